"""One candidate of bench/peers.py: kazoo's ``Election`` recipe.

Usage: ``python bench/peers_kazoo.py CONNECT PATH TIMEOUT_S ID``. Prints ``queued <epoch ms>``
once it has entered the election and ``I lead <epoch ms>`` when it becomes leader. SIGTERM
(or SIGINT) is the graceful stop: the leader's function returns (kazoo deletes its lock
node at once), a waiting contender cancels, then the client closes its session.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from kazoo.client import KazooClient


def say(what: str) -> None:
    print(f"{what} {time.time() * 1000:.0f}", flush=True)


def main(argv: list[str]) -> int:
    connect, path, timeout_s, ident = argv
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = KazooClient(hosts=connect, timeout=float(timeout_s))
    client.start(timeout=60)
    election = client.Election(path, ident)

    def lead() -> None:
        say("I lead")
        stop.wait()

    runner = threading.Thread(target=election.run, args=(lead,), daemon=True)
    runner.start()
    say("queued")
    while not stop.wait(1.0):
        pass
    election.cancel()
    runner.join(10)
    client.stop()
    client.close()
    say("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
