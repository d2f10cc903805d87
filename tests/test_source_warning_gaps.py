"""The three gaps h-srcwarn's ``UntaggedSourceWarning`` for payload changes left (2026-12-08,
h-warn2), each test failing on the code before, against real qdrant-client local mode:

1. ``batch_update_points`` is judged by the state it leaves: a source taken away by one operation
   and set again by a later one for the same points does not warn. Where the batch does not prove
   the later operation reaches the same points (a filter other than ``has_id`` conditions, another
   shard key), it still warns.
2. Key paths with ``[]``/``[N]`` indexing are read as Qdrant applies them: indexing the source
   field, or a key above it on its path, can take the source away and warns; a path that leaves
   the source field's path first does not.
3. The warning is shown before the write is sent: under ``-W error`` it refuses the write, nothing
   stored, audited, and the collection's next such write raises again.
"""
from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from qdrant_client import models

from test_onboard import POLICY, _agent, _client, _points, workdir  # noqa: F401  (workdir: fixture)

from qdrant_guard import AsyncQdrantClient, QdrantClient, UntaggedSourceWarning

Q = [0.1, 0.2, 0.3, 0.4]


def _tagged(client: QdrantClient, n: int = 20, **payload: Any) -> None:
    client.upsert("tickets", [models.PointStruct(id=i, vector=[0.1 * i, 0.2, 0.3, 0.4],
                                                 payload={"text": f"ticket {i}", "source": f"doc{i}", **payload})
                              for i in range(1, n + 1)])


def _warned(call: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    found = [w for w in caught if issubclass(w.category, UntaggedSourceWarning)]
    assert all(w.filename == __file__ for w in found)
    return [str(w.message) for w in found]


def _set(payload: dict[str, Any], points: Any = None, *, key: str | None = None, flt: Any = None,
         shard_key: Any = None) -> models.SetPayloadOperation:
    return models.SetPayloadOperation(set_payload=models.SetPayload(payload=payload, points=points, filter=flt,
                                                                    key=key, shard_key=shard_key))


def _source(client: QdrantClient, pid: int) -> Any:
    return client.retrieve("tickets", [pid])[0].payload.get("source", "<absent>")


def _records() -> list[dict[str, Any]]:
    return [json.loads(x)["record"] for x in Path("audit.jsonl").read_text(encoding="utf-8").split("\n") if x]


# ------------------------------------------------------------------ 1. a batch judged by what it leaves


def test_a_source_removed_and_set_again_in_the_same_batch_does_not_warn(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    again = {
        "set again by id": [_set({"source": None}, [1, 2]), _set({"source": "faq"}, [1, 2])],
        "deleted then overwritten": [
            models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["source"], points=[3])),
            models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
                payload={"text": "x", "source": "kb"}, points=[3]))],
        "cleared then upserted": [
            models.ClearPayloadOperation(clear_payload=models.PointIdsList(points=[4])),
            models.UpsertOperation(upsert=models.PointsList(points=_points(range(4, 5), source="kb")))],
        "set again by a has_id filter": [
            _set({"source": ""}, [5, 6]),
            _set({"source": "kb"}, flt=models.Filter(must=[models.HasIdCondition(has_id=[5, 6, 7])]))],
        "set again by an empty filter (every point)": [_set({"source": []}, [7]), _set({"source": "kb"}, flt=models.Filter())],
        "upserted without one, then tagged": [
            models.UpsertOperation(upsert=models.PointsList(points=_points(range(30, 32)))),
            _set({"source": "kb"}, [30, 31])],
        "removed, then the points deleted": [
            _set({"source": None}, [8]), models.DeleteOperation(delete=models.PointIdsList(points=[8]))],
    }
    for what, ops in again.items():
        assert _warned(lambda: client.batch_update_points("tickets", ops)) == [], what
    stored = client.scroll("tickets", limit=100)[0]
    assert len(stored) == 21 and all(p.payload.get("source") for p in stored)  # 8 deleted, 30 and 31 added
    # Not used up: a removal left as it is still warns.
    (msg,) = _warned(lambda: client.batch_update_points("tickets", [
        _set({"source": "faq"}, [9]), _set({"source": None}, [9])]))
    assert msg.startswith("qdrant_guard: batch_update_points (update_operations[1], a SetPayload) on collection "
                          "'tickets' sets the 'source' payload field (its source_field) of the 1 point(s) named by id "
                          "to null: they now carry no source")
    client.close()


def test_a_batch_warns_of_the_points_no_later_operation_tags_again(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    (msg,) = _warned(lambda: client.batch_update_points("tickets", [
        _set({"source": None}, [1, 2, 3]), _set({"source": "faq"}, [1, 2])]))
    assert "sets the 'source' payload field (its source_field) of the 1 point(s) named by id to null" in msg
    assert _source(client, 3) == "<absent>"
    client.close()
    client = _client()
    _tagged(client)
    (msg,) = _warned(lambda: client.batch_update_points("tickets", [
        models.UpsertOperation(upsert=models.PointsList(points=_points(range(30, 34)))),
        _set({"source": "kb"}, [30])]))
    assert msg.startswith("qdrant_guard: 3 of the 4 point(s) written to collection 'tickets' carry no 'source'")
    client.close()


def test_a_later_set_the_batch_cannot_tie_to_the_same_points_still_warns(workdir: Path) -> None:
    """The safe side: a filter other than has_id conditions may match other points once the earlier
    operations ran (here it matches the same ones, which the guard does not work out), a
    conditional upsert may not apply, and a has_id filter naming other points tags none of them."""
    unproved = {
        "a filter on another field": _set({"source": "kb"}, flt=models.Filter(must=[models.FieldCondition(
            key="lang", match=models.MatchValue(value="en"))])),
        "a has_id filter naming other points": _set({"source": "kb"}, flt=models.Filter(must=[
            models.HasIdCondition(has_id=[3])])),
        "a has_id filter with a should": _set({"source": "kb"}, flt=models.Filter(
            must=[models.HasIdCondition(has_id=[1, 2])], should=[models.HasIdCondition(has_id=[1])])),
        "a conditional upsert": models.UpsertOperation(upsert=models.PointsList(
            points=_points(range(1, 3), source="kb"), update_mode=models.UpdateMode.UPDATE_ONLY)),
    }
    for what, later in unproved.items():
        client = _client()
        _tagged(client, lang="en")
        found = _warned(lambda: client.batch_update_points("tickets", [_set({"source": None}, [1, 2]), later]))
        assert len(found) == 1 and "update_operations[0], a SetPayload" in found[0], what
        assert "of the 2 point(s) named by id to null" in found[0], what
        client.close()
    # A has_id filter naming one of them (and another point) tags that one only.
    client = _client()
    _tagged(client)
    (msg,) = _warned(lambda: client.batch_update_points("tickets", [
        _set({"source": None}, [1, 2]),
        _set({"source": "kb"}, flt=models.Filter(must=[models.HasIdCondition(has_id=[1, 3])]))]))
    assert "of the 1 point(s) named by id to null" in msg
    assert _source(client, 2) == "<absent>" and _source(client, 1) == "kb"
    client.close()
    # Removed by a filter, set again by the same filter: not proved either (a filter on the source
    # field matches nothing once the source is gone).
    client = _client()
    _tagged(client, lang="en")
    flt = models.Filter(must=[models.FieldCondition(key="lang", match=models.MatchValue(value="en"))])
    assert len(_warned(lambda: client.batch_update_points("tickets", [
        _set({"source": None}, flt=flt), _set({"source": "kb"}, flt=flt)]))) == 1
    client.close()


def test_the_ledger_ties_operations_of_one_shard_key_only() -> None:
    """Another shard key's points are other points, though their ids are the same (custom sharding;
    local mode has none, so the ledger is asked directly)."""
    from qdrant_guard.batchsources import SourceLedger

    ledger = SourceLedger("source")
    ledger.operation(0, _set({"source": None}, [1], shard_key="eu"))
    ledger.operation(1, _set({"source": "kb"}, [1], shard_key="us"))
    assert [len(left.ids or ()) for left in ledger.left] == [1]  # point 1 of "eu" still has none
    ledger.operation(2, _set({"source": "kb"}, [1], shard_key="eu"))
    assert [len(left.ids or ()) for left in ledger.left] == [0]
    # A UUID id is one point in any of the forms Qdrant takes.
    uid = "9b2f3c1e-0000-4000-8000-000000000001"
    ledger = SourceLedger("source")
    ledger.operation(0, _set({"source": None}, [uid.upper()]))
    ledger.operation(1, _set({"source": "kb"}, [uid.replace("-", "")]))
    assert [len(left.ids or ()) for left in ledger.left] == [0]


def test_the_async_client_judges_a_batch_by_what_it_leaves(workdir: Path) -> None:
    async def run() -> tuple[list[str], list[str]]:
        client = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        await client.create_collection("tickets", vectors_config=models.VectorParams(
            size=4, distance=models.Distance.COSINE))
        await client.upsert("tickets", _points(range(1, 6), source="a"))
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            await client.batch_update_points("tickets", [_set({"source": None}, [1]), _set({"source": "b"}, [1])])
        with warnings.catch_warnings(record=True) as left:
            warnings.simplefilter("always")
            await client.batch_update_points("tickets", [_set({"source": None}, [1, 2]), _set({"source": "b"}, [1])])
        await client.close()
        return ([f"{w.filename}: {w.message}" for w in again if w.category is UntaggedSourceWarning],
                [f"{w.filename}: {w.message}" for w in left if w.category is UntaggedSourceWarning])

    again, left = asyncio.run(run())
    assert again == []
    assert len(left) == 1 and left[0].startswith(__file__) and "of the 1 point(s) named by id to null" in left[0]


# ------------------------------------------------------------------ 2. key paths with [] indexing


def test_set_payload_key_paths_with_indexing_warn_when_they_can_take_the_source(workdir: Path) -> None:
    # (key, the source stored after it, per local mode): a string source indexed becomes [].
    touching = {"source[0]": [], "source[]": [], "source[0].page": [], '"source"[0]': [], "source[0][1]": [],
                "source.x[0]": {"x": []}}
    beside = ["pages[0]", "sources[0]", "src[].source", "meta[0].source", '"source.x"[0]']
    for key, stored in touching.items():
        client = _client()
        _tagged(client, n=3)
        (msg,) = _warned(lambda: client.set_payload("tickets", {"page": 1}, points=[1], key=key))
        assert _source(client, 1) == stored, key
        assert f"set_payload on collection 'tickets' " in msg and "of the 1 point(s) named by id" in msg, key
        if key != "source.x[0]":
            assert msg.startswith(f"qdrant_guard: set_payload on collection 'tickets' sets {key!r} of the 1 point(s) "
                                  "named by id: Qdrant replaces their 'source' payload field (its source_field) with "
                                  "[] where it is not a list, and rewrites the items the key indexes as objects where "
                                  "it is: they may now carry no source"), msg
        client.close()
    client = _client()
    _tagged(client, n=3)
    for key in beside:
        assert _warned(lambda: client.set_payload("tickets", {"page": 1}, points=[1], key=key)) == [], key
        assert _source(client, 1) == "doc1", key
    client.close()


def test_a_list_source_indexed_may_keep_some_of_its_sources(workdir: Path) -> None:
    """Why the warning says "may": which items a list keeps depends on the stored list, which the
    guard does not read before the write (it warns from the request)."""
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=1, vector=Q, payload={"text": "t", "source": ["a", "b"]})])
    (msg,) = _warned(lambda: client.set_payload("tickets", {"page": 1}, points=[1], key="source[0]"))
    assert "they may now carry no source; " in msg
    assert _source(client, 1) == [{"page": 1}, "b"]
    assert client.count("tickets", count_filter=models.Filter(must=[models.FieldCondition(
        key="source", match=models.MatchValue(value="b"))])).count == 1
    client.close()


def test_indexing_a_key_above_a_dotted_source_field_warns(workdir: Path) -> None:
    (workdir / "policy.toml").write_text(POLICY.replace('text_field = "text"',
                                                        'text_field = "text"\nsource_field = "metadata.source"'))
    for key, warns in (("metadata[0]", True), ("metadata[].source", True), ("metadata.source[]", True),
                       ("metadata.other[0]", False), ("meta[0]", False)):
        client = _client()
        client.upsert("tickets", [models.PointStruct(id=1, vector=Q, payload={"text": "t", "metadata": {"source": "d"}})])
        found = _warned(lambda: client.set_payload("tickets", {"source": "z"}, points=[1], key=key))
        metadata = client.retrieve("tickets", [1])[0].payload.get("metadata")
        if warns:
            assert len(found) == 1 and metadata in ([], {"source": []}), (key, metadata)
            if key != "metadata.source[]":
                assert "Qdrant replaces 'metadata', which holds the 'metadata.source' payload field" in found[0]
        else:
            assert found == [] and metadata["source"] == "d", (key, metadata)
        client.close()


def test_delete_payload_of_the_source_field_with_wildcard_indexing_warns(workdir: Path) -> None:
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=i, vector=Q, payload={"text": "t", "source": ["a", "b"]})
                              for i in (1, 2)])
    # Qdrant deletes nothing for a path ending in [N], nor through items that are not objects.
    for keys in (["source[0]"], ["source[].x"], ["sources[]"]):
        assert _warned(lambda: client.delete_payload("tickets", keys=keys, points=[1])) == [], keys
        assert _source(client, 1) == ["a", "b"]
    (msg,) = _warned(lambda: client.delete_payload("tickets", keys=['"source"[]'], points=[1]))
    assert _source(client, 1) == []
    assert ("delete_payload on collection 'tickets' deletes '\"source\"[]' of the 1 point(s) named by id, which "
            "empties their 'source' payload field (its source_field) where it is a list") in msg
    client.close()
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=1, vector=Q, payload={"text": "t", "source": ["a"]})])
    (msg,) = _warned(lambda: client.batch_update_points("tickets", [models.DeletePayloadOperation(
        delete_payload=models.DeletePayload(keys=["source[]"], points=[1]))]))
    assert msg.startswith("qdrant_guard: batch_update_points (update_operations[0], a DeletePayload)")
    client.close()


# ------------------------------------------------------------------ 3. -W error refuses the write


def _refused(call: Callable[[], Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UntaggedSourceWarning):
            call()


def test_under_w_error_every_warned_write_is_refused_with_nothing_stored(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    before = {p.id: p.payload for p in client.scroll("tickets", limit=100)[0]}
    entries = len(_records())
    calls = {
        "set_payload": lambda: client.set_payload("tickets", {"source": None}, points=[1, 2]),
        "set_payload key": lambda: client.set_payload("tickets", {"page": 1}, points=[1], key="source[0]"),
        "overwrite_payload": lambda: client.overwrite_payload("tickets", {"text": "x"}, points=[3]),
        "clear_payload": lambda: client.clear_payload("tickets", points_selector=[4]),
        "delete_payload": lambda: client.delete_payload("tickets", keys=["source"], points=[5]),
        "upsert": lambda: client.upsert("tickets", _points(range(40, 43))),
        "upload_points": lambda: client.upload_points("tickets", _points(range(40, 43))),
        "upload_collection": lambda: client.upload_collection("tickets", vectors=[Q], payload=[{"text": "t"}],
                                                              ids=[44]),
        "batch_update_points": lambda: client.batch_update_points("tickets", [
            _set({"lang": "en"}, [6]), _set({"source": None}, [7])]),
    }
    for what, call in calls.items():
        _refused(call)  # raised again each time: a refused write does not use the warning up
        assert {p.id: p.payload for p in client.scroll("tickets", limit=100)[0]} == before, what
    records = [r for r in _records()[entries:] if r["op"] != "scroll"]  # the test's own reads
    assert [(r["op"], r["verdict"]) for r in records] == [(r["op"], "UNSUPPORTED_WRITE") for r in records]
    assert len(records) == len(calls)
    assert {r["details"]["reason"] for r in records} == {"warning_raised"}
    assert records[0]["op"] == "set_payload" and records[-1]["op"] == "batch_update_points"
    # Shown, not raised, the same write is made, and warned of once.
    assert len(_warned(calls["set_payload"])) == 1 and _source(client, 1) == "<absent>"
    assert _warned(calls["delete_payload"]) == [] and _source(client, 5) == "<absent>"
    client.close()


def test_under_w_error_the_async_client_refuses_the_write_too(workdir: Path) -> None:
    async def run() -> tuple[int, Any, Any]:
        client = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        await client.create_collection("tickets", vectors_config=models.VectorParams(
            size=4, distance=models.Distance.COSINE))
        await client.upsert("tickets", _points(range(1, 4), source="a"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UntaggedSourceWarning):
                await client.upsert("tickets", _points(range(10, 12)))
            with pytest.raises(UntaggedSourceWarning):
                await client.set_payload("tickets", {"source": None}, points=[1])
            with pytest.raises(UntaggedSourceWarning):
                await client.batch_update_points("tickets", [_set({"source": None}, [2])])
            with pytest.raises(UntaggedSourceWarning):
                client.upload_points("tickets", _points(range(10, 12)))  # a plain method of the async client
        n = (await client.count("tickets")).count
        first = (await client.retrieve("tickets", [1, 2]))
        await client.close()
        return n, first[0].payload["source"], first[1].payload["source"]

    assert asyncio.run(run()) == (3, "a", "a")
