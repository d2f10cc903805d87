"""Key-loading checks that the mutation pass (scripts/mutate.py) found unpinned."""
from __future__ import annotations

import base64
import os

import pytest

from qdrant_guard.keys import (
    KeyAlgorithmError,
    KeyStoreError,
    generate_keypair,
    load_private_key,
    load_public_key,
    private_key_to_pem,
    public_key_from_str,
    public_key_to_pem,
    public_key_to_str,
)


def test_wrong_prefix_names_what_was_found():
    with pytest.raises(KeyAlgorithmError, match="found 'rsa'"):
        public_key_from_str("rsa:AAAA")
    with pytest.raises(KeyAlgorithmError, match="found 'no algorithm prefix'"):
        public_key_from_str("AAAA")


def test_64_byte_body_warns_about_a_private_key():
    body = base64.b64encode(os.urandom(64)).decode()
    with pytest.raises(KeyStoreError, match="never paste a private key") as info:
        public_key_from_str("ed25519:" + body)
    assert body not in str(info.value)
    with pytest.raises(KeyStoreError) as info:
        public_key_from_str("ed25519:" + base64.b64encode(os.urandom(48)).decode())
    assert "never paste" not in str(info.value)


@pytest.mark.parametrize("loader", [load_private_key, load_public_key])
def test_key_text_given_as_a_path_is_refused_without_echoing_it(loader):
    sk, _ = generate_keypair()
    pem = private_key_to_pem(sk).decode()
    one_line = pem.replace("\n", "")  # "-----BEGIN" alone, no newline
    body_lines = "\n".join(pem.splitlines()[1:-1]) + "\n"  # a newline alone, no "-----BEGIN"
    for text in (pem, one_line, body_lines):
        with pytest.raises(KeyStoreError, match="was given key text") as info:
            loader(text)
        secret = pem.splitlines()[1]
        assert secret not in str(info.value)


@pytest.mark.parametrize("loader", [load_private_key, load_public_key])
def test_an_unsupported_key_algorithm_is_a_key_store_error(tmp_path, loader):
    # cryptography raises UnsupportedAlgorithm (not ValueError) for an unknown algorithm OID.
    alg = bytes.fromhex("3005" "06032a0304")  # AlgorithmIdentifier {1.2.3.4}
    if loader is load_private_key:
        body = bytes.fromhex("020100") + alg + bytes.fromhex("04220420") + b"\x01" * 32
        label = b"PRIVATE KEY"
    else:
        body = alg + bytes.fromhex("032100") + b"\x01" * 32
        label = b"PUBLIC KEY"
    der = bytes([0x30, len(body)]) + body
    p = tmp_path / "odd.pem"
    p.write_bytes(b"-----BEGIN " + label + b"-----\n" + base64.encodebytes(der) + b"-----END " + label + b"-----\n")
    os.chmod(p, 0o600)
    with pytest.raises(KeyStoreError, match="cannot be loaded"):
        loader(p)


def test_a_path_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"load_private_key\(\) argument must be a path"):
        load_private_key(5)


def test_missing_key_files_say_how_to_make_them(tmp_path):
    with pytest.raises(KeyStoreError, match="create it with `qdrant-guard keys new --out"):
        load_private_key(tmp_path / "nope.pem")
    with pytest.raises(KeyStoreError, match="writes the public key beside the private one"):
        load_public_key(tmp_path / "nope.pub")
    d = tmp_path / "dir"
    d.mkdir()
    with pytest.raises(KeyStoreError) as info:
        load_private_key(d)
    assert "keys new" not in str(info.value)


@pytest.mark.parametrize("form", ["text", "pem"])
def test_a_public_key_file_where_a_private_key_belongs_says_so(tmp_path, form):
    # Before the mode check: a .pub is world-readable on purpose, "chmod 600" would not help.
    _, pk = generate_keypair()
    p = tmp_path / "guard.pub"
    p.write_bytes(public_key_to_str(pk).encode() + b"\n" if form == "text" else public_key_to_pem(pk))
    os.chmod(p, 0o644)
    with pytest.raises(KeyStoreError, match="holds a public key, but a private key is needed") as info:
        load_private_key(p)
    assert f"give the private key file ({str(tmp_path / 'guard')!r})" in str(info.value)


def test_a_private_key_file_where_a_public_key_belongs_says_so(tmp_path):
    sk, _ = generate_keypair()
    p = tmp_path / "guard.key"
    p.write_bytes(private_key_to_pem(sk))
    os.chmod(p, 0o600)
    with pytest.raises(KeyStoreError, match="holds a private key, but a public key is needed"):
        load_public_key(p)


@pytest.mark.parametrize("loader", [load_private_key, load_public_key])
def test_a_one_line_key_body_given_as_a_path_is_not_echoed(loader, tmp_path):
    # Found by the mutation pass, fixed by the lead: the PEM body alone (no -----BEGIN, no newline),
    # pasted where the path belongs, was echoed whole in "cannot read key file '...'".
    for _ in range(20):
        sk, _ = generate_keypair()
        body = "".join(private_key_to_pem(sk).decode().splitlines()[1:-1])
        with pytest.raises(KeyStoreError, match="look like base64 key material") as info:
            loader(body)
        assert body not in str(info.value) and body[:16] not in str(info.value)
    # A missing path is still named, with the command that creates it.
    missing = tmp_path / "keys" / "guard.key"
    with pytest.raises(KeyStoreError, match="cannot read key file") as info:
        loader(missing)
    assert str(missing) in str(info.value)
    # The price of the heuristic: a missing path of 40+ characters with no dot and mixed case and
    # digits is taken for key material too, and is not echoed; the error still says to give a path.
    with pytest.raises(KeyStoreError, match="give its path"):
        loader("/srv/app/config/keys/GuardSigningKey2026")
