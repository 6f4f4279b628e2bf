"""What the operator needs to send jobs through the gateway (docs/gateway.md#inside-the-job).

All or nothing: ``PI_DISPATCH_GATEWAY_URL`` set means every job Pod reaches out only through the gateway
and holds no model key and no forge token, so the rest (the proxy, the CA jobs verify the gateway with,
the key the operator signs capabilities with) is required with it. Unset: jobs get their credentials as
before (a deployment without the gateway component).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.settings.errors import ConfigError
from pidispatch.settings.readers import absolute_path, given, integer, object_name

GATEWAY_VARIABLES = ("PI_DISPATCH_GATEWAY_URL", "PI_DISPATCH_GATEWAY_PROXY", "PI_DISPATCH_GATEWAY_CA_CONFIGMAP",
                     "PI_DISPATCH_GATEWAY_KEY_FILE", "PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS")
_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?")
_PROXY = re.compile(r"http://[A-Za-z0-9.-]+:[0-9]{1,5}")
MAX_TOKENS_LIMIT = 10**12
# A capability outlives its Job's run timeout by this much (a push or a last reply in flight), and a job with
# no timeout gets this long.
EXPIRY_MARGIN_SECONDS = 600
NO_TIMEOUT_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Gateway:
    """Where job Pods reach the gateway, and what the operator signs their capabilities with."""

    url: str  # https://<service>.<namespace>.svc (the Service's 443)
    proxy: str  # http://<service>.<namespace>.svc:3128
    ca_configmap: str  # key ca.crt: mounted read-only into job Pods
    key_file: str  # the HMAC key of capabilities (gateway/capability.py)
    default_max_tokens: int | None = None  # a job's budget when its Trigger names none


def gateway_settings(env: Mapping[str, str]) -> Gateway | None:
    """Read the gateway's variables; ``None`` when ``PI_DISPATCH_GATEWAY_URL`` is unset."""
    url = given(env, "PI_DISPATCH_GATEWAY_URL")
    proxy = given(env, "PI_DISPATCH_GATEWAY_PROXY")
    ca = object_name(env, "PI_DISPATCH_GATEWAY_CA_CONFIGMAP")
    key = absolute_path(env, "PI_DISPATCH_GATEWAY_KEY_FILE")
    budget = integer(env, "PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS", f"a whole number of tokens from 1 to "
                     f"{MAX_TOKENS_LIMIT} (unset: no budget)", minimum=1, maximum=MAX_TOKENS_LIMIT)
    if url is None:
        return None
    url = url.strip().rstrip("/")
    if not _URL.fullmatch(url):
        raise ConfigError("PI_DISPATCH_GATEWAY_URL", url, "https://<host>[:<port>] with no path, e.g. "
                          "https://pi-dispatch-gateway.pi.svc")
    for name, value, what in (("PI_DISPATCH_GATEWAY_PROXY", proxy, "the gateway's proxy, http://<host>:<port>"),
                              ("PI_DISPATCH_GATEWAY_CA_CONFIGMAP", ca, "the ConfigMap (key ca.crt) job Pods "
                                                                       "verify the gateway with"),
                              ("PI_DISPATCH_GATEWAY_KEY_FILE", key, "the file of the capabilities' key")):
        if value is None:
            raise ConfigError(name, "", f"{what} (required with PI_DISPATCH_GATEWAY_URL; the chart sets it)")
    assert proxy is not None and ca is not None and key is not None
    proxy = proxy.strip().rstrip("/")
    if not _PROXY.fullmatch(proxy):
        raise ConfigError("PI_DISPATCH_GATEWAY_PROXY", proxy, "http://<host>:<port>, e.g. "
                          "http://pi-dispatch-gateway.pi.svc:3128 (the job's TLS goes through it end to end)")
    return Gateway(url=url, proxy=proxy, ca_configmap=ca, key_file=key, default_max_tokens=budget)
