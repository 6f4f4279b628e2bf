"""The poller's GETs to the forge: conditional (``If-None-Match``), with every header of the answer kept.

Not ``forge/github.py``'s client: that one raises on anything but a 2xx and drops the headers, and the poller
lives on ``304 Not Modified`` (which costs no rate limit on GitHub), ``ETag`` and the rate-limit headers
(``ratelimit.py``). The credential is the operator's own (``forge.github.Forge.authorization``: the App's
installation token for the repository, or the mounted token), sent only to the configured API URL: a
pagination link to another host is not followed. Errors name the endpoint's template, never a token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import urllib3

USER_AGENT = "pi-dispatch-receiver-poll"
API_VERSION = "2022-11-28"
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


@dataclass(frozen=True)
class Answer:
    """One answer: ``status`` (0: none came; ``why`` says what happened), the JSON body, the headers (names in
    lower case), the ``ETag`` and the next page's URL (only on the API's own host)."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    next_url: str | None = None
    why: str = ""


class ForgeReader:
    """GETs on ``api_url`` with the ``authorization(repository)`` header value the caller's credential gives."""

    def __init__(self, api_url: str, authorization: Callable[[str], str], *, timeout: float = 10.0,
                 ca_file: str | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self._authorization = authorization
        self._http = urllib3.PoolManager(num_pools=2, maxsize=4, block=False, retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout),
                                         cert_reqs="CERT_REQUIRED", ca_certs=ca_file)

    def get(self, endpoint: str, path_or_url: str, repository: str, *, params: dict[str, Any] | None = None,
            etag: str | None = None) -> Answer:
        """One GET (``endpoint``: the template, for the log); ``etag``: sent as ``If-None-Match``."""
        url = path_or_url if path_or_url.startswith(self.api_url + "/") else self.api_url + path_or_url
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        try:
            authorization = self._authorization(repository)
        except Exception as exc:  # noqa: BLE001 - forge.github's NoCredentials and its kin: no request made
            return Answer(0, why=f"no credential for the forge: {exc}")
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                   "User-Agent": USER_AGENT, "Authorization": authorization}
        if etag:
            headers["If-None-Match"] = etag
        try:
            response = self._http.request("GET", url, headers=headers, preload_content=True)
        except urllib3.exceptions.HTTPError as exc:
            return Answer(0, why=f"GET {endpoint}: no answer ({type(exc).__name__})")
        got = {k.lower(): v for k, v in response.headers.items()}
        body: Any = None
        if response.status != 304 and response.data:
            try:
                body = json.loads(response.data)
            except ValueError:
                body = None
        return Answer(response.status, body, got, got.get("etag"), self._next(got.get("link")),
                      why="" if response.status < 300 or response.status == 304 else f"GET {endpoint}: "
                      f"{response.status} {body.get('message', '') if isinstance(body, dict) else ''}".rstrip())

    def url(self, path: str, params: dict[str, Any]) -> str:
        """The full URL of ``path`` with ``params``: what an ``ETag`` is remembered for."""
        return f"{self.api_url}{path}?{urlencode(params)}"

    def _next(self, link: str | None) -> str | None:
        found = _NEXT.search(link) if link else None
        if found is None or not found.group(1).startswith(self.api_url + "/"):
            return None
        return found.group(1)
