"""What every part of the test kubelet shares: its logger, the Pod's directory name, ``$(VAR)`` expansion and
the ways a container cannot start yet (``Waiting``, ``NotPulled``) or at all (``PodFailed``)."""

from __future__ import annotations

import datetime as dt
import logging
import re

log = logging.getLogger("test-kubelet")

TERMINATION_MESSAGE_LIMIT = 4096
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
UNPULLABLE_REGISTRY = "unpullable.invalid"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(s: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars replaced, ``$$`` -> ``$``, undefined kept."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return VAR_REF.sub(sub, s)


def pod_dir_name(pod: dict) -> str:
    md = pod["metadata"]
    return f"{md['namespace']}_{md['name']}_{md['uid']}"


class PodFailed(Exception):
    """The Pod cannot be started (bad spec for this kubelet): report Failed with this reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class NotPulled(Exception):
    """The image cannot be pulled (its registry is ``unpullable.invalid``): ErrImagePull, then ImagePullBackOff."""

    def __init__(self, image: str, again: bool) -> None:
        self.reason = "ImagePullBackOff" if again else "ErrImagePull"
        super().__init__(f'Back-off pulling image "{image}"' if again else
                         f'failed to pull image "{image}": dial tcp: lookup {image.split("/", 1)[0]}: no such host')


def unpullable(image: str) -> bool:
    return image.split("/", 1)[0].split(":", 1)[0] == UNPULLABLE_REGISTRY


class Waiting(Exception):
    """A dependency (PVC, ConfigMap, Secret) is not ready yet; retry later."""
