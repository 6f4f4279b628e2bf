"""The transcript readers fuzzed (quick run; ``make fuzz`` runs the full million, docs/reliability.md).

Every reader the store and the runner point at agent-written bytes must answer with its own result
or its own error type, never another exception and never a hang.
"""

from __future__ import annotations

import os
import signal

import fuzz_transcript
import pytest
from fuzz_transcript import Generator, fuzz, load_sample_files, load_sample_lines

QUICK_INPUTS = 20_000


def test_twenty_thousand_generated_inputs_crash_no_reader() -> None:
    result = fuzz(QUICK_INPUTS, seed=20_000, workers=2, hang_seconds=30, save_crashes=True, progress=print)
    assert result.inputs == QUICK_INPUTS
    report = "\n\n".join(f"input {c.index} ({c.strategy}):\n{c.error}" for c in result.crashes[:3])
    assert not result.crashes, f"{len(result.crashes)} crashing inputs, saved under tests/fuzz_crashes/:\n{report}"
    # Every strategy ran: a generator that silently stopped producing one of them would hide it.
    assert set(result.counts) == {name for name, _, _ in Generator(1, [b"{}"], [b"{}"]).strategies}


def test_inputs_are_a_pure_function_of_seed_and_index() -> None:
    lines, files = load_sample_lines(), load_sample_files()
    first, again, other = Generator(5, lines, files), Generator(5, lines, files), Generator(6, lines, files)
    assert [first.input(i) for i in range(200)] == [again.input(i) for i in range(200)]
    assert [first.input(i) for i in range(200)] != [other.input(i) for i in range(200)]


@pytest.mark.parametrize(
    "failure",
    [KeyError("not the parser's error"), RecursionError("too deep"), TimeoutError("slow")],
    ids=["foreign-exception", "recursion-error", "timeout"],
)
def test_a_reader_raising_anything_else_counts_as_a_crash(
    monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    def broken(data: bytes) -> list:
        raise failure

    monkeypatch.setattr(fuzz_transcript, "check_transcript", broken)
    result = fuzz(50, seed=3, save_crashes=False)
    assert len(result.crashes) == 50 and type(failure).__name__ in result.crashes[0].error


def test_an_input_that_hangs_counts_as_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def endless(data: bytes) -> list:
        while True:
            pass

    monkeypatch.setattr(fuzz_transcript, "check_transcript", endless)
    result = fuzz(2, seed=3, hang_seconds=0.2, save_crashes=False)
    assert len(result.crashes) == 2 and "Hang" in result.crashes[0].error


def _die(args: tuple[int, int, int, float]) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)  # what a crash in C code does to a worker


def test_a_worker_killed_by_a_signal_counts_as_a_crash_and_does_not_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_transcript, "_run_range", _die)  # the forked workers inherit the patch
    result = fuzz(40, seed=3, workers=2, chunk=10, save_crashes=False)
    assert [c.strategy for c in result.crashes] == ["worker-died"]
    assert result.inputs < 40
