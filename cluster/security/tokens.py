"""Bearer tokens: what a server accepts and what a client sends.

Tokens travel as ``authorization: Bearer <token>`` metadata. The server compares in
constant time against every accepted token (a file may hold several, for rotation), so
timing says nothing about how much of a guess was right.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster.errors import ConfigError
from cluster.security.zkauth import read_secret_file

METADATA_KEY = "authorization"
SCHEME = "Bearer "
TOKEN_ENV = "NIMBUS_TOKEN"
TOKEN_FILE_ENV = "NIMBUS_TOKEN_FILE"
MIN_TOKEN_CHARS = 16
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{16,4096}$")  # visible ASCII: safe in a header


def check_token(token: str, source: str) -> str:
    if not _TOKEN_RE.match(token):
        raise ConfigError(
            f"token from {source} must be {MIN_TOKEN_CHARS} to 4096 visible ASCII characters "
            f"(no spaces), got {len(token)} characters"
        )
    return token


@dataclass(frozen=True)
class TokenSet:
    """The accepted tokens; the first is what this process sends to its peers."""

    tokens: tuple[str, ...] = field(repr=False)

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ConfigError("a token file must hold at least one token")

    def accepts(self, presented: str) -> bool:
        candidate = presented.encode()
        matched = False
        for token in self.tokens:  # no early exit: every token is compared
            matched |= hmac.compare_digest(candidate, token.encode())
        return matched

    @property
    def own(self) -> str:
        return self.tokens[0]


def parse_tokens(text: str, source: str) -> TokenSet:
    """One token per line; blank lines and ``#`` comments ignored."""
    tokens = tuple(
        check_token(line.strip(), source)
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    if not tokens:
        raise ConfigError(f"token file {source} holds no token")
    return TokenSet(tokens)


def load_token_set(path: str) -> TokenSet | None:
    """The server's accepted tokens from ``--token-file``; None: tokens are off."""
    if not path:
        return None
    return parse_tokens(read_secret_file(path, "token file", limit=1 << 20), path)


def load_client_token(path: str = "", environ: Mapping[str, str] | None = None) -> str | None:
    """A client's token: ``path``, else ``$NIMBUS_TOKEN_FILE``, else ``$NIMBUS_TOKEN``."""
    env = os.environ if environ is None else environ
    path = path or env.get(TOKEN_FILE_ENV, "")
    if path:
        return parse_tokens(read_secret_file(path, "token file", limit=1 << 20), path).own
    token = env.get(TOKEN_ENV, "")
    return check_token(token.strip(), f"${TOKEN_ENV}") if token.strip() else None


def bearer(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str | None:
    """The token of an ``authorization: Bearer`` entry; None when there is none."""
    for key, value in metadata or ():
        if key.lower() == METADATA_KEY:
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            return text[len(SCHEME) :].strip() if text.startswith(SCHEME) else ""
    return None
