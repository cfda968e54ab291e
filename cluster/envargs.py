"""Flags that fall back to ``NIMBUS_<FLAG>`` environment variables (for pods)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def env_default(flag: str, default: Any = None) -> Any:
    """The value of ``NIMBUS_<FLAG>`` (``--session-timeout`` -> ``NIMBUS_SESSION_TIMEOUT``)."""
    name = "NIMBUS_" + flag.lstrip("-").replace("-", "_").upper()
    return os.environ.get(name, default)


def add_env_flag(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    default = env_default(flag, kwargs.pop("default", None))
    required = kwargs.pop("required", False) and default is None
    env = "NIMBUS_" + flag.lstrip("-").replace("-", "_").upper()
    help_text = kwargs.pop("help", "")
    parser.add_argument(
        flag, default=default, required=required, help=f"{help_text} [env {env}]", **kwargs
    )
