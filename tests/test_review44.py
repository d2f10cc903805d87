"""Review 44: the write path (receipts on write, vector containers, ids, batches, Documents).

(a) A writer's receipt given as Python objects was verified with the caller's own comparisons: a
    str subclass whose ``__ne__`` said False made a receipt signed for another point (or
    collection, or vector name, or commitment) verify, so a writer replaying any trusted receipt
    stored a raw vector under it; a float subclass hid an epsilon above the ceiling. Receipts are
    now read as exact JSON values before they are checked, and that copy is what is stored.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from guardkit import DIM, audit_records, create, make_kit, models as M, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient, keys, noise
from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptSigner, issue_receipt, stored_form, verify,
                                   verify_receipt)

POLICY = {"class": "PII", "owner": "hr", "writers": ["support"],
          "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}


class Liar(str):
    """Characters of one value, comparing equal to anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


class Small(float):
    """A float that says it is no larger than anything."""

    def __gt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return True


@pytest.fixture()
def signed_writer(tmp_path):
    """bob@support writing collection ``pii`` with receipts of his own key (no noise_on_write)."""
    kit = make_kit(tmp_path)
    sk, pk = keys.generate_keypair()
    cfg = kit.config({"pii": {**POLICY, "noise_on_write": False}},
                     receipts={"trusted_keys": [keys.public_key_to_str(pk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    return kit, owner, owner.with_principal(kit.principal("bob", "support")), ReceiptSigner(sk)


def _release(seed: int, epsilon: float = 1.0) -> tuple[np.ndarray, noise.NoiseParams]:
    x = np.asarray(unit(np.random.default_rng(seed)), np.float32)
    out, params = noise.privatize(x, mechanism="gaussian", epsilon=epsilon, radius=0.01, delta=1e-6, clip_norm=1.0)
    return stored_form(out, distance="Cosine"), params


def _with(rec: dict, **changed) -> dict:
    return {**rec, **changed}


@pytest.mark.parametrize("lie", ["point", "collection", "vector_name", "commitment"])
def test_a_receipt_whose_strings_compare_equal_to_anything_is_refused(signed_writer, lie):
    kit, owner, bob, agent = signed_writer
    signed, params = _release(3)
    rec = issue_receipt(agent, params=params, vector=signed, collection="other" if lie == "collection" else "pii",
                        point_id=7 if lie == "point" else 1, vector_name="x" if lie == "vector_name" else "")
    field = {"point": "point_id"}.get(lie, lie)
    forged = _with(rec, **{field: Liar(rec[field])})
    # The raw vector of another text, not the signed one, when the commitment lies.
    vector = stored_form(np.asarray(unit(np.random.default_rng(99))), distance="Cosine") if lie == "commitment" else signed
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [M.PointStruct(id=1, vector=vector.tolist(),
                                         payload={RECEIPT_KEY: {"v": 1, "vectors": {"": forged}}})])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert snapshot(owner, "pii") == []
    assert audit_records(kit)[-1]["verdict"] == "INVALID_RECEIPT"
    # verify_receipt given the dict reads its values too.
    check = verify_receipt(forged, vector=vector, collection="pii", point_id=1, vector_name="",
                           trusted_keys={agent.key_id: agent.public_key})
    assert not check.ok


def test_a_receipt_whose_epsilon_says_it_is_small_is_refused_above_the_ceiling(signed_writer):
    _, owner, bob, agent = signed_writer
    signed, params = _release(4, epsilon=50.0)  # PII's ceiling is 2.0
    rec = issue_receipt(agent, params=params, vector=signed, collection="pii", point_id=1)
    forged = _with(rec, params={**rec["params"], "epsilon": Small(rec["params"]["epsilon"])})
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [M.PointStruct(id=1, vector=signed.tolist(),
                                         payload={RECEIPT_KEY: {"v": 1, "vectors": {"": forged}}})])
    assert ei.value.verdict == "EPSILON_ABOVE_CEILING"
    assert snapshot(owner, "pii") == []


class Shown(dict):
    """A dict whose items() shows other entries than it holds (pydantic stores what it holds)."""

    def __init__(self, held: dict, shown: dict) -> None:
        super().__init__(held)
        self._shown = shown

    def items(self):  # type: ignore[override]
        return self._shown.items()

    def keys(self):  # type: ignore[override]
        return self._shown.keys()

    def __iter__(self):
        return iter(self._shown)

    def __getitem__(self, k):
        return self._shown[k]

    def get(self, k, default=None):
        return self._shown.get(k, default)


def test_the_stored_receipt_is_the_one_verified(signed_writer):
    # A receipt given as a dict subclass is read as the entries it holds (what pydantic sends of a
    # dict), and that plain copy is verified and stored. Before, its items()/get() were verified
    # (and dict() of it stored): consistent, but not what qdrant-client would send of it.
    _, owner, bob, agent = signed_writer
    signed, params = _release(5)
    good = issue_receipt(agent, params=params, vector=signed, collection="pii", point_id=1)
    other = issue_receipt(agent, params=params, vector=signed, collection="pii", point_id=2)
    bob.upsert("pii", [M.PointStruct(id=1, vector=signed.tolist(),
                                     payload={RECEIPT_KEY: {"v": 1, "vectors": {"": Shown(good, other)}}})])
    reports = verify(owner, "pii", trusted_keys={agent.key_id: agent.public_key})
    assert [(r.point_id, r.vector_name, r.ok) for r in reports] == [(1, "", True)], [r.reason for r in reports]
    stored = snapshot(owner, "pii")[0][1][RECEIPT_KEY]["vectors"][""]
    assert stored == good and json.dumps(stored) == json.dumps(good)


def test_a_plain_receipt_still_verifies_and_is_stored_as_given(signed_writer):
    _, owner, bob, agent = signed_writer
    signed, params = _release(6)
    rec = issue_receipt(agent, params=params, vector=signed, collection="pii", point_id=1)
    bob.upsert("pii", [M.PointStruct(id=1, vector=signed.tolist(),
                                     payload={RECEIPT_KEY: {"v": 1, "vectors": {"": rec}}})])
    assert snapshot(owner, "pii")[0][1][RECEIPT_KEY]["vectors"][""] == rec


# -- (b) vector names a model_construct'ed point does not validate -------------------------------
# points_from_any keeps a models.PointStruct as given: one built with model_construct keeps a
# str subclass as a vector name. Its reflected __ne__ answered verify_receipt's name check (a
# receipt for vector "a" stored for "b"), and a name hashing as another vector's was checked and
# noised with that vector's spec (distance), then stored under its own characters.

class Aliased(str):
    """A name whose characters are one vector's, hashing and comparing as vector "a"."""

    def __hash__(self) -> int:
        return hash("a")

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


def test_a_receipt_for_another_vector_name_is_refused_under_a_lying_name(tmp_path):
    kit = make_kit(tmp_path)
    sk, pk = keys.generate_keypair()
    cfg = kit.config({"pii": {**POLICY, "noise_on_write": False}},
                     receipts={"trusted_keys": [keys.public_key_to_str(pk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", named=("a", "b"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    agent = ReceiptSigner(sk)
    signed, params = _release(7)
    rec = issue_receipt(agent, params=params, vector=signed, collection="pii", point_id=1, vector_name="a")
    point = M.PointStruct.model_construct(id=1, vector={Liar("b"): signed.tolist()},
                                          payload={RECEIPT_KEY: {"v": 1, "vectors": {"b": rec}}})
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [point])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert snapshot(owner, "pii") == []
    assert not verify_receipt(rec, vector=signed, collection="pii", point_id=1, vector_name=Liar("b"),
                              trusted_keys={agent.key_id: agent.public_key}).ok
    assert not verify_receipt(rec, vector=signed, collection=Liar("other"), point_id=1, vector_name="a",
                              trusted_keys={agent.key_id: agent.public_key}).ok


def test_a_vector_name_hashing_as_another_is_noised_for_its_own_vector(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {**POLICY, "noise_on_write": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config={"a": M.VectorParams(size=DIM, distance=M.Distance.DOT),
                                                   "b": M.VectorParams(size=DIM, distance=M.Distance.COSINE)})
    bob = owner.with_principal(kit.principal("bob", "support"))
    v = (np.random.default_rng(2).normal(size=DIM) * 3).tolist()
    bob.upsert("pii", [M.PointStruct.model_construct(id=1, vector={Aliased("b"): v}, payload=None)])
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_NOISED"
    reports = verify(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)
    assert [(r.point_id, r.vector_name, r.ok) for r in reports] == [(1, "b", True)], [r.reason for r in reports]


# -- (c) a Document's text reaches the embedder as the characters screened ------------------------
# A model_construct'ed models.Document keeps a str subclass as its text. The screen read its
# characters (nothing found, so it returned the object itself) and the embedder got the object:
# an embedder formatting a prompt (f"passage: {text}") called its __format__, which showed an SSN.

class Masked(str):
    def __format__(self, spec: str) -> str:
        return "SSN 123-45-6789"

    def __add__(self, other: object) -> str:
        return "SSN 123-45-6789"

    def lower(self) -> str:  # type: ignore[override]
        return "ssn 123-45-6789"


def test_the_embedder_gets_the_screened_characters_of_a_document(tmp_path):
    from qdrant_guard.hashing_embedder import HashingEmbedder

    seen: list[str] = []
    inner = HashingEmbedder(DIM)

    def embedder(texts):
        prompts = [f"passage: {t}" for t in texts]
        seen.extend(prompts + [t.lower() for t in texts] + [t + "" for t in texts])
        return inner(prompts)

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {**POLICY, "noise_on_write": True}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embedder)
    create(owner, "pii")
    bob = owner.with_principal(kit.principal("bob", "support"))
    doc = M.Document.model_construct(text=Masked("the quarterly report"), model="hashing")
    bob.upsert("pii", [M.PointStruct(id=1, vector=doc)])
    bob.update_vectors("pii", [M.PointVectors(id=1, vector=doc)])
    assert seen and not any("123-45-6789" in t for t in seen), seen
    assert seen[0] == "passage: the quarterly report"


# -- (d) the text field holding an object --------------------------------------------------------
# The text field's rules (PII redacted, credentials refused or redacted) read a string, or the
# strings of a list: an object, or a list of objects or lists, was stored as given, its PII (and
# under payload_fields = "text_field" its credentials) unredacted, and readers of other boundaries
# got it so. set_payload with a key into the text field (key="text", "text.body") did the same.

SSN = "My SSN is 123-45-6789"
STRIPE = "key sk_live_51HxQ2eKz8Yv3Lm9Np0Rt7Ws4Uv6Xy"


def _text_client(tmp_path, payload_fields: str, **extra):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {**POLICY, "noise_on_write": True, "readers": ["support"], "text_field": "text",
                              "payload_fields": payload_fields, **extra}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


@pytest.mark.parametrize("payload_fields", ["credentials", "text_field"])
@pytest.mark.parametrize("text", [{"body": SSN}, [{"body": SSN}], [[SSN]], {"a": {"b": [SSN]}}])
def test_pii_in_an_object_in_the_text_field_is_redacted(tmp_path, payload_fields, text):
    _, owner, bob = _text_client(tmp_path, payload_fields)
    bob.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": text})])
    stored = json.dumps(snapshot(owner, "pii")[0][1]["text"])
    assert "123-45-6789" not in stored and "[SSN]" in stored, stored
    read = json.dumps(bob.scroll("pii", limit=1, with_payload=True)[0][0].payload["text"])
    assert "123-45-6789" not in read


def test_the_owner_keeps_pii_in_a_string_text_field_only(tmp_path):
    _, owner, _ = _text_client(tmp_path, "credentials", keep_payload_text_in_boundary=True)
    owner.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": SSN}),
                         M.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload={"text": {"body": SSN}})])
    got = {r[0]: r[1]["text"] for r in snapshot(owner, "pii")}
    assert got == {1: SSN, 2: {"body": "My SSN is [SSN]"}}


def test_a_credential_in_an_object_in_the_text_field_is_refused(tmp_path):
    kit, owner, bob = _text_client(tmp_path, "text_field")
    with pytest.raises(GuardRefusal) as ei:
        bob.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": {"b": STRIPE}})])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert snapshot(owner, "pii") == []


@pytest.mark.parametrize("key", ["text", "text.body", '"text"'])
def test_set_payload_into_the_text_field_is_screened_by_its_rules(tmp_path, key):
    _, owner, bob = _text_client(tmp_path, "credentials")
    bob.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": {"a": "x"}})])
    bob.set_payload("pii", payload={"body": SSN}, points=[1], key=key)
    bob.batch_update_points("pii", [M.SetPayloadOperation(set_payload=M.SetPayload(
        payload={"more": [SSN]}, points=[1], key=key))])
    stored = json.dumps(snapshot(owner, "pii")[0][1]["text"])
    assert "123-45-6789" not in stored and stored.count("[SSN]") == 2, stored


def test_set_payload_under_another_key_keeps_pii_as_payload_fields_says(tmp_path):
    _, owner, bob = _text_client(tmp_path, "credentials")
    bob.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": "x"})])
    bob.set_payload("pii", payload={"body": SSN}, points=[1], key="texts")
    assert snapshot(owner, "pii")[0][1]["texts"] == {"body": SSN}


def test_a_public_collection_refuses_pii_set_into_its_text_field(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text", "payload_fields": "text_field"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "pub")
    client.upsert("pub", [M.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"text": {"a": "x"}})])
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload("pub", payload={"body": SSN}, points=[1], key="text")
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    with pytest.raises(GuardRefusal):
        client.upsert("pub", [M.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload={"text": {"b": SSN}})])
    assert [r[1] for r in snapshot(client, "pub")] == [{"text": {"a": "x"}}]


# -- what held (pinned) ---------------------------------------------------------------------------

def test_a_reader_writes_nothing_and_embeds_nothing_by_any_write_method(tmp_path):
    from guardkit import Recorder

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {**POLICY, "writers": [], "readers": ["support"], "noise_on_write": True}})
    seen = Recorder()
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=seen)
    create(owner, "pii")
    owner.upsert("pii", [M.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    bob = owner.with_principal(kit.principal("bob", "support"))
    before = snapshot(owner, "pii")
    doc = M.Document(text="the quarterly report", model="hashing")
    calls = [
        lambda: bob.upsert("pii", [M.PointStruct(id=2, vector=doc)]),
        lambda: bob.upload_points("pii", [M.PointStruct(id=2, vector=doc)], wait=True),
        lambda: bob.upload_collection("pii", vectors=[unit(np.random.default_rng(1))], ids=[2], wait=True),
        lambda: bob.update_vectors("pii", [M.PointVectors(id=1, vector=doc)]),
        lambda: bob.batch_update_points("pii", [M.UpsertOperation(upsert=M.PointsList(points=[
            M.PointStruct(id=2, vector=doc)]))]),
    ]
    for call in calls:
        with pytest.raises(GuardRefusal) as ei:
            call()
        assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert snapshot(owner, "pii") == before and seen.seen == []


def test_every_spelling_of_a_uuid_is_one_point_to_receipts_and_batches(tmp_path):
    import uuid

    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"pii": {**POLICY, "noise_on_write": True}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "pii", named=("a", "b"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(0)
    u, v = str(uuid.UUID(int=1234567)), str(uuid.UUID(int=7654321))
    bob.upsert("pii", [M.PointStruct(id="urn:uuid:" + u, vector={"a": unit(rng), "b": unit(rng)})])
    bob.update_vectors("pii", [M.PointVectors(id="{" + u + "}", vector={"a": unit(rng)}),
                               M.PointVectors(id=u.replace("-", ""), vector={"b": unit(rng)})])
    bob.batch_update_points("pii", [
        M.UpsertOperation(upsert=M.PointsList(points=[M.PointStruct(id="{" + v + "}", vector={"a": unit(rng)})])),
        M.UpdateVectorsOperation(update_vectors=M.UpdateVectors(points=[M.PointVectors(id=v.upper(), vector={"b": unit(rng)})])),
    ])
    reports = verify(owner, "pii", trusted_keys=owner.guard.trusted_receipt_keys)
    assert len(reports) == 4 and all(r.ok for r in reports), [(r.point_id, r.vector_name, r.reason) for r in reports]
    before = snapshot(owner, "pii")
    with pytest.raises(Exception, match="do not exist"):
        bob.batch_update_points("pii", [
            M.DeleteOperation(delete=M.PointIdsList(points=["urn:uuid:" + v])),
            M.UpdateVectorsOperation(update_vectors=M.UpdateVectors(points=[M.PointVectors(id=v.upper(), vector={"b": unit(rng)})]))])
    assert snapshot(owner, "pii") == before
