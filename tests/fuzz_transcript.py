"""Structure-aware fuzzer for the transcript parser and the header/compaction/context readers.

Every generated input goes through every reader the store and the runner point at a file the agent
wrote (the agent owns ``/session``, so each of these sees hostile bytes):

- ``parse_transcript``    may only return a ``Transcript`` or raise ``TranscriptError``;
- ``check_transcript``    must return a list of ``Problem``, and agree with ``parse_transcript``;
- ``read_first_line`` / ``is_session_header`` / ``header_timestamp_ms`` (gates 11 and 13) never raise;
- ``transcript_has_empty_compaction`` (gate 12) and ``context_usage`` (the runner) never raise;
- gate 12's C searches (``_needles``) return what the pure-Python searches return, and its C
  pre-judgment (``clears``) never spares a line the parse would call an empty compaction.

Anything else (another exception, or one input taking longer than ``--hang-seconds``) is a crash:
the input is written to ``tests/fuzz_crashes/<seed>-<index>.bin`` with a ``.txt`` holding the
traceback, and the run exits 1.

Inputs are mutations of the real pi sample lines (``tests/data/transcripts``) (byte flips, truncations, splices, field
values swapped for random JSON, deep nesting, huge numbers, invalid UTF-8, NULs, long lines) plus
random JSON. Input ``i`` of seed ``s`` is a pure function of ``(s, i)``, so ``--replay i`` rebuilds it.

    .venv/bin/python tests/fuzz_transcript.py                     # 1 000 000 inputs, seed 1
    .venv/bin/python tests/fuzz_transcript.py -n 20000 --seed 7
    .venv/bin/python tests/fuzz_transcript.py --seed 1 --replay 4242
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pidispatch.transcript import compaction
from pidispatch.transcript.compaction import PYTHON_SEARCHES, transcript_has_empty_compaction
from pidispatch.transcript.context import context_usage
from pidispatch.transcript.header import header_timestamp_ms, is_session_header, read_first_line
from pidispatch.transcript.model import ENTRY_MODELS
from pidispatch.transcript.parser import Problem, Transcript, TranscriptError, check_transcript, parse_transcript

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root, for testkit (run as a script, only tests/ is on the path)
from testkit.gen_transcripts import samples_dir  # noqa: E402

SAMPLES = samples_dir()  # the pinned pi's committed session files (make transcripts)
CRASH_DIR = HERE / "fuzz_crashes"

ENTRY_TYPES = ["session", *ENTRY_MODELS]  # every entry type the parser models (model.py)
ROLES = ["user", "assistant", "toolResult", "bashExecution", "custom"]
CONTENT_TYPES = ["text", "thinking", "image", "toolCall"]
KEYS = [
    "type",
    "id",
    "parentId",
    "timestamp",
    "version",
    "cwd",
    "message",
    "role",
    "content",
    "text",
    "usage",
    "input",
    "output",
    "cacheRead",
    "cacheWrite",
    "totalTokens",
    "cost",
    "stopReason",
    "summary",
    "details",
    "readFiles",
    "modifiedFiles",
    "firstKeptEntryId",
    "tokensBefore",
    "provider",
    "modelId",
    "thinkingLevel",
    "arguments",
    "name",
    "toolCallId",
    "isError",
    "api",
    "model",
]
WEIRD_STRINGS = [
    "",
    " ",
    "\u0000",
    "\ud800",
    "\udfff",
    "\u2028",
    "\ufeff",
    "No prior history.",
    "\n\n---\n\n**Turn Context (split turn):**\n\n",
    "\n\n<read-files>\na\n</read-files>",
    "2026-11-29T12:52:56.280Z",
    "9999-12-31T23:59:59.999Z",
    "0000-00-00T00:00:00Z",
    "2026-13-40T25:61:61+99:99",
    "١٢٣٤-٠١-٠١T00:00:00Z",
    "NaN",
    "Infinity",
    "-0",
    "1e309",
]
WEIRD_NUMBERS = [
    "0",
    "-0",
    "1e309",
    "-1e309",
    "1e-400",
    "9007199254740993",
    "1" + "0" * 400,
    "1" + "0" * 5000,
    "0.1",
    "-1",
    "1E+2",
    "123456789012345678901234567890.5e-3",
    "NaN",
    "Infinity",
    "-Infinity",
    "01",
]
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc0\xaf"]


def load_sample_lines(samples: Path = SAMPLES) -> list[bytes]:
    if not samples.is_dir():
        raise SystemExit(f"fuzz: samples not found at {samples} (make transcripts writes them)")
    lines: list[bytes] = []
    for path in sorted(samples.rglob("*.jsonl")):
        lines.extend(line for line in path.read_bytes().split(b"\n") if line)
    return lines


def load_sample_files(samples: Path = SAMPLES) -> list[bytes]:
    return [path.read_bytes() for path in sorted(samples.glob("*.jsonl"))]


class Generator:
    """Input ``i`` of a seed as a pure function of ``(seed, i)``."""

    def __init__(self, seed: int, lines: list[bytes], files: list[bytes]) -> None:
        self.seed = seed
        self.lines = lines
        self.files = files
        self.parsed = [json.loads(line) for line in lines if _is_json(line)]
        # The samples' own entry ids, so generated parentIds and ids sometimes name real entries.
        self.real_ids = sorted({p["id"] for p in self.parsed if isinstance(p, dict) and isinstance(p.get("id"), str)})
        self.strategies: list[tuple[str, int, Callable[[random.Random], bytes]]] = [
            ("sample-file-mutated", 14, self._file_mutated),
            ("lines-mutated", 20, self._lines_mutated),
            ("field-swap", 24, self._field_swap),
            ("random-json", 10, self._random_json_lines),
            ("splice", 8, self._splice),
            ("deep-nesting", 3, self._deep_nesting),
            ("huge-number", 6, self._huge_number),
            ("long-line", 2, self._long_line),
            ("raw-bytes", 4, self._raw_bytes),
            ("sample-file", 1, lambda rng: rng.choice(self.files)),
        ]
        self._names = [name for name, _, _ in self.strategies]
        self._weights = [weight for _, weight, _ in self.strategies]

    def input(self, index: int) -> tuple[str, bytes]:
        rng = random.Random(self.seed * 1_000_003 + index)
        name = rng.choices(self._names, self._weights)[0]
        strategy = next(make for n, _, make in self.strategies if n == name)
        data = strategy(rng)
        if rng.random() < 0.3:
            data = self._byte_mutations(rng, data, rng.randint(1, 4))
        return name, data

    # -- byte-level -------------------------------------------------------------------------------
    def _byte_mutations(self, rng: random.Random, data: bytes, count: int) -> bytes:
        buf = bytearray(data)
        for _ in range(count):
            op = rng.randrange(9)
            pos = rng.randrange(len(buf) + 1)
            if op == 0 and buf:  # flip one bit
                pos = min(pos, len(buf) - 1)
                buf[pos] ^= 1 << rng.randrange(8)
            elif op == 1 and buf:  # replace a byte
                pos = min(pos, len(buf) - 1)
                buf[pos] = rng.randrange(256)
            elif op == 2:  # truncate
                del buf[pos:]
            elif op == 3:  # insert invalid UTF-8
                buf[pos:pos] = rng.choice(INVALID_UTF8)
            elif op == 4:  # insert NULs
                buf[pos:pos] = b"\x00" * rng.randint(1, 8)
            elif op == 5:  # insert or remove a newline
                if rng.random() < 0.5:
                    buf[pos:pos] = b"\n"
                else:
                    at = buf.find(b"\n", pos)
                    if at >= 0:
                        del buf[at]
            elif op == 6 and buf:  # delete a span
                del buf[pos : pos + rng.randint(1, 32)]
            elif op == 7 and buf:  # duplicate a span
                span = bytes(buf[pos : pos + rng.randint(1, 64)])
                buf[pos:pos] = span
            elif op == 8:  # structural characters
                buf[pos:pos] = rng.choice([b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\\u", b"\r"])
        return bytes(buf)

    # -- strategies -------------------------------------------------------------------------------
    def _file_mutated(self, rng: random.Random) -> bytes:
        return self._byte_mutations(rng, rng.choice(self.files), rng.randint(1, 6))

    def _lines_mutated(self, rng: random.Random) -> bytes:
        picked = [rng.choice(self.lines) for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.7:
            picked.insert(0, self.lines[0])  # a real header first, so the entries are validated
        data = b"\n".join(picked) + (b"\n" if rng.random() < 0.85 else b"")
        return self._byte_mutations(rng, data, rng.randint(0, 3))

    def _field_swap(self, rng: random.Random) -> bytes:
        """Real entries with values replaced, keys dropped or added: reaches the schema validation."""
        out = [json.loads(self.lines[0])] if rng.random() < 0.8 else []
        for _ in range(rng.randint(1, 5)):
            value = _deep_copy(rng.choice(self.parsed))
            for _ in range(rng.randint(1, 4)):
                self._mutate_value(rng, value, depth=0)
            out.append(value)
        if rng.random() < 0.1:
            rng.shuffle(out)
        return b"".join(_dump(rng, value) + b"\n" for value in out)

    def _mutate_value(self, rng: random.Random, value: Any, depth: int) -> None:
        if isinstance(value, dict) and value:
            key = rng.choice(list(value))
            if depth < 4 and isinstance(value[key], (dict, list)) and rng.random() < 0.6:
                self._mutate_value(rng, value[key], depth + 1)
                return
            op = rng.randrange(4)
            if op == 0:
                del value[key]
            elif op == 1:
                value[rng.choice(KEYS)] = self._random_value(rng, 0)
            else:
                value[key] = self._random_value(rng, 0)
        elif isinstance(value, list) and value:
            i = rng.randrange(len(value))
            if depth < 4 and isinstance(value[i], (dict, list)) and rng.random() < 0.6:
                self._mutate_value(rng, value[i], depth + 1)
            elif rng.random() < 0.5:
                value[i] = self._random_value(rng, 0)
            else:
                del value[i]

    def _random_value(self, rng: random.Random, depth: int) -> Any:
        kind = rng.randrange(12 if depth < 3 else 9)
        if kind == 0:
            return None
        if kind == 1:
            return rng.random() < 0.5
        if kind == 2:
            return rng.choice([0, -1, 1, 2**31, 2**53 + 1, -(2**63), 10**30, rng.randint(-(10**6), 10**6)])
        if kind == 3:
            return rng.choice([0.5, -0.0, 1e308, 5e-324, rng.uniform(-1e6, 1e6)])
        if kind == 4:
            return rng.choice(WEIRD_STRINGS)
        if kind == 5:
            return rng.choice(ENTRY_TYPES + ROLES + CONTENT_TYPES)
        if kind == 6:
            return "".join(
                chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x10FFFF)])) for _ in range(rng.randint(0, 12))
            )
        if kind == 7:
            return rng.choice([*self.real_ids, "ffffffff"])
        if kind == 8:
            return "x" * rng.choice([0, 1, 4096, 70_000])
        if kind == 9:
            return [self._random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        obj = {rng.choice(KEYS): self._random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
        if rng.random() < 0.6:
            obj["type"] = rng.choice(ENTRY_TYPES + CONTENT_TYPES)
        if rng.random() < 0.3:
            obj["role"] = rng.choice(ROLES)
        return obj

    def _random_json_lines(self, rng: random.Random) -> bytes:
        lines = []
        for _ in range(rng.randint(1, 6)):
            value = self._random_value(rng, 0)
            if not isinstance(value, dict) or rng.random() < 0.7:
                value = {
                    "type": rng.choice(ENTRY_TYPES),
                    "id": rng.choice(["a", "b", "c", *self.real_ids[:1]]),
                    "parentId": rng.choice([None, "a", "b"]),
                    "timestamp": rng.choice(WEIRD_STRINGS),
                    **({} if not isinstance(value, dict) else value),
                }
            lines.append(_dump(rng, value))
        return b"\n".join(lines) + b"\n"

    def _splice(self, rng: random.Random) -> bytes:
        a, b = rng.choice(self.files), rng.choice(self.files + self.lines)
        return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :]

    def _deep_nesting(self, rng: random.Random) -> bytes:
        depth = rng.choice([50, 900, 1000, 1100, 5000, 100_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        body = opener * depth + rng.choice([b"1", b'"x"', b"null", b""]) + closer * (depth if rng.random() < 0.8 else 0)
        field = rng.choice([b"message", b"details", b"content", b"usage", b"summary", b"cwd"])
        kind = rng.choice([b"session", b"message", b"compaction"])
        line = b'{"type":"' + kind + b'","id":"z","parentId":null,"' + field + b'":' + body + b"}"
        where = rng.randrange(3)
        if where == 0:
            return line + b"\n"
        if where == 1:
            return self.lines[0] + b"\n" + line + b"\n"
        return self.lines[0] + b"\n" + body + b"\n"

    def _huge_number(self, rng: random.Random) -> bytes:
        line = rng.choice(self.lines)
        number = rng.choice(WEIRD_NUMBERS).encode()
        for token in (b'"version":3', b'"input":', b'"totalTokens":', b'"timestamp":1', b'"tokensBefore":'):
            at = line.find(token)
            if at >= 0:
                start = at + len(token) - (1 if token.endswith(b"1") or token.endswith(b"3") else 0)
                end = start
                while end < len(line) and line[end : end + 1] in b"0123456789.eE+-":
                    end += 1
                line = line[:start] + number + line[end:]
                break
        else:
            line = line[:-1] + b',"n":' + number + b"}"
        return self.lines[0] + b"\n" + line + b"\n"

    def _long_line(self, rng: random.Random) -> bytes:
        size = rng.choice([4095, 4096, 4097, 65_535, 65_537, 1 << 20])
        filler = rng.choice([b"a", b" ", b"\\", b"\xff", b"\x00", b'"'])
        if rng.random() < 0.5:  # a header whose first line is longer than the header read limit
            return b'{"type":"session","version":3,"cwd":"' + filler * size + b'"}\n'
        return self.lines[0] + b"\n" + b'{"type":"message","x":"' + filler * size + b'"}\n'

    def _raw_bytes(self, rng: random.Random) -> bytes:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 256)))


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _deep_copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _dump(rng: random.Random, value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5, separators=(",", ":"), allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


class Hang(Exception):
    """One input took longer than the hang limit."""


def _on_alarm(signum: int, frame: object) -> None:
    raise Hang("input took longer than the hang limit")


def exercise(data: bytes) -> None:
    """Run every reader on ``data``; raise ``AssertionError`` (or anything) when a contract breaks."""
    problems = check_transcript(data)
    assert isinstance(problems, list) and all(isinstance(p, Problem) for p in problems), "check_transcript shape"
    try:
        transcript = parse_transcript(data)
    except TranscriptError as error:
        assert problems, "parse_transcript raised but check_transcript found no problem"
        assert list(error.problems) == problems, "parse_transcript and check_transcript disagree"
    else:
        assert not problems, "parse_transcript accepted what check_transcript refused"
        assert isinstance(transcript, Transcript)
        transcript.active_path()
        transcript.usage_totals()
        transcript.usage_totals(active_only=True)
    first = read_first_line(-1, len(data), pread=lambda _fd, n, off: data[off : off + n])
    assert first is None or isinstance(first, bytes), "read_first_line shape"
    if first is not None:
        assert isinstance(is_session_header(first), bool)
        stamp = header_timestamp_ms(first)
        assert stamp is None or isinstance(stamp, float)
    assert isinstance(transcript_has_empty_compaction(data), bool)
    if compaction.NATIVE_SEARCH:  # gate 12's C searches: the Python searches' answers, on hostile bytes too
        native = (compaction._find_type, compaction._find_escape)
        for start, end in ((0, len(data)), (len(data) // 3, len(data) - len(data) // 5)):
            for c_search, python_search in zip(native, PYTHON_SEARCHES, strict=True):
                assert c_search(data, start, end) == python_search(data, start, end), "C search differs"
        # gate 12's C pre-judgment spares a parse only where the parse finds no empty summary
        for line in data.split(b"\n"):
            if compaction._clears(line, 0, len(line)):  # type: ignore[misc]
                assert not compaction.parsed_line_has_empty_compaction(line), "clears spared an empty summary"
    context_usage(data)


@dataclass
class Crash:
    index: int
    strategy: str
    error: str


def _run_range(args: tuple[int, int, int, float]) -> tuple[int, list[Crash], dict[str, int]]:
    seed, start, stop, hang_seconds = args
    gen = _worker_generator(seed)
    crashes: list[Crash] = []
    counts: dict[str, int] = {}
    signal.signal(signal.SIGALRM, _on_alarm)
    for index in range(start, stop):
        name, data = gen.input(index)
        counts[name] = counts.get(name, 0) + 1
        signal.setitimer(signal.ITIMER_REAL, hang_seconds)
        try:
            exercise(data)
        except BaseException as exc:  # noqa: BLE001 - the fuzzer's whole point
            if isinstance(exc, KeyboardInterrupt):
                raise
            crashes.append(Crash(index, name, "".join(traceback.format_exception(exc))))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return stop - start, crashes, counts


_GEN: Generator | None = None


def _worker_generator(seed: int) -> Generator:
    global _GEN
    if _GEN is None or _GEN.seed != seed:
        _GEN = Generator(seed, load_sample_lines(), load_sample_files())
    return _GEN


def _chunks(seed: int, total: int, size: int, hang: float) -> Iterator[tuple[int, int, int, float]]:
    for start in range(0, total, size):
        yield seed, start, min(total, start + size), hang


@dataclass
class Result:
    inputs: int
    seconds: float
    crashes: list[Crash]
    counts: dict[str, int]

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def _until_broken(
    results: Iterator[tuple[int, list[Crash], dict[str, int]]], crashes: list[Crash]
) -> Iterator[tuple[int, list[Crash], dict[str, int]]]:
    """The workers' results until one dies; its death is recorded as a crash (not replayable by index)."""
    try:
        yield from results
    except BrokenProcessPool as exc:
        crashes.append(Crash(-1, "worker-died", f"a fuzzing process died ({exc}); rerun with --workers 1 to find "
                                                "the input"))


def fuzz(
    total: int,
    seed: int = 1,
    *,
    workers: int = 1,
    chunk: int = 2000,
    hang_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
    save_crashes: bool = True,
) -> Result:
    """Run ``total`` inputs of ``seed``; crashing inputs are saved under ``tests/fuzz_crashes/``."""
    started = time.monotonic()
    done = 0
    crashes: list[Crash] = []
    counts: dict[str, int] = {}
    jobs = _chunks(seed, total, chunk, hang_seconds)
    # Processes, not a multiprocessing.Pool: a worker killed by a signal (a crash in C code, such as
    # gate 12's search) breaks the executor, which raises, where a Pool would wait for it forever.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) if workers > 1 else None
    results = pool.map(_run_range, jobs) if pool else map(_run_range, jobs)
    last_report = started
    try:
        for n, found, seen in _until_broken(results, crashes):
            done += n
            crashes.extend(found)
            for name, count in seen.items():
                counts[name] = counts.get(name, 0) + count
            now = time.monotonic()
            if progress and (now - last_report >= 5 or done == total):
                last_report = now
                progress(
                    f"fuzz: {done}/{total} inputs ({100 * done / total:.0f}%), "
                    f"{done / (now - started):.0f} inputs/s, {len(crashes)} crashes"
                )
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    crashes.sort(key=lambda crash: crash.index)
    if save_crashes and crashes:
        gen = _worker_generator(seed)
        CRASH_DIR.mkdir(exist_ok=True)
        for crash in crashes:
            if crash.index < 0:
                continue  # a dead worker: no single input to save
            _, data = gen.input(crash.index)
            stem = CRASH_DIR / f"{seed}-{crash.index}"
            stem.with_suffix(".bin").write_bytes(data)
            stem.with_suffix(".txt").write_text(
                f"seed {seed} index {crash.index} strategy {crash.strategy}\n"
                f"replay: .venv/bin/python tests/fuzz_transcript.py --seed {seed} "
                f"--replay {crash.index}\n\n{crash.error}"
            )
    return Result(done, time.monotonic() - started, crashes, counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hang-seconds", type=float, default=10.0)
    parser.add_argument("--replay", type=int, help="rebuild input N of the seed, run it, print its traceback")
    args = parser.parse_args(argv)
    if args.replay is not None:
        name, data = _worker_generator(args.seed).input(args.replay)
        print(f"input {args.replay} of seed {args.seed}: strategy {name}, {len(data)} bytes", flush=True)
        exercise(data)
        print("no crash")
        return 0
    print(f"fuzz: {args.inputs} inputs, seed {args.seed}, {args.workers} workers", flush=True)
    result = fuzz(
        args.inputs,
        args.seed,
        workers=args.workers,
        hang_seconds=args.hang_seconds,
        progress=lambda line: print(line, flush=True),
    )
    mix = ", ".join(f"{name} {count}" for name, count in sorted(result.counts.items()))
    print(
        f"fuzz: {result.inputs} inputs in {result.seconds:.1f} s ({result.rate:.0f} inputs/s); "
        f"{len(result.crashes)} crashes\nfuzz: strategies: {mix}"
    )
    for crash in result.crashes[:20]:
        print(
            f"CRASH index {crash.index} ({crash.strategy}), saved in {CRASH_DIR}/{args.seed}-{crash.index}.bin\n"
            f"{crash.error}",
            file=sys.stderr,
        )
    return 1 if result.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
