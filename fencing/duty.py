"""Leader work that runs for exactly the life of a leadership token.

A pass that meets a lapsed lease (``LeaseLapsedError``) pauses and is tried again at the
next interval: the term is not over until the token is cancelled, and a duty that quit on
a lapse would leave a leader that answers as one and does no work for the rest of its term.
Any other error of a pass is logged (an unexpected one with its traceback) and the next
pass runs: a duty thread never dies silently.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.exceptions import KazooException

from fencing.errors import FencingError, LeaseLapsedError, NotLeaderError
from fencing.token import LeadershipToken

Pass = Callable[[], list[str]]


def run_duty(
    name: str,
    token: LeadershipToken,
    one_pass: Pass,
    *,
    interval: float,
    log: logging.Logger,
    wake: threading.Event | None = None,
    first_pass_at_once: bool = True,
    change_level: int = logging.INFO,
) -> None:
    """Run ``one_pass`` every ``interval`` seconds (sooner when ``wake`` is set) until
    ``token`` is cancelled; each change it returns is logged at ``change_level``."""
    if wake is not None:
        token.on_cancel(lambda _reason: wake.set())
    if not first_pass_at_once and _wait(token, wake, interval):
        return
    while not token.cancelled:
        if wake is not None:
            wake.clear()
        try:
            for change in one_pass():
                log.log(change_level, "%s: %s", name, change)
        except LeaseLapsedError as e:
            log.info("%s paused until the lease is renewed: %s", name, e)
        except NotLeaderError:
            if token.cancelled:
                return
            log.info("%s: a write was refused; next pass in %.1fs", name, interval)
        except (FencingError, KazooException) as e:
            log.info("%s pass failed, next pass in %.1fs: %s", name, interval, e)
        except Exception:
            log.exception("%s pass failed unexpectedly; next pass in %.1fs", name, interval)
        if _wait(token, wake, interval):
            return


def _wait(token: LeadershipToken, wake: threading.Event | None, interval: float) -> bool:
    """Wait one interval; True once the token is cancelled."""
    if wake is None:
        return token.wait(interval)
    wake.wait(interval)
    return token.cancelled
