"""The values of the Trigger's ``run.secrets``, read from where the Pod mounts them, for the runner's report.

The operator mounts each named Secret read-only at ``PI_RUN_SECRETS_DIR/<name>/<key>`` (``manifests/pod.py``)
and lists the names in ``PI_RUN_SECRETS``. The runner never stores or prints a value: it reports a digest of
each (``main.own_secrets``) so the operator's scan before the promotion finds one the job echoed.

The kubelet writes a Secret volume as ``<key> -> ..data/<key>`` with ``..data`` a link to a timestamped
directory, so the links are followed, but only inside that Secret's own mount.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from pidispatch.contract import ENV_RUN_SECRETS, ENV_RUN_SECRETS_DIR, run_secret_problem

VALUE_LIMIT = 1024 * 1024  # a Secret holds at most 1 MiB in all


def run_secret_values(env: Mapping[str, str]) -> Iterator[bytes]:
    """Each value of each mounted ``run.secrets`` Secret (its bytes, and without a trailing newline when it has
    one: what an echo prints). Unreadable entries are skipped: a value the job cannot read it cannot echo."""
    root = env.get(ENV_RUN_SECRETS_DIR) or ""
    names = [n for n in (env.get(ENV_RUN_SECRETS) or "").split(",") if n and run_secret_problem(n) is None]
    if not os.path.isabs(root):
        return
    for name in names:
        mount = os.path.join(root, name)
        try:
            base = os.path.realpath(mount)
            keys = sorted(k for k in os.listdir(mount) if not k.startswith("."))
        except OSError:
            continue
        for key in keys:
            target = os.path.realpath(os.path.join(mount, key))
            if not target.startswith(base + os.sep) or not os.path.isfile(target):
                continue
            try:
                with open(target, "rb") as source:
                    value = source.read(VALUE_LIMIT)
            except OSError:
                continue
            yield value
            if value.rstrip(b"\r\n") != value:
                yield value.rstrip(b"\r\n")
