"""Review 60: the code merged 2026-12-07 21:55-22:55 UTC, probed adversarially (real qdrant-client
local mode throughout).

* ``receipts.averify`` and the sans-IO core it shares with ``verify()``: one-shot iterables as ids
  and revoked, a read failing mid-way, a cancelled caller, a concurrent guarded write. All held.
* ``UntaggedSourceWarning``: every write form counts, a refused write does not warn, views share
  "once". Found: ``batch_update_points`` wrote untagged points without a word; a write whose
  caller was cancelled (a ``wait_for`` timing out as the write returns) left its warning for the
  next call of the client to show, whichever it was (another collection's read, another
  principal's view), and its collection never warned again; the pending warnings were one queue
  per client, so one thread's call could show another's (not reproduced in 60 runs: the window is
  a few statements; gone by construction, the list is the call's own).
* ``missing_key_files``: found: a missing ``signing_key`` with a missing ``audit_log`` directory
  still took two starts (the single-key case returned None, so the directory went unnamed); a
  missing signing key whose own .pub the policy lists too got its ``keys new`` command twice, the
  second refusing to overwrite the first's key.
"""
from __future__ import annotations

import asyncio
import shlex
import warnings
from pathlib import Path

import numpy as np
import pytest
from guardkit import audit_records
from qdrant_client import AsyncQdrantClient as RawAsyncClient
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models
from test_onboard import POLICY, _agent, _client, _points, workdir  # noqa: F401  (workdir: fixture)
from test_receipt_verify_async import _async_reports, _reasons, _sync_reports, store  # noqa: F401
from test_receipt_verify_client import _pii, _trusted

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, QdrantClient, UntaggedSourceWarning, cli
from qdrant_guard.receipts import averify, verify

# -- averify ----------------------------------------------------------------------------------


def test_generators_as_ids_and_revoked_give_the_lists_reports(store):
    kit, path = store
    trusted = _trusted(kit)
    (kid,) = trusted
    ids = [21, 0, 10, 20, 99, 0]
    want = _sync_reports(path, trusted_keys=trusted, ids=ids, revoked=[kid])
    assert {r.reason for r in want if r.check.key_id == kid} == {"revoked_key"}
    for run in (_sync_reports, _async_reports):
        got = run(path, trusted_keys=trusted, ids=(i for i in ids), revoked=(k for k in [kid]), batch_size=2)
        assert got == want, run.__name__


def test_a_read_failing_midway_raises_as_verify_and_frees_the_owners_client(store):
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        local = owner._client  # the real local-mode store; its second page fails
        real, calls = local.scroll, []

        async def failing(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("disk gone")
            return await real(*args, **kwargs)

        local.scroll = failing
        with pytest.raises(RuntimeError, match="disk gone"):
            await averify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2)
        local.scroll = real
        assert owner._alock.owner is None  # released: the next guarded call runs
        assert await owner.count("pii") is not None
        assert [r["op"] for r in audit_records(kit)].count("receipts.verify") == 1
        await owner.close()

    asyncio.run(run())


def test_a_cancelled_averify_waiting_for_the_client_leaves_no_entry_and_no_lock(store):
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        hold = await owner._alock.acquire()  # another guarded call holds the client
        before = audit_records(kit)
        task = asyncio.ensure_future(averify(owner, "pii", trusted_keys=_trusted(kit)))
        for _ in range(50):
            await asyncio.sleep(0.01)
            if owner._alock._waiters:
                break
        assert owner._alock._waiters, "averify never waited for the client"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        owner._alock.release(hold)
        assert owner._alock.owner is None
        assert audit_records(kit) == before  # no entry for reads never made
        # Verified afterwards, its one entry written then.
        assert _reasons(await averify(owner, "pii", [10], trusted_keys=_trusted(kit))) == {(10, ""): "vector_mismatch"}
        assert [r["op"] for r in audit_records(kit)[len(before):]] == ["receipts.verify"]
        await owner.close()

    asyncio.run(run())


def test_a_cancellation_landing_in_a_page_read_unwinds_averify_and_frees_the_client(store):
    kit, path = store
    cfg = kit.config({"pii": _pii()})

    async def run() -> None:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        local = owner._client
        real, calls = local.scroll, []

        async def cancelled_in_page_two(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                asyncio.current_task().cancel()  # a wait_for timing out during the read
            return await real(*args, **kwargs)

        local.scroll = cancelled_in_page_two
        before = len(audit_records(kit))
        with pytest.raises(asyncio.CancelledError):
            await averify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2)
        local.scroll = real
        assert len(calls) == 2 and owner._alock.owner is None
        assert [r["op"] for r in audit_records(kit)[before:]] == ["receipts.verify"]
        assert (await owner.count("pii")).count == 8
        await owner.close()

    asyncio.run(run())


def test_a_sync_verify_failing_midway_frees_the_owners_client(store):
    import threading

    kit, path = store
    owner = QdrantClient(path=path, guard=kit.config({"pii": _pii()}), principal=kit.principal("alice", "hr"))
    local = owner._client
    real, calls = local.scroll, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk gone")
        return real(*args, **kwargs)

    local.scroll = failing
    with pytest.raises(RuntimeError, match="disk gone"):
        verify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2)
    local.scroll = real
    took: list[bool] = []

    def take() -> None:  # another thread's guarded call would wait for this
        took.append(owner._local_lock.acquire(timeout=5))
        owner._local_lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join()
    assert took == [True] and owner.count("pii").count == 8
    owner.close()


def test_averify_beside_guarded_writes_of_the_same_client(store):
    kit, path = store
    cfg = kit.config({"pii": _pii()})
    rng = np.random.default_rng(9)

    async def run() -> tuple[list, list]:
        owner = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
        writes = [owner.upsert("pii", [models.PointStruct(id=100 + i, vector=rng.normal(size=16).tolist(),
                                                           payload={"source": "s"})]) for i in range(4)]
        got = await asyncio.gather(averify(owner, "pii", trusted_keys=_trusted(kit), batch_size=2), *writes)
        after = await averify(owner, "pii", list(range(100, 104)), trusted_keys=_trusted(kit))
        assert owner._alock.owner is None
        await owner.close()
        return got[0], after

    during, after = asyncio.run(run())
    # Each new point is either not yet there or verified, never half-read; afterwards all verify.
    assert all(r.reason == "ok" for r in during if isinstance(r.point_id, int) and r.point_id >= 100)
    assert {r.reason for r in after} == {"ok"} and len(after) == 4


# -- UntaggedSourceWarning --------------------------------------------------------------------


def _untagged(caught: list) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UntaggedSourceWarning)]


def test_every_write_form_counts_its_untagged_points(workdir):
    client = _client()
    vec = [0.1, 0.2, 0.3, 0.4]
    payloads = [{"text": "t", "source": s} for s in ("a", None, "", [], ["b"], "c")]
    forms = {
        "list": lambda n: client.upsert(n, [models.PointStruct(id=i, vector=vec, payload=p)
                                            for i, p in enumerate(payloads)]),
        "batch": lambda n: client.upsert(n, models.Batch(ids=list(range(6)), vectors=[vec] * 6, payloads=payloads)),
        "upload_points": lambda n: client.upload_points(n, (models.PointStruct(id=i, vector=vec, payload=p)
                                                            for i, p in enumerate(payloads))),
        "upload_collection": lambda n: client.upload_collection(n, vectors=[vec] * 6, ids=iter(range(6)),
                                                                payload=(p for p in payloads)),
    }
    for form, write in forms.items():
        client.close()
        client = _client()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write("tickets")
        # null, "" and [] name no source: 3 of 6; a generator of payloads is read once (6 written).
        assert [m.split(" carry")[0] for m in _untagged(caught)] == [
            "qdrant_guard: 3 of the 6 point(s) written to collection 'tickets'"], form
        assert client.count("tickets").count == 6, form
    client.close()


def test_a_batch_of_upserts_warns_too(workdir):
    # Before, batch_update_points wrote untagged points without a word (the capped top-10 alike).
    client = _client()
    ops = [models.UpsertOperation(upsert=models.PointsList(points=_points(range(1, 4)))),
           models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["x"], points=[1])),
           models.UpsertOperation(upsert=models.PointsList(points=_points(range(4, 6), source="faq")))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.batch_update_points("tickets", ops)
        client.batch_update_points("tickets", ops[:1])  # once per collection
    found = _untagged(caught)
    assert len(found) == 1 and found[0].startswith(
        "qdrant_guard: 3 of the 5 point(s) written to collection 'tickets' carry no 'source' payload field")
    assert caught[0].filename == __file__
    assert len(client.query_points("tickets", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == 5  # 4 + faq's
    client.close()


def test_a_public_collection_neither_caps_nor_warns(workdir):
    client = _client()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.upsert("kb", _points(range(1, 21)))
        client.batch_update_points("kb", [models.UpsertOperation(upsert=models.PointsList(
            points=_points(range(21, 23))))])
    assert not _untagged(caught)
    assert len(client.query_points("kb", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == 10
    client.close()


def test_a_dotted_source_field_is_read_nested(workdir):
    (workdir / "policy.toml").write_text(POLICY.replace('text_field = "text"',
                                                        'text_field = "text"\nsource_field = "metadata.source"'))
    client = _client()
    pts = [models.PointStruct(id=i, vector=[0.1, 0.2, 0.3, 0.4], payload={"text": "t", **m})
           for i, m in enumerate([{"metadata": {"source": "a"}}, {"metadata.source": "flat"}, {"source": "x"}])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.upsert("tickets", pts)
    (msg,) = _untagged(caught)
    assert msg.startswith("qdrant_guard: 2 of the 3 point(s) written to collection 'tickets' carry no "
                          "'metadata.source' payload field")
    client.close()


def test_a_refused_write_does_not_warn_nor_use_up_the_warning(workdir):
    client = _client()
    secret = "client = Api(key='sk_live_51HqLyjWDarjtT1zdp7dcXYZabcdef123456')"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(GuardRefusal):
            client.upsert("tickets", [*_points(range(1, 4)), models.PointStruct(
                id=9, vector=[0.1, 0.2, 0.3, 0.4], payload={"text": secret})])
        assert not _untagged(caught)
        client.upsert("tickets", _points(range(1, 4)))
        assert len(_untagged(caught)) == 1
    client.close()


def test_views_of_one_client_warn_once_per_collection(workdir):
    client = _client()
    view = client.with_principal(_agent())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        view.upsert("tickets", _points(range(1, 3)))
        client.upsert("tickets", _points(range(3, 5)))
        view.upsert("tickets", _points(range(5, 7)))
    assert len(_untagged(caught)) == 1
    client.close()


def test_a_write_whose_caller_was_cancelled_leaves_its_warning_to_no_other_call(workdir):
    # A cancellation landing as the write returns (asyncio.wait_for timing out then): the write is
    # made. Before review 60 the next call of the client showed its warning, whichever it was
    # (here a count of another collection, at its line), and the collection never warned again.
    # Since 2026-12-08 (h-warn2) the warning is shown before the write is sent: the cancelled call
    # itself shows it, and no later call repeats it.
    async def run() -> tuple[list[str], list[str], list[str], int]:
        client = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        for name in ("tickets", "kb"):
            await client.create_collection(name, vectors_config=models.VectorParams(
                size=4, distance=models.Distance.COSINE))
        local = client._client
        real = local.upsert

        async def cancelled_as_it_returns(*args, **kwargs):
            asyncio.current_task().cancel()
            return await real(*args, **kwargs)

        local.upsert = cancelled_as_it_returns
        with warnings.catch_warnings(record=True) as cancelled:
            warnings.simplefilter("always")
            with pytest.raises(asyncio.CancelledError):
                await client.upsert("tickets", _points(range(1, 6)))
        local.upsert = real
        with warnings.catch_warnings(record=True) as other:
            warnings.simplefilter("always")
            await client.count("kb")
        with warnings.catch_warnings(record=True) as next_write:
            warnings.simplefilter("always")
            await client.upsert("tickets", _points(range(6, 8)))
        n = (await client.count("tickets")).count
        await client.close()
        return _untagged(cancelled), _untagged(other), _untagged(next_write), n

    cancelled, other, next_write, n = asyncio.run(run())
    assert n == 7  # the cancelled write was made
    assert len(cancelled) == 1 and "5 of the 5 point(s)" in cancelled[0]
    assert other == [] and next_write == []


# -- missing_key_files ------------------------------------------------------------------------


def test_a_missing_signing_key_and_audit_directory_are_named_in_one_error(workdir):
    (workdir / "keys" / "guard.key").unlink()
    (workdir / "policy.toml").write_text(POLICY.replace('audit_log = "audit.jsonl"', 'audit_log = "logs/audit.jsonl"'))
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    msg = str(exc.value)
    assert "1 key file the policy names does not exist" in msg
    assert f"{workdir / 'keys' / 'guard.key'} (signing_key): `qdrant-guard keys new --out" in msg
    assert f"also, audit_log's directory {workdir / 'logs'} does not exist" in msg


def test_the_signing_keys_own_pub_missing_too_needs_its_command_once(workdir):
    # Before, the .pub's line repeated `keys new --out keys/guard.key`: run as listed, the second
    # refused to overwrite the key the first had made.
    (workdir / "keys" / "guard.key").unlink()
    (workdir / "keys" / "guard.key.pub").unlink()
    (workdir / "policy.toml").write_text('audit_trusted_keys = ["keys/guard.key.pub"]\n' + POLICY)
    with pytest.raises(ConfigError) as exc:
        QdrantClient(":memory:", guard="policy.toml")
    msg = str(exc.value)
    assert "2 key files the policy names do not exist" in msg
    assert f"{workdir / 'keys' / 'guard.key.pub'} (audit_trusted_keys): written beside " in msg
    commands = [shlex.split(part) for part in msg.split("`")[1::2]]
    assert len(commands) == 1
    for argv in commands:
        assert argv[0] == "qdrant-guard" and cli.main(argv[1:]) == 0
    QdrantClient(":memory:", guard="policy.toml").close()
