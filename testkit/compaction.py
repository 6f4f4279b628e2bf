"""Gate 12's reference and the scanner in any chunking, shared by the compaction and needle tests.

``reference`` parses every line as pi splits them (no pre-filter); ``scan`` feeds the streaming scanner in
the given cuts; ``compaction_lines()`` is a hypothesis strategy of compaction entries spelled every way
pi's JSON.parse accepts (escapes, spacing, CRLF), with noise lines between them.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from pidispatch.transcript._jsjson import loads
from pidispatch.transcript.compaction import (
    PLACEHOLDER,
    SPLIT_TURN_MARKER,
    EmptyCompactionScanner,
    compaction_summary_is_empty,
)
from testkit.transcripts import sample

SPLIT = SPLIT_TURN_MARKER
HEAD = sample("s1_after_turn2.jsonl")


def reference(data: bytes) -> bool:
    """Gate 12 with no pre-filter: parse every line as pi splits them (on `\\n` only)."""
    for line in data.split(b"\n"):
        ok, value = loads(line.decode("utf-8", errors="replace"))
        if ok and isinstance(value, dict) and value.get("type") == "compaction" and compaction_summary_is_empty(value):
            return True
    return False


def scan(data: bytes, cuts: list[int]) -> bool:
    scanner = EmptyCompactionScanner()
    start = 0
    for cut in sorted({min(max(cut, 0), len(data)) for cut in cuts}) + [len(data)]:
        scanner.feed(data[start:cut])
        start = cut
    return scanner.finish()


def escaped(text: str, which: set[int] | None = None, upper: bool = False) -> str:
    """`text` as a JSON string body, the characters at `which` (all when None) as \\u escapes."""
    out = []
    for index, ch in enumerate(text):
        if which is None or index in which:
            code = f"{ord(ch):04x}"
            out.append("\\u" + (code.upper() if upper else code))
        else:
            out.append(json.dumps(ch)[1:-1])
    return "".join(out)


def compaction_line(type_body: str, summary_body: str, *, spaced: bool = False, crlf: bool = False) -> bytes:
    sep = " : " if spaced else ":"
    comma = " ,\t" if spaced else ","
    line = (
        f'{{"type"{sep}"{type_body}"{comma}"id"{sep}"c1"{comma}"summary"{sep}"{summary_body}"{comma}'
        f'"details"{sep}{{"readFiles":[],"modifiedFiles":[]}}}}'
    )
    return line.encode() + (b"\r\n" if crlf else b"\n")


# Random transcripts mixing compaction entries spelled every way pi's JSON.parse accepts, in any
# chunking: the scanner must agree with parsing every line.
_summaries = st.sampled_from(
    ["", " ", "\u00a0", "\n", PLACEHOLDER, PLACEHOLDER + SPLIT, "Real.", '"compaction"', "\u001b"]
)
_types = st.sampled_from(["compaction", "message", "compactio", "Compaction", "compaction "])


@st.composite
def compaction_lines(draw: st.DrawFn) -> bytes:
    kind = draw(_types)
    summary = draw(_summaries)
    type_escapes = draw(st.sets(st.integers(min_value=0, max_value=len(kind) - 1)))
    summary_escapes = draw(st.sets(st.integers(min_value=0, max_value=max(len(summary) - 1, 0))))
    upper = draw(st.booleans())
    spaced = draw(st.booleans())
    crlf = draw(st.booleans())
    line = compaction_line(escaped(kind, type_escapes, upper), escaped(summary, summary_escapes, upper),
                           spaced=spaced, crlf=crlf)
    noise = draw(st.sampled_from([b"", b"garbage\n", b'{"type":"message","text":"\\u001b[0m"}\n', b"\n"]))
    return noise + line
