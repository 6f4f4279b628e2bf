"""Which repositories a Trigger serves: ``on.repository`` (one exact OWNER/NAME) and ``on.repositories`` (patterns).

A delivery from a repository its Trigger does not serve creates nothing: the receiver ignores it
(``receiver/delivery.py``) and the operator's admission refuses a Job made for it by hand
(``jobflow/admit.py``, ``beyond-trigger``). Resume is armed only on a Trigger that names what it serves
(:func:`names_repositories`): a transcript is replayed into every later job on its branch, so the
repositories whose conversations are kept must be a choice somebody wrote down, not "whatever GitHub sends".

Rules, one source for the receiver, the operator and doctor:

* An entry is ``OWNER/NAME``; each half is a shell-style glob (``*``, ``?``, ``[abc]``, ``[!abc]``) matched on
  its own, so ``*`` never crosses the ``/``: ``acme/*`` serves every repository of ``acme`` and none of
  ``acme-labs``. Matching ignores case, as GitHub does for owners and names.
* ``on.repository`` is one more entry, matched exactly (its schema allows no glob characters).
* A Trigger that names neither serves every repository, as before these fields existed; it cannot arm resume.
  An empty ``on.repositories`` is refused by the schema (name one, or leave the field out).
* A fork's pull request is served by its base repository (the payload's ``repository``, which the Job carries):
  the fork's own owner does not matter here, and the fork rules (``jobflow/forks.py``) apply on top.

Plain functions over plain data (no pydantic): the receiver reads Triggers as dicts, the operator as models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

# An entry of on.repositories: GitHub's name characters plus the glob ones, on each side of one slash.
PATTERN = r"^[A-Za-z0-9_.*?!\[\]-]+/[A-Za-z0-9_.*?!\[\]-]+$"
PATTERNS_MAX = 32
SERVES_EVERY = "every repository"


def entries(repository: str | None, repositories: Sequence[str] | None) -> tuple[str, ...]:
    """What a Trigger names: its ``on.repository`` then its ``on.repositories``, in the order written."""
    named = [repository] if isinstance(repository, str) and repository else []
    named += [p for p in repositories or () if isinstance(p, str) and p]
    return tuple(named)


def entries_of(on: Mapping[str, Any] | None) -> tuple[str, ...]:
    """:func:`entries` of a Trigger's ``spec.on`` as a dict (what the receiver and doctor read)."""
    on = on if isinstance(on, Mapping) else {}
    wanted = on.get("repositories")
    return entries(on.get("repository"), wanted if isinstance(wanted, list) else None)


def entry_matches(entry: str, repository: str) -> bool:
    """Whether ``entry`` (OWNER/NAME, each half a glob) names ``repository`` (OWNER/NAME), ignoring case."""
    owner_glob, slash, name_glob = entry.casefold().partition("/")
    owner, sep, name = repository.casefold().partition("/")
    if not slash or not sep or "/" in name_glob or "/" in name:
        return False
    return fnmatchcase(owner, owner_glob) and fnmatchcase(name, name_glob)


def serves(named: Sequence[str], repository: str) -> bool:
    """Whether a Trigger that names ``named`` (:func:`entries`) serves ``repository``: nothing named serves all."""
    return not named or any(entry_matches(entry, repository) for entry in named)


def names_repositories(named: Sequence[str]) -> bool:
    """Whether a Trigger names what it serves: the condition for arming resume."""
    return bool(named)


def _any_name(glob: str) -> bool:
    return bool(glob) and set(glob) == {"*"}


def serves_everything(named: Sequence[str]) -> bool:
    """Whether ``named`` serves every repository: nothing named, or an entry like ``*/*``."""
    for entry in named:
        owner, _, name = entry.partition("/")
        if _any_name(owner) and _any_name(name):
            return True
    return not named


def described(named: Sequence[str]) -> str:
    """What a Trigger serves, for a person: ``every repository`` or the entries it names."""
    if not named:
        return f"{SERVES_EVERY} (it names none)"
    return ", ".join(named)


NO_REPOSITORIES_MESSAGE = (
    "run.resume is set but the Trigger names no repository (on.repository or on.repositories), so resume is off "
    "and every job starts a fresh conversation (session reason disabled): a transcript is replayed into every "
    "later job on its branch, so the repositories whose conversations are kept must be named. Add "
    "on.repositories (e.g. [\"your-org/*\"]) or on.repository to arm it, or remove run.resume."
)
NO_REPOSITORIES = "NoRepositories"
