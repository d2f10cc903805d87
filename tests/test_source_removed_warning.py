"""``UntaggedSourceWarning`` for payload changes that take existing points' source away (review 60
left it open; 2026-12-07, h-srcwarn): ``set_payload`` of an empty source (or, with ``key=``, a
nested one), ``overwrite_payload``/``clear_payload`` without one, ``delete_payload`` of the source
field, and the same operations in ``batch_update_points``. Before, they were silent: the points
joined those without a source, which all count as one, and a top-10 held 4 of them. Each warns
like a write of untagged points: once per collection and client (one marking for both), at the
caller's line, only where the source cap is enforced and only when the source is removed.
"""
from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from qdrant_client import models

from test_onboard import POLICY, _agent, _client, _points, workdir  # noqa: F401  (workdir: fixture)

from qdrant_guard import AsyncQdrantClient, QdrantClient, UnsupportedWriteError, UntaggedSourceWarning

Q = [0.1, 0.2, 0.3, 0.4]


def _tagged(client: QdrantClient, n: int = 20, **payload: Any) -> None:
    """``n`` points of ``tickets``, each its own source (a top-10 holds 10)."""
    client.upsert("tickets", [models.PointStruct(id=i, vector=[0.1 * i, 0.2, 0.3, 0.4],
                                                 payload={"text": f"ticket {i}", "source": f"doc{i}", **payload})
                              for i in range(1, n + 1)])


def _warned(call: Callable[[], Any]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, UntaggedSourceWarning)]


def _text(found: list[warnings.WarningMessage]) -> str:
    assert len(found) == 1, [str(w.message) for w in found]
    return str(found[0].message)


def test_set_payload_emptying_the_source_warns_at_the_callers_line(workdir: Path) -> None:
    for value, named in ((None, "null"), ("", '""'), ([], "[]")):
        client = _client()
        _tagged(client)
        found = _warned(lambda: client.set_payload("tickets", {"source": value}, points=list(range(1, 11))))
        assert _text(found).startswith(
            "qdrant_guard: set_payload on collection 'tickets' sets the 'source' payload field (its source_field) "
            f"of the 10 point(s) named by id to {named}: they now carry no source; points without one all count "
            "as one source, so a top-10 query returns at most 4 of them"), value
        assert found[0].filename == __file__
        assert "set max_source_fraction in [collections.tickets.diversity]" in str(found[0].message)
        # What it warns of: the ten now count as one source, of which a top-20 holds 8.
        assert len(client.query_points("tickets", query=Q, limit=20).points) == 18
        client.close()


def test_set_payload_by_filter_names_the_points_the_filter_selects(workdir: Path) -> None:
    client = _client()
    _tagged(client, lang="en")
    flt = models.Filter(must=[models.FieldCondition(key="lang", match=models.MatchValue(value="en"))])
    found = _warned(lambda: client.set_payload("tickets", {"source": None}, points=flt))
    assert ("sets the 'source' payload field (its source_field) of the points the filter selects to null"
            in _text(found))
    client.close()


def test_set_payload_below_a_key_reaching_the_source_warns(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    found = _warned(lambda: client.set_payload("tickets", {"page": 3}, points=[1, 2], key="source"))
    assert "sets the 'source' payload field (its source_field) of the 2 point(s) named by id to an object" in _text(found)
    client.close()
    (workdir / "policy.toml").write_text(POLICY.replace('text_field = "text"',
                                                        'text_field = "text"\nsource_field = "metadata.source"'))
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=i, vector=Q, payload={"text": "t", "metadata": {"source": f"d{i}"}})
                              for i in range(1, 4)])
    found = _warned(lambda: client.set_payload("tickets", {"source": ""}, points=[1], key="metadata"))
    assert ("sets the 'metadata.source' payload field (its source_field) of the 1 point(s) named by id to \"\""
            in _text(found))
    client.close()
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=1, vector=Q, payload={"text": "t", "metadata": {"source": "d"}})])
    found = _warned(lambda: client.set_payload("tickets", {"metadata": {"page": 2}}, points=[1]))
    assert ("replaces 'metadata' of the 1 point(s) named by id with a value without the 'metadata.source' payload "
            "field" in _text(found))
    assert client.retrieve("tickets", [1])[0].payload["metadata"] == {"page": 2}
    client.close()


def test_overwrite_and_clear_payload_without_a_source_warn(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    found = _warned(lambda: client.overwrite_payload("tickets", {"text": "new"}, points=[1, 2, 3]))
    assert ("overwrite_payload on collection 'tickets' overwrites the payload of the 3 point(s) named by id with "
            "one without a 'source' field (its source_field): they now carry no source" in _text(found))
    client.close()
    client = _client()
    _tagged(client)
    found = _warned(lambda: client.clear_payload("tickets", points_selector=[4, 5]))
    assert ("clear_payload on collection 'tickets' clears the payload of the 2 point(s) named by id, its 'source' "
            "field (the source_field) with it" in _text(found))
    client.close()


def test_delete_payload_of_the_source_field_or_a_key_holding_it_warns(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    found = _warned(lambda: client.delete_payload("tickets", keys=["lang", "source"], points=[1, 2]))
    assert ("delete_payload on collection 'tickets' deletes the 'source' payload field (its source_field) of the "
            "2 point(s) named by id" in _text(found))
    client.close()
    (workdir / "policy.toml").write_text(POLICY.replace('text_field = "text"',
                                                        'text_field = "text"\nsource_field = "metadata.source"'))
    client = _client()
    client.upsert("tickets", [models.PointStruct(id=1, vector=Q, payload={"text": "t", "metadata": {"source": "d"}})])
    found = _warned(lambda: client.delete_payload("tickets", keys=["metadata"], points=[1]))
    assert ("deletes 'metadata' of the 1 point(s) named by id, which holds the 'metadata.source' payload field"
            in _text(found))
    client.close()


def test_each_payload_operation_of_a_batch_warns_naming_its_place(workdir: Path) -> None:
    keep = models.SetPayloadOperation(set_payload=models.SetPayload(payload={"lang": "en"}, points=[1]))
    cases = {
        "update_operations[1], a SetPayload) on collection 'tickets' sets the 'source' payload field (its "
        "source_field) of the 2 point(s) named by id to null":
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"source": None}, points=[1, 2])),
        "update_operations[1], a OverwritePayload) on collection 'tickets' overwrites the payload of the 1 "
        "point(s) named by id with one without a 'source' field":
            models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"text": "x"}, points=[3])),
        "update_operations[1], a DeletePayload) on collection 'tickets' deletes the 'source' payload field (its "
        "source_field) of the points the filter selects":
            models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["source"], filter=models.Filter(
                must=[models.HasIdCondition(has_id=[4])]))),
    }
    for expected, op in cases.items():
        client = _client()
        _tagged(client)
        found = _warned(lambda: client.batch_update_points("tickets", [keep, op]))
        assert _text(found).startswith("qdrant_guard: batch_update_points (" + expected), expected
        assert found[0].filename == __file__
        client.close()


def test_changes_that_leave_a_source_do_not_warn_nor_use_up_the_warning(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    calls = [
        lambda: client.set_payload("tickets", {"source": "faq", "lang": "en"}, points=[1, 2]),
        lambda: client.set_payload("tickets", {"source": ["faq", "kb"]}, points=[3]),
        lambda: client.set_payload("tickets", {"lang": "en"}, points=[4]),
        lambda: client.set_payload("tickets", {"source": None}, points=[5], key="meta"),  # beside the field
        lambda: client.set_payload("tickets", {"page": 1}, points=[5], key="pages[0]"),  # a [] path beside it
        lambda: client.overwrite_payload("tickets", {"text": "x", "source": "faq"}, points=[6]),
        lambda: client.delete_payload("tickets", keys=["lang", "source.page"], points=[1]),
        lambda: client.batch_update_points("tickets", [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"source": "kb"}, points=[7])),
            models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
                payload={"text": "y", "source": "kb"}, points=[8])),
            models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["lang"], points=[2]))]),
    ]
    for call in calls:
        assert _warned(call) == []
    assert len(client.query_points("tickets", query=Q, limit=10).points) == 10
    assert len(_warned(lambda: client.delete_payload("tickets", keys=["source"], points=[9]))) == 1
    client.close()


def test_no_warning_where_the_source_cap_is_not_enforced(workdir: Path) -> None:
    for section in ('[collections.tickets.diversity]\nmode = "monitor"\n',
                    "[collections.tickets.diversity]\nmax_source_fraction = 1.0\n"):
        (workdir / "policy.toml").write_text(POLICY + section)
        client = _client()
        _tagged(client)
        assert _warned(lambda: client.set_payload("tickets", {"source": None}, points=[1, 2])) == [], section
        assert _warned(lambda: client.delete_payload("tickets", keys=["source"], points=[3])) == [], section
        client.close()
    client = _client()
    client.upsert("kb", _points(range(1, 4), source="a"))
    assert _warned(lambda: client.set_payload("kb", {"source": None}, points=[1, 2])) == []  # PUBLIC: no cap
    client.close()


def test_one_marking_for_writes_and_payload_changes(workdir: Path) -> None:
    client = _client()
    _tagged(client)
    assert len(_warned(lambda: client.upsert("tickets", _points(range(30, 32))))) == 1
    assert _warned(lambda: client.set_payload("tickets", {"source": None}, points=[1])) == []
    client.close()
    client = _client()
    _tagged(client)
    view = client.with_principal(_agent())
    assert len(_warned(lambda: view.delete_payload("tickets", keys=["source"], points=[1]))) == 1
    assert _warned(lambda: client.overwrite_payload("tickets", {"text": "x"}, points=[2])) == []
    assert _warned(lambda: client.upsert("tickets", _points(range(30, 32)))) == []
    client.close()


def test_a_refused_change_does_not_warn_nor_use_up_the_warning(workdir: Path) -> None:
    client = _client()
    _tagged(client, n=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(UnsupportedWriteError, match="do not exist"):
            client.set_payload("tickets", {"source": None}, points=[1, 99])
    assert not [w for w in caught if issubclass(w.category, UntaggedSourceWarning)]
    assert len(_warned(lambda: client.set_payload("tickets", {"source": None}, points=[1]))) == 1
    client.close()


def test_the_async_clients_warning_lands_on_the_callers_line(workdir: Path) -> None:
    async def run() -> list[warnings.WarningMessage]:
        client = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        await client.create_collection("tickets", vectors_config=models.VectorParams(
            size=4, distance=models.Distance.COSINE))
        await client.upsert("tickets", _points(range(1, 4), source="a"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await client.delete_payload("tickets", keys=["source"], points=[1])
            await client.set_payload("tickets", {"source": None}, points=[2])
        await client.close()
        return [w for w in caught if issubclass(w.category, UntaggedSourceWarning)]

    found = asyncio.run(run())
    assert len(found) == 1 and found[0].filename == __file__
