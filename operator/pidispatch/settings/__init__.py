"""Settings from the environment, with the session store's names (docs/store-contract.md#settings) and strict parsing.

A malformed value is a configuration error naming the variable and the accepted form, never a
silent default: a typo in ``PI_SESSION_MAX_BYTES`` must not quietly turn a bound off.

One module per concern:

- :mod:`.readers`: one reader per kind of value (a bounded whole number, a quantity of bytes, a flag,
  text, a name, a path, a URL, JSON) and the one rule for an empty value;
- :mod:`.store`: :class:`Settings`, the session store's bounds and switches (docs/store-contract.md#settings);
- :mod:`.github`: :class:`GitHubSettings`, how the operator reaches GitHub and what a job's token may do;
- :mod:`.jobpod`: what every job Pod is built with (image, command, env, resources, disk, credentials);
- :mod:`.operator`: :class:`OperatorSettings`, the operator process's whole environment;
- :mod:`.errors`: :class:`ConfigError`.

The names below are re-exported so that ``from pidispatch.settings import X`` is the one way in; each is imported
when first asked for, so ``Settings`` costs only :mod:`.store`, :mod:`.readers` and :mod:`.errors`.

This package is plain Python on purpose: the ``key``/``store``/``transcript`` commands import it and
must start in well under 200 ms, which pydantic-settings alone (about 200 ms to import) would spend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pidispatch.settings.errors import ConfigError
    from pidispatch.settings.github import (
        AUTH_SOURCES,
        DEFAULT_GITHUB_API_URL,
        DEFAULT_GITHUB_WEB_URL,
        DEFAULT_JOB_TOKEN_PERMISSIONS,
        GITHUB_REPOSITORY_PERMISSIONS,
        GITHUB_VARIABLES,
        GitHubSettings,
        job_token_permissions,
        permission_levels,
    )
    from pidispatch.settings.jobpod import (
        DEFAULT_EPHEMERAL_STORAGE_LIMIT,
        DEFAULT_EPHEMERAL_STORAGE_REQUEST,
        DEFAULT_GIT_EMAIL,
        DEFAULT_GIT_NAME,
        DEFAULT_JOB_COMMAND,
        DEFAULT_JOB_IMAGE,
        DEFAULT_WORKSPACE_SIZE_LIMIT,
    )
    from pidispatch.settings.operator import DEFAULT_STAGING_DIR, MAX_SECONDS, OPERATOR_VARIABLES, OperatorSettings
    from pidispatch.settings.readers import (
        EMPTY_MEANS_UNSET,
        QUANTITY_ACCEPTED,
        parse_bytes,
        parse_strict_int,
        refuse_empty,
    )
    from pidispatch.settings.store import (
        DEFAULT_MAX_BYTES,
        DEFAULT_RETHREAD_PCT,
        DEFAULT_TTL_DAYS,
        STORE_VARIABLES,
        Settings,
    )

# Each name and the module that defines it, imported on first use (PEP 562): the store path asks for
# ``Settings`` alone and so never loads the operator's, GitHub's or the job Pod's settings (docs/cli.md#start-up-cost).
_HOMES = {
    "ConfigError": "errors",
    "AUTH_SOURCES": "github",
    "DEFAULT_GITHUB_API_URL": "github",
    "DEFAULT_GITHUB_WEB_URL": "github",
    "DEFAULT_JOB_TOKEN_PERMISSIONS": "github",
    "GITHUB_REPOSITORY_PERMISSIONS": "github",
    "GITHUB_VARIABLES": "github",
    "GitHubSettings": "github",
    "job_token_permissions": "github",
    "permission_levels": "github",
    "DEFAULT_EPHEMERAL_STORAGE_LIMIT": "jobpod",
    "DEFAULT_EPHEMERAL_STORAGE_REQUEST": "jobpod",
    "DEFAULT_GIT_EMAIL": "jobpod",
    "DEFAULT_GIT_NAME": "jobpod",
    "DEFAULT_JOB_COMMAND": "jobpod",
    "DEFAULT_JOB_IMAGE": "jobpod",
    "DEFAULT_WORKSPACE_SIZE_LIMIT": "jobpod",
    "DEFAULT_STAGING_DIR": "operator",
    "MAX_SECONDS": "operator",
    "OPERATOR_VARIABLES": "operator",
    "OperatorSettings": "operator",
    "EMPTY_MEANS_UNSET": "readers",
    "QUANTITY_ACCEPTED": "readers",
    "parse_bytes": "readers",
    "parse_strict_int": "readers",
    "refuse_empty": "readers",
    "DEFAULT_MAX_BYTES": "store",
    "DEFAULT_RETHREAD_PCT": "store",
    "DEFAULT_TTL_DAYS": "store",
    "STORE_VARIABLES": "store",
    "Settings": "store",
}

__all__ = [
    "AUTH_SOURCES",
    "DEFAULT_EPHEMERAL_STORAGE_LIMIT",
    "DEFAULT_EPHEMERAL_STORAGE_REQUEST",
    "DEFAULT_GITHUB_API_URL",
    "DEFAULT_GITHUB_WEB_URL",
    "DEFAULT_GIT_EMAIL",
    "DEFAULT_GIT_NAME",
    "DEFAULT_JOB_COMMAND",
    "DEFAULT_JOB_IMAGE",
    "DEFAULT_JOB_TOKEN_PERMISSIONS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RETHREAD_PCT",
    "DEFAULT_STAGING_DIR",
    "DEFAULT_TTL_DAYS",
    "DEFAULT_WORKSPACE_SIZE_LIMIT",
    "EMPTY_MEANS_UNSET",
    "GITHUB_REPOSITORY_PERMISSIONS",
    "GITHUB_VARIABLES",
    "permission_levels",
    "MAX_SECONDS",
    "OPERATOR_VARIABLES",
    "QUANTITY_ACCEPTED",
    "STORE_VARIABLES",
    "ConfigError",
    "GitHubSettings",
    "OperatorSettings",
    "Settings",
    "job_token_permissions",
    "parse_bytes",
    "parse_strict_int",
    "refuse_empty",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
