"""Structure-aware fuzzer for the webhook receiver: the real ``POST /webhook`` handler, fed hostile deliveries.

Every input goes through ``Receiver.webhook``, the entry point aiohttp calls, with the Job sink of
``test_receiver.MemoryCluster`` (it checks every Job against the CRD). For every input the handler answers,
never raising, never 5xx; a delivery not signed with the secret over its exact body is 401 (413 over the
cap) and creates no Job; a Job comes only from a signed delivery with a usable id and event whose payload
``parse_delivery`` and ``sender_problem`` accept, of a Trigger it matches, answered 202. Anything else is
a crash, saved to ``tests/fuzz_crashes/webhook-<seed>-<index>.json`` (the run exits 1). Inputs: GitHub-format
deliveries (``testkit/fakegithub.py``) mutated (random and malformed JSON, wrong types, deleted fields, deep
nesting, huge values, byte flips, bodies altered after signing, absent, garbage and wrong-secret signatures,
odd event names and ids, form-encoded bodies); input ``i`` of seed ``s`` depends on ``(s, i)`` alone.

    .venv/bin/python -m tests.fuzz_webhook [-n 1000000] [--seed 1] [--workers N] [--replay INDEX]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import hashlib
import hmac
import itertools
import json
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
import traceback
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from aiohttp import HttpVersion11, web
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS
from pidispatch.receiver import delivery as core
from pidispatch.receiver.app import Receiver
from pidispatch.receiver.metrics import ReceiverMetrics
from pidispatch.receiver.signature import WebhookSecret
from testkit import fakegithub, github_objects
from testkit.fakegithub import Delivery, Webhooks
from testkit.receiver import MemoryCluster, trigger

HERE = Path(__file__).resolve().parent
CRASH_DIR = HERE / "fuzz_crashes"
SECRET = b"fuzz-webhook-secret"
FORM = "application/x-www-form-urlencoded"
MAX_BODY = 1024 * 1024  # the receiver's default cap: a larger body is 413 before its signature is read
EVENTS = [*core.ACTIONS, "ping", "push", "pull_request", "Issues", "issue_comment ", "", "installation"]
PHRASES = ["@pi", "@pi fix", "@pip install", "someone@pi.dev", "> @pi", "`@pi`", "```\n@pi\n```",
           "<!-- @pi -->", "@PI", "\u200b@pi", "@pi\x00", "pi", "@pi" * 2000, "<!-- pi-dispatch: x -->@pi"]
HOSTILE_STRINGS = ["", "@pi", "pi", "OWNER", "Bot", "acme/widgets", "\ud800", "\x00", "ACME/Widgets", "../x",
                   "labeled", "created", "submitted"]
HOSTILE_KEYS = ["login", "type", "body", "name", "full_name", "number", "repo", "id", "x"]
# Strategy (a method of the same name) → its weight in the mix.
STRATEGY_WEIGHTS = {"valid": 3, "mutated-fields": 6, "byte-mutations": 3, "random-json": 2, "deep-or-huge": 1,
                    "form-encoded": 2, "unsigned": 1, "wrong-secret": 2, "garbage-signature": 2,
                    "altered-after-signing": 2, "odd-headers": 2}
TRIGGERS = [
    trigger("fix", "issue_comment.created", phrase="@pi", authorAssociations=list(AUTHOR_ASSOCIATIONS)),
    trigger("label", "issues.labeled", label="pi"),
    trigger("review", "pull_request_review.submitted", phrase="@pi"),
    trigger("inline", "pull_request_review_comment.created", phrase="@pi"),
    trigger("elsewhere", "issue_comment.created", phrase="@pi", repository="other/repo"),
]


@dataclass(frozen=True)
class Case:
    """One delivery as it arrives: the headers that matter and the raw body."""

    event: str | None
    delivery: str | None
    signature: str | None
    content_type: str
    body: bytes

    def headers(self) -> dict[str, str]:
        named = {"X-GitHub-Event": self.event, "X-GitHub-Delivery": self.delivery,
                 "X-Hub-Signature-256": self.signature}
        return {"Content-Type": self.content_type, "Content-Length": str(len(self.body)),
                "User-Agent": "GitHub-Hookshot/8c1e3b2", **{k: v for k, v in named.items() if v is not None}}


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signed_by_the_secret(case: Case) -> bool:
    """The oracle's own reading of GitHub's rule: ``sha256=`` and the HMAC of the exact body (hex in any case)."""
    sig = case.signature
    return sig is not None and sig.startswith("sha256=") and sig[7:].lower() == sign(case.body)[7:]


class Generator:
    """Input ``i`` of ``seed``: a pure function of the two (``random.Random(seed * 2**32 + i)``)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        # The builders number comments, stamp times and draw commit shas: fixed here, so the inputs depend
        # on the seed alone.
        shas = random.Random(0)
        with mock.patch.object(fakegithub, "_ids", itertools.count(1_000_001)), \
                mock.patch.object(github_objects, "now", lambda: "2026-01-02T03:04:05Z"), \
                mock.patch.object(fakegithub.uuid, "uuid4", lambda: uuid.UUID(int=shas.getrandbits(128), version=4)):
            self.base = self._deliveries(Webhooks("http://fuzz.invalid/webhook", SECRET))
        self.strategies: list[tuple[str, int, Callable[[random.Random], Case]]] = [
            (name, weight, getattr(self, name.replace("-", "_"))) for name, weight in STRATEGY_WEIGHTS.items()]
        self._weights = [w for _, w, _ in self.strategies]

    @staticmethod
    def _deliveries(hooks: Webhooks) -> list[Delivery]:
        """GitHub-format deliveries of every event a Trigger matches (and ``ping``), the phrases tried in each."""
        base: list[Delivery] = []
        for i, phrase in enumerate(PHRASES):
            base += [hooks.issue_comment(i + 1, phrase, on_pull_request=i % 2 == 0),
                     hooks.pull_request_review(hooks.pull_request(i + 1, fork="m/w" if i % 3 else None), phrase),
                     hooks.pull_request_review_comment(i + 1, phrase),
                     hooks.issue_comment(i + 1, phrase, bot=i % 4 == 1, repository="other/repo")]
        base += [hooks.issues_labeled(n, label) for n, label in enumerate(["pi", "PI", "bug", "p i"], 1)]
        base += [hooks.ping("Keep it logically awesome.", hook_id=1)]
        return base

    def input(self, index: int) -> tuple[str, Case]:
        rng = random.Random(self.seed * 2**32 + index)
        name, _, build = rng.choices(self.strategies, self._weights)[0]
        return name, build(rng)

    def _pick(self, rng: random.Random) -> Delivery:
        return self.base[rng.randrange(len(self.base))]

    @staticmethod
    def _id(rng: random.Random) -> str:
        a, b, c, d, e = (rng.getrandbits(bits) for bits in (32, 16, 12, 12, 48))
        return f"{a:08x}-{b:04x}-4{c:03x}-a{d:03x}-{e:012x}"

    def _signed(self, rng: random.Random, event: str | None, body: bytes, ctype: str = "application/json") -> Case:
        return Case(event, self._id(rng), sign(body), ctype, body)

    def _dump(self, rng: random.Random, value: Any) -> bytes:
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5, allow_nan=True,
                          separators=(",", ":") if rng.random() < 0.7 else (", ", ": "))
        return text.encode("utf-8", "surrogatepass")

    def random_value(self, rng: random.Random, depth: int = 0) -> Any:
        kind = rng.randrange(12 if depth < 4 else 9)  # containers (9 to 11) only this deep
        def strings() -> str:
            return rng.choice([*HOSTILE_STRINGS[:6], "a" * rng.randrange(300), *HOSTILE_STRINGS[6:]])

        def objects() -> dict[str, Any]:
            return {rng.choice(HOSTILE_KEYS): self.random_value(rng, depth + 1) for _ in range(rng.randrange(4))}

        return [lambda: None, lambda: rng.random() < 0.5,
                lambda: rng.choice([0, -1, 1, 2**31, 2**63, -(2**64), 10**400, 7]),
                lambda: rng.choice([0.0, -0.0, 1.5, 1e308, float("nan"), float("inf")]), strings, strings,
                lambda: "".join(chr(rng.randrange(0x30000)) for _ in range(rng.randrange(12))),
                lambda: rng.randrange(1, 10**6), lambda: "x" * rng.choice([1, 70000, 300000]), objects, objects,
                lambda: [self.random_value(rng, depth + 1) for _ in range(rng.randrange(4))]][kind]()

    def _mutate(self, rng: random.Random, value: Any, depth: int = 0) -> Any:
        """A copy of ``value`` with some fields replaced by random values, deleted or retyped."""
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                roll = rng.random()
                if roll < 0.04:
                    continue
                out[key] = self.random_value(rng) if roll < 0.12 else self._mutate(rng, item, depth + 1)
            if rng.random() < 0.05:
                out[rng.choice(["action", "sender", "comment", "issue", "review", "extra"])] = self.random_value(rng)
            return out
        if isinstance(value, list):
            return [self._mutate(rng, item, depth + 1) for item in value]
        return value

    def valid(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        return self._signed(rng, d.event, d.body)

    def mutated_fields(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        return self._signed(rng, d.event, self._dump(rng, self._mutate(rng, d.payload)))

    def byte_mutations(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        body = bytearray(d.body)
        for _ in range(rng.randrange(1, 6)):
            op = rng.randrange(4)
            if not body:
                break
            at = rng.randrange(len(body))
            if op == 0:
                body[at] ^= 1 << rng.randrange(8)
            elif op == 1:
                del body[at:]
            elif op == 2:
                body[at:at] = rng.choice([b"\x00", b"\xff\xfe", b"\\u", b"{", b"]", b'"', b",,", b"\xed\xa0\x80"])
            else:
                body[at:at + rng.randrange(20)] = b""
        return self._signed(rng, d.event, bytes(body))

    def random_json(self, rng: random.Random) -> Case:
        event = rng.choice(EVENTS)
        body = self._dump(rng, self.random_value(rng)) if rng.random() < 0.8 else rng.randbytes(rng.randrange(200))
        return self._signed(rng, event, body)

    def deep_or_huge(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        payload = json.loads(d.body)
        roll = rng.randrange(4)
        if roll == 0:
            body = b"[" * 100_000 + b"]" * 100_000  # past the JSON decoder's recursion limit
        elif roll == 1:
            nested: Any = "@pi"
            for _ in range(rng.choice([50, 500, 900])):
                nested = {"body": nested}
            payload[rng.choice(["comment", "review", "sender", "repository"])] = nested
            body = self._dump(rng, payload)
        elif roll == 2:
            for where in ("comment", "review"):
                if isinstance(payload.get(where), dict):
                    payload[where]["body"] = "@pi " + "y" * rng.choice([65536, 500_000])
            payload["repository"]["full_name"] = rng.choice(["a/" + "b" * 300, "acme/widgets"])
            body = self._dump(rng, payload)
        else:
            body = b'{"action":' + b"1" * rng.choice([4300, 100_000]) + b"}"  # int() digit limit, and beyond
        return self._signed(rng, d.event, body)

    def form_encoded(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        inner = d.body if rng.random() < 0.6 else self._dump(rng, self._mutate(rng, d.payload))
        fields = [("payload", inner.decode("utf-8", "replace"))]
        if rng.random() < 0.2:
            fields.append(("payload", "{}"))
        if rng.random() < 0.2:
            fields = [("other", "x")]
        body = urllib.parse.urlencode(fields).encode()
        if rng.random() < 0.2:
            body = body[: rng.randrange(len(body) + 1)] + rng.choice([b"%", b"%zz", b"&&=", b"\xff"])
        return self._signed(rng, d.event, body, FORM)

    def unsigned(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        return Case(d.event, self._id(rng), None, "application/json", d.body)

    def wrong_secret(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        secret = rng.choice([b"", b"fuzz-webhook-secreT", SECRET + b"\n", rng.randbytes(16)])
        return Case(d.event, self._id(rng), sign(d.body, secret), "application/json", d.body)

    def garbage_signature(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        good = sign(d.body)
        sig = rng.choice([
            "", "sha256=", "sha1=" + hashlib.sha1(d.body).hexdigest(), good[:-1], good + "0", good.upper(),
            "SHA256=" + good[7:], " " + good, good + " ", "sha256=" + "0" * 64, "sha256=" + "g" * 64,
            "sha256=" + good[7:].upper(), good.replace("sha256=", "sha256:"), "sha256=" + good[8:] + good[7],
            "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.randrange(80))),
            "sha256=" + "".join(chr(rng.randrange(0xA0, 0x100)) for _ in range(64)),
        ])
        return Case(d.event, self._id(rng), sig, "application/json", d.body)

    def altered_after_signing(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        sig = sign(d.body)
        body = rng.choice([d.body + b" ", d.body.replace(b"@pi", b"@pj", 1), d.body[:-1],
                           d.body.replace(b'"OWNER"', b'"NONE"', 1), b" " + d.body,
                           self._dump(rng, self._mutate(rng, d.payload))])
        if body == d.body:
            body += b"\n"
        return Case(d.event, self._id(rng), sig, "application/json", body)

    def odd_headers(self, rng: random.Random) -> Case:
        d = self._pick(rng)
        event = rng.choice([None, d.event, *EVENTS, "".join(chr(rng.randrange(0x21, 0x7F)) for _ in range(10))])
        delivery = rng.choice([None, "", self._id(rng), "../../etc", "x" * 300, "UPPER-CASE", "a b", "\t"])
        case = self._signed(rng, event, d.body, rng.choice(["application/json", "text/plain", "", FORM]))
        return Case(case.event, delivery, case.signature, case.content_type, case.body)


# -- the properties ---------------------------------------------------------------------------------------------
def _payload(case: Case) -> Any:
    """The payload the body encodes, the way GitHub sends either content type; raises ``ValueError`` if none."""
    body = case.body
    if case.content_type == FORM:
        values = urllib.parse.parse_qs(body.decode("utf-8", "strict"), keep_blank_values=True,
                                       strict_parsing=True).get("payload", [])
        (value,) = values  # ValueError unless exactly one
        body = value.encode()
    return json.loads(body)


def allowed_triggers(case: Case) -> set[str]:
    """The Triggers the delivery may start a Job of: none unless every check before the matching passes."""
    if (not signed_by_the_secret(case) or core.delivery_id_problem(case.delivery) is not None
            or case.event is None or core.event_problem(case.event) is not None):
        return set()
    try:
        event = core.parse_delivery(case.event, _payload(case))
    except (ValueError, RecursionError, UnicodeError, core.Malformed):
        return set()
    if isinstance(event, core.Ignored) or core.sender_problem(event) is not None:
        return set()
    return {t["metadata"]["name"] for t in TRIGGERS if core.mismatch(t, event) is None}


class Bench:
    """One event loop per process, and one receiver per input (so no state leaks from one to the next)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.metrics = ReceiverMetrics()
        self._stream_protocol = mock.Mock(_reading_paused=False)
        # The request's surroundings (aiohttp's test mocks), made once: made per input they cost more than it.
        first = make_mocked_request("POST", "/webhook", loop=self.loop)
        self._surroundings = (first.protocol, first.writer, first.task)

    def answer(self, case: Case) -> tuple[int, dict[str, Any]]:
        cluster = MemoryCluster(TRIGGERS)
        receiver = Receiver(cluster, WebhookSecret(SECRET), max_body=MAX_BODY, metrics=self.metrics)
        return self.loop.run_until_complete(self._post(receiver, case)), cluster.jobs

    async def _post(self, receiver: Receiver, case: Case) -> int:
        payload = StreamReader(self._stream_protocol, 2**16, loop=self.loop)
        payload.feed_data(case.body)
        payload.feed_eof()
        headers = CIMultiDict(case.headers())
        raw = tuple((k.encode("utf-8"), v.encode("utf-8", "surrogateescape")) for k, v in headers.items())
        message = RawRequestMessage("POST", "/webhook", HttpVersion11, CIMultiDictProxy(headers), raw, False, None,
                                    False, False, URL("/webhook"))
        protocol, writer, task = self._surroundings
        request = web.Request(message, payload, protocol, writer, task, self.loop)
        try:
            response = await receiver.webhook(request)
        except web.HTTPException as exc:  # aiohttp renders these itself; only a 4xx is an answer
            assert exc.status < 500, f"raised {exc.status}"
            return exc.status
        return response.status


def exercise(bench: Bench, case: Case) -> int:
    """Post ``case``; raise ``AssertionError`` (or anything) when a property breaks. The Jobs it created."""
    status, jobs = bench.answer(case)
    assert status < 500, f"answered {status}"
    if not signed_by_the_secret(case):
        refused = 413 if len(case.body) > MAX_BODY else 401
        assert status == refused, f"a delivery not signed by the secret answered {status}, not {refused}"
    if not jobs:
        return 0
    assert status == 202, f"Jobs created under {status}"
    started = sorted(job["spec"]["trigger"] for job in jobs.values())
    allowed = allowed_triggers(case)
    assert set(started) <= allowed and len(started) == len(set(started)), \
        f"Jobs of {started}, where the checks allow {sorted(allowed)}"
    assert {job["spec"]["deliveryId"] for job in jobs.values()} == {case.delivery}
    return len(jobs)


@dataclass
class Crash:
    index: int
    strategy: str
    error: str


def _on_alarm(signum: int, frame: object) -> None:
    raise TimeoutError("input took longer than the hang limit")


@functools.lru_cache(maxsize=1)
def _worker(seed: int) -> tuple[Generator, Bench]:
    return Generator(seed), Bench()


def _run_range(args: tuple[int, int, int, float]) -> tuple[int, list[Crash], dict[str, int], int]:
    seed, start, stop, hang_seconds = args
    gen, bench = _worker(seed)
    crashes: list[Crash] = []
    counts: dict[str, int] = {}
    with_jobs = 0
    events = logging.getLogger("pidispatch.events")
    # A log line per input would be most of the cost; both are put back (a test runs this in its own process).
    was_disabled, events.disabled, previous = events.disabled, True, signal.signal(signal.SIGALRM, _on_alarm)
    try:
        for index in range(start, stop):
            name, case = gen.input(index)
            counts[name] = counts.get(name, 0) + 1
            signal.setitimer(signal.ITIMER_REAL, hang_seconds)
            try:
                with_jobs += bool(exercise(bench, case))
            except Exception as exc:  # noqa: BLE001 - the fuzzer's whole point (TimeoutError: a hang)
                crashes.append(Crash(index, name, "".join(traceback.format_exception(exc))))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        events.disabled = was_disabled
        signal.signal(signal.SIGALRM, previous)
    return stop - start, crashes, counts, with_jobs


@dataclass
class Result:
    inputs: int
    seconds: float
    crashes: list[Crash]
    counts: dict[str, int]
    with_jobs: int  # inputs that created a Job: proof that the harness sees Jobs at all


def fuzz(total: int, seed: int = 1, *, workers: int = 1, chunk: int = 2000, hang_seconds: float = 10.0,
         progress: Callable[[str], None] | None = None, save_crashes: bool = True) -> Result:
    """Run ``total`` inputs of ``seed``; crashing inputs are saved under ``tests/fuzz_crashes/``."""
    started = last_report = time.monotonic()
    done = with_jobs = 0
    crashes: list[Crash] = []
    counts: Counter[str] = Counter()
    jobs: Iterator[tuple[int, int, int, float]] = (
        (seed, start, min(total, start + chunk), hang_seconds) for start in range(0, total, chunk))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) if workers > 1 else None
    results = pool.map(_run_range, jobs) if pool else map(_run_range, jobs)
    try:
        for n, found, seen, meant in results:
            done += n
            with_jobs += meant
            crashes.extend(found)
            counts.update(seen)
            now = time.monotonic()
            if progress and (now - last_report >= 5 or done == total):
                last_report = now
                progress(f"fuzz webhook: {done}/{total} inputs ({100 * done / total:.0f}%), "
                         f"{done / (now - started):.0f} inputs/s, {len(crashes)} crashes")
    except BrokenProcessPool as exc:
        crashes.append(Crash(-1, "worker-died", f"a fuzzing process died ({exc}); rerun with --workers 1"))
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    crashes.sort(key=lambda crash: crash.index)
    if save_crashes and crashes:
        gen = Generator(seed)
        CRASH_DIR.mkdir(exist_ok=True)
        for crash in (c for c in crashes if c.index >= 0):  # a dead worker leaves no single input to save
            (CRASH_DIR / f"webhook-{seed}-{crash.index}.json").write_text(json.dumps(
                {"seed": seed, "index": crash.index, "strategy": crash.strategy,
                 "headers": (case := gen.input(crash.index)[1]).headers(), "error": crash.error,
                 "body_base64": base64.b64encode(case.body).decode(),
                 "replay": f".venv/bin/python -m tests.fuzz_webhook --seed {seed} --replay {crash.index}"}, indent=1))
    return Result(done, time.monotonic() - started, crashes, counts, with_jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hang-seconds", type=float, default=10.0)
    parser.add_argument("--replay", type=int, help="rebuild input N of the seed, run it, print its traceback")
    args = parser.parse_args(argv)
    if args.replay is not None:
        gen, bench = _worker(args.seed)
        name, case = gen.input(args.replay)
        print(f"input {args.replay} of seed {args.seed}: strategy {name}, headers {case.headers()}, "
              f"{len(case.body)} bytes", flush=True)
        print(f"no crash; {exercise(bench, case)} Jobs")
        return 0
    print(f"fuzz webhook: {args.inputs} inputs, seed {args.seed}, {args.workers} workers", flush=True)
    result = fuzz(args.inputs, args.seed, workers=args.workers, hang_seconds=args.hang_seconds,
                  progress=lambda line: print(line, flush=True))
    mix = ", ".join(f"{name} {count}" for name, count in sorted(result.counts.items()))
    rate = result.inputs / max(result.seconds, 1e-9)
    print(f"fuzz webhook: {result.inputs} inputs in {result.seconds:.1f} s ({rate:.0f} inputs/s); "
          f"{result.with_jobs} created Jobs; {len(result.crashes)} crashes\nfuzz webhook: strategies: {mix}")
    for crash in result.crashes[:20]:
        print(f"CRASH index {crash.index} ({crash.strategy}), saved in {CRASH_DIR}/webhook-{args.seed}-"
              f"{crash.index}.json\n{crash.error}", file=sys.stderr)
    return 1 if result.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
