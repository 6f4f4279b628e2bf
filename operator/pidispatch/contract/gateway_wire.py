"""What the gateway, the operator and a job's runner agree on: listeners, paths, headers, environment.

Standard library only; imported by all three (docs/gateway.md#the-wire).

The gateway serves TLS on one port (``HTTPS_PORT``, the Service's 443 so no port appears in a git remote,
which ``gh`` needs to match it) with three path spaces, and a plain-HTTP CONNECT proxy on another:

* ``/model/<provider>/<rest>``: forwarded to the provider's own base URL + ``/<rest>`` (the base URL pi
  would use for that provider), with the provider's key in place of the capability. The job's pi has
  ``baseUrl: https://<gateway>/model/<provider>`` and the capability as its API key.
* ``/<owner>/<name>.git/...``: git smart HTTP of the forge, the capability as the Basic password
  (any user name), the job's token in its place upstream.
* ``/api/v3/...`` and ``/api/graphql``: the forge's REST and GraphQL APIs in GitHub Enterprise's layout
  (so ``gh`` talks to it with ``GH_HOST=<gateway host>`` and ``GH_ENTERPRISE_TOKEN=<capability>``),
  forwarded to the real API (``api.github.com`` or the Enterprise host's ``/api/v3``).
* ``CONNECT host:443`` on ``PROXY_PORT`` with ``Proxy-Authorization: Basic`` (any user, the capability as
  the password: ``HTTPS_PROXY=http://job:<capability>@<gateway>:3128``), to hosts the claims allow.

``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus) are on ``METRICS_PORT``,
never on the port jobs reach.

Refusals answer ``403`` (``401`` without a valid capability; a spent budget is a 403 too: clients retry a
429) with ``X-Pi-Gateway-Refusal: <reason>`` and a
JSON body ``{"error": {"type": "pi_gateway_refusal", "reason": ..., "message": ...}}`` that the OpenAI and
Anthropic clients both surface as the error's message.
"""

from __future__ import annotations

HTTPS_PORT = 8443  # the container port; the Service maps 443 to it
SERVICE_PORT = 443
PROXY_PORT = 3128
METRICS_PORT = 9090

MODEL_PREFIX = "/model/"
API_PREFIX = "/api/v3/"
GRAPHQL_PATH = "/api/graphql"
REFUSAL_HEADER = "X-Pi-Gateway-Refusal"

# Refusal reasons (the header's value, the ledger's keys, the Job's status).
REFUSED_NO_CAPABILITY = "no-capability"
REFUSED_BAD_CAPABILITY = "bad-capability"
REFUSED_BUDGET = "token-budget"
REFUSED_PROVIDER = "unknown-provider"
REFUSED_NO_KEY = "no-provider-key"
REFUSED_REPOSITORY = "other-repository"
REFUSED_FORK_WRITE = "fork-read-only"
REFUSED_HOST = "host-not-allowed"
REFUSED_UNCHECKED = "unchecked-request"  # a forge request the gateway cannot read (GraphQL it cannot parse ...)
REFUSED_NO_TOKEN = "no-forge-token"  # the claims name no forge token, or its Secret has none
REFUSED_REDIRECT = "upstream-redirect"  # the forge redirected somewhere the gateway does not forward to

# Environment of the job container (the operator sets these; the capability comes by secretKeyRef from the
# Job's own Secret, never as a literal in the Pod spec).
ENV_URL = "PI_GATEWAY_URL"  # https://<service>.<namespace>.svc (no port: 443)
ENV_TOKEN = "PI_GATEWAY_TOKEN"  # the capability
ENV_PROXY = "PI_GATEWAY_PROXY"  # http://<service>.<namespace>.svc:3128 (the runner adds the credentials)
ENV_CA_FILE = "PI_GATEWAY_CA_FILE"  # the CA that signed the gateway's certificate
ENV_MODELS_FILE = "PI_MODELS_FILE"  # the deployment's models.json, read-only; the runner routes it into pi's agent dir
ENVS = (ENV_URL, ENV_TOKEN, ENV_PROXY, ENV_CA_FILE, ENV_MODELS_FILE)
MODELS_DIR = "/etc/pi-dispatch/models"  # where the job Pod mounts the deployment's models.json behind the gateway

SECRET_KEY = "capability"
CA_DIR = "/etc/pi-dispatch/gateway"
CA_KEY = "ca.crt"

# The ledger: one ConfigMap per Job (owned by it), one data key per gateway replica, each a JSON object
# {"input", "output", "cacheRead", "cacheWrite", "requests", "refusals": {reason-or-host: count}}.
LEDGER_PREFIX = "pi-job-ledger-"
LEDGER_LABEL = "pi-dispatch.dev/ledger"


def ledger_name(uid: str) -> str:
    """The ConfigMap the gateway writes ``uid``'s figures into."""
    return LEDGER_PREFIX + uid
