"""A job's gateway capability: the operator's signed statement of what one Job may reach.

``pdg1.<claims>.<mac>`` where ``claims`` is the base64url (unpadded) of compact, key-sorted JSON and
``mac = base64url(HMAC-SHA256(key, "pi-dispatch gateway v1\\0" + claims))``. The operator mints it when
it builds the Job's Pod and keeps it in the Job's own Secret; the gateway verifies it with the same key
and needs no per-job lookup to know the Job's repository, whether it is a fork's job, its token budget,
its egress hosts and where its credentials are. Nothing in the claims is secret (the agent may read
them); the Secrets they name are read by the gateway alone.

The capability is what the agent holds instead of the keys: anyone who has it can do, through the
gateway, exactly what the Job could, until ``exp`` (the Job's run timeout and a margin). The domain
string keeps the key from ever producing a MAC that another purpose would accept (the transfer token's
domain is different, and the key is another Secret's besides).

Standard library only: the runner imports the format (to read its own claims), the operator mints,
the gateway verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

PREFIX = "pdg1"
DOMAIN = b"pi-dispatch gateway v1\0"
MIN_KEY_BYTES = 32
MAX_CAPABILITY_BYTES = 8192  # a header's worth; a longer presented value is refused before any decoding


class CapabilityError(ValueError):
    """A presented capability is malformed, forged or expired (the message never repeats the value)."""


@dataclass(frozen=True)
class SecretRef:
    """A key of a Secret in the Job's namespace (read by the gateway, never mounted in the job)."""

    secret: str
    key: str


@dataclass(frozen=True)
class Claims:
    """What one Job may reach through the gateway. Every field is decided by the operator.

    ``repository`` is ``owner/name`` on ``forge`` (the web URL, e.g. ``https://github.com``) whose REST
    API is ``api`` (``https://api.github.com``, or ``https://HOST/api/v3`` on GitHub Enterprise).
    ``fork``: the job serves a fork's pull request, so the forge is read-only to it except the one
    comment on ``subject`` (the issue's or pull request's number) that it posts. ``max_tokens``: the
    job's budget over every model reply's input, output and cache figures (``None``: no budget).
    ``egress``: host names (``*.example.org`` for subdomains) the HTTPS proxy may CONNECT to.
    ``token``: where the job's forge token is; ``credentials``: the model keys by the environment
    variable name pi would read them from (``OPENAI_API_KEY`` ...).
    """

    uid: str
    namespace: str
    job: str
    repository: str
    forge: str
    api: str
    exp: int
    fork: bool = False
    subject: int | None = None
    max_tokens: int | None = None
    egress: tuple[str, ...] = ()
    token: SecretRef | None = None
    credentials: dict[str, SecretRef] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["egress"] = list(self.egress)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Claims:
        """The claims of a verified capability; a shape the operator never writes is refused."""
        if not isinstance(data, dict):
            raise CapabilityError("the capability's claims are not an object")
        try:
            token = data.get("token")
            credentials = data.get("credentials") or {}
            return cls(
                uid=_text(data["uid"]), namespace=_text(data["namespace"]), job=_text(data["job"]),
                repository=_text(data["repository"]), forge=_text(data["forge"]), api=_text(data["api"]),
                exp=_integer(data["exp"]), fork=bool(data.get("fork", False)),
                subject=None if data.get("subject") is None else _integer(data["subject"]),
                max_tokens=None if data.get("max_tokens") is None else _integer(data["max_tokens"]),
                egress=tuple(_text(host) for host in data.get("egress") or ()),
                token=None if token is None else SecretRef(_text(token["secret"]), _text(token["key"])),
                credentials={_text(name): SecretRef(_text(ref["secret"]), _text(ref["key"]))
                             for name, ref in credentials.items()},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise CapabilityError(f"the capability's claims lack or mistype a field ({exc})") from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise CapabilityError("the capability is not base64url") from None


def _mac(key: bytes, body: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the gateway key needs at least {MIN_KEY_BYTES} bytes")
    return hmac.new(key, DOMAIN + body.encode("ascii"), hashlib.sha256).digest()


def mint(key: bytes, claims: Claims) -> str:
    """The capability the operator puts in the Job's Secret."""
    body = _b64(json.dumps(claims.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8"))
    return f"{PREFIX}.{body}.{_b64(_mac(key, body))}"


def verify(key: bytes, presented: str | None, *, now: float | None = None) -> Claims:
    """The claims of ``presented`` when the operator's key signed it and it has not expired.

    The MAC is compared in constant time before anything in the claims is parsed, so a forged value
    never reaches the JSON decoder.
    """
    if not presented:
        raise CapabilityError("no capability presented")
    if len(presented) > MAX_CAPABILITY_BYTES:
        raise CapabilityError("the capability is too long")
    parts = presented.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise CapabilityError("not a gateway capability")
    body, mac = parts[1], parts[2]
    try:
        body.encode("ascii")
    except UnicodeEncodeError:
        raise CapabilityError("the capability is not base64url") from None
    if not hmac.compare_digest(_mac(key, body), _unb64(mac)):
        raise CapabilityError("the capability's signature does not match")
    try:
        claims = Claims.from_json(json.loads(_unb64(body)))
    except ValueError as exc:
        if isinstance(exc, CapabilityError):
            raise
        raise CapabilityError("the capability's claims are not JSON") from None
    if (time.time() if now is None else now) >= claims.exp:
        raise CapabilityError("the capability has expired")
    return claims


def load_key(path: str) -> bytes:
    """The gateway key from ``path`` (the chart's gateway Secret, mounted in the operator and the gateway).

    A trailing newline is dropped; fewer than 32 bytes is refused (the message names the file, never the key).
    """
    try:
        with open(path, "rb") as handle:
            key = handle.read(4096).rstrip(b"\r\n")
    except OSError as exc:
        raise CapabilityError(f"cannot read the gateway key file {path}: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise CapabilityError(f"the gateway key in {path} has {len(key)} bytes; it needs at least {MIN_KEY_BYTES} "
                              "random bytes (the chart makes one in its gateway Secret)")
    return key
