"""events.emit: a record is built only when something would receive it, and then exactly as before."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pidispatch import events


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The events the logger builds a record for."""
    names: list[str] = []
    make = events.logger.makeRecord

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        names.append(record.fields["event"])  # type: ignore[attr-defined]
        return record

    monkeypatch.setattr(events.logger, "makeRecord", counting)
    return names


@contextmanager
def cut_off(*handlers: logging.Handler) -> Iterator[None]:
    """The events logger with only ``handlers``, not propagating: pytest's capture (added to the
    logger when the test starts) is taken off and put back before the test ends."""
    logger = events.logger
    saved, propagate = list(logger.handlers), logger.propagate
    logger.handlers[:], logger.propagate = list(handlers), False
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = saved, propagate


def test_an_event_nothing_would_receive_is_not_built(built: list[str]) -> None:
    with cut_off():
        events.emit("session_resolved", key="k", resume=True, reason="resumed")
    assert built == []


def test_an_event_with_a_handler_is_built_and_delivered_with_its_fields(built: list[str]) -> None:
    kept = Kept()
    with cut_off(kept):
        events.emit("session_resolved", key="k", resume=True, reason="resumed")
    assert built == ["session_resolved"]
    (record,) = kept.records
    assert record.fields == {  # type: ignore[attr-defined]
        "event": "session_resolved", "key": "k", "resume": True, "reason": "resumed"}
    assert record.getMessage() == '{"event":"session_resolved","key":"k","resume":true,"reason":"resumed"}'


def test_without_a_last_resort_logging_still_gets_the_record(
    built: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``logging.lastResort`` unset, logging warns once about a logger with no handlers: kept."""
    monkeypatch.setattr(logging, "lastResort", None)
    monkeypatch.setattr(logging.getLogger().manager, "emittedNoHandlerWarning", True)  # no stderr noise
    with cut_off():
        events.emit("session_resolved", key="k", resume=False, reason="absent")
    assert built == ["session_resolved"]


def test_a_filter_on_the_events_logger_still_sees_every_record(
    built: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[logging.LogRecord] = []
    monkeypatch.setattr(events.logger, "filters", [lambda record: seen.append(record) or True])
    with cut_off():
        events.emit("session_resolved", key="k", resume=False, reason="absent")
    assert built == ["session_resolved"] and len(seen) == 1
