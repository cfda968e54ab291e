"""A kazoo client whose connection loop died is cut off for good: say so and exit.

kazoo runs one thread per client that connects, reads and writes. An exception that
thread does not expect (a torn stream, a bug) ends it: kazoo reports the session CLOSED,
then never connects again, while every other thread of the process runs on without
ZooKeeper and a replica keeps answering from a view that will never change. So every
long-lived client is watched: when its loop has ended without ``stop()`` being asked for,
the process logs why and exits non-zero within about a second, and its supervisor or pod
restarts it with a new client and a new session (its old lock node goes with the old
session: fencing holds either way).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from kazoo.client import KazooClient

log = logging.getLogger(__name__)

#: The exit code of a process whose ZooKeeper connection loop died (BSD's EX_SOFTWARE).
EXIT_ZK_LOOP_DIED = 70
#: How often the loop is looked at; two looks in a row must agree (start-up is brief).
CHECK_INTERVAL = 0.5


def loop_died(client: KazooClient) -> bool:
    """The client was started and not stopped, yet its connection loop has ended."""
    return bool(not client._stopped.is_set() and client._connection.connection_stopped.is_set())


def _exit_process(name: str) -> None:
    log.critical(
        "%s: the ZooKeeper client's connection loop died (see the traceback above) and "
        "will never reconnect; exiting with status %d to be restarted",
        name,
        EXIT_ZK_LOOP_DIED,
    )
    logging.shutdown()
    os._exit(EXIT_ZK_LOOP_DIED)


def watch_connection_loop(
    client: KazooClient,
    name: str,
    *,
    on_death: Callable[[str], None] = _exit_process,
    interval: float = CHECK_INTERVAL,
) -> threading.Thread:
    """Start a daemon thread that calls ``on_death(name)`` once the client's loop died.

    The thread ends when the client is stopped (asked to), or after ``on_death``.
    """

    def watch() -> None:
        dead_looks = 0
        while True:
            if client._stopped.wait(interval):
                return  # stopped on purpose: nothing to watch any more
            try:
                dead_looks = dead_looks + 1 if loop_died(client) else 0
            except Exception:  # a kazoo without these attributes: say so once, stop
                log.exception("%s: cannot watch the ZooKeeper connection loop", name)
                return
            if dead_looks >= 2:
                on_death(name)
                return

    thread = threading.Thread(target=watch, name=f"zk-loop-watch-{name}", daemon=True)
    thread.start()
    return thread
