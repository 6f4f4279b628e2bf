"""Which REST calls and git requests a job may send to its forge (docs/gateway.md#rest).

Pure decisions on the request line as the job sent it (the path still percent-encoded, exactly what goes
upstream), so what is checked is what is forwarded: a path the gateway would have to decode to judge
(an encoded slash, backslash or dot, an empty or dot segment) is refused rather than normalised.
"""

from __future__ import annotations

import re

from pidispatch.contract.gateway_wire import REFUSED_FORK_WRITE, REFUSED_REPOSITORY, REFUSED_UNCHECKED
from pidispatch.gateway.capability import Claims
from pidispatch.gateway.forge_graphql import Refusal

READS = frozenset({"GET", "HEAD"})
METHODS = frozenset({"GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"})
# The only non-repository REST reads: who the token is (``gh api user``, ``gh auth status``) and the rate limit.
OTHER_READS = frozenset({"/user", "/rate_limit"})
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
_UNSAFE = re.compile(r"%(2[eEfF]|5[cC]|00)|\\")
GIT_SERVICES = frozenset({"git-upload-pack", "git-receive-pack"})


def _same(claims: Claims, owner: str, name: str) -> bool:
    return f"{owner}/{name}".lower() == claims.repository.lower()


def rest(claims: Claims, method: str, raw_path: str) -> Refusal | None:
    """``None`` when ``method raw_path`` (the part after ``/api/v3``, percent-encoded) may go to ``claims.api``."""
    if method not in METHODS:
        return Refusal(REFUSED_UNCHECKED, f"{method} is not forwarded to the forge")
    segments = raw_path.split("/")
    if not raw_path.startswith("/") or _UNSAFE.search(raw_path) or any(s in ("", ".", "..") for s in segments[1:]):
        return Refusal(REFUSED_UNCHECKED, "a path with an empty, dot or encoded separator segment is not forwarded")
    if raw_path in OTHER_READS:
        if method in READS:
            return None
        return Refusal(REFUSED_REPOSITORY, f"{raw_path} may only be read")
    if len(segments) < 4 or segments[1] != "repos" or not _NAME.fullmatch(segments[2]) or \
            not _NAME.fullmatch(segments[3]) or not _same(claims, segments[2], segments[3]):
        return Refusal(REFUSED_REPOSITORY, f"this job may call the forge's API for {claims.repository} only")
    rest_of = segments[4:]
    if claims.fork:
        if method in READS:
            return None
        if method == "POST" and claims.subject is not None and rest_of == ["issues", str(claims.subject), "comments"]:
            return None
        return Refusal(REFUSED_FORK_WRITE, f"a fork's job may only read, and comment on #{claims.subject}")
    if not rest_of and method not in READS:
        return Refusal(REFUSED_REPOSITORY, "the repository's own settings are not the job's to change")
    return None


def git(claims: Claims, owner: str, name: str, service: str | None) -> Refusal | None:
    """``None`` when a smart-HTTP request for ``owner/name`` (``.git`` already dropped) and ``service`` may go on."""
    if service not in GIT_SERVICES:
        return Refusal(REFUSED_UNCHECKED, "only git's smart HTTP (git-upload-pack, git-receive-pack) is forwarded")
    if not (_NAME.fullmatch(owner) and _NAME.fullmatch(name) and _same(claims, owner, name)):
        return Refusal(REFUSED_REPOSITORY, f"this job may reach {claims.repository} only")
    if claims.fork and service == "git-receive-pack":
        return Refusal(REFUSED_FORK_WRITE, "a fork's job may not push; it may only fetch")
    return None
