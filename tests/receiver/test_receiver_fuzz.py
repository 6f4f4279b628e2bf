"""The webhook receiver fuzzed (quick run; ``make fuzz`` runs the full million, docs/reliability.md).

Every delivery anyone can send goes through the real ``POST /webhook`` handler: no input may make it
raise or answer 5xx, and no Job may come from a delivery the secret did not sign or from a payload
``parse_delivery`` rejects. The last tests break the receiver on purpose and check the fuzzer says so.
"""

from __future__ import annotations

import types
from typing import Any

import fuzz_webhook
import pytest
from fuzz_webhook import Generator, fuzz

from pidispatch.receiver import app as receiver_app
from pidispatch.receiver import delivery as core
from pidispatch.receiver import intake as receiver_intake

QUICK_INPUTS = 20_000


def test_twenty_thousand_deliveries_crash_nothing_and_start_no_unsigned_or_malformed_job() -> None:
    result = fuzz(QUICK_INPUTS, seed=20_000, workers=2, hang_seconds=30, save_crashes=True, progress=print)
    assert result.inputs == QUICK_INPUTS
    report = "\n\n".join(f"input {c.index} ({c.strategy}):\n{c.error}" for c in result.crashes[:3])
    assert not result.crashes, f"{len(result.crashes)} failing inputs, saved under tests/fuzz_crashes/:\n{report}"
    # Every strategy ran, and some inputs did create Jobs: a harness that never sees one proves nothing.
    assert set(result.counts) == {name for name, _, _ in Generator(1).strategies}
    assert result.with_jobs > QUICK_INPUTS // 50, result.with_jobs


def test_inputs_are_a_pure_function_of_seed_and_index() -> None:
    first, again, other = Generator(5), Generator(5), Generator(6)
    assert [first.input(i) for i in range(200)] == [again.input(i) for i in range(200)]
    assert [first.input(i) for i in range(200)] != [other.input(i) for i in range(200)]


# -- the fuzzer catches what it is for --------------------------------------------------------------------------
def _core_with(**replaced: Any) -> types.SimpleNamespace:
    """``delivery`` as the handler sees it, some functions replaced (the fuzzer's oracle keeps the real ones)."""
    return types.SimpleNamespace(**{**{name: getattr(core, name) for name in dir(core)}, **replaced})


def _strategies(result: fuzz_webhook.Result) -> set[str]:
    return {crash.strategy for crash in result.crashes}


def test_a_receiver_that_trusts_any_signature_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiver_app, "signature_matches", lambda secret, body, value: True)
    result = fuzz(600, seed=3, save_crashes=False)
    assert {"wrong-secret", "altered-after-signing"} <= _strategies(result)
    assert any("not signed by the secret" in crash.error for crash in result.crashes)


def test_a_receiver_that_makes_jobs_of_malformed_payloads_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    good = Generator(1).base[0]  # a comment a Trigger matches

    def lenient(event: str, payload: Any) -> Any:
        try:
            return core.parse_delivery(event, payload)
        except core.Malformed:
            return core.parse_delivery(good.event, good.payload)

    # The decision path is intake's (the webhook and the poller share it): its view of the core is replaced.
    monkeypatch.setattr(receiver_intake, "core", _core_with(parse_delivery=lenient))
    result = fuzz(600, seed=3, save_crashes=False)
    assert "mutated-fields" in _strategies(result)
    assert any("where the checks allow []" in crash.error for crash in result.crashes)


def test_an_exception_escaping_the_handler_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(event: str | None) -> None:
        raise KeyError("not an answer")

    monkeypatch.setattr(receiver_app, "core", _core_with(event_problem=broken))
    result = fuzz(100, seed=3, save_crashes=False)
    assert result.crashes and all("KeyError" in crash.error for crash in result.crashes)
    assert len(result.crashes) > 50, "every signed delivery reaches the event check"
