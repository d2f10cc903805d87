"""Review 48's leftovers (2026-12-07).

Writes to a PUBLIC collection whose input the guard cannot read (``upsert`` of ``[object()]``, a
dict where a point belongs, a column of objects) were refused with no audit entry, while the same
input on a sensitive collection, or a str given as ``points``, is audited ``UNSUPPORTED_WRITE``;
and ``set_payload``/``overwrite_payload`` on a PUBLIC collection passed a payload that is no dict
to qdrant-client unscreened, which stores a pydantic model's or a dataclass's fields as given: an
SSN in the text field reached a PUBLIC collection.

Real local Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pydantic
import pytest
from guardkit import audit_records, create, make_kit, snapshot, unit
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, QdrantClient

SSN = "123-45-6789"

_UNREADABLE = {
    "upsert_object": ("upsert", lambda n: ((n, [object()]), {})),
    "upsert_dict": ("upsert", lambda n: ((n, [{"id": 1, "vector": "x"}]), {})),
    "upload_points_object": ("upload_points", lambda n: ((n, [object()]), {})),
    "upload_points_str": ("upload_points", lambda n: ((n, "points"), {})),
    "upload_collection_vectors": ("upload_collection", lambda n: ((n,), {"vectors": [object()], "ids": [1]})),
    "upload_collection_payload": ("upload_collection", lambda n: (
        (n,), {"vectors": [[0.25] * 16], "payload": [object()], "ids": [1]})),
    "upload_collection_ids": ("upload_collection", lambda n: ((n,), {"vectors": [[0.25] * 16], "ids": [object()]})),
    "update_vectors_object": ("update_vectors", lambda n: ((n, [object()]), {})),
    "update_vectors_str": ("update_vectors", lambda n: ((n, "points"), {})),
    "set_payload_object": ("set_payload", lambda n: ((n, object()), {"points": [1]})),
    "overwrite_payload_object": ("overwrite_payload", lambda n: ((n, object()), {"points": [1]})),
}


def _kit_config(tmp_path):
    kit = make_kit(tmp_path)
    return kit, kit.config({"pii": {"class": "PII", "owner": "hr", "noise_on_write": True},
                            "pub": {"class": "PUBLIC"}}, unlisted="refuse")


def _point():
    return models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"n": 1})


def _refused_entries(kit, entries):
    return [(r["op"], r["collection"], r["verdict"], r["details"]["reason"], r["details"]["error"])
            for r in audit_records(kit)[entries:]]


# Before the fix the PUBLIC rows failed (no entry) but for set_payload/overwrite_payload, which
# failed in qdrant-client (PydanticSerializationError, no entry); the sensitive rows are controls.
@pytest.mark.parametrize("case", sorted(_UNREADABLE))
@pytest.mark.parametrize("collection", ["pub", "pii"])
def test_a_write_the_guard_cannot_read_is_refused_and_audited(tmp_path, case, collection):
    kit, cfg = _kit_config(tmp_path)
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, collection)
    client.upsert(collection, [_point()])
    before = snapshot(client, collection)
    entries = len(audit_records(kit))
    method, build = _UNREADABLE[case]
    args, kwargs = build(collection)
    with pytest.raises((TypeError, ValueError)) as err:
        getattr(client, method)(*args, **kwargs)
    assert _refused_entries(kit, entries) == [
        (method, collection, "UNSUPPORTED_WRITE", "invalid_input", type(err.value).__name__)]
    assert snapshot(client, collection) == before


@pytest.mark.parametrize("case", sorted(_UNREADABLE))
def test_the_async_client_audits_the_same_public_refusals(tmp_path, case):
    async def attempt():
        kit, cfg = _kit_config(tmp_path)
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await client.create_collection("pub", vectors_config=models.VectorParams(
            size=16, distance=models.Distance.COSINE))
        await client.upsert("pub", [_point()])
        entries = len(audit_records(kit))
        method, build = _UNREADABLE[case]
        args, kwargs = build("pub")
        with pytest.raises((TypeError, ValueError)):
            await getattr(client, method)(*args, **kwargs)
        assert [e[:4] for e in _refused_entries(kit, entries)] == [
            (method, "pub", "UNSUPPORTED_WRITE", "invalid_input")]
        await client.close()

    asyncio.run(attempt())


class _Model(pydantic.BaseModel):
    text: str


@dataclasses.dataclass
class _Record:
    text: str


@pytest.mark.parametrize("kind", [_Model, _Record])
@pytest.mark.parametrize("method", ["set_payload", "overwrite_payload"])
def test_a_payload_object_cannot_carry_text_past_the_public_screen(tmp_path, kind, method):
    kit, cfg = _kit_config(tmp_path)
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "pub")
    client.upsert("pub", [_point()])
    entries = len(audit_records(kit))
    with pytest.raises(TypeError, match=f"{method}\\(\\) argument 'payload' must be a dict of payload fields"):
        getattr(client, method)("pub", kind(text=f"SSN {SSN}"), points=[1])
    # Before the fix: stored as {"text": "SSN 123-45-6789"}, no entry.
    assert client.retrieve("pub", [1])[0].payload == {"n": 1}
    assert [e[:4] for e in _refused_entries(kit, entries)] == [(method, "pub", "UNSUPPORTED_WRITE", "invalid_input")]
    assert SSN not in str(audit_records(kit))
    # The same text as a dict is screened as before: a PUBLIC collection refuses an SSN.
    with pytest.raises(Exception, match="SSN"):
        getattr(client, method)("pub", {"text": f"SSN {SSN}"}, points=[1])
    assert client.retrieve("pub", [1])[0].payload == {"n": 1}


def test_valid_public_writes_still_pass_unaudited(tmp_path):
    kit, cfg = _kit_config(tmp_path)
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "pub")
    entries = len(audit_records(kit))
    client.upsert("pub", [_point()])
    client.upload_points("pub", [models.PointStruct(id=2, vector=[0.25] * 16, payload={"text": "hello"})])
    client.upload_collection("pub", vectors=[[0.25] * 16], payload=[{"a": 1}], ids=[3])
    client.update_vectors("pub", [models.PointVectors(id=1, vector=[0.5] * 16)])
    client.set_payload("pub", {"tag": "x"}, points=[1])
    client.overwrite_payload("pub", {"tag": "y"}, points=[2])
    assert sorted(p[0] for p in snapshot(client, "pub")) == [1, 2, 3]
    assert client.retrieve("pub", [2])[0].payload == {"tag": "y"}
    assert audit_records(kit)[entries:] == []


# -- payload fields that cannot hold what the policy says -------------------------------------

def _load(tmp_path, body):
    from qdrant_guard.policy import load_policy

    path = tmp_path / "policy.toml"
    path.write_text(f'[collections.c]\nclass = "PII"\n{body}\n')
    path.chmod(0o644)
    return load_policy(path)


@pytest.mark.parametrize(("body", "named", "fix"), [
    ('text_field = "_qdrant_guard_receipt"', "collections.c.text_field = '_qdrant_guard_receipt'",
     'text_field = "text"'),
    ('source_field = "_qdrant_guard_receipt"', "collections.c.source_field = '_qdrant_guard_receipt'",
     'source_field = "source"'),
    ('source_field = "_qdrant_guard_receipt.src"', "collections.c.source_field = '_qdrant_guard_receipt.src'",
     'source_field = "source"'),
    ('text_field = "text"\nsource_field = "text"', "source_field 'text' is the text_field 'text'",
     "under different payload keys"),
    ('text_field = "meta"\nsource_field = "meta.src"', "source_field 'meta.src' is inside the text_field 'meta'",
     "under different payload keys"),
])
def test_a_payload_field_the_guard_cannot_use_is_refused_at_load(tmp_path, body, named, fix):
    from qdrant_guard.errors import ConfigError

    # Before the fix: each loaded.
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, body)
    assert named in str(err.value) and fix in str(err.value)


def test_fields_that_only_look_alike_still_load(tmp_path):
    for body in ('text_field = "text"\nsource_field = "meta.text"', 'text_field = "text"\nsource_field = "textual"',
                 'text_field = "_qdrant_guard_receipts"', 'source_field = "meta._qdrant_guard_receipt"'):
        _load(tmp_path, body)


def test_a_source_inside_the_text_field_was_stored_redacted(tmp_path):
    """Why the roles conflict: a policy built past the load check (model_copy does not validate)
    stores the source redacted, so caps and restricted_sources would count '[EMAIL]'."""
    kit, cfg = _kit_config(tmp_path)
    pii = cfg.collections["pii"].model_copy(update={"text_field": "meta", "source_field": "meta.src"})
    client = QdrantClient(":memory:", guard=cfg.model_copy(update={"collections": {**cfg.collections, "pii": pii}}),
                          principal=kit.principal("alice", "hr"))
    create(client, "pii")
    client.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)),
                                             payload={"meta": {"src": "alice@example.com"}})])
    assert snapshot(client, "pii")[0][1]["meta"] == {"src": "[EMAIL]"}


# -- trust files in a directory anyone may write -----------------------------------------------

def _key_files(d):
    """A private key (0600) and its public key (0644) in directory ``d``."""
    from qdrant_guard import keys

    sk, pk = keys.generate_keypair()
    private, public = d / "k.key", d / "k.key.pub"
    private.write_bytes(keys.private_key_to_pem(sk))
    private.chmod(0o600)
    public.write_text(keys.public_key_to_str(pk) + "\n")
    public.chmod(0o644)
    return private, public


@pytest.mark.parametrize("which", ["public", "private"])
def test_a_key_in_a_directory_anyone_may_write_is_refused(tmp_path, which):
    from qdrant_guard import keys
    from qdrant_guard.keys import KeyStoreError

    d = tmp_path / "shared"
    d.mkdir()
    private, public = _key_files(d)
    load = {"public": lambda: keys.load_public_key(str(public)), "private": lambda: keys.load_private_key(private)}
    load[which]()
    d.chmod(0o777)  # the files keep their modes: anyone may now put another key in their place
    # Before the fix: loaded.
    with pytest.raises(KeyStoreError) as err:
        load[which]()
    assert f"is below directory {str(d)!r}, which every user may write and which has no sticky bit (mode 777)" \
        in str(err.value)
    assert f"chmod o-w {d}" in str(err.value)
    d.chmod(0o1777)  # as /tmp: only a file's owner may rename or delete it
    load[which]()


def test_a_directory_anyone_may_write_further_up_the_path_is_refused_too(tmp_path):
    from qdrant_guard import keys
    from qdrant_guard.keys import KeyStoreError

    top = tmp_path / "open"
    (top / "sub").mkdir(parents=True)
    _, public = _key_files(top / "sub")
    top.chmod(0o777)  # anyone may rename "sub" away and make a "sub" of their own
    with pytest.raises(KeyStoreError, match=f"below directory {str(top)!r}"):
        keys.load_public_key(str(public))
    # And through a symlink from a directory only its owner writes: the resolved way is checked.
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o755)
    (safe / "k.pub").symlink_to(public)
    with pytest.raises(KeyStoreError, match=f"below directory {str(top)!r}"):
        keys.load_public_key(str(safe / "k.pub"))


def test_a_policy_in_a_directory_anyone_may_write_stops_the_client(tmp_path):
    from qdrant_guard.errors import ConfigError

    kit = make_kit(tmp_path)
    d = tmp_path / "shared"
    d.mkdir()
    policy = d / "policy.toml"
    policy.write_text(f'signing_key = "{kit.guard_key_path}"\n[collections.pub]\nclass = "PUBLIC"\n')
    policy.chmod(0o644)
    QdrantClient(":memory:", guard=str(policy)).close()
    d.chmod(0o777)
    # Before the fix: the client started.
    with pytest.raises(ConfigError) as err:
        QdrantClient(":memory:", guard=str(policy))
    assert f"policy file {str(policy)!r} is below directory {str(d)!r}" in str(err.value)
    assert "(mode 777)" in str(err.value) and f"chmod o-w {d}" in str(err.value)
    d.chmod(0o1777)
    QdrantClient(":memory:", guard=str(policy)).close()


def test_an_audit_log_below_a_directory_anyone_may_write_is_refused(tmp_path):
    from qdrant_guard.audit import AuditLog
    from qdrant_guard.errors import AuditError

    top = tmp_path / "open"
    (top / "logs").mkdir(parents=True)
    top.chmod(0o777)
    # Before the fix only the log's own directory was checked.
    with pytest.raises(AuditError, match=f"below directory {str(top)!r}, which is world-writable"):
        AuditLog(top / "logs" / "audit.jsonl")
