"""The gateway capability (operator/pidispatch/gateway/capability.py): minted by the operator, checked by
the gateway."""

from __future__ import annotations

import base64
import json

import pytest

from pidispatch.gateway.capability import CapabilityError, Claims, SecretRef, load_key, mint, verify

KEY = b"k" * 32
UID = "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


def claims(**overrides: object) -> Claims:
    base: dict = dict(uid=UID, namespace="pi", job="fix-1", repository="acme/app", forge="https://github.com",
                      api="https://api.github.com", exp=2_000_000_000, subject=7, max_tokens=100_000,
                      egress=("registry.npmjs.org",), token=SecretRef("pi-job-github-x", "token"),
                      credentials={"OPENAI_API_KEY": SecretRef("model-keys", "openai")})
    base.update(overrides)
    return Claims(**base)


def test_round_trip_gives_back_every_claim() -> None:
    original = claims(fork=True)
    assert verify(KEY, mint(KEY, original), now=1_000) == original


def test_another_key_is_refused() -> None:
    with pytest.raises(CapabilityError, match="signature"):
        verify(b"o" * 32, mint(KEY, claims()), now=1_000)


def test_edited_claims_are_refused() -> None:
    prefix, body, mac = mint(KEY, claims()).split(".")
    data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    data["repository"] = "acme/other"
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    with pytest.raises(CapabilityError, match="signature"):
        verify(KEY, f"{prefix}.{forged}.{mac}", now=1_000)


def test_expired_is_refused() -> None:
    token = mint(KEY, claims(exp=1_000))
    with pytest.raises(CapabilityError, match="expired"):
        verify(KEY, token, now=1_000)
    assert verify(KEY, token, now=999).exp == 1_000


@pytest.mark.parametrize("presented", [None, "", "pdg1", "pdg2.a.b", "pdg1.a.b.c", "pdg1.é.x", "x" * 9000])
def test_malformed_is_refused_without_echoing_it(presented: str | None) -> None:
    with pytest.raises(CapabilityError) as caught:
        verify(KEY, presented, now=1_000)
    assert not presented or presented not in str(caught.value)


def test_a_signed_body_of_the_wrong_shape_is_refused() -> None:
    body = base64.urlsafe_b64encode(b'{"uid": 1}').rstrip(b"=").decode()
    from pidispatch.gateway.capability import _b64, _mac
    with pytest.raises(CapabilityError, match="lack or mistype"):
        verify(KEY, f"pdg1.{body}.{_b64(_mac(KEY, body))}", now=1_000)


def test_short_keys_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError):
        mint(b"short", claims())
    path = tmp_path / "key"
    path.write_bytes(b"s" * 31 + b"\n")
    with pytest.raises(CapabilityError, match="31 bytes") as caught:
        load_key(str(path))
    assert "sss" not in str(caught.value)
    path.write_bytes(KEY + b"\n")
    assert load_key(str(path)) == KEY
