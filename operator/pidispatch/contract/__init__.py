"""The container contract (docs/architecture.md#container-contract): what the job Pod and the runner agree on, defined
once.

The operator builds the Pod from these (``manifests/pod.py``); the runner (``runner/``) honours them inside
the Pod and writes its report, which the operator reads, by the one model in ``contract/report.py``. Nothing
else is shared across that boundary, so the runner imports only this package and the store's and transcript's
helpers (checked by import-linter, ``.importlinter``).
"""

from __future__ import annotations

import re
from typing import TypeGuard

VENUE = "kubernetes"  # the venue a job of this operator stamps and is judged by (docs/store-contract.md#venues)
CONTAINER = "pi"  # the job container, whose termination message carries the report
SESSION_MOUNT = "/session"  # the staged copy's directory, mounted only when the job has a session key
SESSION_FILE = f"{SESSION_MOUNT}/current.jsonl"
WORKSPACE = "/workspace"  # always the same path: pi refuses a session whose header cwd does not exist
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MESSAGE_LIMIT = 4096  # the kubelet's cap on a termination message, in bytes
# The token fields a report may carry (`contract/report.py`), the same as the Job's `status.tokens`: the sums
# over the job's own assistant replies (pi's `usage`), never the resumed history's. `cost` is the dollars pi
# priced them at, sent only when every reply was priced; `unpriced` counts the replies no price was known for.
# Upstream's record lists 23 fields; the 18 nothing here measures are left out (docs/store-divergences.md).
TOKEN_FIELDS = ("input", "output", "cacheRead", "cacheWrite", "total", "cost", "calls", "unpriced")

AGENT_DIR = "/pi-agent"  # pi's agent directory (writable) when models.json comes from a ConfigMap
MODELS_JSON = "models.json"

# Environment the operator sets on the job container.
ENV_SESSION_FILE = "PI_SESSION_FILE"  # only when /session is mounted
# "true" when the gates staged a transcript: the prompt's shape follows it (docs/store-contract.md#operator-side).
ENV_HOST_RESUME = "PI_SESSION_HOST_RESUME"
ENV_RETHREAD = "PI_SESSION_RETHREAD"  # "true" when a letter and the ledger are staged for an unpack
ENV_RETHREAD_PCT = "PI_SESSION_RETHREAD_PCT"  # the context use (%) at which the job packs a handoff; 0 = never
# Comma-separated names (never values) of the model credentials' variables: the runner reports a digest of
# each value and of the forge token (``store/redact.py``), so the operator's scan can redact them.
ENV_SECRET_NAMES = "PI_SECRET_ENV"
ENV_AGENT_DIR = "PI_CODING_AGENT_DIR"  # pi's own: where it reads models.json
# run.secrets: each named Secret of the Trigger's namespace is mounted read-only at RUN_SECRETS_DIR/<name>/<key>
# (a file per key, never an environment value the Pod's spec would show). ENV_RUN_SECRETS lists the names
# (comma-separated) so the runner reports a digest of every value for the scan before the promotion.
RUN_SECRETS_DIR = "/var/run/pi-dispatch/secrets"
ENV_RUN_SECRETS_DIR = "PI_RUN_SECRETS_DIR"
ENV_RUN_SECRETS = "PI_RUN_SECRETS"
# Names a model credential may not take: the forge token reaches the Pod only one way (GH_TOKEN, by
# the operator's own secretKeyRef), and the session and agent settings are the operator's.
FORGE_TOKEN_NAMES = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")

# Labels on what the operator creates.
JOB_LABEL = "pi-dispatch.dev/job"
RELEASE_LABEL = "pi-dispatch.dev/release"  # the Helm release of the operator that created it (its uninstall hook's)
MANAGED_BY = {"app.kubernetes.io/managed-by": "pi-dispatch"}


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def run_secret_problem(name: str) -> str | None:
    """Why ``name`` cannot be one of ``run.secrets`` (a Secret's name: a DNS subdomain), or ``None``."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return f"{name[:80]!r} is not a Secret's name (lowercase letters, digits, '-' and '.', at most 253)"
    return None


# A flow names a pi skill: pi's own rule for a skill's name (lowercase letters, digits, single hyphens, 64 at most).
_FLOW = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
FLOW_MAX_LENGTH = 64


def flow_problem(name: str) -> str | None:
    """Why ``name`` cannot be ``run.flow`` (a pi skill's name), or ``None``.

    Checked when the Trigger loads and by the runner, not by the CRD: the field took any string before it
    acted, and a narrower pattern would refuse every write of a Trigger stored then (docs/crd-policy.md)."""
    if len(name) > FLOW_MAX_LENGTH or not _FLOW.fullmatch(name):
        return (f"{name[:80]!r} is not a flow's name: a pi skill's name is lowercase letters, digits and single "
                f"hyphens, {FLOW_MAX_LENGTH} characters at most")
    return None


# run.command names a command a pi extension registers (``pi.registerCommand``), run as the job's whole prompt
# '/<name> args'. pi takes any string as a name and splits the prompt at its first space; this is the form a
# person can write and read back: a letter or digit, then letters, digits, '.', '_', '-' or ':' (pi calls the
# second of two commands of one name 'name:2'). ``skill:<name>`` is a skill, which is run.flow's.
_COMMAND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
COMMAND_NAME_MAX_LENGTH = 64


def split_command(text: str) -> tuple[str, str]:
    """``'/name args'`` → ``('name', 'args')``, as pi splits it (at the first space; no space: no args)."""
    name, _, args = text[1:].partition(" ")
    return name, args


def command_problem(text: str) -> str | None:
    """Why ``text`` cannot be ``run.command`` (``/<name>`` then optional arguments after one space), or ``None``.

    Checked when the Trigger loads and by the runner, not by the CRD (as :func:`flow_problem`)."""
    shown = repr(text[:80])
    if not text.startswith("/"):
        return f"{shown} is not a command: it starts with '/', as in '/review focus on tests'"
    name, args = split_command(text)
    if name.startswith("skill:"):
        return (f"{shown} invokes a skill, not a command: a skill is run.flow's (run.flow: "
                f"{name.removeprefix('skill:') or '<name>'})")
    if len(name) > COMMAND_NAME_MAX_LENGTH or not _COMMAND_NAME.fullmatch(name):
        return (f"{shown} does not start with a command's name: '/' then a letter or digit, then letters, digits, "
                f"'.', '_', '-' or ':' ({COMMAND_NAME_MAX_LENGTH} at most), then a space before any arguments")
    if any(ord(c) < 32 or ord(c) == 127 for c in args):
        return f"{shown} has a line break or another control character in its arguments: write them on one line"
    return None


def credential_name_problem(name: str) -> str | None:
    """Why ``name`` may not be the environment variable of a model credential, or ``None``."""
    if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name) \
            or not name.isascii():
        return f"{name!r} is not an environment variable name"
    if name in FORGE_TOKEN_NAMES:
        return f"{name} is the forge token, which reaches the job only from the github.* values"
    if name.startswith("PI_SESSION") or name == ENV_AGENT_DIR:
        return f"{name} is set by the operator"
    return None

# The workspace checkout (issue 14): the operator resolves the commit from the forge API and hands
# the runner these; the runner clones before pi starts and reports the final HEAD.
ENV_CHECKOUT = "PI_CHECKOUT"  # JSON {"url", "ref", "sha", "branch"}: branch null is a read-only checkout
ENV_SUBJECT = "PI_SUBJECT"  # JSON {"title", "body"} of the issue or pull request (untrusted text)
ENV_PREVIOUS_COMMIT = "PI_PREVIOUS_COMMIT"  # JSON {"sha", "aheadBy", "behindBy", "status"}: the head moved
# The workspace's size limit in bytes (the emptyDir's sizeLimit): a tree larger than this is not checked out.
ENV_WORKSPACE_LIMIT = "PI_WORKSPACE_LIMIT_BYTES"
ENV_FLOW = "PI_FLOW"  # run.flow: the repository's .pi/skills/<flow> the job runs (runner/flow.py)
ENV_COMMAND = "PI_COMMAND"  # run.command: '/<name> args', a command of the image's extensions (runner/command.py)
# The job image's declaration that it runs commands: the directory of the trusted pi extensions it loads with -e
# (never the repository's). A command job on an image without it is refused before pi starts.
ENV_COMMAND_EXTENSIONS_DIR = "PI_COMMAND_EXTENSIONS_DIR"
ENV_EVENT_FILE = "PI_EVENT_FILE"  # set by the runner for pi: the event as JSON, for a command's handler to read
GIT_USERNAME = "x-access-token"  # what git sends as the user name with a token (GitHub's convention)
SUBJECT_TITLE_LIMIT = 256
SUBJECT_BODY_LIMIT = 8192
CA_BUNDLE_DIR = "/etc/pi-dispatch/ca"  # the CA bundle ConfigMap's mount in the job Pod (its key ca.crt)
CA_BUNDLE_KEY = "ca.crt"


def is_commit(value: object) -> TypeGuard[str]:
    """A full commit id (SHA-1 or SHA-256, lower-case hex): the only form a checkout's commit takes."""
    return isinstance(value, str) and len(value) in (40, 64) and all(c in "0123456789abcdef" for c in value)
