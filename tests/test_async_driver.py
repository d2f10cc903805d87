"""qdrant_guard.async_driver: steps in worker threads, and where a cancellation lands.

The operations here are small generators speaking the pipeline's protocol (Call, Offload); the
guarded client's own runs are in tests/test_async_offloop.py and tests/test_review_async.py.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from qdrant_guard.async_driver import TaskLock, drive_async
from qdrant_guard.pipeline import Call, Offload

STEP_S = 0.3


def _op(seen: list[str]) -> Any:
    """Asks for ``a``, then blocks its step (as a store round trip does), then asks for ``b``."""
    seen.append(f"step in {threading.current_thread().name}")
    yield Call("a", {})
    time.sleep(STEP_S)
    try:
        got = yield Call("b", {})
    except BaseException as exc:  # as pipeline.forward audits a failed call
        seen.append(f"b failed: {type(exc).__name__}")
        raise
    seen.append(f"b answered {got}")
    return "done"


def _run(lock: bool) -> tuple[list[str], list[str], str]:
    seen: list[str] = []
    invoked: list[str] = []

    async def invoke(call: Call) -> str:
        invoked.append(call.method)
        await asyncio.sleep(0)
        return call.method.upper()

    async def main() -> str:
        task = asyncio.create_task(drive_async(_op(seen), invoke, lock=TaskLock() if lock else None))
        await asyncio.sleep(STEP_S / 3)  # the second step is sleeping in its thread
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    return seen, invoked, asyncio.run(main())


def test_steps_run_off_the_loop_thread():
    seen, _, _ = _run(lock=False)
    assert seen[0].startswith("step in qdrant_guard-step")


def test_a_cancellation_during_a_step_lands_at_the_next_call_on_a_server_connection():
    seen, invoked, outcome = _run(lock=False)
    assert outcome == "cancelled"
    assert invoked == ["a"]  # b was never sent
    assert seen[-1] == "b failed: CancelledError"  # the operation saw it, and could audit it


def test_in_local_mode_the_call_goes_on_and_the_result_is_dropped():
    """Local-mode requests never suspend, so the on-loop driver could not be cancelled there."""
    seen, invoked, outcome = _run(lock=True)
    assert outcome == "cancelled"
    assert invoked == ["a", "b"]
    assert seen[-1] == "b answered B"


def test_a_cancellation_is_delivered_at_the_next_offload_in_local_mode():
    seen: list[str] = []
    ran: list[str] = []

    def op() -> Any:
        yield Call("a", {})
        time.sleep(STEP_S)
        try:
            yield Offload(lambda: ran.append("offload"))
        except asyncio.CancelledError:
            seen.append("offload cancelled")
            raise
        yield Call("b", {})

    async def invoke(call: Call) -> str:
        return call.method

    async def main() -> None:
        task = asyncio.create_task(drive_async(op(), invoke, lock=TaskLock()))
        await asyncio.sleep(STEP_S / 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["offload cancelled"] and ran == []


def test_the_operations_own_errors_and_results_come_back():
    def failing() -> Any:
        yield Call("a", {})
        raise KeyError("x")

    def returning() -> Any:
        got = yield Call("a", {})
        return got * 2

    async def invoke(call: Call) -> int:
        return 21

    with pytest.raises(KeyError):
        asyncio.run(drive_async(failing(), invoke))
    assert asyncio.run(drive_async(returning(), invoke)) == 42
