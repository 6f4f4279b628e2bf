"""Which repositories a Trigger serves (``api/serves.py``): the one table the receiver, the admission and doctor
share, and the schema's check of an entry (``on.repositories`` in the Trigger CRD, through the model)."""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.api import serves
from pidispatch.api.models import TriggerSpec, problem
from pidispatch.receiver import delivery as core
from testkit.fakegithub import Webhooks

# (what the Trigger names, the repository a delivery comes from, served?)
SERVED: list[tuple[str, tuple[str, ...], str, bool]] = [
    ("nothing named: every repository, as before the field existed", (), "anyone/anything", True),
    ("exact: the same repository", ("acme/api",), "acme/api", True),
    ("exact: another name of the same owner", ("acme/api",), "acme/web", False),
    ("exact: the same name under another owner", ("acme/api",), "evil/api", False),
    ("exact: case does not matter, as on GitHub", ("Acme/API",), "acme/api", True),
    ("owner glob: every repository of the owner", ("acme/*",), "acme/anything", True),
    ("owner glob: another owner", ("acme/*",), "evil/anything", False),
    ("owner glob: an owner whose name starts with it is another owner", ("acme/*",), "acme-labs/api", False),
    ("owner glob: case does not matter", ("ACME/*",), "acme/Widgets", True),
    ("name glob: a prefix", ("acme-labs/api-*",), "acme-labs/api-gateway", True),
    ("name glob: the prefix alone", ("acme-labs/api-*",), "acme-labs/api-", True),
    ("name glob: another name", ("acme-labs/api-*",), "acme-labs/web", False),
    ("name glob: the same name under another owner", ("acme-labs/api-*",), "acme-lab/api-gateway", False),
    ("owner globbed, name fixed", ("*/dotfiles",), "anyone/dotfiles", True),
    ("owner globbed, another name", ("*/dotfiles",), "anyone/dotfile", False),
    ("? is one character", ("acme/api-v?",), "acme/api-v2", True),
    ("? is exactly one character", ("acme/api-v?",), "acme/api-v10", False),
    ("a character class", ("acme/[aw]*",), "acme/web", True),
    ("a negated character class", ("acme/[!aw]*",), "acme/web", False),
    ("* never crosses the slash", ("acme*",), "acme/api", False),
    ("an owner glob does not reach into the name", ("*/*",), "acme/api", True),
    ("the first of several that matches", ("acme/*", "acme-labs/api-*"), "acme-labs/api-x", True),
    ("none of several", ("acme/*", "acme-labs/api-*"), "acme-labz/api-x", False),
]


@pytest.mark.parametrize(("named", "repository", "served"), [s[1:] for s in SERVED], ids=[s[0] for s in SERVED])
def test_what_a_trigger_serves(named: tuple[str, ...], repository: str, served: bool) -> None:
    assert serves.serves(named, repository) is served


# A fork's pull request: the payload's repository (and so the Job's) is the base repository; the head is the fork.
FORKS: list[tuple[str, tuple[str, ...], str, str, bool]] = [
    ("a fork of a trusted repository is served by its base", ("acme/*",), "acme/api", "stranger/api", True),
    ("a trusted owner's fork of an untrusted base is not", ("acme/*",), "evil/api", "acme/api", False),
]


@pytest.mark.parametrize(("named", "base", "head", "served"), [f[1:] for f in FORKS], ids=[f[0] for f in FORKS])
def test_a_fork_pull_request_is_served_by_its_base_repository(named: tuple[str, ...], base: str, head: str,
                                                              served: bool) -> None:
    hooks = Webhooks("http://unused", b"s", repository=base)
    event = core.parse_delivery("pull_request_review_comment", hooks.pull_request_review_comment(
        hooks.pull_request(4, fork=head), "@pi").payload)
    assert isinstance(event, core.Event) and event.fork is True, "the fork rules still see a fork"
    assert event.repository == base
    assert serves.serves(named, event.repository) is served


ENTRIES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("neither field", {"event": "issues.labeled"}, ()),
    ("on.repository alone is one exact entry", {"repository": "acme/api"}, ("acme/api",)),
    ("both: on.repository first", {"repository": "acme/api", "repositories": ["x/*"]}, ("acme/api", "x/*")),
    ("not a list: nothing named", {"repositories": "acme/*"}, ()),
]


@pytest.mark.parametrize(("on", "named"), [e[1:] for e in ENTRIES], ids=[e[0] for e in ENTRIES])
def test_entries_of_a_trigger(on: dict[str, Any], named: tuple[str, ...]) -> None:
    assert serves.entries_of(on) == named
    if isinstance(on.get("repositories", []), list):
        model = TriggerSpec.model_validate({"on": {"event": "issues.labeled", **on}, "run": {}})
        assert model.on.served() == named


EVERYTHING = [
    ("nothing named", (), True),
    ("*/*", ("acme/*", "*/*"), True),
    ("**/*", ("**/*",), True),
    ("an owner", ("acme/*",), False),
    ("every owner's repository of one name", ("*/api",), False),
]


@pytest.mark.parametrize(("named", "everything"), [e[1:] for e in EVERYTHING], ids=[e[0] for e in EVERYTHING])
def test_serves_everything(named: tuple[str, ...], everything: bool) -> None:
    assert serves.serves_everything(named) is everything


SCHEMA = [
    ("an owner glob", ["acme/*"], None),
    ("a name glob and a class", ["acme-labs/api-[a-z]*"], None),
    ("an empty list: name one, or leave the field out", [], "at least 1"),
    ("no slash", ["acme"], "pattern"),
    ("two slashes", ["acme/api/x"], "pattern"),
    ("a space", ["acme/ api"], "pattern"),
    ("too many", [f"o{i}/*" for i in range(serves.PATTERNS_MAX + 1)], "at most"),
]


@pytest.mark.parametrize(("entries", "refused"), [s[1:] for s in SCHEMA], ids=[s[0] for s in SCHEMA])
def test_the_schema_checks_each_entry(entries: list[str], refused: str | None) -> None:
    why = problem(TriggerSpec, {"on": {"event": "issues.labeled", "repositories": entries}, "run": {}})
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why
