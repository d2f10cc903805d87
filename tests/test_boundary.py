"""Boundary credentials: a valid token verifies; every forgery is refused with its reason."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from qdrant_guard.boundary import (
    CREDENTIAL_SIGNATURE_PREFIX,
    CredentialRejected,
    Principal,
    VerifiedPrincipal,
    issue_credential,
    verify_credential,
)
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import CredentialError
from qdrant_guard.keys import generate_keypair, key_id, public_key_bytes

NOW = 1_700_000_000


@pytest.fixture(scope="module")
def auth():
    a_sk, a_pk = generate_keypair()
    b_sk, b_pk = generate_keypair()
    x_sk, _ = generate_keypair()
    return {"a_sk": a_sk, "a_pk": a_pk, "b_sk": b_sk, "b_pk": b_pk, "x_sk": x_sk,
            "authorities": {"A": [a_pk], "B": [b_pk]}}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def token_for(auth, **kw):
    args = dict(agent_id="agent-1", boundary="A", ttl_s=600, now=NOW)
    args.update(kw)
    return issue_credential(auth["a_sk"], **args)


def verify(token, auth, **kw):
    args = dict(authorities=auth["authorities"], now=NOW + 1)
    args.update(kw)
    return verify_credential(token, **args)


def reason_of(token, auth, **kw):
    with pytest.raises(CredentialRejected) as info:
        verify(token, auth, **kw)
    assert isinstance(info.value, CredentialError)
    return info.value.reason


def split(token):
    _, claims, sig = token.split(".")
    return json.loads(unb64url(claims)), unb64url(sig)


def assemble(claims_bytes: bytes, sig: bytes) -> str:
    return f"qgc1.{b64url(claims_bytes)}.{b64url(sig)}"


def resigned(claims: dict, sk) -> str:
    body = canonical_json(claims)
    return assemble(body, sk.sign(CREDENTIAL_SIGNATURE_PREFIX + body))


def test_valid_credential(auth):
    tok = token_for(auth)
    vp = verify(tok, auth)
    assert vp == VerifiedPrincipal("agent-1", "A", NOW + 600, key_id(auth["a_pk"]), vp.jti)
    claims, sig = split(tok)
    assert claims["alg"] == "Ed25519" and claims["v"] == 1 and claims["iat"] == NOW
    assert len(sig) == 64
    # jti is random per token.
    assert split(token_for(auth))[0]["jti"] != claims["jti"]
    # A single key instead of a list is accepted, and extra authority keys do no harm.
    assert verify(tok, auth, authorities={"A": auth["a_pk"]}).agent_id == "agent-1"
    assert verify(tok, auth, authorities={"A": [auth["b_pk"], auth["a_pk"]]}).boundary == "A"


def test_cross_boundary_is_rejected(auth):
    # Signed by A's authority but claiming boundary B.
    claims, _ = split(token_for(auth))
    claims["boundary"] = "B"
    assert reason_of(resigned(claims, auth["a_sk"]), auth) == "unknown_key"
    # ... and claiming B's key id does not help: the signature is A's.
    claims["kid"] = key_id(auth["b_pk"])
    assert reason_of(resigned(claims, auth["a_sk"]), auth) == "bad_signature"
    # Editing the boundary of a genuine A token breaks the signature (or the key lookup).
    assert reason_of(resigned(claims, auth["x_sk"]), auth) == "bad_signature"
    assert reason_of(token_for(auth, boundary="C"), auth) == "unknown_boundary"


def _edit(tok, **changes):
    claims, sig = split(tok)
    claims.update(changes)
    return assemble(canonical_json(claims), sig)


def _sig_edit(tok, new_sig: bytes):
    prefix, claims, _ = tok.split(".")
    return f"{prefix}.{claims}.{b64url(new_sig)}"


@pytest.mark.parametrize("name,forge,reason", [
    ("agent_id", lambda t, a: _edit(t, agent_id="agent-2"), "bad_signature"),
    ("exp", lambda t, a: _edit(t, exp=NOW + 10 ** 6), "bad_signature"),
    ("jti", lambda t, a: _edit(t, jti="other"), "bad_signature"),
    ("kid_unknown", lambda t, a: _edit(t, kid="ed25519:" + "0" * 32), "unknown_key"),
    ("alg", lambda t, a: _edit(t, alg="HS256"), "algorithm"),
    ("alg_none", lambda t, a: _edit(t, alg="none"), "algorithm"),
    ("version", lambda t, a: _edit(t, v=2), "malformed"),
    ("extra_claim", lambda t, a: _edit(t, admin=True), "malformed"),
    ("float_iat", lambda t, a: _edit(t, iat=float(NOW)), "malformed"),
    ("exp_before_iat", lambda t, a: _edit(t, exp=NOW - 1), "malformed"),
    ("truncated_sig", lambda t, a: _sig_edit(t, split(t)[1][:63]), "bad_signature"),
    ("extended_sig", lambda t, a: _sig_edit(t, split(t)[1] + b"\0"), "bad_signature"),
    ("flipped_sig", lambda t, a: _sig_edit(t, bytes([split(t)[1][0] ^ 1]) + split(t)[1][1:]), "bad_signature"),
    ("empty_sig", lambda t, a: t.rsplit(".", 1)[0] + ".", "bad_signature"),
    ("other_signer", lambda t, a: resigned(split(t)[0], a["x_sk"]), "bad_signature"),
    ("prefix", lambda t, a: "qgc2" + t[4:], "malformed"),
    ("parts", lambda t, a: t + ".x", "malformed"),
    ("garbage", lambda t, a: "qgc1.!!.!!", "malformed"),
    ("not_json", lambda t, a: assemble(b"not json", b"\0" * 64), "malformed"),
    ("json_list", lambda t, a: assemble(b"[1]", b"\0" * 64), "malformed"),
])
def test_forgery_matrix(auth, name, forge, reason):
    assert reason_of(forge(token_for(auth), auth), auth) == reason


def test_non_canonical_claims(auth):
    tok = token_for(auth)
    claims, sig = split(tok)
    canon = canonical_json(claims)
    variants = [
        json.dumps(dict(reversed(list(claims.items()))), separators=(",", ":")).encode(),  # key order
        json.dumps(claims, sort_keys=True).encode(),  # whitespace
        canon.replace(b'"agent-1"', b'"\\u0061gent-1"'),  # unicode escape
        canon.replace(b'"v":1', b'"v":1.0e0'),  # exponent form of a number
        canon + b" ",
    ]
    for body in variants:
        assert body != canon
        assert reason_of(assemble(body, sig), auth) == "non_canonical", body
    # Padding or non-url base64 in either part is a different encoding of the same bytes.
    prefix, c, s = tok.split(".")
    assert reason_of(f"{prefix}.{c}==.{s}" if len(c) % 4 else f"{prefix}.{c}=.{s}", auth) == "malformed"
    std = base64.b64encode(unb64url(s)).rstrip(b"=").decode()
    if std != s:
        assert reason_of(f"{prefix}.{c}.{std}", auth) == "bad_signature"


def test_deeply_nested_claims_are_rejected_not_raised(auth):
    # json raises RecursionError on deep nesting; it must still be a CredentialRejected.
    _, sig = split(token_for(auth))
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        assert reason_of(assemble(body, sig), auth) == "malformed"


def test_algorithm_confusion_other_schemes(auth):
    claims, _ = split(token_for(auth))
    body = canonical_json(claims)
    msg = CREDENTIAL_SIGNATURE_PREFIX + body
    ecdsa = ec.generate_private_key(ec.SECP256R1()).sign(msg, ec.ECDSA(hashes.SHA256()))
    rsa_sig = rsa.generate_private_key(65537, 2048).sign(msg, padding.PKCS1v15(), hashes.SHA256())
    mac = hmac.new(public_key_bytes(auth["a_pk"]), msg, hashlib.sha512).digest()  # 64 bytes
    for sig, alg in ((ecdsa, "ES256"), (rsa_sig, "RS256"), (mac, "HS512")):
        assert reason_of(assemble(body, sig), auth) == "bad_signature"
        relabelled = dict(claims, alg=alg)
        rb = canonical_json(relabelled)
        assert reason_of(assemble(rb, sig), auth) == "algorithm"
    with pytest.raises(TypeError, match="Ed25519PublicKey"):
        verify(token_for(auth), auth,
               authorities={"A": [ec.generate_private_key(ec.SECP256R1()).public_key()]})


def test_revocation(auth):
    tok = token_for(auth)
    vp = verify(tok, auth)
    assert reason_of(tok, auth, revoked_keys={key_id(auth["a_pk"])}) == "revoked"
    assert reason_of(tok, auth, revoked_credentials={vp.jti}) == "revoked"
    assert verify(tok, auth, revoked_credentials={"other"}).jti == vp.jti


def test_time_window(auth):
    tok = token_for(auth)
    assert verify(tok, auth, now=NOW + 600 + 30).agent_id == "agent-1"
    assert reason_of(tok, auth, now=NOW + 600 + 31) == "expired"
    assert reason_of(tok, auth, now=NOW + 631, leeway_s=0) == "expired"
    assert verify(tok, auth, now=NOW - 30).agent_id == "agent-1"
    assert reason_of(tok, auth, now=NOW - 31) == "not_yet_valid"
    assert reason_of(tok, auth, now=NOW - 1, leeway_s=0) == "not_yet_valid"


def test_argument_errors(auth):
    with pytest.raises(TypeError):
        verify(None, auth)
    with pytest.raises(TypeError):
        verify(token_for(auth), auth, authorities=[auth["a_pk"]])
    with pytest.raises(TypeError):
        verify(token_for(auth), auth, revoked_keys="abc")
    with pytest.raises(TypeError):
        issue_credential(None, agent_id="a", boundary="A")
    with pytest.raises(ValueError):
        issue_credential(auth["a_sk"], agent_id="a", boundary="A", ttl_s=0)
    with pytest.raises(ValueError):
        issue_credential(auth["a_sk"], agent_id="", boundary="A")
    with pytest.raises(TypeError):
        issue_credential(auth["a_sk"], agent_id="a", boundary="A", ttl_s=float("nan"))


def test_principal():
    p = Principal("agent", "A", "qgc1.secret.token")
    assert "secret" not in repr(p)
    with pytest.raises(TypeError):
        Principal(None, "A")
    with pytest.raises(ValueError):
        Principal("a", "")
    with pytest.raises(TypeError):
        Principal("a", "A", 5)
    with pytest.raises(AttributeError):
        p.agent_id = "x"  # frozen
