"""Settings from the environment, with the session-store spec's names and strict parsing.

A malformed value is a configuration error naming the variable and the accepted form, never a
silent default: a typo in ``PI_SESSION_MAX_BYTES`` must not quietly turn a bound off.

This module is plain Python on purpose: the ``key``/``store``/``transcript`` commands import it and
must start in well under 200 ms, which pydantic-settings alone (about 200 ms to import) would spend.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_CANONICAL_NON_NEGATIVE = re.compile(r"(?:0|[1-9][0-9]*)")

DEFAULT_TTL_DAYS = 14
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_RETHREAD_PCT = 70  # PI_SESSION_RETHREAD_PCT; the runner parses it alike (runner/config.py)


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


# A Kubernetes quantity of bytes: a decimal number with an optional binary (Ki..Ei) or decimal (k..E) suffix
# or exponent. No milli- (a fraction of a byte) and no sign.
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][0-9]+)?")
_QUANTITY_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
                    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
QUANTITY_ACCEPTED = "a Kubernetes quantity of bytes of at least 1Mi, e.g. 10Gi, 500Mi or 20G"


def parse_bytes(variable: str, raw: str, minimum: int = 2**20) -> int:
    """A quantity (``10Gi``, ``500M``, ``1e9``) as whole bytes, rounded up as Kubernetes does; ``ConfigError``
    naming ``variable`` when it is not one, or is below ``minimum`` (a workspace of a few bytes is a typo)."""
    from fractions import Fraction

    m = _QUANTITY.fullmatch(raw.strip())
    if m is None:
        raise ConfigError(variable, raw, QUANTITY_ACCEPTED)
    number, suffix = m.group(1), m.group(2) or ""
    scale = 10 ** int(suffix[1:]) if suffix[:1] in ("e", "E") and suffix != "E" else _QUANTITY_SUFFIX[suffix]
    value = Fraction(number) * scale
    whole = -(-value.numerator // value.denominator)
    if whole < minimum:
        raise ConfigError(variable, raw, QUANTITY_ACCEPTED)
    return whole


# Every variable each component reads, named once: an empty value of any of them is refused
# (tests/test_settings_strict.py holds these lists to the names the code reads).
STORE_VARIABLES = (
    "PI_SESSIONS_DIR", "PI_SESSIONS_TTL_DAYS", "PI_SESSION_MAX_BYTES", "PI_SESSION_MAX_AGE_DAYS",
    "PI_SESSION_MAX_RESUME_CHAIN", "PI_SESSION_MAX_CONTEXT_PCT", "PI_SESSIONS_ALLOW_GH_SOURCE", "GITHUB_AUTH_SOURCE",
    "PI_SESSION_RETHREAD_PCT",
)
GITHUB_VARIABLES = (
    "GITHUB_API_URL", "GITHUB_API_TIMEOUT_SECONDS", "GITHUB_WEB_URL", "GITHUB_CA_BUNDLE_FILE",
    "GITHUB_CA_BUNDLE_CONFIGMAP", "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY_FILE",
    "GITHUB_TOKEN_FILE", "GITHUB_TOKEN_SECRET",
)
OPERATOR_VARIABLES = (
    "PI_DISPATCH_NAMESPACE", "PI_DISPATCH_STAGING_DIR", "PI_DISPATCH_STAGING_CLAIM", "PI_DISPATCH_MAX_CONCURRENT_JOBS",
    "PI_DISPATCH_JOB_IMAGE", "PI_DISPATCH_JOB_COMMAND", "PI_DISPATCH_JOB_ENV", "PI_DISPATCH_JOB_TIMEOUT_SECONDS",
    "PI_DISPATCH_JOB_START_TIMEOUT_SECONDS", "PI_DISPATCH_JOB_RESOURCES", "PI_DISPATCH_JOB_CREDENTIALS",
    "PI_DISPATCH_JOB_MODELS_CONFIGMAP", "PI_DISPATCH_JOB_POD_RETENTION_SECONDS",
    "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED", "PI_DISPATCH_JOB_GIT_NAME", "PI_DISPATCH_JOB_GIT_EMAIL",
    "PI_DISPATCH_JOB_CHECKOUT", "PI_DISPATCH_JOB_TOKEN_PERMISSIONS", "PI_DISPATCH_METRICS_PORT",
    "PI_DISPATCH_HEALTH_PORT", "PI_DISPATCH_PEERING", "PI_DISPATCH_POD_NAME", "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS",
    "PI_DISPATCH_SWEEP_INTERVAL_SECONDS", "PI_DISPATCH_RELEASE", "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT",
    "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST", "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT",
    *STORE_VARIABLES, *GITHUB_VARIABLES,
)

# The one variable whose empty value has a documented meaning: spec §2.1, "Empty string = unset".
EMPTY_MEANS_UNSET = frozenset({"PI_SESSIONS_DIR"})


def refuse_empty(env: Mapping[str, str], names: Iterable[str]) -> None:
    """An empty (or blank) value of any of ``names`` is a configuration error naming the variable.

    A manifest that renders a missing value as ``""`` must say so, never quietly run with a default:
    an empty ``GITHUB_AUTH_SOURCE`` once meant ``gh``, the full-scope credential. Unset the variable to
    get its default. The exceptions are documented in :data:`EMPTY_MEANS_UNSET`.
    """
    for name in names:
        raw = env.get(name)
        if raw is not None and raw.strip() == "" and name not in EMPTY_MEANS_UNSET:
            raise ConfigError(name, raw, "a value: an empty one is refused (unset the variable to get its default)")


def _int_setting(env: Mapping[str, str], variable: str, default: int, accepted: str) -> int:
    raw = env.get(variable)
    # Only an absent variable takes the default. An empty value is malformed (spec §2.1's strict
    # parse of the trimmed text): a manifest that renders a missing value as "" should say so, not
    # quietly run with the default. The chart omits a bound it has no value for.
    if raw is None:
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
    rethread_pct: int = DEFAULT_RETHREAD_PCT  # pack a handoff at the end of a job at or above this context use

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every setting; raise :class:`ConfigError` on the first malformed one."""
        env = os.environ if env is None else env
        refuse_empty(env, STORE_VARIABLES)
        sessions_dir = (env.get("PI_SESSIONS_DIR") or "").strip() or None  # spec §2.1: empty = unset
        pct_raw = env.get("PI_SESSION_MAX_CONTEXT_PCT")
        max_context_pct = None
        if pct_raw is not None:
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
            rethread_pct=DEFAULT_RETHREAD_PCT if (pct := env.get("PI_SESSION_RETHREAD_PCT")) is None else
            parse_strict_int("PI_SESSION_RETHREAD_PCT", pct, "an integer from 0 (no handoff) to 100", 0, 100),
        )


DEFAULT_STAGING_DIR = "/var/lib/pi-dispatch/jobs"
DEFAULT_JOB_IMAGE = "ghcr.io/pi-dispatch/job:latest"
# The job Pod's disk (issue 31): the workspace emptyDir's sizeLimit, and the container's ephemeral-storage.
# The workspace holds the checkout and its .git: 10Gi takes any repository a coding agent can sensibly work
# in, and a fork cannot fill a node's disk through it. The kubelet counts every emptyDir and the container's
# own writes (logs, pi's ~/.pi, tool caches, /tmp) against the Pod's ephemeral-storage limit, so the limit
# is the workspace plus 2Gi for those; the request is what a typical job uses (the scheduler reserves it).
DEFAULT_WORKSPACE_SIZE_LIMIT = "10Gi"
DEFAULT_EPHEMERAL_STORAGE_REQUEST = "2Gi"
DEFAULT_EPHEMERAL_STORAGE_LIMIT = "12Gi"
DEFAULT_JOB_COMMAND = ("pidispatch", "runner")


def _json_value(variable: str, raw: str | None, accepted: str) -> Any:
    """The JSON value of a setting, ``None`` when it is unset or blank; malformed JSON is a configuration error."""
    import json

    if raw is None or raw.strip() == "":
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError(variable, raw, accepted) from None


def _json_command(variable: str, raw: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    accepted = 'a JSON array of non-empty strings, e.g. ["pidispatch","runner"]'
    value = _json_value(variable, raw, accepted)
    if value is None:
        return default
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(variable, raw, accepted)
    return tuple(value)


def _json_env(variable: str, raw: str | None) -> tuple[tuple[str, str], ...]:
    accepted = 'a JSON object of string values, e.g. {"PI_OFFLINE":"1"}'
    value = _json_value(variable, raw, accepted)
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str)
                                              for k, v in value.items()):
        raise ConfigError(variable, raw, accepted)
    reserved = sorted(k for k in value if k.startswith("PI_SESSION"))
    if reserved:
        raise ConfigError(variable, raw, f"{accepted}, without PI_SESSION* names (the operator sets those)")
    return tuple(sorted(value.items()))


def _json_resources(variable: str, raw: str | None) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    accepted = ('a JSON object {"requests": {...}, "limits": {...}} of quantity strings, '
                'e.g. {"limits":{"memory":"2Gi"}}')
    value = _json_value(variable, raw, accepted)
    if value is None:
        return ()

    def quantity(q: object) -> bool:  # "500m", "2Gi", or a whole number (Helm renders `cpu: 1` as 1)
        return (isinstance(q, str) and q != "") or (isinstance(q, int) and not isinstance(q, bool) and q >= 0)

    if not isinstance(value, dict) or not set(value) <= {"requests", "limits"} or not all(
            isinstance(v, dict) and all(isinstance(k, str) and k and quantity(q) for k, q in v.items())
            for v in value.values()):
        raise ConfigError(variable, raw, accepted)
    return tuple(sorted((part, tuple(sorted((k, str(q)) for k, q in v.items()))) for part, v in value.items()))


def _json_credentials(variable: str, raw: str | None) -> tuple[tuple[str, str, str], ...]:
    from pidispatch.contract import credential_name_problem

    accepted = ('a JSON object of environment variable -> {"secretName": ..., "key": ...}, '
                'e.g. {"OPENAI_API_KEY":{"secretName":"model-keys","key":"openai"}}')
    value = _json_value(variable, raw, accepted)
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ConfigError(variable, raw, accepted)
    out = []
    for name, ref in value.items():
        why = credential_name_problem(name) if isinstance(name, str) else "not a name"
        if why is not None:
            raise ConfigError(variable, raw, f"{accepted}; {why}")
        if not isinstance(ref, dict) or set(ref) != {"secretName", "key"} \
                or not _DNS_SUBDOMAIN.fullmatch(str(ref["secretName"])) or not _SECRET_KEY.fullmatch(str(ref["key"])):
            raise ConfigError(variable, raw, accepted)
        out.append((name, ref["secretName"], ref["key"]))
    return tuple(sorted(out))


def _dns_name(variable: str, raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    if not _DNS_SUBDOMAIN.fullmatch(raw) or len(raw) > 253:
        raise ConfigError(variable, raw, "a Kubernetes object name (DNS subdomain)")
    return raw


AUTH_SOURCES = ("app", "pat", "gh")  # the CRD's enum (pidispatch.api.crds.AUTH_SOURCES; a test keeps them equal)
DEFAULT_GITHUB_API_URL = "https://api.github.com"
DEFAULT_GITHUB_WEB_URL = "https://github.com"
DEFAULT_GIT_NAME = "pi-dispatch[bot]"
DEFAULT_GIT_EMAIL = "pi-dispatch[bot]@users.noreply.github.com"


def _flag(name: str, raw: str | None, default: bool) -> bool:
    """``true`` or ``false``; unset or empty: ``default``."""
    if raw is None or raw.strip() == "":
        return default
    if raw.strip() not in ("true", "false"):
        raise ConfigError(name, raw, "true or false")
    return raw.strip() == "true"


def _one_line(name: str, raw: str | None, default: str) -> str:
    """A short single-line text setting (a git identity); unset or empty: ``default``."""
    if raw is None or raw.strip() == "":
        return default
    if len(raw) > 200 or any(c in raw for c in "\n\r\0<>"):
        raise ConfigError(name, raw, "one line of at most 200 characters without < or >")
    return raw.strip()
_API_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_APP_VARIABLES = ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY_FILE")

# PI_DISPATCH_JOB_TOKEN_PERMISSIONS: what a job's App installation token may do, asked for at every
# mint (GitHub narrows the token to it, and refuses with 422 a permission the installation lacks).
# Without it a job token would carry everything the App was granted. Repository permissions only:
# the token is scoped to one repository.
DEFAULT_JOB_TOKEN_PERMISSIONS = (("contents", "write"), ("issues", "write"), ("metadata", "read"),
                                 ("pull_requests", "write"))
GITHUB_REPOSITORY_PERMISSIONS = frozenset({
    "actions", "administration", "attestations", "checks", "codespaces", "contents", "dependabot_secrets",
    "deployments", "environments", "issues", "merge_queues", "metadata", "packages", "pages", "pull_requests",
    "repository_custom_properties", "repository_hooks", "repository_projects", "secret_scanning_alerts",
    "secrets", "security_events", "single_file", "statuses", "vulnerability_alerts", "workflows"})


def job_token_permissions(raw: str | None) -> tuple[tuple[str, str], ...]:
    """``PI_DISPATCH_JOB_TOKEN_PERMISSIONS``: unset is the default; anything but a JSON object of GitHub
    repository permission names to ``read``/``write`` (``metadata``: ``read``) is a configuration error."""
    import json

    variable = "PI_DISPATCH_JOB_TOKEN_PERMISSIONS"
    if raw is None:
        return DEFAULT_JOB_TOKEN_PERMISSIONS
    accepted = ('a JSON object of GitHub repository permissions to "read" or "write", e.g. '
                '{"contents":"write","pull_requests":"write","issues":"write","metadata":"read"}')
    try:
        value = json.loads(raw)
    except ValueError:
        raise ConfigError(variable, raw, accepted) from None
    if not isinstance(value, dict) or not value:
        raise ConfigError(variable, raw, accepted)
    for name, level in value.items():
        if name not in GITHUB_REPOSITORY_PERMISSIONS:
            raise ConfigError(variable, raw, f"{accepted}; {name!r} is not a GitHub repository permission")
        if level not in (("read",) if name == "metadata" else ("read", "write")):
            raise ConfigError(variable, raw, f"{accepted}; {name} cannot be {level!r}")
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class GitHubSettings:
    """How the operator reaches GitHub (its own calls) and what job Pods get as ``GH_TOKEN``.

    ``GITHUB_AUTH_SOURCE`` (in :class:`Settings`) picks the source. ``app``: the App's id, installation
    and private key file (mounted from a Secret, never read through the API) are set together or not at
    all. ``pat``/``gh``: ``GITHUB_TOKEN_FILE`` is the operator's own token (a mounted Secret) and
    ``GITHUB_TOKEN_SECRET`` (``name/key``) the Secret job Pods reference. Nothing set: no GitHub client,
    and a pull-request job takes its head from ``spec.resolved`` of the Job, as before this feature.
    """

    api_url: str = DEFAULT_GITHUB_API_URL
    app_id: int | None = None
    app_installation_id: int | None = None
    app_private_key_file: str | None = None
    token_file: str | None = None
    token_secret: tuple[str, str] | None = None
    timeout_seconds: int = 10
    # Where repositories are cloned from (``<web_url>/<owner>/<name>.git``); GitHub Enterprise: its own host.
    web_url: str = DEFAULT_GITHUB_WEB_URL
    # A PEM bundle (mounted from a ConfigMap) that the operator's calls trust instead of the system's CAs:
    # a forge behind a private CA. Job Pods get the same ConfigMap (``ca_bundle_configmap``) for git and gh.
    ca_bundle_file: str | None = None
    ca_bundle_configmap: str | None = None
    # What a job's App installation token may do (PI_DISPATCH_JOB_TOKEN_PERMISSIONS).
    job_token_permissions: tuple[tuple[str, str], ...] = DEFAULT_JOB_TOKEN_PERMISSIONS

    @property
    def app_configured(self) -> bool:
        return self.app_id is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str], source: str) -> GitHubSettings:
        refuse_empty(env, GITHUB_VARIABLES)
        def text(name: str) -> str | None:
            raw = env.get(name)
            return None if raw is None or raw.strip() == "" else raw.strip()

        def positive(name: str) -> int | None:
            raw = text(name)
            return None if raw is None else parse_strict_int(name, raw, "a positive whole number", 1)

        def path(name: str) -> str | None:
            raw = text(name)
            if raw is not None and not raw.startswith("/"):
                raise ConfigError(name, raw, "an absolute path to a file (a mounted Secret)")
            return raw

        url = text("GITHUB_API_URL") or DEFAULT_GITHUB_API_URL
        if not _API_URL.fullmatch(url):
            raise ConfigError("GITHUB_API_URL", url, "an http(s) URL without query, e.g. https://api.github.com or "
                                                     "https://github.example.com/api/v3")
        app = (positive("GITHUB_APP_ID"), positive("GITHUB_APP_INSTALLATION_ID"), path("GITHUB_APP_PRIVATE_KEY_FILE"))
        if any(v is not None for v in app):
            missing = [n for n, v in zip(_APP_VARIABLES, app, strict=True) if v is None]
            if missing:
                raise ConfigError(missing[0], "", "set together with " + " and ".join(
                    n for n in _APP_VARIABLES if n != missing[0]) + " (a GitHub App needs all three)")
            if source != "app":
                raise ConfigError("GITHUB_APP_ID", str(app[0]), f"unset while GITHUB_AUTH_SOURCE={source} (the App is "
                                                                "used only with GITHUB_AUTH_SOURCE=app)")
        token_file = path("GITHUB_TOKEN_FILE")
        secret_raw = text("GITHUB_TOKEN_SECRET")
        token_secret = None
        if secret_raw is not None:
            name, _, key = secret_raw.partition("/")
            if not (_DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253 and _SECRET_KEY.fullmatch(key)):
                raise ConfigError("GITHUB_TOKEN_SECRET", secret_raw, "<secret name>/<key> of a Secret in the "
                                                                      "operator's namespace, e.g. github-token/token")
            token_secret = (name, key)
        for name, value in (("GITHUB_TOKEN_FILE", token_file), ("GITHUB_TOKEN_SECRET", secret_raw)):
            if value is not None and source == "app":
                raise ConfigError(name, value, "unset while GITHUB_AUTH_SOURCE=app (a token Secret is used only "
                                               "with GITHUB_AUTH_SOURCE=pat or gh)")
        web = text("GITHUB_WEB_URL") or DEFAULT_GITHUB_WEB_URL
        if not _API_URL.fullmatch(web):
            raise ConfigError("GITHUB_WEB_URL", web, "an http(s) URL without query or credentials, e.g. "
                                                     "https://github.com or https://github.example.com")
        ca_file = path("GITHUB_CA_BUNDLE_FILE")
        ca_map = text("GITHUB_CA_BUNDLE_CONFIGMAP")
        if ca_map is not None and not (_DNS_SUBDOMAIN.fullmatch(ca_map) and len(ca_map) <= 253):
            raise ConfigError("GITHUB_CA_BUNDLE_CONFIGMAP", ca_map, "the name of a ConfigMap in the operator's "
                                                                    "namespace with the key ca.crt")
        timeout_raw = text("GITHUB_API_TIMEOUT_SECONDS")
        timeout = 10 if timeout_raw is None else parse_strict_int(
            "GITHUB_API_TIMEOUT_SECONDS", timeout_raw, "a whole number of seconds from 1 to 120", 1, 120)
        return cls(api_url=url.rstrip("/"), app_id=app[0], app_installation_id=app[1], app_private_key_file=app[2],
                   token_file=token_file, token_secret=token_secret, timeout_seconds=timeout,
                   web_url=web.rstrip("/"), ca_bundle_file=ca_file, ca_bundle_configmap=ca_map,
                   job_token_permissions=job_token_permissions(env.get("PI_DISPATCH_JOB_TOKEN_PERMISSIONS")))


MAX_SECONDS = 2147483647  # an int32, as Kubernetes' own ttlSecondsAfterFinished


def _optional_seconds(env: Mapping[str, str], variable: str) -> int | None:
    """A number of seconds, ``None`` when the variable is unset or blank (no bound)."""
    raw = env.get(variable)
    if raw is None or raw.strip() == "":
        return None
    return parse_strict_int(variable, raw, f"a whole number of seconds from 0 to {MAX_SECONDS}, or unset for never",
                            0, MAX_SECONDS)


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator process needs beyond the store's settings (names in the Helm chart's Deployment).

    ``PI_DISPATCH_NAMESPACE`` is the one namespace watched (the release namespace: the RBAC is a Role);
    the staging directory is the operator's mount of the staging PVC and ``PI_DISPATCH_STAGING_CLAIM``
    the name job Pods mount it by.
    """

    store: Settings
    namespace: str | None = None
    staging_dir: str = DEFAULT_STAGING_DIR
    staging_claim: str | None = None
    max_concurrent_jobs: int = 4
    job_image: str = DEFAULT_JOB_IMAGE
    job_command: tuple[str, ...] = DEFAULT_JOB_COMMAND
    job_env: tuple[tuple[str, str], ...] = ()
    # A job's run timeout (its Pod's activeDeadlineSeconds) unless its Trigger sets run.timeoutSeconds; 0: none.
    job_timeout_seconds: int = 3600
    # A job Pod that has not started its container this long after its creation fails its Job (and frees its slot).
    job_start_timeout_seconds: int = 600
    # The job container's resources (requests/limits), unless its Trigger sets run.resources.
    job_resources: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # Model credentials of every job Pod: (env name, Secret name, key), by secretKeyRef; a Trigger's
    # run.credentials are merged over them.
    job_credentials: tuple[tuple[str, str, str], ...] = ()
    # A ConfigMap whose key models.json becomes pi's models.json (read-only) in job Pods.
    job_models_configmap: str | None = None
    # Retention: a finished Job's Pod and per-job token Secret are deleted this long after its completedAt
    # (0: as soon as its outcome is recorded); the Job itself, when set, this long after (None: kept).
    job_pod_retention_seconds: int = 600
    job_ttl_seconds_after_finished: int | None = None
    # The git identity of the agent's commits (the App's bot identity, or the chart's job.git values).
    job_git_name: str = DEFAULT_GIT_NAME
    job_git_email: str = DEFAULT_GIT_EMAIL
    # Clone the job's repository into /workspace at the commit resolved from the forge API (needs the
    # operator's GitHub client; without one the workspace stays empty). Off: the head lookup alone.
    job_checkout: bool = True
    metrics_port: int = 9090
    health_port: int = 8080
    peering: str = "pi-dispatch"
    # The Pod's name, the operator's identity in kopf peering: a container restarted in the same Pod
    # recognises its own lease instead of waiting for it to expire.
    pod_name: str | None = None
    resumable_refresh_seconds: int = 300
    sweep_interval_seconds: int = 3600
    # The Helm release: job Pods carry it (RELEASE_LABEL), so the uninstall hook deletes only its own.
    release: str | None = None
    # The job Pod's disk: the workspace emptyDir's sizeLimit (a quantity, and in bytes for the runner's
    # size check before the checkout) and the container's ephemeral-storage request and limit.
    job_workspace_size_limit: str = DEFAULT_WORKSPACE_SIZE_LIMIT
    job_workspace_limit_bytes: int = 10 * 2**30
    job_ephemeral_storage_request: str = DEFAULT_EPHEMERAL_STORAGE_REQUEST
    job_ephemeral_storage_limit: str = DEFAULT_EPHEMERAL_STORAGE_LIMIT
    github: GitHubSettings = GitHubSettings()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env
        refuse_empty(env, OPERATOR_VARIABLES)

        def integer(name: str, default: int, accepted: str, minimum: int, maximum: int) -> int:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            return parse_strict_int(name, raw, accepted, minimum, maximum)

        store = Settings.from_env(env)
        source = env.get("GITHUB_AUTH_SOURCE")
        # Strict here (the operator acts on it), lenient in Settings (the store commands never use it).
        if source is not None and source != "" and source not in AUTH_SOURCES:
            raise ConfigError("GITHUB_AUTH_SOURCE", source, "one of " + ", ".join(AUTH_SOURCES) + " (unset: gh)")
        workspace, request, limit = _job_disk(env)
        return cls(
            store=store,
            namespace=env.get("PI_DISPATCH_NAMESPACE") or None,
            release=_dns_name("PI_DISPATCH_RELEASE", env.get("PI_DISPATCH_RELEASE")),
            job_workspace_size_limit=workspace[0], job_workspace_limit_bytes=workspace[1],
            job_ephemeral_storage_request=request, job_ephemeral_storage_limit=limit,
            staging_dir=env.get("PI_DISPATCH_STAGING_DIR") or DEFAULT_STAGING_DIR,
            staging_claim=env.get("PI_DISPATCH_STAGING_CLAIM") or None,
            max_concurrent_jobs=integer("PI_DISPATCH_MAX_CONCURRENT_JOBS", 4, "a whole number from 1 to 10000",
                                        1, 10000),
            job_image=env.get("PI_DISPATCH_JOB_IMAGE") or DEFAULT_JOB_IMAGE,
            job_command=_json_command("PI_DISPATCH_JOB_COMMAND", env.get("PI_DISPATCH_JOB_COMMAND"),
                                      DEFAULT_JOB_COMMAND),
            job_env=_json_env("PI_DISPATCH_JOB_ENV", env.get("PI_DISPATCH_JOB_ENV")),
            job_timeout_seconds=integer("PI_DISPATCH_JOB_TIMEOUT_SECONDS", 3600,
                                        "a whole number of seconds from 0 (no timeout) to 604800", 0, 604800),
            job_start_timeout_seconds=integer("PI_DISPATCH_JOB_START_TIMEOUT_SECONDS", 600,
                                              "a whole number of seconds from 10 to 86400", 10, 86400),
            job_resources=_json_resources("PI_DISPATCH_JOB_RESOURCES", env.get("PI_DISPATCH_JOB_RESOURCES")),
            job_credentials=_json_credentials("PI_DISPATCH_JOB_CREDENTIALS", env.get("PI_DISPATCH_JOB_CREDENTIALS")),
            job_models_configmap=_dns_name("PI_DISPATCH_JOB_MODELS_CONFIGMAP",
                                           env.get("PI_DISPATCH_JOB_MODELS_CONFIGMAP")),
            job_pod_retention_seconds=integer("PI_DISPATCH_JOB_POD_RETENTION_SECONDS", 600,
                                              f"a whole number of seconds from 0 to {MAX_SECONDS}", 0, MAX_SECONDS),
            job_ttl_seconds_after_finished=_optional_seconds(env, "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED"),
            job_git_name=_one_line("PI_DISPATCH_JOB_GIT_NAME", env.get("PI_DISPATCH_JOB_GIT_NAME"), DEFAULT_GIT_NAME),
            job_git_email=_one_line("PI_DISPATCH_JOB_GIT_EMAIL", env.get("PI_DISPATCH_JOB_GIT_EMAIL"),
                                    DEFAULT_GIT_EMAIL),
            job_checkout=_flag("PI_DISPATCH_JOB_CHECKOUT", env.get("PI_DISPATCH_JOB_CHECKOUT"), True),
            metrics_port=integer("PI_DISPATCH_METRICS_PORT", 9090, "a TCP port, 0 to turn metrics off", 0, 65535),
            health_port=integer("PI_DISPATCH_HEALTH_PORT", 8080, "a TCP port, 0 to turn the probe off", 0, 65535),
            peering=env.get("PI_DISPATCH_PEERING") or "pi-dispatch",
            pod_name=env.get("PI_DISPATCH_POD_NAME") or None,
            resumable_refresh_seconds=integer("PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", 300,
                                              "a whole number of seconds from 5 to 86400", 5, 86400),
            sweep_interval_seconds=integer("PI_DISPATCH_SWEEP_INTERVAL_SECONDS", 3600,
                                           "a whole number of seconds from 10 to 604800", 10, 604800),
            github=GitHubSettings.from_env(env, store.github_auth_source),
        )


def _job_disk(env: Mapping[str, str]) -> tuple[tuple[str, int], str, str]:
    """The workspace's sizeLimit (as given, and in bytes) and the ephemeral-storage request and limit.

    The kubelet evicts a Pod whose emptyDirs and containers together pass the sum of its containers'
    limits: a limit below the workspace's size would evict a job the runner's size check let through,
    so it is refused here, as is a request above the limit (the apiserver would refuse every Pod).
    """
    def quantity(name: str, default: str) -> tuple[str, int]:
        raw = env.get(name)
        text = default if raw is None else raw.strip()
        return text, parse_bytes(name, text)

    workspace = quantity("PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT", DEFAULT_WORKSPACE_SIZE_LIMIT)
    request = quantity("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST", DEFAULT_EPHEMERAL_STORAGE_REQUEST)
    limit = quantity("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT", DEFAULT_EPHEMERAL_STORAGE_LIMIT)
    if limit[1] < workspace[1]:
        raise ConfigError("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT", limit[0],
                          f"a quantity at least PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT ({workspace[0]}): the "
                          "workspace counts against it, with the container's logs and pi's own files")
    if request[1] > limit[1]:
        raise ConfigError("PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST", request[0],
                          f"a quantity at most PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT ({limit[0]})")
    return workspace, request[0], limit[0]
