"""One candidate of bench/peers.py: kazoo's ``Election`` recipe.

Usage: ``python bench/peers_kazoo.py CONNECT PATH TIMEOUT_S ID``. Prints ``queued <epoch ms>``
once it has entered the election and ``I lead <epoch ms>`` when it becomes leader. SIGTERM
(or SIGINT) is the graceful stop: the leader's function returns (kazoo deletes its lock
node at once), a waiting contender cancels, then the client closes its session.

Each ``poll N`` line on stdin is answered ``poll N L <epoch ms>`` while it leads, else
``poll N F <epoch ms>`` (bench/peers.py's slow-disk column). It leads while the Election's
function runs and the client is connected: kazoo leaves it to the leader to stop on a
suspended connection or a lost session, which a careful leader does; after a lost session
it never claims again (its lock node went with the session).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from kazoo.client import KazooClient, KazooState

_say_lock = threading.Lock()


def say(what: str) -> None:
    with _say_lock:  # one write per line: the poll answers come from another thread
        sys.stdout.write(f"{what} {time.time() * 1000:.0f}\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    connect, path, timeout_s, ident = argv
    stop = threading.Event()
    leading = threading.Event()
    lost = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = KazooClient(hosts=connect, timeout=float(timeout_s))

    def on_state(state: str) -> None:
        if state == KazooState.LOST and leading.is_set():
            lost.set()

    client.add_listener(on_state)
    client.start(timeout=60)
    election = client.Election(path, ident)

    def lead() -> None:
        leading.set()
        say("I lead")
        stop.wait()

    def answer_polls() -> None:
        for line in sys.stdin:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "poll":
                leads = leading.is_set() and client.connected and not lost.is_set()
                say(f"poll {parts[1]} {'L' if leads else 'F'}")

    threading.Thread(target=answer_polls, name="polls", daemon=True).start()
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
