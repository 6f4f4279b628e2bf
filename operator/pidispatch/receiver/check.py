"""``pidispatch receiver check URL``: does the webhook at ``URL`` refuse a delivery that is not signed?

``helm test`` runs it from inside the cluster against the receiver's Service: a receiver that answers an
unsigned delivery with anything but 401 (a wrong secret mounted as empty, a proxy in front that answers
for it, another service behind the path) would let anyone who can reach the URL start jobs. The request
is a real GitHub-shaped ``issue_comment`` delivery without ``X-Hub-Signature-256``; the receiver refuses
it before reading the body, so nothing is created whatever the check finds.

Standard library only: it runs in the operator image with no cluster credentials.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
import uuid

TIMEOUT_SECONDS = 10
REFUSED = 401  # what the receiver answers a delivery without a signature (receiver/app.py)


def unsigned_delivery(url: str) -> urllib.request.Request:
    """An ``issue_comment.created`` delivery as GitHub sends it, minus the signature."""
    body = json.dumps({"action": "created", "comment": {"body": "@pi helm test: an unsigned delivery"},
                       "issue": {"number": 1}, "repository": {"full_name": "pi-dispatch/helm-test"}}).encode()
    return urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/pidispatch-check",
        "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": str(uuid.uuid4())})


def check(url: str, timeout: float = TIMEOUT_SECONDS) -> tuple[bool, str]:
    """``(True, why)`` when ``url`` refused the unsigned delivery with 401, else ``(False, what it did)``."""
    try:
        with urllib.request.urlopen(unsigned_delivery(url), timeout=timeout) as response:  # noqa: S310 - http(s) given by the chart
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, (f"no answer from {url} ({reason}): is the receiver running and its Service ready? "
                       f"kubectl get pods,endpoints -l app.kubernetes.io/component=receiver")
    if status == REFUSED:
        return True, f"{url} refused an unsigned delivery (401)"
    if 200 <= status < 300:
        return False, (f"{url} ACCEPTED an unsigned delivery ({status}): anyone who can reach it can start jobs. "
                       "Check that the receiver has its webhook secret and that nothing else answers on the path")
    return False, (f"{url} answered an unsigned delivery with {status}, not 401: something other than the "
                   "receiver answers there, or it is misconfigured (kubectl logs deploy/<release>-receiver)")


def main(url: str) -> int:
    """Print one line; 0 when the delivery was refused as it must be, 1 otherwise."""
    ok, line = check(url)
    (sys.stdout if ok else sys.stderr).write(f"pidispatch receiver check: {line}\n")
    return 0 if ok else 1
