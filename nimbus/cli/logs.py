"""Structured logs: one line per event, each naming the replica (or supervisor) and epoch.

A log line is only useful across a failover if it says who wrote it and under which
leader epoch, so a filter stamps both on every record, whichever module logged it. The
default format is one JSON object per line (``json``), which log shippers parse as is;
``text`` is the same fields for a terminal. A traceback stays inside its JSON line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

from cluster.errors import ConfigError

FORMATS = ("json", "text")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

_TEXT = "%(asctime)s %(levelname)s %(name)s [%(replica)s epoch %(epoch)s]: %(message)s"
_JSON_FIELDS = ["asctime", "levelname", "name", "replica", "epoch", "message"]
_RENAMED = {"asctime": "time", "levelname": "level", "name": "logger"}


class LogContext(logging.Filter):
    """Stamps ``replica`` and ``epoch`` on each record; set both once they are known."""

    def __init__(self, replica: str = "") -> None:
        super().__init__()
        self.replica = replica
        self.epoch: Callable[[], int] = lambda: 0

    def filter(self, record: logging.LogRecord) -> bool:
        record.replica = self.replica
        try:
            record.epoch = self.epoch()
        except Exception:  # a log call must never fail because the daemon is half-built
            record.epoch = 0
        return True


def configure(level: str, fmt: str, *, stream: TextIO | None = None) -> LogContext:
    """Send the root logger's records to ``stream`` (stderr) in ``fmt``; returns the context."""
    name = level.upper()
    if name not in _LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(_LEVELS)}, got {level!r}")
    if fmt not in FORMATS:
        raise ConfigError(f"--log-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    context = LogContext()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(context)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(_JSON_FIELDS, rename_fields=_RENAMED))
    else:
        handler.setFormatter(logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(name)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    return context
