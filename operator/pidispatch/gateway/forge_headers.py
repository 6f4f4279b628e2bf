"""The headers the forge path passes each way, and the upstream URLs it rewrites (docs/gateway.md#what-crosses).

Both directions are lists of what passes, not of what is dropped: a header the gateway does not know (a cookie,
``WWW-Authenticate``, ``X-GitHub-SSO``'s authorization URL, ``X-OAuth-Scopes``) never reaches the other side.
``Location`` and ``Link`` carry upstream URLs: one under the forge's API or web address is rewritten to the same
path on the gateway (so the job follows it back through the gateway, where its token is added again); any other,
or one with user information in it, is dropped, and a redirect to it refused by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from yarl import URL

from pidispatch.contract.gateway_wire import API_PREFIX, GRAPHQL_PATH
from pidispatch.gateway.capability import Claims
from pidispatch.gateway.forge_graphql import graphql_url

TO_UPSTREAM = frozenset({
    "accept", "accept-encoding", "accept-language", "content-type", "content-encoding", "content-length",
    "user-agent", "git-protocol", "x-github-api-version", "if-none-match", "if-modified-since", "graphql-features",
    "time-zone",
})
TO_JOB = frozenset({
    "content-type", "content-encoding", "content-length", "cache-control", "etag", "last-modified", "expires",
    "pragma", "vary", "date", "retry-after", "x-github-request-id", "x-github-media-type",
    "x-github-api-version-selected", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
    "x-ratelimit-used", "x-ratelimit-resource",
})
_LINK = re.compile(r"<([^>]*)>([^,]*)")


def to_upstream(headers: Mapping[str, str]) -> dict[str, str]:
    """The job's headers the forge may see: none that carries a credential, none that is hop-by-hop."""
    return {name: value for name, value in headers.items() if name.lower() in TO_UPSTREAM}


def rewrite_url(claims: Claims, value: str, upstream: URL, gateway: str) -> str | None:
    """``value`` (absolute, or relative to ``upstream``) as the same resource on the gateway (``gateway``:
    ``https://host[:port]``), or ``None`` when it is not under the forge's API or web address, or names a user."""
    try:
        target = upstream.join(URL(value))
    except ValueError:
        return None
    if target.user is not None or target.password is not None or not target.is_absolute():
        return None
    api, graphql, web = URL(claims.api.rstrip("/")), URL(graphql_url(claims.api)), URL(claims.forge.rstrip("/"))
    path = target.raw_path
    tail = ("?" + target.raw_query_string) if target.raw_query_string else ""
    if target.origin() == graphql.origin() and path == graphql.raw_path:
        return gateway + GRAPHQL_PATH + tail
    if target.origin() == api.origin() and (path == api.raw_path or path.startswith(api.raw_path.rstrip("/") + "/")):
        rest = path[len(api.raw_path.rstrip("/")):]
        return gateway + API_PREFIX.rstrip("/") + rest + tail
    if target.origin() == web.origin() and path.startswith(web.raw_path.rstrip("/") + "/"):
        return gateway + path[len(web.raw_path.rstrip("/")):] + tail
    return None


def to_job(claims: Claims, headers: Mapping[str, str], upstream: URL, gateway: str, *, keep_length: bool
           ) -> dict[str, str]:
    """The forge's response headers the job may see, with ``Location`` and ``Link`` rewritten onto the gateway."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in TO_JOB and (keep_length or lower != "content-length"):
            out[name] = value
        elif lower == "location":
            rewritten = rewrite_url(claims, value, upstream, gateway)
            if rewritten is not None:
                out[name] = rewritten
        elif lower == "link":
            links = [f"<{url}>{params}" for raw, params in _LINK.findall(value)
                     if (url := rewrite_url(claims, raw, upstream, gateway)) is not None]
            if links:
                out[name] = ", ".join(link.strip() for link in links)
    return out
