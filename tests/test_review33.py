"""Thirty-third review (2026-12-06, h-rev33): the whole public surface of qdrant-client 1.20.

Names the guard decides on were read as the Python objects given, while qdrant-client sends
their characters. A str subclass (or a model built with ``model_construct()``, which keeps one)
could show the guard one name and Qdrant another:

* ``collection_name`` (and migrate's ``collection_names``, a str ``with_lookup``, a
  ``LookupLocation``/``WithLookup``'s ``collection``, an alias operation's names) whose
  ``__hash__``/``__eq__`` miss the policy got the unlisted policy (PUBLIC under
  ``unlisted = "public"``), while the REST transport put ``str(name)`` into the URL and pydantic
  the characters into the body: on a server, any principal read, looked up or aliased a
  sensitive collection. In local mode the store's own look-up missed too, so these tests show the
  guard deciding on the collection it now sends (a refusal, or the owner's call going through
  where it failed before).
* facet's ``key`` whose ``__eq__`` said it was the source field passed the budget's facet rule
  (every value of another field of a budgeted collection), and a ``model_construct()``ed filter
  key did the same for ``count``'s source-only filter rule: both leak in local mode.
* facet's ``key`` and ``group_by`` whose ``__getitem__`` lies seemed not to start at the kept text
  field, so facet values and group ids came back unredacted to another boundary: local mode.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import qdrant_client
from qdrant_client import models

from qdrant_guard import AsyncQdrantClient, QdrantClient
from qdrant_guard.errors import GuardRefusal
from qdrant_guard.receipts import normalize_point_id

from tests.guardkit import DIM, create, make_kit, snapshot, unit


class Hidden(str):
    """A name no dict look-up finds: its characters are a collection's, its hash is not."""

    def __hash__(self) -> int:
        return 12345

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True


class EqualToAll(str):
    """A key that says it equals any other (the source field)."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


class BadIndex(str):
    """A key path whose characters, read one at a time, look like no field name."""

    __hash__ = str.__hash__

    def __getitem__(self, i):  # type: ignore[override]
        return "!" if isinstance(i, int) else str.__getitem__(self, i)


SECRET = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
BUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
            "diversity": {"max_source_coverage": 0.2, "max_source_fraction": 1.0, "min_unique_sources": 1}}
KEPT_TEXT = {"class": "PII", "owner": "hr", "readers": ["support"], "text_field": "text",
             "keep_payload_text_in_boundary": True, "intent": {"enabled": False},
             "diversity": {"max_source_fraction": 1.0, "min_unique_sources": 1}}


def _secret_store(tmp_path, **extra):
    """alice@hr's client on PII collection ``secret`` (3 points) and ``pub`` (unlisted: PUBLIC),
    and bob@support's view, who may not read ``secret``."""
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"secret": SECRET}, unlisted="public", **extra),
                         principal=kit.principal("alice", "hr"))
    create(owner, "secret")
    create(owner, "pub")
    rng = np.random.default_rng(0)
    owner.upsert("secret", [models.PointStruct(id=i, vector=unit(rng), payload={"text": f"salary {i}"})
                            for i in range(3)])
    return kit, owner, owner.with_principal(kit.principal("bob", "support"))


def test_a_collection_name_that_hides_from_the_policy_is_decided_by_its_characters(tmp_path):
    # Before: PUBLIC (unlisted), passed on; on a server REST asked for /collections/secret/...
    _, owner, bob = _secret_store(tmp_path)
    for call in (lambda c: c.scroll(Hidden("secret")), lambda c: c.count(Hidden("secret")),
                 lambda c: c.query_points(Hidden("secret"), query=[1.0] * DIM),
                 lambda c: c.retrieve(Hidden("secret"), [0], with_vectors=True)):
        with pytest.raises(GuardRefusal, match="may not read PII collection 'secret'"):
            call(bob)
    # The owner's call is sent as "secret" (before: local mode looked the subclass up, and missed).
    records, _ = owner.scroll(Hidden("secret"), with_vectors=True)
    assert sorted(r.id for r in records) == [0, 1, 2]


def test_the_async_client_decides_a_hidden_collection_name_alike(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"secret": SECRET}, unlisted="public")

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("secret", vectors_config=models.VectorParams(size=DIM, distance="Cosine"))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal, match="may not read PII collection 'secret'"):
            await bob.scroll(Hidden("secret"))
        with pytest.raises(GuardRefusal, match="may not write PII collection 'secret'"):
            bob.upload_points(Hidden("secret"), [models.PointStruct(id=1, vector=[1.0] * DIM)])
        assert (await owner.count(Hidden("secret"))).count == 0

    asyncio.run(main())


def test_migrate_decides_and_sends_the_names_it_checked(tmp_path):
    # Before: the hidden name passed the admin check (PUBLIC), and qdrant-client's own assertion
    # stopped it; a generator was used up by the check, and nothing was migrated.
    _, owner, bob = _secret_store(tmp_path)
    with pytest.raises(GuardRefusal, match="may not administer PII collection 'secret'"):
        bob.migrate(qdrant_client.QdrantClient(":memory:"), collection_names=[Hidden("secret")])
    dest = qdrant_client.QdrantClient(":memory:")
    owner.migrate(dest, collection_names=(n for n in [Hidden("secret")]))
    assert dest.count("secret").count == 3


def test_lookups_into_a_hidden_collection_name_are_refused(tmp_path):
    # Before: the str with_lookup and the model_construct()ed lookups were looked up as PUBLIC.
    _, _, bob = _secret_store(tmp_path)
    bob.upsert("pub", [models.PointStruct(id=10 + i, vector=[1.0] * DIM, payload={"g": i}) for i in range(3)])
    lookups = [Hidden("secret"), models.WithLookup.model_construct(collection=Hidden("secret"), with_payload=True,
                                                                   with_vectors=None)]
    for lookup in lookups:
        with pytest.raises(GuardRefusal, match="may not read PII collection 'secret'"):
            bob.query_points_groups("pub", group_by="g", query=[1.0] * DIM, with_lookup=lookup)
    with pytest.raises(GuardRefusal, match="may not read PII collection 'secret'"):
        bob.query_points("pub", query=0, lookup_from=models.LookupLocation.model_construct(
            collection=Hidden("secret"), vector=None, shard_key=None))


def test_an_alias_operation_built_around_validation_is_decided_by_its_names(tmp_path):
    # Before: a model_construct()ed CreateAlias naming Hidden("secret") passed as PUBLIC; a
    # server would have made "pubx" (PUBLIC) an alias of "secret".
    _, owner, bob = _secret_store(tmp_path)
    op = models.CreateAliasOperation.model_construct(
        create_alias=models.CreateAlias.model_construct(collection_name=Hidden("secret"), alias_name="pubx"))
    with pytest.raises(GuardRefusal, match="may not administer PII collection 'secret'"):
        bob.update_collection_aliases([op])
    assert owner.get_aliases().aliases == []


def test_delete_vector_name_is_sent_the_name_whose_receipts_it_drops(tmp_path):
    # Before: local mode got the subclass and missed the vector (ValueError); on a server the
    # URL named str(name) while the guard dropped the receipts of the name it saw.
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"secret": SECRET}), principal=kit.principal("alice", "hr"))
    create(owner, "secret", named=("a", "b"))
    rng = np.random.default_rng(1)
    owner.upsert("secret", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)})])
    owner.delete_vector_name("secret", vector_name=Hidden("b"))
    (_, payload, vector), = snapshot(owner, "secret")
    assert set(vector) == {"a"}
    assert set(payload["_qdrant_guard_receipt"]["vectors"]) == {"a"}


def _budgeted(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"hr": BUDGETED}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll", "name": f"emp{i}"})
                        for i in range(10)])
    return kit, owner.with_principal(kit.principal("bob", "support"))


def test_a_facet_key_that_equals_everything_is_not_the_source_field(tmp_path):
    # Before: answered every employee's name, past the budget (local mode).
    _, bob = _budgeted(tmp_path)
    with pytest.raises(GuardRefusal, match="facet on key 'name'"):
        bob.facet("hr", key=EqualToAll("name"))


def test_a_constructed_filter_key_that_equals_everything_is_not_the_source_field(tmp_path):
    # Before: count answered 1 for name = emp3 (local mode), a filter on another field than the source.
    _, bob = _budgeted(tmp_path)
    flt = models.Filter.model_construct(must=[models.FieldCondition.model_construct(
        key=EqualToAll("name"), match=models.MatchValue(value="emp3"))], should=None, must_not=None, min_should=None)
    with pytest.raises(GuardRefusal, match="filter on fields other than 'source'"):
        bob.count("hr", count_filter=flt)


def test_the_async_facet_key_is_read_as_its_characters(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": BUDGETED})

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=DIM, distance="Cosine"))
        await owner.upsert("hr", [models.PointStruct(id=1, vector=[1.0] * DIM, payload={"source": "p", "name": "x"})])
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(GuardRefusal, match="facet on key 'name'"):
            await bob.facet("hr", key=EqualToAll("name"))

    asyncio.run(main())


def _kept_text(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"hr": KEPT_TEXT}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={
        "source": f"s{i}", "text": f"Call alice at alice{i}@example.com"}) for i in range(3)])
    return kit, owner.with_principal(kit.principal("bob", "support"))


def test_facet_values_and_group_ids_of_the_kept_text_stay_redacted_for_a_lying_key(tmp_path):
    # Before: BadIndex("text") seemed not to start at the text field: the e-mails came back as stored.
    _, bob = _kept_text(tmp_path)
    values = [h.value for h in bob.facet("hr", key=BadIndex("text")).hits]
    ids = [g.id for g in bob.query_points_groups("hr", query=[1.0] * DIM, group_by=BadIndex("text")).groups]
    for got in (values, ids):
        assert got and all(v == "Call alice at [EMAIL]" for v in got), got


def test_the_async_group_ids_stay_redacted_for_a_lying_key(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": KEPT_TEXT})

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=DIM, distance="Cosine"))
        await owner.upsert("hr", [models.PointStruct(id=1, vector=[1.0] * DIM, payload={
            "source": "s", "text": "Call alice at alice@example.com"})])
        bob = owner.with_principal(kit.principal("bob", "support"))
        res = await bob.query_points_groups("hr", query=[1.0] * DIM, group_by=BadIndex("text"))
        assert [g.id for g in res.groups] == ["Call alice at [EMAIL]"]

    asyncio.run(main())


def test_a_constructed_with_lookup_into_a_budgeted_collection_is_refused_by_its_characters(tmp_path):
    # Before: the budget rule looked Hidden("hr") up, missed (PUBLIC), and let the lookup through.
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"hr": dict(BUDGETED, raw_in_boundary=True)}, unlisted="public"),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    create(owner, "pub")
    owner.upsert("pub", [models.PointStruct(id=10 + i, vector=[1.0] * DIM, payload={"g": i}) for i in range(3)])
    lookup = models.WithLookup.model_construct(collection=Hidden("hr"), with_payload=True, with_vectors=None)
    with pytest.raises(GuardRefusal, match="with_lookup returns points of 'hr' past its extraction budget"):
        owner.query_points_groups("pub", group_by="g", query=[1.0] * DIM, with_lookup=lookup)


class SplitsElsewhere(str):
    """A payload key path whose split() names another top-level key."""

    __hash__ = str.__hash__

    def split(self, *args, **kwargs):  # type: ignore[override]
        return ["other"]


def test_a_set_payload_key_that_splits_elsewhere_cannot_claim_a_restricted_source(tmp_path):
    # Before: the writer tagged its own point with restricted source payroll (local mode), which
    # raises its own budget on payroll; only the owner may.
    kit = make_kit(tmp_path)
    pol = {**BUDGETED, "writers": ["support"], "source_field": "meta.source",
           "diversity": {**BUDGETED["diversity"], "restricted_sources": ["payroll"]}}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("hr", [models.PointStruct(id=100, vector=[1.0] * DIM, payload={"meta": {"source": "mine"}})])
    with pytest.raises(GuardRefusal, match=r"restricted source\(s\) \['payroll'\]"):
        bob.set_payload("hr", payload={"source": "payroll"}, key=SplitsElsewhere("meta"), points=[100])
    assert snapshot(owner, "hr")[0][1]["meta"] == {"source": "mine"}


class LyingInt(int):
    """A point id whose __int__ names another point."""

    def __int__(self) -> int:
        return 7


def test_an_int_point_id_is_its_own_value_in_the_receipt(tmp_path):
    # Before: "int:7"; pydantic sends 5. The thirty-second review's UUID case, for ints.
    assert normalize_point_id(LyingInt(5)) == "int:5"
    # A model_construct()ed point keeps the subclass: its receipt named point 7, so the vector
    # stored under 8 never verified and every read stripped it.
    kit = make_kit(tmp_path)
    pol = {**SECRET, "readers": ["support"], "writers": ["support"]}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.upsert("hr", [models.PointStruct.model_construct(id=LyingInt(8), vector=[1.0] * DIM, payload=None)])
    (pid, payload, _), = snapshot(owner, "hr")
    assert (pid, payload["_qdrant_guard_receipt"]["vectors"][""]["point_id"]) == (8, "int:8")
    assert bob.retrieve("hr", [8], with_vectors=True)[0].vector is not None
