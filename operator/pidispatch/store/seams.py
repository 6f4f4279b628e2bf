"""Named points inside resolve and promote where tests inject races and crashes.

Production passes no seams. A test passes an object whose ``at(step)`` swaps a file, plants a link
or kills the process at exactly that step, so race and crash tests need no sleeps.
"""

from __future__ import annotations

from typing import Protocol


class Seams(Protocol):
    def at(self, step: str) -> None: ...


class NoSeams:
    def at(self, step: str) -> None:
        return None


NO_SEAMS: Seams = NoSeams()
