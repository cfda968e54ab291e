"""A TCP server that accepts every connection and closes it at once.

Stands for a proxy (or a load balancer) in front of a live process whose backend does not
answer: a connect succeeds, then the connection is closed before a byte is exchanged. The
kernel fault ``accept-close-proxy`` (``tests/chaos/kernel_faults_extra.py``) redirects the
other replicas' connections to the leader's gRPC port here, inside the leader's network
namespace.

Run: ``python -m devtools.acceptclose --port P [--host H]``; prints ``listening H:P`` once
it accepts, and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from collections.abc import Sequence


def serve(listener: socket.socket) -> int:
    """Accept and close until the listener is closed; how many connections it closed."""
    closed = 0
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # the listener was closed: the end
            return closed
        conn.close()
        closed += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(128)

    def on_signal(signum: int, frame: object) -> None:
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"listening {args.host}:{args.port}", flush=True)
    try:
        serve(listener)
    finally:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
