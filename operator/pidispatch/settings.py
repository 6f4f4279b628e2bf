"""Settings from the environment, with the session-store spec's names and strict parsing.

A malformed value is a configuration error naming the variable and the accepted form, never a
silent default: a typo in ``PI_SESSION_MAX_BYTES`` must not quietly turn a bound off.

This module is plain Python on purpose: the ``key``/``store``/``transcript`` commands import it and
must start in well under 200 ms, which pydantic-settings alone (about 200 ms to import) would spend.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

_CANONICAL_NON_NEGATIVE = re.compile(r"(?:0|[1-9][0-9]*)")

DEFAULT_TTL_DAYS = 14
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class ConfigError(Exception):
    """A setting that cannot be used as given. The CLI prints it as one line and exits 2."""

    def __init__(self, variable: str, value: str, accepted: str) -> None:
        super().__init__(f"{variable}={value!r} is not valid: expected {accepted}")
        self.variable = variable
        self.accepted = accepted


def parse_strict_int(variable: str, raw: str, accepted: str, minimum: int = 0, maximum: int | None = None) -> int:
    """Trim, parse base-10, and require the canonical decimal form (so ``07``, ``+3``, ``1e3`` fail)."""
    text = raw.strip()
    if not _CANONICAL_NON_NEGATIVE.fullmatch(text):
        raise ConfigError(variable, raw, accepted)
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(variable, raw, accepted)
    return value


def _int_setting(env: Mapping[str, str], variable: str, default: int, accepted: str) -> int:
    raw = env.get(variable)
    # An empty value counts as unset: Helm renders absent values as "", and that is not a typo.
    if raw is None or raw.strip() == "":
        return default
    return parse_strict_int(variable, raw, accepted)


@dataclass(frozen=True)
class Settings:
    """The store's bounds and switches (spec §2.1). ``sessions_dir`` is ``None`` when no store is set."""

    sessions_dir: str | None = None
    ttl_days: int = DEFAULT_TTL_DAYS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_days: int = 0
    max_resume_chain: int = 0
    max_context_pct: int | None = None
    allow_gh_source: bool = False
    github_auth_source: str = "gh"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every setting; raise :class:`ConfigError` on the first malformed one."""
        env = os.environ if env is None else env
        sessions_dir = env.get("PI_SESSIONS_DIR") or None
        pct_raw = env.get("PI_SESSION_MAX_CONTEXT_PCT")
        max_context_pct = None
        if pct_raw is not None and pct_raw.strip() != "":
            max_context_pct = parse_strict_int(
                "PI_SESSION_MAX_CONTEXT_PCT", pct_raw, "an integer from 1 to 100, or unset for no bound", 1, 100
            )
        return cls(
            sessions_dir=sessions_dir,
            ttl_days=_int_setting(
                env, "PI_SESSIONS_TTL_DAYS", DEFAULT_TTL_DAYS, "a whole number of days, 0 to keep forever"
            ),
            max_bytes=_int_setting(
                env, "PI_SESSION_MAX_BYTES", DEFAULT_MAX_BYTES, "a whole number of bytes, 0 for no cap"
            ),
            max_age_days=_int_setting(
                env, "PI_SESSION_MAX_AGE_DAYS", 0, "a whole number of days, 0 for no bound"
            ),
            max_resume_chain=_int_setting(
                env, "PI_SESSION_MAX_RESUME_CHAIN", 0, "a whole number of deliveries, 0 for no bound"
            ),
            max_context_pct=max_context_pct,
            # Only the exact string "1" opens the hatch: "true", "yes" or " 1" keep it shut.
            allow_gh_source=env.get("PI_SESSIONS_ALLOW_GH_SOURCE") == "1",
            github_auth_source=env.get("GITHUB_AUTH_SOURCE") or "gh",
        )
