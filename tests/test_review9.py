"""Ninth review: the evening's field-name screen, payload_fields and drop-in fixes, attacked
against real local-mode Qdrant (no mocks)."""
from __future__ import annotations

import collections
import dataclasses
import enum

import numpy as np
import pydantic
import pytest

from guardkit import create, make_kit, models, snapshot, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
SSN = "123-45-6789"


class _Kind(enum.Enum):
    KEY = STRIPE


@dataclasses.dataclass
class _Conf:
    note: str


class _Model(pydantic.BaseModel):
    note: str


# Values qdrant-client serialises (pydantic) into strings or objects holding the secret: each was
# stored as that string, unscreened, because the screen read only str, dict and list values.
HIDDEN = {
    "bytes": lambda: {"b": STRIPE.encode()},
    "bytearray": lambda: {"b": bytearray(STRIPE.encode())},
    "enum": lambda: {"e": _Kind.KEY},
    "dataclass": lambda: {"d": _Conf(STRIPE)},
    "model": lambda: {"m": _Model(note=STRIPE)},
    "deque": lambda: {"q": collections.deque([STRIPE])},
    "nested bytes": lambda: {"meta": {"x": [STRIPE.encode()]}},
}


def _client(tmp_path, **sens_over):
    kit = make_kit(tmp_path)
    sens = {"class": "PII", "owner": "hr", "text_field": "text", "intent": {"enabled": False}, **sens_over}
    cfg = kit.config({"c": sens, "pub": {"class": "PUBLIC", "text_field": "text"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("c", "pub"):
        create(client, name)
        client.upsert(name, [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)),
                                                payload={"text": "hello"})])
    return kit, client


def _write(client, col, form, payload):
    vec = unit(np.random.default_rng(2))
    {
        "upsert": lambda: client.upsert(col, [models.PointStruct(id=2, vector=vec, payload=payload)]),
        "upload_collection": lambda: client.upload_collection(col, vectors=[vec], payload=[payload], ids=[2],
                                                              wait=True),
        "set_payload": lambda: client.set_payload(col, payload=payload, points=[1]),
        "set_payload key": lambda: client.set_payload(col, payload=payload, points=[1], key="meta"),
        "batch set_payload": lambda: client.batch_update_points(col, [models.SetPayloadOperation(
            set_payload=models.SetPayload(payload=payload, points=[1]))]),
    }[form]()


FORMS = ["upsert", "upload_collection", "set_payload", "set_payload key", "batch set_payload"]


@pytest.mark.parametrize("shape", list(HIDDEN))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("col,verdict", [("c", "CREDENTIAL_IN_TEXT"), ("pub", "SENSITIVITY_MISMATCH")])
def test_a_secret_in_a_value_the_client_serialises_is_screened(tmp_path, form, shape, col, verdict):
    kit, client = _client(tmp_path)
    before = snapshot(client, col)
    with pytest.raises(GuardRefusal) as ei:
        _write(client, col, form, HIDDEN[shape]())
    assert ei.value.verdict == verdict
    assert snapshot(client, col) == before
    assert STRIPE not in str(ei.value)
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("shape", ["bytes", "model", "deque"])
def test_a_serialised_value_is_stored_redacted_under_redact(tmp_path, shape):
    _, client = _client(tmp_path, credentials_in_text="redact")
    client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload=HIDDEN[shape]())])
    stored = {pid: p for pid, p, _ in snapshot(client, "c")}[2]
    stored.pop(RECEIPT_KEY, None)
    assert STRIPE not in repr(stored)
    assert "[STRIPE_KEY]" in repr(stored)


def test_an_ordinary_serialised_value_is_stored_as_qdrant_client_would(tmp_path):
    _, client = _client(tmp_path)
    payload = {"b": b"plain bytes", "m": _Model(note="nothing here"), "q": collections.deque(["a", 1])}
    client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload=payload)])
    stored = {pid: p for pid, p, _ in snapshot(client, "c")}[2]
    stored.pop(RECEIPT_KEY, None)
    assert stored == {"b": "plain bytes", "m": {"note": "nothing here"}, "q": ["a", 1]}


@pytest.mark.parametrize("payload_fields", ["text_field", "credentials"])
def test_a_text_field_given_as_bytes_is_screened_as_the_text_field(tmp_path, payload_fields):
    # bytes are stored as the string: its PII must be redacted as the str text field's is.
    _, client = _client(tmp_path, payload_fields=payload_fields)
    client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)),
                                           payload={"text": f"ssn {SSN}".encode()})])
    stored = {pid: p for pid, p, _ in snapshot(client, "c")}[2]
    assert stored["text"] == "ssn [SSN]"
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)),
                                                 payload={"text": [f"ssn {SSN}".encode()]})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"


# -- field names outside filters: the common read names none, and is not walked --------------------

def test_a_bool_with_payload_gives_no_field_name_root():
    # Every scroll (with_payload=True by default) walked a FieldNames root holding True: ~4 us a
    # read for nothing (no timing asserted here; the roots are what the screen walks).
    from qdrant_guard.querycheck import field_name_roots
    for method in ("scroll", "retrieve", "query_points", "query_points_groups"):
        assert list(field_name_roots(method, {"with_payload": True})) == []
        assert list(field_name_roots(method, {"with_payload": False})) == []
    assert [w for w, _ in field_name_roots("scroll", {"with_payload": ["a"], "order_by": "b"})] == \
        ["order_by", "with_payload"]


def test_a_key_in_with_payload_is_still_screened_after_the_bool_fast_path(tmp_path):
    _, client = _client(tmp_path)
    ghp = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    for kw in ({"with_payload": [ghp]}, {"with_payload": models.PayloadSelectorExclude(exclude=[ghp])}):
        with pytest.raises(GuardRefusal) as ei:
            client.scroll("c", **kw)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert client.scroll("c", with_payload=True)[0][0].payload["text"] == "hello"


# -- a set_payload/overwrite_payload payload given as another Mapping ------------------------------

MAPPINGS = {"UserDict": collections.UserDict, "MappingProxyType": lambda d: __import__("types").MappingProxyType(d)}


@pytest.mark.parametrize("mapping", list(MAPPINGS))
@pytest.mark.parametrize("col,form", [("pub", "set"), ("pub", "set key"), ("pub", "overwrite"), ("c", "set key")])
def test_a_payload_given_as_another_mapping_is_screened(tmp_path, mapping, col, form):
    # qdrant-client's REST model validates any Mapping into the dict it sends; the screen read only
    # a dict and passed the rest on as it was (local mode happens to fail serialising it).
    kit, client = _client(tmp_path)
    payload = MAPPINGS[mapping]({"note": STRIPE})
    before = snapshot(client, col)
    with pytest.raises(GuardRefusal) as ei:
        {"set": lambda: client.set_payload(col, payload=payload, points=[1]),
         "set key": lambda: client.set_payload(col, payload=payload, points=[1], key="meta"),
         "overwrite": lambda: client.overwrite_payload(col, payload=payload, points=[1])}[form]()
    assert ei.value.verdict == ("SENSITIVITY_MISMATCH" if col == "pub" else "CREDENTIAL_IN_TEXT")
    assert snapshot(client, col) == before
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


def test_an_ordinary_mapping_payload_is_stored(tmp_path):
    _, client = _client(tmp_path)
    client.set_payload("pub", payload=collections.UserDict({"note": "fine"}), points=[1], key="meta")
    assert {pid: p for pid, p, _ in snapshot(client, "pub")}[1] == {"text": "hello", "meta": {"note": "fine"}}


def test_a_text_field_given_as_a_generator_is_read_once_on_public(tmp_path):
    # payload_fields = "text_field": only the text field's screen reads it; the form it read is stored.
    kit = make_kit(tmp_path)
    cfg = kit.config({"pub": {"class": "PUBLIC", "text_field": "text", "payload_fields": "text_field"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "pub")
    client.upsert("pub", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)),
                                             payload={"text": "hello"})])
    client.set_payload("pub", payload={"text": (t for t in ["a", "b"])}, points=[1])
    assert snapshot(client, "pub")[0][1] == {"text": ["a", "b"]}
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload("pub", payload={"text": (t for t in [f"ssn {SSN}"])}, points=[1])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub")[0][1] == {"text": ["a", "b"]}


# -- limit / group_size pass-through ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.int64(0), np.int64(-1), 0.0], ids=["np0", "np-1", "float0"])
def test_a_limit_below_one_in_any_numeric_type_goes_to_qdrant_as_given(tmp_path, bad):
    # 7445644 passed int 0 through, but a numpy integer or a float 0 was still read as "the
    # default" (ten points for limit, three a group) where qdrant-client refuses it.
    _, client = _client(tmp_path)
    q = unit(np.random.default_rng(3))
    with pytest.raises(ValueError, match="limit value"):
        client.query_points("c", query=q, limit=bad)
    with pytest.raises(ValueError, match="group_size value"):
        client.query_points_groups("c", query=q, group_by="text", group_size=bad)
    assert len(client.query_points("c", query=q, limit=np.int64(1)).points) == 1


# -- a field-name argument given as a dict: its keys reach the log ---------------------------------

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


@pytest.mark.parametrize("call", ["with_payload", "order_by"])
@pytest.mark.parametrize("value", [STRIPE, "alice@example.com", "x"], ids=["cred", "pii", "plain"])
def test_a_secret_dict_key_of_a_field_name_argument_is_refused_and_never_logged(tmp_path, call, value):
    # The dict's values were screened, but its keys went raw into the refusal's path
    # ("order_by.ghp_...") and the audit entry; a key alone was not screened at all.
    kit, client = _client(tmp_path, query={"filter_pii": "allow"})
    with pytest.raises(GuardRefusal) as ei:
        if call == "with_payload":
            client.query_points("c", query=unit(np.random.default_rng(3)), with_payload={GHP: [value]})
        else:
            client.scroll("c", order_by={GHP: value})
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert GHP not in str(ei.value) and STRIPE not in str(ei.value)
    audit = (kit.tmp / "audit.jsonl").read_text()
    assert GHP not in audit and STRIPE not in audit


def test_valid_dict_forms_of_field_name_arguments_still_pass(tmp_path):
    # (local mode cannot read an order_by dict; REST validates it into models.OrderBy)
    from qdrant_guard.filterroots import FieldNames, _iter_keys
    names = [k for _, k, _ in _iter_keys(FieldNames("order_by", {"key": "text", "direction": "asc"}), "order_by")]
    assert names == ["key", "text", "direction", "asc"]
    _, client = _client(tmp_path)
    client.query_points("c", query=unit(np.random.default_rng(3)), with_payload={"include": ["text"]})


# -- the async client shares these screens -----------------------------------------------------------

def test_async_client_screens_serialised_values_and_mapping_payloads(tmp_path):
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}})

    async def main():
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await client.create_collection("c", vectors_config=models.VectorParams(size=16, distance="Cosine"))
        await client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={})])
        with pytest.raises(GuardRefusal) as ei:
            await client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)),
                                                         payload={"b": STRIPE.encode()})])
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        with pytest.raises(GuardRefusal) as ei:
            await client.set_payload("c", payload=collections.UserDict({"n": STRIPE}), points=[1], key="m")
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        await client.close()

    asyncio.run(main())
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


def test_a_key_kept_on_a_sensitive_collection_is_still_refused_on_a_public_one(tmp_path):
    # _CLEAN_KEYS holds only keys the detector finds nothing in, and the detector reads a key alone
    # (no policy, no collection): a key stored on one collection decides nothing for another.
    _, client = _client(tmp_path)
    vec = unit(np.random.default_rng(2))
    client.upsert("c", [models.PointStruct(id=2, vector=vec, payload={"alice@example.com": 1})])
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=2, vector=vec, payload={"alice@example.com": 1})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
