"""The one way a test waits: poll a condition until it holds, or fail naming what was awaited.

No sleep stands in for a wait: the interval is only how often to look, the timeout only a bound on a
condition that never comes true.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2,
               fatal: tuple[type[BaseException], ...] = ()) -> Any:
    """Poll ``fn`` until it returns something truthy, and return that; raise TimeoutError naming ``what``.

    Exceptions raised by ``fn`` count as "not yet" (the last one is reported on timeout), except
    those in ``fatal``, which propagate at once.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    last_val: Any = None
    while True:
        try:
            last_val = fn()
            if last_val:
                return last_val
        except fatal:
            raise
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f"; last error: {last_exc!r}" if last_exc else f"; last value: {last_val!r}"
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
