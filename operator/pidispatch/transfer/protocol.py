"""What the operator's transfer server and a job's runner agree on: paths, headers, environment.

Standard library only; imported by both sides.

* ``GET  /v1/jobs/<uid>/session``: the Job's staged copy as an archive (``archive.py``).
* ``PUT  /v1/jobs/<uid>/session``: the runner's result, an archive with ``Content-Length`` and
  ``X-Pi-Transfer-Digest: sha256=<hex of the whole body>``; answers 200 with the marker's JSON.

Both carry ``Authorization: Bearer <token>`` where the token is the uid's (``token.py``). Answers:
401 (no or wrong token), 404 (not a Kubernetes uid, or no staging directory for it), 400 (digest
mismatch, malformed archive, a name outside the allow-list), 413 (over the cap: at once from a
``Content-Length`` over it, else while the body streams, which is then not read further), 408 (the
body did not arrive whole within the server's body deadline), 409 with ``Retry-After`` (an upload of
the same job is already in flight: one at a time per job).
"""

from __future__ import annotations

import re

API_PREFIX = "/v1/jobs"
SESSION_PATH = API_PREFIX + "/{uid}/session"
DIGEST_HEADER = "X-Pi-Transfer-Digest"
DIGEST_PREFIX = "sha256="

# Environment the operator would set on a job container in transfer mode (the lead wires these; the token
# comes by secretKeyRef from the job's own Secret, never as a literal in the Pod spec).
ENV_URL = "PI_TRANSFER_URL"  # the full URL of this job's session: https://<service>.<ns>.svc:<port>/v1/jobs/<uid>/session
ENV_TOKEN = "PI_TRANSFER_TOKEN"  # this job's credential (hex)
ENV_CA_FILE = "PI_TRANSFER_CA_FILE"  # the CA that signed the server's certificate (a mounted ConfigMap/Secret key)
ENV_MAX_BYTES = "PI_TRANSFER_MAX_BYTES"  # the cap on either direction's body, in bytes

# Where the job Pod finds its credential and the CA: its own per-job Secret (made and owned by the operator,
# read by secretKeyRef; ``jobPodPolicy`` allows a job Pod this name for its own Job's uid only), and the CA
# ConfigMap mounted read-only.
SECRET_KEY = "token"
CA_DIR = "/etc/pi-dispatch/transfer"
CA_KEY = "ca.crt"
ENVS = (ENV_URL, ENV_TOKEN, ENV_CA_FILE, ENV_MAX_BYTES)

# A Kubernetes uid as the apiserver makes them (RFC 4122, lower case). Checked before a uid touches a path.
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Upload and marker names inside <staging>/<uid>/ (next to session/, out of the Pod's reach in mount mode).
UPLOAD_PREFIX = "upload-"
MARKER = "uploaded.json"


def is_uid(value: str) -> bool:
    """True when ``value`` has the shape of a Kubernetes object uid (and so is a single safe path segment)."""
    return UID.fullmatch(value) is not None


def session_url(base: str, uid: str) -> str:
    """The URL of one job's session under the server's ``base`` (``https://host:port``), for ``ENV_URL``."""
    if not is_uid(uid):
        raise ValueError(f"not a Kubernetes uid: {uid!r}")
    return base.rstrip("/") + SESSION_PATH.format(uid=uid)


def digest_header(hex_digest: str) -> str:
    return DIGEST_PREFIX + hex_digest


def parse_digest_header(value: str | None) -> str | None:
    """The hex SHA-256 from ``sha256=<hex>``, or ``None`` when the header is missing or not that shape."""
    if value is None or not value.startswith(DIGEST_PREFIX):
        return None
    hex_digest = value[len(DIGEST_PREFIX):].strip().lower()
    return hex_digest if re.fullmatch(r"[0-9a-f]{64}", hex_digest) else None
