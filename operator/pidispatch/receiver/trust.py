"""Whom a Trigger trusts: the GitHub author associations of its ``on.authorAssociations`` (unset: ``OWNER``,
``MEMBER``, ``COLLABORATOR``). One rule for starting a job (a comment's or review's author,
``delivery.author_not_allowed``) and for ending a conversation (who closed the issue or pull request,
``closed.retirement_problem``): on a public repository anyone can comment, open or close their own issue, and
neither may act on the work the maintainers' jobs do unless a Trigger says so. No I/O.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.vocabulary import DEFAULT_AUTHOR_ASSOCIATIONS


def association_refused(on: dict[str, Any], association: str | None, who: str = "author") -> str | None:
    """Why ``association`` (``None``: the payload had none, read as ``NONE``) is not one the Trigger's ``on``
    accepts, or ``None`` when it is. ``who`` names the person in the answer."""
    allowed = on.get("authorAssociations") or DEFAULT_AUTHOR_ASSOCIATIONS
    association = association or "NONE"
    if association in allowed:
        return None
    return f"the {who}'s association ({association[:32]}) is not one of {', '.join(allowed)}"
