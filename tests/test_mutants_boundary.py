"""Credential checks that the boundary mutation pass (scripts/mutate.py) found unpinned."""
from __future__ import annotations

import base64

import pytest

from qdrant_guard.boundary import (
    CREDENTIAL_SIGNATURE_PREFIX,
    CredentialRejected,
    issue_credential,
    verify_credential,
)
from qdrant_guard.canonical import canonical_json, decode_canonical
from qdrant_guard.keys import generate_keypair

NOW = 1_700_000_000


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(token: str) -> dict:
    body = token.split(".")[1]
    return decode_canonical(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def _signed(claims: dict, sk) -> str:
    body = canonical_json(claims)
    return f"qgc1.{_b64url(body)}.{_b64url(sk.sign(CREDENTIAL_SIGNATURE_PREFIX + body))}"


def test_credential_with_exp_equal_to_iat_is_malformed():
    # A zero-lifetime credential is refused even inside the clock leeway, not accepted.
    sk, pk = generate_keypair()
    claims = _claims(issue_credential(sk, agent_id="a", boundary="A", ttl_s=60, now=NOW))
    claims["exp"] = claims["iat"]
    with pytest.raises(CredentialRejected) as info:
        verify_credential(_signed(claims, sk), authorities={"A": [pk]}, now=NOW)
    assert info.value.reason == "malformed"
    claims["exp"] = claims["iat"] + 1
    assert verify_credential(_signed(claims, sk), authorities={"A": [pk]}, now=NOW).agent_id == "a"


@pytest.mark.parametrize("keys", ["", b"", "ed25519:abc"])
def test_string_authority_keys_are_a_type_error(keys):
    # A key id or PEM text where key objects belong is a configuration error, never "unknown_key".
    sk, _ = generate_keypair()
    token = issue_credential(sk, agent_id="a", boundary="A", now=NOW)
    with pytest.raises(TypeError, match="must be a sequence of Ed25519PublicKey"):
        verify_credential(token, authorities={"A": keys}, now=NOW)


def test_private_key_as_authority_is_a_type_error():
    # An authority list holding the private key is refused by type, not half-used.
    sk, _ = generate_keypair()
    token = issue_credential(sk, agent_id="a", boundary="A", now=NOW)
    with pytest.raises(TypeError, match="holds a Ed25519PrivateKey; only Ed25519PublicKey"):
        verify_credential(token, authorities={"A": [sk]}, now=NOW)
