"""Which GraphQL requests a job may send to its forge (docs/gateway.md#graphql).

A request is forwarded only when this module can read it (``forge_graphql_parse.py``) and every operation in it
passes; anything it cannot read is refused, never forwarded on trust:

* a query's root fields are ``repository`` with ``owner`` and ``name`` (literals or the request's variables) naming
  the job's repository (case-insensitive), ``viewer`` reading only who the token is, ``rateLimit`` and
  ``__typename``. Below them no field that reaches other repositories or owners' lists (``NESTED_REFUSED``);
* a mutation's root fields are those ``MUTATIONS`` allows the job, each checked against the job's repository by
  the upstream's own word about the node ids it names (``NodeLookup``, with the job's token);
* subscriptions are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pidispatch.contract.gateway_wire import REFUSED_FORK_WRITE, REFUSED_REPOSITORY, REFUSED_UNCHECKED
from pidispatch.gateway.capability import Claims
from pidispatch.gateway.forge_graphql_parse import (
    Document,
    Field,
    GraphQLSyntaxError,
    every_field,
    parse,
    resolve,
    root_fields,
)

MAX_BODY_BYTES = 256 * 1024  # gh's largest request (pr view with every field) is a few KiB

# ``__type`` and ``__schema``: introspection, which says what the schema has (gh asks which fields Issue has), never
# what any repository holds.
QUERY_ROOTS = frozenset({"repository", "viewer", "rateLimit", "__typename", "__type", "__schema"})
VIEWER_FIELDS = frozenset({"login", "id", "databaseId", "name", "__typename"})
# Below an allowed root: fields that lead to other repositories, or to lists of an owner's or organisation's.
NESTED_REFUSED = frozenset({
    "repository", "repositories", "repositoriesContributedTo", "topRepositories", "starredRepositories",
    "watching", "pinnedItems", "pinnableItems", "itemShowcase", "organizations", "gists",
    "forks", "search", "resource", "repositoryOwner", "user", "enterprise",
})
# The mutations ``gh`` sends for ``pr create``, ``pr comment``/``issue comment`` and ``pr edit``'s title, body
# and base; a fork's job may only comment on its subject.
MUTATIONS = frozenset({"createPullRequest", "addComment", "updatePullRequest"})
FORK_MUTATIONS = frozenset({"addComment"})


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


class NodeLookup(Protocol):
    """What the upstream says about node ids, asked with the job's own token (``forge.py`` implements it)."""

    async def repository_id(self) -> str | None:
        """The job's repository's node id (REST ``GET /repos/{owner}/{name}``)."""
        ...

    async def subject_ids(self) -> set[str]:
        """The node ids of the job's subject: its issue's and, for a pull request, the pull request's (REST)."""
        ...

    async def node_repository(self, node_id: str) -> str | None:
        """``owner/name`` of the repository the issue or pull request ``node_id`` is in (GraphQL ``node``)."""
        ...


def graphql_url(api: str) -> str:
    """The GraphQL endpoint beside a REST base: ``https://HOST/api/v3`` → ``https://HOST/api/graphql``
    (GitHub Enterprise), ``https://api.github.com`` → ``https://api.github.com/graphql``."""
    base = api.rstrip("/")
    return base[: -len("/v3")] + "/graphql" if base.endswith("/api/v3") else base + "/graphql"


def _same(repository: str, owner: Any, name: Any) -> bool:
    return isinstance(owner, str) and isinstance(name, str) and \
        f"{owner}/{name}".lower() == repository.lower()


def _nested(field: Field, document: Document) -> Refusal | None:
    for below in every_field(field.selections, document.fragments):
        if below.name in NESTED_REFUSED:
            return Refusal(REFUSED_REPOSITORY, f"the field {below.name} below {field.name} may reach another "
                                               "repository; the gateway refuses it")
    return None


def _query_field(claims: Claims, field: Field, document: Document, variables: dict[str, Any]) -> Refusal | None:
    if field.name not in QUERY_ROOTS:
        return Refusal(REFUSED_REPOSITORY, f"the query field {field.name} is not one the gateway lets a job read "
                                           f"(only {', '.join(sorted(QUERY_ROOTS))})")
    if field.name == "repository":
        args = resolve(field.arguments, variables)
        if not _same(claims.repository, args.get("owner"), args.get("name")):
            return Refusal(REFUSED_REPOSITORY, f"this job may read only {claims.repository}")
        return _nested(field, document)
    if field.name == "viewer":
        extra = {f.name for f in every_field(field.selections, document.fragments)} - VIEWER_FIELDS
        if extra:
            return Refusal(REFUSED_REPOSITORY, f"viewer may be read for {', '.join(sorted(VIEWER_FIELDS))} only")
    return None


async def _mutation_field(claims: Claims, field: Field, document: Document, variables: dict[str, Any],
                          lookup: NodeLookup) -> Refusal | None:
    allowed = FORK_MUTATIONS if claims.fork else MUTATIONS
    if field.name not in allowed:
        if claims.fork:
            return Refusal(REFUSED_FORK_WRITE, "a fork's job may only comment on its own issue or pull request")
        return Refusal(REFUSED_REPOSITORY, f"the mutation {field.name} is not one the gateway allows "
                                           f"(only {', '.join(sorted(MUTATIONS))})")
    refused = _nested(field, document)
    if refused is not None:
        return refused
    given = resolve(field.arguments, variables).get("input")
    if not isinstance(given, dict):
        return Refusal(REFUSED_UNCHECKED, f"{field.name} without an input object the gateway can read")
    if field.name == "addComment":
        subject = given.get("subjectId")
        if not isinstance(subject, str):
            return Refusal(REFUSED_UNCHECKED, "addComment without a subjectId")
        if claims.fork:
            if claims.subject is None or subject not in await lookup.subject_ids():
                return Refusal(REFUSED_FORK_WRITE, f"a fork's job may comment only on #{claims.subject}")
            return None
        return await _in_repository(claims, subject, lookup)
    if field.name == "updatePullRequest":
        target = given.get("pullRequestId")
        if not isinstance(target, str):
            return Refusal(REFUSED_UNCHECKED, "updatePullRequest without a pullRequestId")
        return await _in_repository(claims, target, lookup)
    # createPullRequest: into the job's repository, from a branch of it.
    repository_id = await lookup.repository_id()
    named = [given.get("repositoryId"), given.get("headRepositoryId", repository_id)]
    if repository_id is None or any(value != repository_id for value in named):
        return Refusal(REFUSED_REPOSITORY, f"a pull request may be opened only in {claims.repository}")
    return None


async def _in_repository(claims: Claims, node_id: str, lookup: NodeLookup) -> Refusal | None:
    found = await lookup.node_repository(node_id)
    if found is None or found.lower() != claims.repository.lower():
        return Refusal(REFUSED_REPOSITORY, f"this job may write only to {claims.repository}'s issues and pull requests")
    return None


async def check(claims: Claims, body: Any, lookup: NodeLookup) -> Refusal | None:
    """``None`` when the GraphQL request ``body`` (the decoded JSON) may go upstream, else why not."""
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return Refusal(REFUSED_UNCHECKED, "a GraphQL request is a JSON object with a query string")
    variables = {} if body.get("variables") is None else body["variables"]
    if not isinstance(variables, dict):
        return Refusal(REFUSED_UNCHECKED, "the request's variables are not an object")
    try:
        document = parse(body["query"])
        if not document.operations:
            return Refusal(REFUSED_UNCHECKED, "the document has no operation")
        for operation in document.operations:
            fields = root_fields(operation.selections, document.fragments)
            for field in fields:
                if operation.kind == "query":
                    refused = _query_field(claims, field, document, variables)
                elif operation.kind == "mutation":
                    refused = await _mutation_field(claims, field, document, variables, lookup)
                else:
                    refused = Refusal(REFUSED_UNCHECKED, "subscriptions are not forwarded")
                if refused is not None:
                    return refused
    except GraphQLSyntaxError as exc:
        return Refusal(REFUSED_UNCHECKED, f"the gateway cannot read this GraphQL request ({exc}), so it refuses it")
    return None
