"""``pidispatch gateway``'s own settings from the environment (the process; the operator's side is ``gateway.py``),
as strictly as the other components' (docs/cli.md).

TLS is never off: the certificate and key files are required, as is the gateway key (the Secret the
operator mints capabilities with). The replica name (the ledger's data key) is the Pod's name, which the
chart gives by the downward API.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.contract.gateway_wire import HTTPS_PORT, METRICS_PORT
from pidispatch.contract.gateway_wire import PROXY_PORT as PROXY_PORT_DEFAULT
from pidispatch.settings.errors import ConfigError
from pidispatch.settings.readers import absolute_path, integer, json_setting, refuse_empty, text

NAMESPACE = "PI_DISPATCH_NAMESPACE"
POD_NAME = "POD_NAME"
PORT = "PI_GATEWAY_PORT"
METRICS = "PI_GATEWAY_METRICS_PORT"
CERT_FILE = "PI_GATEWAY_CERT_FILE"
KEY_FILE = "PI_GATEWAY_KEY_FILE"
GATEWAY_KEY_FILE = "PI_GATEWAY_KEY"
MODELS_FILE = "PI_GATEWAY_MODELS_FILE"
MAX_CONNECTIONS = "PI_GATEWAY_MAX_CONNECTIONS"
HEAD_SECONDS = "PI_GATEWAY_HEAD_SECONDS"
IDLE_SECONDS = "PI_GATEWAY_IDLE_SECONDS"
BODY_SECONDS = "PI_GATEWAY_BODY_SECONDS"
READ_SECONDS = "PI_GATEWAY_UPSTREAM_READ_SECONDS"
MAX_BODY = "PI_GATEWAY_MAX_BODY"
FLUSH_SECONDS = "PI_GATEWAY_LEDGER_FLUSH_SECONDS"
PROXY_PORT = "PI_GATEWAY_PROXY_PORT"
EGRESS_HOSTS = "PI_GATEWAY_EGRESS_HOSTS"  # JSON list: hosts every job's proxy may reach (the chart's)
DENIED_NETWORKS = "PI_GATEWAY_DENIED_NETWORKS"  # JSON list of CIDRs the proxy never connects to (the cluster's)
FORGE_CA_FILE = "PI_GATEWAY_FORGE_CA_FILE"  # the forge's CA (GitHub Enterprise); unset: the system's roots

ENV_NAMES = (NAMESPACE, POD_NAME, PORT, METRICS, CERT_FILE, KEY_FILE, GATEWAY_KEY_FILE, MODELS_FILE,
             MAX_CONNECTIONS, HEAD_SECONDS, IDLE_SECONDS, BODY_SECONDS, READ_SECONDS, MAX_BODY, FLUSH_SECONDS,
             PROXY_PORT, EGRESS_HOSTS, DENIED_NETWORKS, FORGE_CA_FILE)

# Every job of a namespace streams through the gateway at once; an idle TLS connection costs ~300 KiB.
DEFAULT_MAX_CONNECTIONS = 1024
MAX_MAX_CONNECTIONS = 65536
DEFAULT_HEAD_SECONDS = 10
DEFAULT_IDLE_SECONDS = 75  # pi's SDKs keep connections alive between turns
DEFAULT_BODY_SECONDS = 120
DEFAULT_READ_SECONDS = 600  # a reasoning model may think minutes before its first token
DEFAULT_MAX_BODY = 64 * 2**20
MAX_SECONDS = 86400
_REPLICA = re.compile(r"[A-Za-z0-9._-]{1,253}")  # a ConfigMap data key


@dataclass(frozen=True)
class GatewaySettings:
    namespace: str
    replica: str
    cert_file: str
    key_file: str
    gateway_key_file: str
    models_file: str | None = None
    port: int = HTTPS_PORT
    metrics_port: int = METRICS_PORT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    head_seconds: int = DEFAULT_HEAD_SECONDS
    idle_seconds: int = DEFAULT_IDLE_SECONDS
    body_seconds: int = DEFAULT_BODY_SECONDS
    read_seconds: int = DEFAULT_READ_SECONDS
    max_body: int = DEFAULT_MAX_BODY
    flush_seconds: int = 1
    proxy_port: int = PROXY_PORT_DEFAULT
    egress_hosts: tuple[str, ...] = ()
    denied_networks: tuple[str, ...] = ()
    forge_ca_file: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if env is None else env
        refuse_empty(env, ENV_NAMES)
        namespace = text(env, NAMESPACE)
        if not namespace:
            raise ConfigError(NAMESPACE, "", "the namespace the gateway serves (the chart sets it)")
        replica = text(env, POD_NAME) or "gateway"
        if not _REPLICA.fullmatch(replica):
            raise ConfigError(POD_NAME, replica, "the Pod's name (letters, digits, '.', '_', '-'), the ledger's key")

        def required(name: str, what: str) -> str:
            value = absolute_path(env, name)
            if value is None:
                raise ConfigError(name, "", f"{what} (required: the gateway serves TLS only)")
            return value

        def seconds(name: str, default: int) -> int:
            return integer(env, name, f"a whole number of seconds from 1 to {MAX_SECONDS}", default=default,
                           minimum=1, maximum=MAX_SECONDS)

        port = integer(env, PORT, "a TCP port from 1 to 65535", default=HTTPS_PORT, minimum=1, maximum=65535)
        metrics = integer(env, METRICS, "a TCP port from 1 to 65535", default=METRICS_PORT, minimum=1,
                          maximum=65535)
        proxy = integer(env, PROXY_PORT, "a TCP port from 1 to 65535", default=PROXY_PORT_DEFAULT, minimum=1,
                        maximum=65535)
        hosts = _strings(env, EGRESS_HOSTS, 'a JSON list of host names, e.g. ["registry.npmjs.org", "*.pypi.org"]')
        networks = _strings(env, DENIED_NETWORKS, 'a JSON list of CIDRs, e.g. ["10.0.0.0/8"]')
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ConfigError(DENIED_NETWORKS, network, "a CIDR such as 10.96.0.0/12") from None
        if len({port, metrics, proxy}) < 3:
            raise ConfigError(PROXY_PORT, str(proxy), f"three different ports for {PORT} ({port}), {METRICS} "
                              f"({metrics}) and {PROXY_PORT}")
        if metrics == port:
            raise ConfigError(METRICS, str(metrics), f"a port other than {PORT}'s ({port}): jobs must not reach "
                              "the probes and metrics")
        return cls(
            namespace=namespace, replica=replica,
            cert_file=required(CERT_FILE, "the server certificate's PEM file"),
            key_file=required(KEY_FILE, "the server key's PEM file"),
            gateway_key_file=required(GATEWAY_KEY_FILE, "the file of the gateway key capabilities are signed with"),
            models_file=absolute_path(env, MODELS_FILE),
            port=port, metrics_port=metrics,
            max_connections=integer(env, MAX_CONNECTIONS, f"a whole number from 1 to {MAX_MAX_CONNECTIONS}",
                                    default=DEFAULT_MAX_CONNECTIONS, minimum=1, maximum=MAX_MAX_CONNECTIONS),
            head_seconds=seconds(HEAD_SECONDS, DEFAULT_HEAD_SECONDS),
            idle_seconds=seconds(IDLE_SECONDS, DEFAULT_IDLE_SECONDS),
            body_seconds=seconds(BODY_SECONDS, DEFAULT_BODY_SECONDS),
            read_seconds=seconds(READ_SECONDS, DEFAULT_READ_SECONDS),
            max_body=integer(env, MAX_BODY, "a whole number of bytes from 1 MiB to 1 GiB", default=DEFAULT_MAX_BODY,
                             minimum=2**20, maximum=2**30),
            flush_seconds=seconds(FLUSH_SECONDS, 1),
            proxy_port=proxy, egress_hosts=hosts, denied_networks=networks,
            forge_ca_file=absolute_path(env, FORGE_CA_FILE),
        )


def _strings(env: Mapping[str, str], name: str, accepted: str) -> tuple[str, ...]:
    value = json_setting(env, name, accepted)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(name, str(env.get(name)), accepted)
    return tuple(value)
