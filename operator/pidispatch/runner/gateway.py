"""The job's side of the gateway (docs/gateway.md#inside-the-job): every way out goes through it.

When the Pod names a gateway (``PI_GATEWAY_URL``), the operator has already given the job only the
capability (``PI_GATEWAY_TOKEN``; also as ``GH_TOKEN`` and ``GH_ENTERPRISE_TOKEN``, which git's askpass
and ``gh`` read), ``GH_HOST`` set to the gateway, and a checkout URL on the gateway. The runner adds what a
Pod spec cannot say:

* a CA bundle of the image's roots and the gateway's CA (``SSL_CERT_FILE``, ``GIT_SSL_CAINFO``,
  ``CURL_CA_BUNDLE``; ``NODE_EXTRA_CA_CERTS`` adds the gateway's CA to Node's own roots), so git, ``gh``
  and pi trust the gateway while a tool that goes through the proxy still checks the real host's
  certificate against the usual roots;
* the proxy, with the capability as its password (``HTTPS_PROXY`` and friends; the gateway's own host is
  reached directly: ``NO_PROXY``);
* pi's ``models.json``: every provider pi knows and every provider of the deployment's ``models.json``
  routed to ``<gateway>/model/<provider>`` with ``PI_GATEWAY_TOKEN`` as its key, so pi never holds a
  provider key and never reaches a provider but through the gateway.

Nothing here holds or writes a secret: the capability stays in the environment (the models.json names the
variable, the proxy URL is built in the environment given to the job's processes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from pidispatch.contract import gateway_wire as protocol
from pidispatch.providers import KEY_VARIABLES

SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
MODELS_JSON = "models.json"
PROXY_USER = "job"


class GatewayConfigError(ValueError):
    """The Pod names a gateway but not what reaching it takes (the message names the variable)."""


@dataclass(frozen=True)
class Gateway:
    """Where the job's gateway is and what the job trusts it by."""

    url: str  # https://<host>, no path
    proxy: str  # http://<host>:<port>
    ca_file: str

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    def model_base(self, provider: str) -> str:
        return f"{self.url}{protocol.MODEL_PREFIX}{quote(provider, safe='')}"


def gateway_of(env: Mapping[str, str]) -> Gateway | None:
    """The gateway the Pod names, or ``None`` (a deployment without one: the job reaches out as before)."""
    url = env.get(protocol.ENV_URL)
    if not url:
        return None
    missing = [name for name in (protocol.ENV_TOKEN, protocol.ENV_PROXY, protocol.ENV_CA_FILE) if not env.get(name)]
    if missing:
        raise GatewayConfigError(f"{protocol.ENV_URL} is set but {', '.join(missing)} is not: the Pod must carry "
                                 "the job's capability, the proxy and the gateway's CA with it")
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.netloc or parts.path not in ("", "/") or "@" in parts.netloc:
        raise GatewayConfigError(f"{protocol.ENV_URL} is not valid: expected https://HOST[:PORT] without a path "
                                 "or credentials")
    proxy = urlsplit(env[protocol.ENV_PROXY])
    if proxy.scheme != "http" or not proxy.netloc or "@" in proxy.netloc:
        raise GatewayConfigError(f"{protocol.ENV_PROXY} is not valid: expected http://HOST:PORT without credentials")
    return Gateway(url=url.rstrip("/"), proxy=env[protocol.ENV_PROXY].rstrip("/"), ca_file=env[protocol.ENV_CA_FILE])


def ca_bundle(gateway: Gateway, directory: str, system: tuple[str, ...] = SYSTEM_BUNDLES) -> str:
    """Write the image's roots followed by the gateway's CA into ``directory``; its path."""
    parts: list[bytes] = []
    for candidate in system:
        try:
            with open(candidate, "rb") as source:
                parts.append(source.read())
            break
        except OSError:
            continue
    try:
        with open(gateway.ca_file, "rb") as source:
            parts.append(source.read())
    except OSError as error:
        raise GatewayConfigError(f"cannot read the gateway's CA {gateway.ca_file} ({protocol.ENV_CA_FILE}): "
                                 f"{error.strerror}") from None
    path = os.path.join(directory, "ca-bundle.pem")
    with open(path, "wb") as sink:
        sink.write(b"\n".join(part.rstrip(b"\n") for part in parts) + b"\n")
    return path


def proxy_env(gateway: Gateway, capability: str) -> dict[str, str]:
    """The proxy variables every common client reads (curl, git, pip, npm, Go, Python), upper and lower case."""
    parts = urlsplit(gateway.proxy)
    with_credentials = f"http://{PROXY_USER}:{quote(capability, safe='')}@{parts.netloc}"
    direct = ",".join((urlsplit(gateway.url).hostname or "", "localhost", "127.0.0.1"))
    env: dict[str, str] = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = with_credentials
    env["NO_PROXY"] = env["no_proxy"] = direct
    return env


def routed_models(original: Any, gateway: Gateway) -> dict[str, Any]:
    """pi's models.json with every provider it may use routed to the gateway.

    The deployment's providers keep everything but ``baseUrl`` and ``apiKey`` (and lose ``headers``, which
    may name a credential); pi's own providers get only those two, so their built-in models stay.
    """
    providers: dict[str, Any] = {}
    given = original.get("providers") if isinstance(original, dict) else None
    for name in KEY_VARIABLES:
        providers[name] = {}
    if isinstance(given, dict):
        for name, value in given.items():
            providers[str(name)] = {k: v for k, v in value.items() if k not in ("headers",)} \
                if isinstance(value, dict) else {}
    for name, value in providers.items():
        value["baseUrl"] = gateway.model_base(name)
        value["apiKey"] = protocol.ENV_TOKEN
        value.pop("authHeader", None)
    out = dict(original) if isinstance(original, dict) else {}
    out["providers"] = providers
    return out


def read_models(path: str | None) -> Any:
    if not path:
        return None
    try:
        with open(path, "rb") as source:
            return json.loads(source.read(1 << 20))
    except (OSError, ValueError) as error:
        raise GatewayConfigError(f"cannot read the deployment's models.json {path} ({protocol.ENV_MODELS_FILE}): "
                                 f"{error}") from None


def through_gateway(env: Mapping[str, str], private_dir: Callable[[], str]) -> dict[str, str]:
    """``env`` with every way out set to the gateway (unchanged when the Pod names none).

    Writes the CA bundle into the directory ``private_dir()`` makes (only behind a gateway: a run without one
    leaves nothing behind) and pi's routed ``models.json`` into pi's agent directory (``PI_CODING_AGENT_DIR``,
    which the Pod makes writable). Raises ``GatewayConfigError``.
    """
    gateway = gateway_of(env)
    if gateway is None:
        return dict(env)
    out = dict(env)
    bundle = ca_bundle(gateway, private_dir())
    out.update({"SSL_CERT_FILE": bundle, "GIT_SSL_CAINFO": bundle, "CURL_CA_BUNDLE": bundle,
                "REQUESTS_CA_BUNDLE": bundle, "NODE_EXTRA_CA_CERTS": gateway.ca_file})
    out.update(proxy_env(gateway, env[protocol.ENV_TOKEN]))
    agent_dir = env.get("PI_CODING_AGENT_DIR")
    if not agent_dir:
        raise GatewayConfigError("PI_CODING_AGENT_DIR is not set: with a gateway the Pod gives pi a writable agent "
                                 "directory the runner writes the routed models.json into")
    routed = routed_models(read_models(env.get(protocol.ENV_MODELS_FILE)), gateway)
    os.makedirs(agent_dir, exist_ok=True)
    target = os.path.join(agent_dir, MODELS_JSON)
    temporary = target + ".tmp"
    with open(temporary, "w", encoding="utf-8") as sink:
        json.dump(routed, sink, indent=2, sort_keys=True)
    os.replace(temporary, target)
    return out
