"""``nimbus`` with kazoo's connection loop made to die once a trigger file appears.

The fault kazoo meets in the field (an exception its loop does not expect, e.g. on a torn
stream) is injected where the loop reads a reply: it raises once
``NIMBUS_TEST_LOOP_TRIGGER`` names an existing file. Everything else is the real CLI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from kazoo.protocol.connection import ConnectionHandler

from nimbus.cli import main

TRIGGER = Path(os.environ["NIMBUS_TEST_LOOP_TRIGGER"])
_original = ConnectionHandler._read_socket


def _read_socket(self: ConnectionHandler, read_timeout: Any) -> Any:
    if TRIGGER.exists():
        raise RuntimeError("injected: the connection loop meets an exception it did not expect")
    return _original(self, read_timeout)


ConnectionHandler._read_socket = _read_socket

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
