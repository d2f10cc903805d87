"""Mutation pass 27: tests that kill the mutants earlier tests let through (batchplaces, writes,
keys, policy, async_lock, async_driver, _facade). Real qdrant-client local mode where a client is
involved; the batchplaces helpers are called directly where no client can reach the case."""
from __future__ import annotations

import pytest
from qdrant_client.http import models

from qdrant_guard import GuardRefusal
from qdrant_guard.batchplaces import operation_place, placed
from qdrant_guard.errors import AuditError, InvalidVectorError

METHOD = "batch_update_points"


# -- batchplaces -----------------------------------------------------------------------------
def test_an_operation_that_is_no_model_is_named_by_its_index_only():
    # A dict (or any object without pydantic fields) where an operation belongs: only the index.
    exc = InvalidVectorError("point 4: bad")
    assert operation_place({"upsert": {"points": []}}, 2, exc) == "update_operations[2]"
    assert operation_place(object(), 0, exc) == "update_operations[0]"


def test_an_audit_failure_and_a_foreign_error_are_never_renamed():
    audit = AuditError("batch_update_points: the audit log could not be written")
    assert placed(audit, METHOD, "update_operations[1].upsert", 1) is audit
    foreign = RuntimeError("batch_update_points: qdrant went away")
    assert placed(foreign, METHOD, "update_operations[1].upsert", 1) is foreign


def test_a_refusal_whose_message_does_not_start_with_its_directive_is_kept():
    refusal = GuardRefusal("CREDENTIAL_IN_TEXT", "text contains credentials", point_ids=[4])
    refusal.directive = "something else entirely"
    assert placed(refusal, METHOD, "update_operations[1].upsert.points[0]", 1) is refusal
    assert str(refusal) == "CREDENTIAL_IN_TEXT: text contains credentials [points: 4]"


def test_an_error_class_that_cannot_be_made_from_one_message_is_kept():
    class TwoPart(ValueError):
        def __new__(cls, head, tail):
            return super().__new__(cls, f"{head}{tail}")

        def __init__(self, head, tail):
            super().__init__(f"{head}{tail}")

    exc = TwoPart("point 4: ", "bad vector")
    assert placed(exc, METHOD, "update_operations[1].upsert", 1) is exc


# -- writes: a PUBLIC batch ------------------------------------------------------------------
def _public_client(kit):
    from guardkit import DIM, create

    from qdrant_guard import QdrantClient

    config = kit.config({"pub": {"class": "PUBLIC", "text_field": "text"}})
    client = QdrantClient(":memory:", guard=config, principal=kit.principal("alice", "hr"))
    create(client, "pub")
    client.upsert("pub", [models.PointStruct(id=i, vector=[0.25] * DIM, payload={"y": 0}) for i in (1, 2)])
    return client


@pytest.fixture()
def kit(tmp_path):
    from guardkit import make_kit

    return make_kit(tmp_path)


def test_a_public_batch_is_sent_and_answered(kit):
    client = _public_client(kit)
    answers = client.batch_update_points("pub", [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 2}, points=[2]))])
    assert [a.status for a in answers] == [models.UpdateStatus.COMPLETED] * 2
    got = {p.id: p.payload for p in client.retrieve("pub", [1, 2])}
    assert got == {1: {"y": 1}, 2: {"y": 2}}


def test_a_public_batch_operation_whose_error_names_it_already_stops_the_batch(kit):
    from qdrant_guard.errors import GuardArgumentTypeError

    client = _public_client(kit)
    bad = models.UpdateVectorsOperation(update_vectors=models.UpdateVectors.model_construct(points=[{"bogus": 1}]))
    with pytest.raises(GuardArgumentTypeError) as ei:
        client.batch_update_points("pub", [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[1])), bad])
    assert str(ei.value).startswith("update_operations[1].update_vectors.points[0] is a dict")
    assert ei.value.__cause__ is None
    # Nothing was sent: the good operation before it did not run on its own.
    assert {p.id: p.payload for p in client.retrieve("pub", [1, 2])} == {1: {"y": 0}, 2: {"y": 0}}


# -- async_driver: a request made while unwinding a cancellation ------------------------------
def test_a_request_made_while_unwinding_a_cancellation_waits_for_the_lock():
    # Cancelled at its Offload (the lock released for the step), an operation that then makes a
    # request (none of the guard's does) takes the lock first: it waits for the task holding it.
    import asyncio
    import threading

    from qdrant_guard.async_driver import TaskLock, drive_async
    from qdrant_guard.pipeline import Call, Offload

    order: list[str] = []
    stepping = threading.Event()
    finish_step = threading.Event()

    def step() -> None:
        stepping.set()
        finish_step.wait(30)

    def op():
        try:
            yield Offload(step)
        except asyncio.CancelledError:
            yield Call("unwind", {})
            raise
        return "done"

    async def invoke(call: Call) -> str:
        order.append(call.method)
        return "ok"

    async def main() -> None:
        lock = TaskLock()
        task = asyncio.create_task(drive_async(op(), invoke, lock=lock))
        await asyncio.to_thread(stepping.wait, 30)  # the step runs in its thread, the lock free
        hold = await lock.acquire()
        task.cancel()
        for _ in range(50):  # give the cancelled task every chance to run ahead
            await asyncio.sleep(0)
        finish_step.set()
        await asyncio.sleep(0.05)
        order.append("other holder releases")
        lock.release(hold)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lock.owner is None

    asyncio.run(main())
    assert order == ["other holder releases", "unwind"]


# -- async_lock: a plain holder ----------------------------------------------------------------
def test_a_plain_holder_is_the_owner_and_a_loop_thread_is_refused_while_it_holds():
    import asyncio
    import threading

    from qdrant_guard.async_driver import TaskLock

    class Refused(Exception):
        pass

    lock = TaskLock()
    lock.acquire_plain(Refused)
    try:
        assert lock.owner is threading.current_thread()
        seen: list[object] = []

        def on_a_loop() -> None:
            async def main() -> None:
                try:
                    lock.acquire_plain(Refused)
                except Refused:
                    seen.append("refused")
                else:
                    seen.append("took it")
                    lock.release()
            try:
                asyncio.run(main())
            except BaseException as exc:  # noqa: BLE001 - reported below
                seen.append(exc)

        worker = threading.Thread(target=on_a_loop)
        worker.start()
        worker.join(30)
        assert seen == ["refused"]
    finally:
        lock.release()
    assert lock.owner is None


def test_a_task_that_takes_the_lock_plainly_is_its_owner_and_takes_it_again():
    import asyncio

    from qdrant_guard.async_driver import TaskLock

    lock = TaskLock()

    async def main() -> None:
        lock.acquire_plain(RuntimeError)
        assert lock.owner is asyncio.current_task()
        hold = await lock.acquire()  # the same task: again, as an RLock
        lock.release(hold)
        lock.release()
        assert lock.owner is None

    asyncio.run(main())


def test_a_queued_waiter_whose_coroutine_is_closed_leaves_the_queue():
    # As the collector closes a waiter on a dropped loop: the lock is not handed to it later.
    import asyncio

    from qdrant_guard.async_driver import TaskLock

    lock = TaskLock()

    async def main() -> None:
        hold = await lock.acquire()
        waiter = asyncio.get_running_loop().create_task(lock.acquire())
        for _ in range(3):
            await asyncio.sleep(0)  # the waiter is queued, waiting
        assert not waiter.done()
        waiter.get_coro().close()  # GeneratorExit at its await, as the collector throws it
        lock.release(hold)
        assert lock.owner is None
        assert await lock.acquire() is not None  # free for the next
        waiter.cancel()

    asyncio.run(main())


# -- _facade: operations given to the guard ------------------------------------------------------
def _alias_owner(kit):
    from guardkit import create

    from qdrant_guard import QdrantClient

    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True}
    owner = QdrantClient(":memory:", guard=kit.config({"hr": pol, "hr_alias": pol}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    return owner


def test_a_grpc_alias_operation_is_converted_and_applied(kit):
    from qdrant_client import grpc

    owner = _alias_owner(kit)
    owner.update_collection_aliases(change_aliases_operations=[
        grpc.AliasOperations(create_alias=grpc.CreateAlias(collection_name="hr", alias_name="hr_alias"))])
    assert [(a.alias_name, a.collection_name) for a in owner.get_aliases().aliases] == [("hr_alias", "hr")]


def test_a_model_of_another_kind_is_refused_where_an_operation_belongs(kit):
    from qdrant_guard.errors import UnsupportedWriteError

    owner = _alias_owner(kit)
    owner.upsert("hr", [models.PointStruct(id=1, vector=[0.25] * 16, payload={"y": 0})])
    with pytest.raises(UnsupportedWriteError, match=r"update_operations\[0\] is a qdrant_client\.http\.models\.models\."
                                                    r"PointStruct, which the guard cannot check"):
        owner.batch_update_points("hr", [models.PointStruct(id=1, vector=[0.5] * 16, payload={"y": 1})])
    with pytest.raises(UnsupportedWriteError, match=r"change_aliases_operations\[0\] is a .*CreateAlias, which"):
        owner.update_collection_aliases(change_aliases_operations=[
            models.CreateAlias(collection_name="hr", alias_name="hr_alias")])
    assert owner.get_aliases().aliases == []
    assert owner.retrieve("hr", [1])[0].payload == {"y": 0}


def test_a_hold_handed_over_is_its_own_and_a_stale_release_of_it_releases_nothing():
    import asyncio

    from qdrant_guard.async_driver import TaskLock

    lock = TaskLock()

    async def main() -> None:
        first = await lock.acquire()
        waiting = asyncio.get_running_loop().create_task(lock.acquire())
        for _ in range(3):
            await asyncio.sleep(0)
        lock.release(first)
        handed = await waiting  # handed over by the release, not taken free
        assert handed is not None and handed is not first
        lock.release(handed)
        third = await lock.acquire()
        lock.release(handed)  # stale: names a hold that is no longer the lock's
        assert lock.owner is asyncio.current_task()
        lock.release(third)
        assert lock.owner is None

    asyncio.run(main())


def test_a_plain_holder_takes_the_lock_again_as_an_rlock():
    import asyncio
    import threading

    from qdrant_guard.async_driver import TaskLock

    class Refused(Exception):
        pass

    lock = TaskLock()

    async def in_a_task() -> None:  # a task on a running loop: refused if it were not the holder
        lock.acquire_plain(Refused)
        lock.acquire_plain(Refused)
        lock.release()
        assert lock.owner is asyncio.current_task()
        lock.release()

    asyncio.run(in_a_task())
    assert lock.owner is None

    done: list[str] = []

    def in_a_thread() -> None:  # a thread without a loop: it would wait for itself
        lock.acquire_plain(Refused)
        lock.acquire_plain(Refused)
        lock.release()
        lock.release()
        done.append("done")

    worker = threading.Thread(target=in_a_thread, daemon=True)
    worker.start()
    worker.join(20)
    assert done == ["done"] and lock.owner is None


def test_an_invalid_dict_operation_names_its_first_three_problems_and_counts_the_rest(kit):
    from qdrant_guard.errors import UnsupportedWriteError

    owner = _alias_owner(kit)
    three = {"set_payload": {"payload": 1, "points": "x", "key": 5}}
    with pytest.raises(UnsupportedWriteError) as ei:
        owner.batch_update_points("hr", [three])
    assert str(ei.value) == (
        "batch_update_points() update_operations[0] is not a valid models.SetPayloadOperation: "
        "set_payload.payload (Input should be a valid dictionary); set_payload.points (Input should be a valid "
        "list); set_payload.key (Input should be a valid string). Pass the operation as a "
        "models.SetPayloadOperation")
    four = {"set_payload": {"payload": 1, "points": "x", "key": 5, "extra": 1}}
    with pytest.raises(UnsupportedWriteError) as ei:
        owner.batch_update_points("hr", [four])
    assert "set_payload.key (Input should be a valid string) and 1 more. Pass" in str(ei.value)
    seven = {"set_payload": {"payload": 1, "points": "x", "key": 5, "shard_key": 1.5}}
    with pytest.raises(UnsupportedWriteError) as ei:
        owner.batch_update_points("hr", [seven])
    assert ("set_payload.points (Input should be a valid list); set_payload.shard_key.int (Input should be a valid "
            "integer) and 4 more. Pass") in str(ei.value)


# -- errors: a refusal's message -------------------------------------------------------------------
def test_a_refusals_message_lists_up_to_five_point_ids_and_counts_the_rest():
    assert str(GuardRefusal("V", "do this")) == "V: do this"
    assert str(GuardRefusal("V", "do this", point_ids=[1])) == "V: do this [points: 1]"
    assert str(GuardRefusal("V", "do this", point_ids=[1, 2, 3, 4, "a"])) == "V: do this [points: 1, 2, 3, 4, 'a']"
    assert str(GuardRefusal("V", "do this", point_ids=range(1, 7))) == "V: do this [points: 1, 2, 3, 4, 5 (+1 more)]"
    assert str(GuardRefusal("V", "do this", point_ids=range(1, 10))) == "V: do this [points: 1, 2, 3, 4, 5 (+4 more)]"


def test_a_stopped_holder_is_looked_for_among_the_garbage_at_most_once_an_interval(monkeypatch):
    # A full collection can take a tenth of a second: waiters recheck often, collections are spaced.
    import asyncio
    import gc

    from qdrant_guard.async_driver import TaskLock

    lock = TaskLock()
    loop = asyncio.new_event_loop()

    async def hold() -> None:
        await lock.acquire()
        await asyncio.Event().wait()

    async def until_held() -> None:
        while lock.owner is None:
            await asyncio.sleep(0)

    task = loop.create_task(hold())
    loop.run_until_complete(until_held())  # stopped, its holder pending, the loop still referenced
    collections: list[int] = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(1) or real(*a))
    for _ in range(3):
        lock._reclaim()
    assert collections == [1] and lock.owner is task
    task.cancel()
    loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    loop.close()


# -- _facade: handles and views of a client without a guard ---------------------------------------
def test_a_plain_clients_handles_are_qdrant_clients_own_and_a_guarded_ones_are_refused(kit):
    import qdrant_client

    from qdrant_guard import QdrantClient
    from qdrant_guard.errors import QdrantGuardError

    plain, raw = QdrantClient(":memory:"), qdrant_client.QdrantClient(":memory:")
    assert plain.init_options == raw.init_options
    for handle in ("http", "grpc_points", "grpc_collections"):
        with pytest.raises(NotImplementedError) as mine:
            getattr(plain, handle)
        with pytest.raises(NotImplementedError) as theirs:
            getattr(raw, handle)
        assert str(mine.value) == str(theirs.value)
    with pytest.raises(QdrantGuardError, match="with_principal needs a client constructed with guard="):
        plain.with_principal(kit.principal("bob", "hr"))
    guarded = _alias_owner(kit)
    for handle in ("http", "grpc_points", "grpc_collections", "init_options"):
        with pytest.raises(GuardRefusal, match=f"client.{handle} is .* that would bypass the guard policy"):
            getattr(guarded, handle)
