"""How the operator reaches GitHub: the API and web addresses, the credential, a private CA, and what a
job's App token may do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.errors import ConfigError
from pidispatch.settings.readers import (
    SECRET_KEY,
    absolute_path,
    integer,
    is_object_name,
    object_name,
    parse_json,
    refuse_empty,
    text,
    url,
)

AUTH_SOURCES = ("app", "pat", "gh")  # the CRD's enum (pidispatch.api.crds.AUTH_SOURCES; a test keeps them equal)
DEFAULT_GITHUB_API_URL = "https://api.github.com"
DEFAULT_GITHUB_WEB_URL = "https://github.com"

# Every variable GitHubSettings reads, named once: an empty value of any of them is refused
# (tests/settings/test_settings_strict.py holds the lists to the names the code reads).
GITHUB_VARIABLES = (
    "GITHUB_API_URL",
    "GITHUB_API_TIMEOUT_SECONDS",
    "GITHUB_WEB_URL",
    "GITHUB_CA_BUNDLE_FILE",
    "GITHUB_CA_BUNDLE_CONFIGMAP",
    "GITHUB_APP_ID",
    "GITHUB_APP_INSTALLATION_ID",
    "GITHUB_APP_PRIVATE_KEY_FILE",
    "GITHUB_TOKEN_FILE",
    "GITHUB_TOKEN_SECRET",
)
_APP_VARIABLES = ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY_FILE")

# PI_DISPATCH_JOB_TOKEN_PERMISSIONS: what a job's App installation token may do, asked for at every
# mint (GitHub narrows the token to it, and refuses with 422 a permission the installation lacks).
# Without it a job token would carry everything the App was granted. Repository permissions only:
# the token is scoped to one repository.
DEFAULT_JOB_TOKEN_PERMISSIONS = (
    ("contents", "write"),
    ("issues", "write"),
    ("metadata", "read"),
    ("pull_requests", "write"),
)
GITHUB_REPOSITORY_PERMISSIONS = frozenset({
    "actions", "administration", "attestations", "checks", "codespaces", "contents", "dependabot_secrets",
    "deployments", "environments", "issues", "merge_queues", "metadata", "packages", "pages", "pull_requests",
    "repository_custom_properties", "repository_hooks", "repository_projects", "secret_scanning_alerts",
    "secrets", "security_events", "single_file", "statuses", "vulnerability_alerts", "workflows",
})
# The levels a token may be asked for, where not read or write: GitHub's "Create an installation access token"
# takes only write for workflows (there is no read level: its description's app-permissions enum), and
# metadata only read here (GitHub's read is all a token ever needs of it). docs/github-contracts.md
PERMISSION_LEVELS: dict[str, tuple[str, ...]] = {"metadata": ("read",), "workflows": ("write",)}


def permission_levels(name: str) -> tuple[str, ...]:
    """The levels ``PI_DISPATCH_JOB_TOKEN_PERMISSIONS`` may give the repository permission ``name``."""
    return PERMISSION_LEVELS.get(name, ("read", "write"))


def job_token_permissions(raw: str | None) -> tuple[tuple[str, str], ...]:
    """``PI_DISPATCH_JOB_TOKEN_PERMISSIONS``: unset is the default.

    Anything but a non-empty JSON object of GitHub repository permission names to ``read``/``write``
    (``metadata``: ``read`` only; ``workflows``: ``write`` only, :data:`PERMISSION_LEVELS`) is a configuration
    error, an empty value too.
    """
    variable = "PI_DISPATCH_JOB_TOKEN_PERMISSIONS"
    if raw is None:
        return DEFAULT_JOB_TOKEN_PERMISSIONS
    accepted = ('a JSON object of GitHub repository permissions to "read" or "write", e.g. '
                '{"contents":"write","pull_requests":"write","issues":"write","metadata":"read"}')
    value = parse_json(variable, raw, accepted)
    if not isinstance(value, dict) or not value:
        raise ConfigError(variable, raw, accepted)
    for name, level in value.items():
        if name not in GITHUB_REPOSITORY_PERMISSIONS:
            raise ConfigError(variable, raw, f"{accepted}; {name!r} is not a GitHub repository permission")
        if level not in permission_levels(name):
            raise ConfigError(variable, raw, f"{accepted}; {name} cannot be {level!r}")
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class GitHubSettings:
    """How the operator reaches GitHub (its own calls) and what job Pods get as ``GH_TOKEN``.

    ``GITHUB_AUTH_SOURCE`` (in :class:`~pidispatch.settings.store.Settings`) picks the source. ``app``:
    the App's id, installation and private key file (mounted from a Secret, never read through the API)
    are set together or not at all. ``pat``/``gh``: ``GITHUB_TOKEN_FILE`` is the operator's own token (a
    mounted Secret) and ``GITHUB_TOKEN_SECRET`` (``name/key``) the Secret job Pods reference. Nothing set:
    no GitHub client, and a pull-request job takes its head from ``spec.resolved`` of the Job, as before
    this feature.
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
        """Whether the operator mints App installation tokens (the App's three variables are set)."""
        return self.app_id is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str], source: str) -> GitHubSettings:
        """Read and validate GitHub's settings for the credential ``source`` (``app``, ``pat`` or ``gh``).

        Each setting is checked in turn and the first unusable one raises :class:`ConfigError`; so is a
        credential set for a source it is not used with (an App beside ``pat``, a token beside ``app``).
        """
        refuse_empty(env, GITHUB_VARIABLES)
        # GitHub's values are read trimmed: a value pasted with a space or a newline means the same.
        github = {name: env[name].strip() for name in GITHUB_VARIABLES if name in env}
        api_url = url(github, "GITHUB_API_URL", DEFAULT_GITHUB_API_URL, "an http(s) URL without query, e.g. "
                      "https://api.github.com or https://github.example.com/api/v3")
        app_id, installation_id, private_key_file = _app(github, source)
        token_file, token_secret = _token(github, source)
        web_url = url(github, "GITHUB_WEB_URL", DEFAULT_GITHUB_WEB_URL, "an http(s) URL without query or "
                      "credentials, e.g. https://github.com or https://github.example.com")
        ca_bundle_file = absolute_path(github, "GITHUB_CA_BUNDLE_FILE")
        ca_bundle_configmap = object_name(github, "GITHUB_CA_BUNDLE_CONFIGMAP",
                                          "the name of a ConfigMap in the operator's namespace with the key ca.crt")
        timeout = integer(github, "GITHUB_API_TIMEOUT_SECONDS", "a whole number of seconds from 1 to 120",
                          default=10, minimum=1, maximum=120)
        return cls(
            api_url=api_url,
            app_id=app_id,
            app_installation_id=installation_id,
            app_private_key_file=private_key_file,
            token_file=token_file,
            token_secret=token_secret,
            timeout_seconds=timeout,
            web_url=web_url,
            ca_bundle_file=ca_bundle_file,
            ca_bundle_configmap=ca_bundle_configmap,
            job_token_permissions=job_token_permissions(env.get("PI_DISPATCH_JOB_TOKEN_PERMISSIONS")),
        )


def _app(github: Mapping[str, str], source: str) -> tuple[int | None, int | None, str | None]:
    """The App's id, installation id and private key file: all three or none, and only for ``app``."""
    app = (
        integer(github, "GITHUB_APP_ID", "a positive whole number", minimum=1),
        integer(github, "GITHUB_APP_INSTALLATION_ID", "a positive whole number", minimum=1),
        absolute_path(github, "GITHUB_APP_PRIVATE_KEY_FILE"),
    )
    if all(v is None for v in app):
        return None, None, None
    missing = [n for n, v in zip(_APP_VARIABLES, app, strict=True) if v is None]
    if missing:
        others = " and ".join(n for n in _APP_VARIABLES if n != missing[0])
        raise ConfigError(missing[0], "", f"set together with {others} (a GitHub App needs all three)")
    if source != "app":
        raise ConfigError("GITHUB_APP_ID", str(app[0]), f"unset while GITHUB_AUTH_SOURCE={source} (the App is "
                                                        "used only with GITHUB_AUTH_SOURCE=app)")
    return app


def _token(github: Mapping[str, str], source: str) -> tuple[str | None, tuple[str, str] | None]:
    """The operator's token file and the ``name/key`` of the Secret job Pods reference; never for ``app``."""
    token_file = absolute_path(github, "GITHUB_TOKEN_FILE")
    secret_raw = text(github, "GITHUB_TOKEN_SECRET")
    token_secret = None
    if secret_raw is not None:
        name, _, key = secret_raw.partition("/")
        if not (is_object_name(name) and SECRET_KEY.fullmatch(key)):
            raise ConfigError("GITHUB_TOKEN_SECRET", secret_raw, "<secret name>/<key> of a Secret in the "
                                                                  "operator's namespace, e.g. github-token/token")
        token_secret = (name, key)
    for name, value in (("GITHUB_TOKEN_FILE", token_file), ("GITHUB_TOKEN_SECRET", secret_raw)):
        if value is not None and source == "app":
            raise ConfigError(name, value, "unset while GITHUB_AUTH_SOURCE=app (a token Secret is used only "
                                           "with GITHUB_AUTH_SOURCE=pat or gh)")
    return token_file, token_secret
