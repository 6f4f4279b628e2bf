"""Races injected at the store's seams: ``At`` runs an action once when the store reaches a named step, and
``BIG`` is a transcript longer than two copy chunks, so a race injected during the copy lands mid-copy.
"""

from __future__ import annotations

from collections.abc import Callable

from pidispatch.store.resolve import CHUNK
from testkit.store import sample

BIG = sample("s1_after_turn2.jsonl") + b"".join(
    b'{"type":"custom","id":"%08x","parentId":null,"timestamp":"x","pad":"%s"}\n'
    % (i, b"p" * 1000) for i in range(2 * CHUNK // 1000))  # > 2 chunks: races land mid-copy


class At:
    """Run ``action`` once when the store reaches ``step``."""

    def __init__(self, step: str, action: Callable[[], None]) -> None:
        self.step, self.action, self.fired = step, action, False

    def at(self, step: str) -> None:
        if step == self.step and not self.fired:
            self.fired = True
            self.action()
