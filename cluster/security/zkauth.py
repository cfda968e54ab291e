"""ZooKeeper digest authentication and the ACL every node the service creates carries.

As Storm does (``mk-topo-only-acls``, ``storm.zookeeper.auth.payload``): the service's
processes authenticate with one ``user:password`` digest identity, and each node they
create is modifiable by that identity only (optionally readable by anyone). The secret
comes from a file or the environment, never from the command line, where ``ps`` shows it.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.security import ACL, Permissions, make_acl, make_digest_acl

from cluster.errors import ConfigError

log = logging.getLogger(__name__)

#: Environment variable holding ``user:password`` itself (for pods: a Secret as env).
SECRET_ENV = "NIMBUS_ZK_AUTH"
#: Environment variable naming a file that holds ``user:password``.
FILE_ENV = "NIMBUS_ZK_AUTH_FILE"
_MAX_SECRET_BYTES = 4096


@dataclass(frozen=True)
class ZkAuth:
    """One digest identity; ``world_readable`` adds READ for anyone to every node made."""

    user: str
    password: str = field(repr=False)
    world_readable: bool = False

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user or any(c.isspace() for c in self.user):
            raise ConfigError(
                "ZooKeeper auth user must be non-empty, without ':' or whitespace "
                "(the secret is 'user:password')"
            )
        if not self.password:
            raise ConfigError("ZooKeeper auth password is empty (the secret is 'user:password')")

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """What kazoo sends with ``addauth`` on every (re)connect."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        """The default ACL of every node this client creates (ephemeral lock nodes too)."""
        entries = [make_digest_acl(self.user, self.password, all=True)]
        if self.world_readable:
            entries.append(make_acl("world", "anyone", read=True))
        return entries

    def private_acl(self, *readers: ACL) -> list[ACL]:
        """Service-only ACL plus ``readers``: never world-readable (for secrets)."""
        return [make_digest_acl(self.user, self.password, all=True), *readers]


def parse_secret(text: str, *, source: str, world_readable: bool = False) -> ZkAuth:
    """``user:password`` (surrounding whitespace and one trailing newline ignored)."""
    secret = text.strip()
    user, sep, password = secret.partition(":")
    if not sep:
        raise ConfigError(f"ZooKeeper auth from {source} must be 'user:password'")
    try:
        return ZkAuth(user, password, world_readable=world_readable)
    except ConfigError as e:
        raise ConfigError(f"ZooKeeper auth from {source}: {e}") from e


def read_secret_file(
    path: str, what: str, *, limit: int = _MAX_SECRET_BYTES, secret: bool = True
) -> str:
    """A small (``secret``) file's text; warns when others may read a secret.

    Only a warning: Kubernetes mounts Secrets 0644 unless told otherwise.
    """
    p = Path(path)
    try:
        info = p.stat()
        if info.st_size > limit:
            raise ConfigError(f"{what} {path} is {info.st_size} bytes, over the {limit}-byte limit")
        if secret and info.st_mode & stat.S_IRWXO:
            log.warning("%s %s is readable by others; chmod 600 it", what, path)
        return p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 text") from e


def load_zk_auth(
    path: str | None = None,
    *,
    world_readable: bool = False,
    environ: Mapping[str, str] | None = None,
) -> ZkAuth | None:
    """The identity from ``path``, else ``$NIMBUS_ZK_AUTH_FILE``, else ``$NIMBUS_ZK_AUTH``.

    None when none is set: ZooKeeper auth is off and nodes are created open, as before.
    """
    env = os.environ if environ is None else environ
    path = path or env.get(FILE_ENV, "")
    if path:
        text = read_secret_file(path, "ZooKeeper auth file")
        return parse_secret(text, source=path, world_readable=world_readable)
    secret = env.get(SECRET_ENV, "")
    if secret:
        return parse_secret(secret, source=f"${SECRET_ENV}", world_readable=world_readable)
    if world_readable:
        raise ConfigError(
            "--zk-world-readable needs ZooKeeper auth (--zk-auth-file, "
            f"${FILE_ENV} or ${SECRET_ENV}): without it every node is open anyway"
        )
    return None


def parse_flag_bool(value: object) -> bool:
    """A boolean from a flag, an environment variable or TOML (``true``/``1``/``yes``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def warn_if_open(client: KazooClient, root: str, auth: ZkAuth | None) -> None:
    """With auth on, say so when ``root`` predates it: its ACL still lets anyone write.

    ``ensure_path`` leaves existing nodes' ACLs alone, so a root made before auth was
    turned on stays open; only a fresh root (or an operator's setAcl) is protected.
    """
    if auth is None:
        return
    try:
        acls, _ = client.get_acls(root)
    except KazooException as e:
        log.warning("could not read the ACL of %s: %s", root, e)
        return
    if any(a.id.scheme == "world" and a.perms & ~Permissions.READ for a in acls):
        log.warning(
            "ZooKeeper auth is on but %s was created without it: anyone may still change "
            "nodes made before; start on a fresh --root or set its ACLs",
            root,
        )


WORLD_READABLE_ENV = "NIMBUS_ZK_WORLD_READABLE"


def zk_auth_from_env(environ: Mapping[str, str] | None = None) -> ZkAuth | None:
    """For processes started by another (workers): the identity their parent exported."""
    env = os.environ if environ is None else environ
    try:
        world = parse_flag_bool(env.get(WORLD_READABLE_ENV, "false"))
    except ValueError as e:
        raise ConfigError(f"${WORLD_READABLE_ENV}: {e}") from e
    return load_zk_auth(world_readable=world, environ=env)


def export_to_children(path: str, world_readable: bool) -> None:
    """Make child processes (workers) find the same identity: file path and flag, no secret."""
    if path:
        os.environ[FILE_ENV] = path
    os.environ[WORLD_READABLE_ENV] = "true" if world_readable else "false"
