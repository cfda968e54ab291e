"""``with`` for what devtools starts: started on entry, stopped on exit however it ended.

Invariant: every subclass's ``stop`` is idempotent, so leaving the block after an explicit
``stop`` (or after a ``start`` that failed half-way and cleaned up) is harmless.
"""

from __future__ import annotations

from typing import Self


class Started:
    """A local service a test or a developer starts: ``with Service(...) as s:``."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()  # however the block ended: the exception, if any, goes on
