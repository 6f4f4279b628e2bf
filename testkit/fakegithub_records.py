"""What the fake GitHub API keeps of a pull request and of an installation token it issued: records that both its
REST side (``testkit/fakegithub_api.py``) and its GraphQL side (``testkit/fakegithub_graphql.py``) read, here so
that neither imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Pull:
    base_repo: str
    number: int
    head_ref: str
    head_repo: str | None
    status: int = 200
    delay: float = 0.0
    title: str = ""
    body: str = ""
    base_ref: str = "main"


@dataclass
class Issued:
    installation_id: int
    repositories: tuple[str, ...]  # full names
    expires_at: float
    permissions: dict[str, str]
    revoked: bool = False
