"""Who built a conversation: the ``population`` sidecar and the rule that a job may resume only within it
(docs/sessions.md#who-may-resume-a-conversation).

A Trigger's *population* is the set of GitHub author associations whose people may start its jobs
(``api/population.py`` says which set a Trigger admits). The key (forge, repository, branch) names no Trigger,
so two Triggers on one branch share one conversation; the stamp keeps a conversation built for a narrow
population (the maintainers) from being resumed by a Trigger that admits a wider one (anyone), whose job would
get the maintainers' context and tool output.

The sidecar is ours, not pi-dispatch's (docs/store-divergences.md): tokens separated by single spaces, sorted,
each a word of capitals and underscores. An older store has none, and a missing or malformed stamp reads
*unknown*, which no Trigger's population is within: such a key starts cold once (``population-widened``) and
its next promotion stamps it. The store knows the tokens only as words; the vocabulary is the API's.
"""

from __future__ import annotations

import re

from pidispatch.store import sidecars

POPULATION = "population"
MAX_TOKENS = 16
_TOKEN = re.compile(r"[A-Z][A-Z_]{0,31}")

Population = frozenset[str]


def render(population: Population) -> str:
    """The sidecar's content: the tokens sorted, one space apart."""
    return " ".join(sorted(population))


def parse(text: str | None) -> Population | None:
    """The stamped population, or ``None`` (unknown) for anything :func:`render` would not have written.

    An empty population is never written (a Trigger admits someone), so an empty file reads unknown too, as
    the common read rule says of every empty sidecar.
    """
    if text is None:
        return None
    tokens = text.split(" ")
    if not 0 < len(tokens) <= MAX_TOKENS or tokens != sorted(set(tokens)):
        return None
    if not all(_TOKEN.fullmatch(token) for token in tokens):
        return None
    return frozenset(tokens)


def read_population(key_dir: str) -> Population | None:
    return parse(sidecars.read_sidecar(key_dir, POPULATION))


def within(job: Population, stamp: Population | None) -> bool:
    """Whether a job of population ``job`` may resume a conversation built under ``stamp``: only when it admits
    nobody the builders did not (a subset, or equal). Unknown (``None``) admits nobody."""
    return stamp is not None and job <= stamp
