"""The session store's settings (docs/store-contract.md#settings): where the store is, its bounds, and its switches.

Read by the store commands (``key``, ``store``, ``transcript``), the operator and doctor alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.readers import integer, refuse_empty, text

DEFAULT_TTL_DAYS = 14
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_RETHREAD_PCT = 70  # PI_SESSION_RETHREAD_PCT; the runner parses it alike (runner/config.py)

# Every variable the store reads, named once: an empty value of any of them is refused
# (tests/settings/test_settings_strict.py holds the lists to the names the code reads).
STORE_VARIABLES = (
    "PI_SESSIONS_DIR",
    "PI_SESSIONS_TTL_DAYS",
    "PI_SESSION_MAX_BYTES",
    "PI_SESSION_MAX_AGE_DAYS",
    "PI_SESSION_MAX_RESUME_CHAIN",
    "PI_SESSION_MAX_CONTEXT_PCT",
    "PI_SESSIONS_ALLOW_GH_SOURCE",
    "GITHUB_AUTH_SOURCE",
    "PI_SESSION_RETHREAD_PCT",
)


@dataclass(frozen=True)
class Settings:
    """The store's bounds and switches (docs/store-contract.md#settings). ``sessions_dir`` is ``None`` when no store is
    set."""

    sessions_dir: str | None = None
    # A transcript idle this many days has expired (the gates refuse it, the reaper removes it); 0: forever.
    ttl_days: int = DEFAULT_TTL_DAYS
    # A transcript larger than this is neither resumed nor promoted; 0: no cap.
    max_bytes: int = DEFAULT_MAX_BYTES
    # A conversation started more than this many days ago is not resumed; 0: no bound.
    max_age_days: int = 0
    # A key whose chain of resumes reached this starts over; 0: no bound.
    max_resume_chain: int = 0
    # A session whose context use (%) reached this is not resumed; None: no bound.
    max_context_pct: int | None = None
    # The hatch for resuming jobs that get the deployment's gh login (docs/store-contract.md#gh-auth-source).
    allow_gh_source: bool = False
    github_auth_source: str = "gh"
    rethread_pct: int = DEFAULT_RETHREAD_PCT  # pack a handoff at the end of a job at or above this context use

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every setting; raise :class:`ConfigError` on the first malformed one.

        Only an absent variable takes its default: an empty value is refused (the strict parse of the trimmed
        text, docs/store-contract.md#settings), except ``PI_SESSIONS_DIR``, whose empty value means "no store".
        """
        env = os.environ if env is None else env
        refuse_empty(env, STORE_VARIABLES)
        sessions_dir = text(env, "PI_SESSIONS_DIR")  # empty = unset (docs/store-contract.md#settings)
        max_context_pct = integer(
            env, "PI_SESSION_MAX_CONTEXT_PCT", "an integer from 1 to 100, or unset for no bound",
            minimum=1, maximum=100,
        )
        return cls(
            sessions_dir=None if sessions_dir is None else sessions_dir.strip(),
            ttl_days=integer(
                env, "PI_SESSIONS_TTL_DAYS", "a whole number of days, 0 to keep forever", default=DEFAULT_TTL_DAYS
            ),
            max_bytes=integer(
                env, "PI_SESSION_MAX_BYTES", "a whole number of bytes, 0 for no cap", default=DEFAULT_MAX_BYTES
            ),
            max_age_days=integer(
                env, "PI_SESSION_MAX_AGE_DAYS", "a whole number of days, 0 for no bound", default=0
            ),
            max_resume_chain=integer(
                env, "PI_SESSION_MAX_RESUME_CHAIN", "a whole number of deliveries, 0 for no bound", default=0
            ),
            max_context_pct=max_context_pct,
            # Only the exact string "1" opens the hatch: "true", "yes" or " 1" keep it shut.
            allow_gh_source=env.get("PI_SESSIONS_ALLOW_GH_SOURCE") == "1",
            # Lenient here (the store commands never act on it), strict in OperatorSettings.
            github_auth_source=text(env, "GITHUB_AUTH_SOURCE", "gh"),
            rethread_pct=integer(
                env, "PI_SESSION_RETHREAD_PCT", "an integer from 0 (no handoff) to 100",
                default=DEFAULT_RETHREAD_PCT, maximum=100,
            ),
        )
