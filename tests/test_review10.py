"""Tenth review: the read round's budget shortcuts and the payload screen's remembered clean pairs,
attacked against real stores and real local-mode Qdrant (no mocks)."""
from __future__ import annotations

import enum
import uuid

import numpy as np
import pytest

from guardkit import models, snapshot, unit
from test_review9 import _client  # the same PII and PUBLIC pair, one point each
from qdrant_guard import GuardRefusal
from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore, RedisBudgetStore, SqliteBudgetStore
from qdrant_guard.receipts import RECEIPT_KEY

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
# A secret the detector finds only next to a secret-like name: clean as a title, a finding as a password.
PASSWORD = "Tr0ub4dor&3xQz"


# -- the budget: admit_many's call of a built-in store's _admit_points ---------------------------

@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_spec(request, tmp_path):
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'budget.db'}"
    return request.getfixturevalue("redis_url")


def _store(spec, tmp_path):
    if spec == "memory":
        return MemoryBudgetStore()
    if spec.startswith("sqlite"):
        return SqliteBudgetStore(tmp_path / f"budget-{uuid.uuid4().hex}.db")
    return RedisBudgetStore(spec, prefix=f"qg:r10:{uuid.uuid4().hex}:")  # one key space per test


def test_an_admit_points_set_on_the_store_instance_is_the_one_admit_many_uses(store_spec, tmp_path):
    # admit_many called a built-in store's _admit_points directly whenever its class's admit_points
    # was the built-in one, so an admit_points set on the instance (a wrapper: a freeze, a quota, a
    # metric) was skipped and the store's own admission released the points the wrapper withheld.
    store = _store(store_spec, tmp_path)
    calls = []

    def frozen(keys, points, *, window_s, now):
        calls.append(len(points))
        return type(store).admit_points(store, [(key, 0) for key, _ in keys], points, window_s=window_s, now=now)

    store.admit_points = frozen
    budget = ExtractionBudget(store, window_s=3600.0)
    decisions = budget.admit_many(principal="mallory", collection="docs", max_source_coverage=0.5,
                                  requests={"memo": ([1, 2, 3], 20), "wiki": ([4], 10)})
    assert calls == [4]
    assert all(d.admitted == [] for d in decisions.values())
    assert decisions["memo"].withheld == [1, 2, 3] and decisions["wiki"].withheld == [4]


def test_an_admit_points_of_another_store_charges_that_store(tmp_path):
    # The instance's admit_points bound to another store: the charges go where it says, as the
    # checked path sends them (the shortcut charged the store it was set on).
    store, other = MemoryBudgetStore(), MemoryBudgetStore()
    store.admit_points = other.admit_points
    budget = ExtractionBudget(store, window_s=3600.0)
    budget.admit_many(principal="mallory", collection="docs", max_source_coverage=0.5,
                      requests={"memo": ([1, 2], 20)})
    key = ExtractionBudget.budget_key("mallory", "docs", "memo")
    assert other.seen(key, window_s=3600.0, now=budget.clock()) == 2
    assert store.seen(key, window_s=3600.0, now=budget.clock()) == 0


def test_the_built_in_path_still_admits_as_the_checked_path(store_spec, tmp_path):
    # The shortcut kept for the plain built-in store: same decisions as admit_points called itself.
    store = _store(store_spec, tmp_path)
    budget = ExtractionBudget(store, window_s=3600.0)
    decisions = budget.admit_many(principal="p", collection="docs", max_source_coverage=0.25,
                                  requests={"memo": ([1, 2, 3], 8), "wiki": ([3, 4], 40)})
    # memo's cap is 2: point 3 (also wiki's) is withheld by memo and charged to neither.
    assert decisions["memo"].admitted == [1, 2] and decisions["memo"].withheld == [3]
    assert decisions["wiki"].admitted == [4] and decisions["wiki"].withheld == [3]
    assert decisions["wiki"].seen_after == 1


# -- the payload screen: str subclasses are screened as the characters the client stores ----------

class _Config(str, enum.Enum):
    KEY = STRIPE


class _Masked(str):
    """A str that hides itself from logs: str() and f-strings show stars, the client stores it."""

    def __str__(self):
        return "****"

    def __repr__(self):
        return "_Masked('****')"


class _PoseAsTitle(str):
    """A str that compares and hashes as "title" (so as a key and a pair the screen remembered)."""

    def __eq__(self, other):
        return other == "title" or str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash("title")


def _write(client, col, form, payload):
    vec = unit(np.random.default_rng(2))
    {
        "upsert": lambda: client.upsert(col, [models.PointStruct(id=2, vector=vec, payload=payload)]),
        "upsert dict point": lambda: client.upsert(col, [{"id": 2, "vector": vec, "payload": payload}]),
        "set_payload": lambda: client.set_payload(col, payload=payload, points=[1]),
        "set_payload key": lambda: client.set_payload(col, payload=payload, points=[1], key="meta"),
        "batch set_payload": lambda: client.batch_update_points(col, [models.SetPayloadOperation(
            set_payload=models.SetPayload(payload=payload, points=[1]))]),
    }[form]()


FORMS = ["upsert", "upsert dict point", "set_payload", "set_payload key", "batch set_payload"]
VERDICT = {"c": "CREDENTIAL_IN_TEXT", "pub": "SENSITIVITY_MISMATCH"}
SHAPES = {
    "str enum": lambda: {"note": _Config.KEY},
    "masked str": lambda: {"note": _Masked(STRIPE)},
    "masked str in a list": lambda: {"note": ["ok", _Masked(STRIPE)]},
    "masked str nested": lambda: {"meta": {"x": _Masked(STRIPE)}},
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("col", ["c", "pub"])
def test_a_secret_in_a_str_subclass_is_screened_as_stored(tmp_path, col, form, shape):
    # The value screen read a str subclass through an f-string, i.e. its __str__: a (str, Enum)
    # member showed "_Config.KEY" and a masking class "****", and the Stripe key the client stores
    # (the characters) was written unscreened to PII and PUBLIC collections alike.
    kit, client = _client(tmp_path)
    before = snapshot(client, col)
    with pytest.raises(GuardRefusal) as ei:
        _write(client, col, form, SHAPES[shape]())
    assert ei.value.verdict == VERDICT[col]
    assert snapshot(client, col) == before
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("col", ["c", "pub"])
@pytest.mark.parametrize("nested", [False, True])
def test_a_key_posing_as_a_remembered_one_does_not_reuse_its_clean_pairs(tmp_path, col, nested):
    # ("title", PASSWORD) is clean and remembered; a str subclass key "password" that hashes and
    # compares as "title" found that pair, so the password under "password" (a finding there) was
    # stored unscreened. It is screened as the key "password" it is stored under.
    _, client = _client(tmp_path)
    client.set_payload(col, payload={"title": PASSWORD}, points=[1])
    before = snapshot(client, col)
    payload = {_PoseAsTitle("password"): PASSWORD}
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload(col, payload={"m": payload} if nested else payload, points=[1])
    assert ei.value.verdict == VERDICT[col]
    assert snapshot(client, col) == before


def test_a_key_posing_as_a_clean_key_is_screened_for_what_it_holds(tmp_path):
    # The key screen's memory of clean keys was looked up by the key's __eq__/__hash__.
    _, client = _client(tmp_path)
    client.set_payload("pub", payload={"title": "x"}, points=[1])
    before = snapshot(client, "pub")
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload("pub", payload={_PoseAsTitle("ssn 123-45-6789"): 1}, points=[1])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert snapshot(client, "pub") == before


def test_a_clean_str_subclass_is_stored_as_the_client_stores_it(tmp_path):
    # Nothing changes for a str subclass without a finding: stored as its characters, as before.
    _, client = _client(tmp_path)
    payload = {"lang": _Masked("en"), _Masked("kind"): np.str_("memo"), "tags": [_Masked("a")]}
    client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload=payload)])
    client.set_payload("pub", payload=payload, points=[1])
    stored = {pid: p for pid, p, _ in snapshot(client, "c")}[2]
    stored.pop(RECEIPT_KEY, None)
    assert stored == {"lang": "en", "kind": "memo", "tags": ["a"]}
    assert {pid: p for pid, p, _ in snapshot(client, "pub")}[1] == {"text": "hello", "lang": "en", "kind": "memo",
                                                                    "tags": ["a"]}


@pytest.mark.parametrize("method", ["set_payload", "overwrite_payload"])
def test_a_key_posing_as_another_name_cannot_write_the_receipt_container(tmp_path, method):
    # The reserved-key check asked `RECEIPT_KEY in payload`, by the key's __eq__/__hash__: a key
    # stored as the receipt key but comparing as "title" passed it and replaced the receipts.
    _, client = _client(tmp_path)
    before = snapshot(client, "c")
    with pytest.raises(GuardRefusal) as ei:
        getattr(client, method)("c", payload={_PoseAsTitle(RECEIPT_KEY): {"v": 1}}, points=[1])
    assert ei.value.verdict == "RECEIPT_TAMPERING"
    assert snapshot(client, "c") == before


class _QuietDict(dict):
    """A dict whose items() leave out its "secret" entry: what qdrant-client's REST serialiser
    (model_dump_json) sends is the dict's storage, the entry included."""

    def items(self):
        return [(k, v) for k, v in dict.items(self) if k != "secret"]


class _QuietList(list):
    """A list whose iteration skips the Stripe key; pydantic serialises the list's storage."""

    def __iter__(self):
        return iter([x for x in list.__iter__(self) if x != STRIPE])


@pytest.mark.parametrize("payload", [lambda: {"meta": _QuietDict(title="x", secret=STRIPE)},
                                     lambda: {"tags": _QuietList(["a", STRIPE])},
                                     lambda: {"meta": {"deep": [_QuietDict(secret=STRIPE)]}}],
                         ids=["dict items()", "list __iter__", "nested"])
@pytest.mark.parametrize("col", ["c", "pub"])
def test_a_container_subclass_is_screened_as_pydantic_sends_it(tmp_path, col, payload):
    # The screen walked a nested dict by items() and a list by iteration; the points the guard
    # forwards are serialised by REST with model_dump_json, which reads the containers' storage:
    # the hidden Stripe key went to the server unscreened (local mode happens to store the view).
    kit, client = _client(tmp_path)
    point = models.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload=payload())
    assert STRIPE in point.model_dump_json()
    before = snapshot(client, col)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert(col, [point])
    assert ei.value.verdict == VERDICT[col]
    assert snapshot(client, col) == before


def test_an_ordinary_container_subclass_is_stored_with_its_entries(tmp_path):
    import collections
    _, client = _client(tmp_path)
    payload = {"meta": collections.OrderedDict(a="x", b=collections.defaultdict(list, c=["y"])),
               "n": collections.Counter(k=2)}
    client.upsert("c", [models.PointStruct(id=2, vector=unit(np.random.default_rng(2)), payload=payload)])
    stored = {pid: p for pid, p, _ in snapshot(client, "c")}[2]
    stored.pop(RECEIPT_KEY, None)
    assert stored == {"meta": {"a": "x", "b": {"c": ["y"]}}, "n": {"k": 2}}


def test_a_container_subclass_in_an_inference_object_is_screened_as_sent(tmp_path):
    # A PUBLIC InferenceObject's strings are screened before qdrant-client sends the object to
    # inference; a dict subclass was walked by its items(), which hid the key REST sends.
    _, client = _client(tmp_path)
    obj = models.InferenceObject(object={"m": _QuietDict(note="x", secret=STRIPE)}, model="m")
    assert STRIPE in obj.model_dump_json()
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=2, vector=obj)])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
