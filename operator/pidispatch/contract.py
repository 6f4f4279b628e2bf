"""The container contract (ARCHITECTURE §5): what the job Pod and the runner agree on, defined once.

The operator builds the Pod from these (``manifests/pod.py``) and reads the runner's report by them
(``report.py``); the runner (``runner/``) honours them inside the Pod. Nothing else is shared across
that boundary, so the runner imports only this module and the store's and transcript's helpers
(checked by import-linter, ``.importlinter``).
"""

from __future__ import annotations

VENUE = "kubernetes"  # the venue a job of this operator stamps and is judged by (spec §2.4)
CONTAINER = "pi"  # the job container, whose termination message carries the report
SESSION_MOUNT = "/session"  # the staged copy's directory, mounted only when the job has a session key
SESSION_FILE = f"{SESSION_MOUNT}/current.jsonl"
WORKSPACE = "/workspace"  # always the same path: pi refuses a session whose header cwd does not exist
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MESSAGE_LIMIT = 4096  # the kubelet's cap on a termination message, in bytes

# Environment the operator sets on the job container.
ENV_SESSION_FILE = "PI_SESSION_FILE"  # only when /session is mounted
ENV_HOST_RESUME = "PI_SESSION_HOST_RESUME"  # "true" when the gates staged a transcript (spec §4.1)

# Labels on what the operator creates.
JOB_LABEL = "pi-dispatch.dev/job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "pi-dispatch"}
