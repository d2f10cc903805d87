"""Key handling and the canonical encoding."""
from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from qdrant_guard.canonical import canonical_json, decode_canonical, is_canonical
from qdrant_guard.errors import CredentialError, QdrantGuardError
from qdrant_guard.keys import (
    KeyAlgorithmError,
    KeyStoreError,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    private_key_to_pem,
    public_key_bytes,
    public_key_from_str,
    public_key_to_pem,
    public_key_to_str,
)


# ----------------------------------------------------------------------------- canonical JSON

def test_canonical_encoding_rules():
    assert canonical_json({"b": 1, "a": [True, None, 1.0, "é"]}) == '{"a":[true,null,1.0,"é"],"b":1}'.encode()
    assert canonical_json(0.1) == b"0.1"
    assert canonical_json(1e300) == b"1e+300"
    assert canonical_json((1, 2)) == b"[1,2]"
    assert canonical_json({"\u00e9": "\n"}) == '{"é":"\\n"}'.encode()
    # Keys sort by code point, not locale.
    assert canonical_json({"a": 1, "B": 2, "é": 3}) == '{"B":2,"a":1,"é":3}'.encode()


def test_canonical_round_trips_floats_exactly():
    for x in (0.1, 1 / 3, 2.0 ** -1074, 1.7976931348623157e308, -0.0, 123456789.0):
        assert json.loads(canonical_json(x)) == x
        assert is_canonical(canonical_json({"x": x}))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_canonical_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="NaN and Infinity"):
        canonical_json({"x": [bad]})


@pytest.mark.parametrize("bad", [b"x", {1: 2}, {1.5}, object(), bytearray(b"x")])
def test_canonical_rejects_other_types(bad):
    with pytest.raises(TypeError):
        canonical_json({"x": bad} if not isinstance(bad, dict) else bad)


def test_non_canonical_encodings_are_detected():
    canon = canonical_json({"a": 1.0, "b": "é"})
    assert decode_canonical(canon) == {"a": 1.0, "b": "é"}
    for text in ('{"b":"é","a":1.0}', '{"a": 1.0,"b":"é"}', '{"a":1.0,"b":"\\u00e9"}',
                 '{"a":1e0,"b":"é"}', '{"a":1.00,"b":"é"}', '{"a":1.0,"a":1.0,"b":"é"}', '{"a":1.0,"b":"é"}\n'):
        assert not is_canonical(text.encode()), text
        with pytest.raises(ValueError):
            decode_canonical(text.encode())
    # 1 and 1.0 are different values with different canonical bytes; the schema decides which one
    # a field must hold (see test_receipts: an int where a float was signed is non_canonical).
    assert canonical_json({"a": 1}) == b'{"a":1}' != canonical_json({"a": 1.0})
    assert type(decode_canonical(b'{"a":1}')["a"]) is int
    assert type(decode_canonical(b'{"a":1.0}')["a"]) is float
    assert not is_canonical(b"\xff")
    assert not is_canonical(b'{"a":NaN}')
    with pytest.raises(TypeError):
        decode_canonical("text")


# ----------------------------------------------------------------------------- keys

def test_key_id_and_string_forms():
    sk, pk = generate_keypair()
    raw = public_key_bytes(pk)
    assert len(raw) == 32
    assert key_id(pk) == "ed25519:" + hashlib.sha256(raw).digest()[:16].hex()
    assert key_id(sk) == key_id(pk)
    s = public_key_to_str(pk)
    assert s == "ed25519:" + base64.b64encode(raw).decode()
    assert public_key_bytes(public_key_from_str(s)) == raw
    assert public_key_bytes(load_public_key(s)) == raw
    assert key_id(generate_keypair()[1]) != key_id(pk)
    with pytest.raises(TypeError):
        key_id(None)
    with pytest.raises(TypeError):
        key_id(ec.generate_private_key(ec.SECP256R1()).public_key())


def test_public_key_from_str_errors():
    with pytest.raises(KeyAlgorithmError, match="ed25519:"):
        public_key_from_str("rsa:AAAA")
    with pytest.raises(KeyStoreError, match="32 bytes"):
        public_key_from_str("ed25519:" + base64.b64encode(b"x" * 31).decode())
    with pytest.raises(KeyStoreError, match="base64"):
        public_key_from_str("ed25519:!!!")
    with pytest.raises(TypeError):
        public_key_from_str(None)


def _write(path, data, mode=0o600):
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_private_key_pem_round_trip(tmp_path):
    sk, pk = generate_keypair()
    p = _write(tmp_path / "k.pem", private_key_to_pem(sk))
    loaded = load_private_key(p)
    assert key_id(loaded) == key_id(pk)
    assert load_private_key(str(p)).sign(b"m") == sk.sign(b"m")  # Ed25519 is deterministic


@pytest.mark.skipif(os.name != "posix", reason="permission bits")
def test_private_key_refuses_loose_permissions(tmp_path):
    sk, _ = generate_keypair()
    p = _write(tmp_path / "k.pem", private_key_to_pem(sk), 0o644)
    with pytest.raises(KeyStoreError, match="chmod 600"):
        load_private_key(p)
    os.chmod(p, 0o640)
    with pytest.raises(KeyStoreError):
        load_private_key(p)
    assert load_private_key(p, allow_group_readable=True)


def test_private_key_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope.pem"
    with pytest.raises(KeyStoreError, match="nope.pem"):
        load_private_key(missing)
    garbage = _write(tmp_path / "garbage.pem", b"not a key")
    with pytest.raises(KeyStoreError, match="garbage.pem"):
        load_private_key(garbage)
    with pytest.raises(TypeError):
        load_private_key(None)


@pytest.mark.parametrize("make,name", [
    (lambda: rsa.generate_private_key(65537, 2048), "RSA"),
    (lambda: ec.generate_private_key(ec.SECP256R1()), "EC"),
])
def test_algorithm_confusion_in_key_files(tmp_path, make, name):
    key = make()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    p = _write(tmp_path / "other.pem", pem)
    with pytest.raises(KeyAlgorithmError, match=name) as info:
        load_private_key(p)
    # Refusal is both a key-store and a credential error, and a QdrantGuardError.
    assert isinstance(info.value, CredentialError) and isinstance(info.value, QdrantGuardError)
    pub = _write(tmp_path / "other.pub", key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(KeyAlgorithmError, match=name):
        load_public_key(pub)


def test_load_public_key_files(tmp_path):
    sk, pk = generate_keypair()
    pem = _write(tmp_path / "k.pub", public_key_to_pem(pk), 0o644)
    assert key_id(load_public_key(pem)) == key_id(pk)
    txt = _write(tmp_path / "k.txt", (public_key_to_str(pk) + "\n").encode(), 0o644)
    assert key_id(load_public_key(str(txt))) == key_id(pk)
    assert load_public_key(pk) is pk
    assert isinstance(load_public_key(pk), Ed25519PublicKey)
    with pytest.raises(KeyStoreError, match="missing.pub"):
        load_public_key(tmp_path / "missing.pub")
    with pytest.raises(KeyStoreError):
        load_public_key(_write(tmp_path / "bad.pub", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
    with pytest.raises(TypeError):
        load_public_key(None)
