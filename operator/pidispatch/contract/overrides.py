"""What a Trigger's Pod overrides (``run.env``, ``run.volumes``, ``run.affinity``; issue 42 item 7) may never touch:
the environment the operator and the container contract set, the paths the job Pod mounts, and the placement
rules that would loosen the deployment's. Pure rules, read by the Trigger's model (a Trigger that breaks one is
refused, ``Ready=False``, ``InvalidSpec``) and again by ``manifests/pod.py`` when it builds the Pod
(docs/nodes.md#pod-overrides).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

# Prefixes of the names the operator, the runner and the tools of the contract read: pi-dispatch's own (PI_*,
# PIDISPATCH_*, PI_DISPATCH_*), the forge CLI's and git's (GH_*, GITHUB_*, GIT_*: a GIT_SSL_NO_VERIFY or GH_HOST
# would send the job's credentials elsewhere), and the dynamic loader's (LD_*).
RESERVED_ENV_PREFIXES = ("PI_", "PIDISPATCH_", "GH_", "GITHUB_", "GIT_", "LD_")
# Whole names: the proxy the gateway's capability rides on (either case), the CA files the runner points at,
# what a process is started with (HOME, PATH, a Node or Python start-up hook), and the runner's own.
RESERVED_ENV_NAMES = frozenset({
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "NODE_OPTIONS", "NODE_TLS_REJECT_UNAUTHORIZED", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
    "HOME", "PATH", "USER", "SHELL", "TMPDIR", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Where a Trigger's ConfigMaps go: under /mnt only, so never over the workspace, the session, pi's agent directory,
# the operator's CA and secret mounts (/etc/pi-dispatch, /var/run/pi-dispatch) or the image's own files.
VOLUME_ROOT = "/mnt"
# The Pod's own volumes' names are fixed (workspace, session, agent, models, ...): a Trigger's get this prefix.
VOLUME_PREFIX = "trigger-"
# The placement fields a Trigger's affinity may hold: Kubernetes' own, nothing else.
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def env_name_problem(name: str) -> str | None:
    """Why a Trigger's ``run.env`` may not set ``name``, or ``None``."""
    if not _ENV_NAME.fullmatch(name):
        return f"{name[:80]!r} is not an environment variable name"
    if name in RESERVED_ENV_NAMES or name.upper() in RESERVED_ENV_NAMES:
        return (f"{name} is set by the operator or the job's contract (the gateway's proxy, the CA files, what "
                "a process starts with): a Trigger may not override it")
    prefix = next((p for p in RESERVED_ENV_PREFIXES if name.upper().startswith(p)), None)
    if prefix is not None:
        return (f"{name} starts with {prefix}, which the operator, the runner, git or the forge CLI read: a "
                "Trigger may not set such a name")
    return None


def mount_path(name: str, given: str | None) -> str:
    """Where a Trigger's ConfigMap volume ``name`` is mounted: ``given``, else ``/mnt/<name>``."""
    return given if given is not None else f"{VOLUME_ROOT}/{name}"


def mount_path_problem(path: str) -> str | None:
    """Why a Trigger's ConfigMap may not be mounted at ``path``, or ``None``: only a normal absolute path strictly
    under ``/mnt``."""
    if not path.startswith("/") or posixpath.normpath(path) != path or "//" in path:
        return f"{path[:80]!r} is not a normal absolute path"
    if not path.startswith(VOLUME_ROOT + "/"):
        return (f"{path} is not under {VOLUME_ROOT}: a Trigger's ConfigMaps are mounted there only, away from the "
                "workspace, the session and what the operator mounts")
    if ":" in path:
        return f"{path} has a colon"
    return None


def affinity_problem(affinity: Mapping[str, Any]) -> str | None:
    """Why a Trigger's ``run.affinity`` is not one the Pod can take as written, or ``None`` (the apiserver judges
    the terms themselves): each kind an object of only the required and preferred parts, each part of the
    shape Kubernetes gives it."""
    for kind, value in affinity.items():
        if kind not in AFFINITY_KINDS:
            return f"{kind} is not an affinity (only {', '.join(AFFINITY_KINDS)})"
        if not isinstance(value, Mapping):
            return f"{kind} is not an object"
        extra = set(value) - {REQUIRED, PREFERRED}
        if extra:
            return f"{kind} holds {', '.join(sorted(extra))}: only {REQUIRED} and {PREFERRED}"
        preferred = value.get(PREFERRED)
        if preferred is not None and not (isinstance(preferred, list) and all(isinstance(t, Mapping)
                                                                                for t in preferred)):
            return f"{kind}.{PREFERRED} is not a list of terms"
        required = value.get(REQUIRED)
        if required is None:
            continue
        if kind == "nodeAffinity":
            terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
            if not isinstance(required, Mapping) or set(required) != {"nodeSelectorTerms"} or not isinstance(
                    terms, list) or not terms or not all(isinstance(t, Mapping) for t in terms):
                return f"nodeAffinity.{REQUIRED} is not {{nodeSelectorTerms: [a term, ...]}}"
        elif not (isinstance(required, list) and all(isinstance(t, Mapping) for t in required)):
            return f"{kind}.{REQUIRED} is not a list of terms"
    return None


# A Kubernetes quantity, any resource's: a signless decimal with a binary (Ki..Ei), decimal (n, u, m, k..E) suffix or
# an exponent.
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?")
_SCALE = {"": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
          "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
          "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
          "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60)}


def quantity_value(raw: object) -> Fraction | None:
    """A Kubernetes quantity's exact value (``500m`` is 1/2, ``2Gi`` 2**31), or ``None`` when it is not one."""
    m = _QUANTITY.fullmatch(str(raw).strip())
    if m is None:
        return None
    number, suffix = m.group(1), m.group(2) or ""
    if suffix[:1] in ("e", "E") and suffix != "E":
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    return Fraction(number) * _SCALE[suffix]
