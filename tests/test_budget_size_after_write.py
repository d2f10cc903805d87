"""The extraction budget's cap is a share of a source's size, which reads cache: a write through the
guard drops the cached sizes, so the size before a delete never sets the cap after it."""
from __future__ import annotations

import numpy as np
import pytest

from tests.guardkit import make_kit, models, payroll, unit

PAYROLL = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="payroll"))])


def _payroll(tmp_path):
    return payroll(make_kit(tmp_path))


def _seen(bob):
    return {p.id for p in bob.scroll("hr", scroll_filter=PAYROLL, limit=100)[0]}


@pytest.mark.parametrize("shrink", ["delete", "retag"])
def test_the_cap_after_a_write_follows_the_size_after_it(tmp_path, shrink):
    owner, bob = _payroll(tmp_path)
    first = {p.id for p in bob.scroll("hr", scroll_filter=PAYROLL, limit=1)[0]}
    assert len(first) == 1  # 10 points: bob may see 2; the size 10 is now cached
    gone = [i for i in range(10) if i not in first][:5]
    if shrink == "delete":
        owner.delete("hr", points_selector=models.PointIdsList(points=gone))
    else:
        owner.set_payload("hr", payload={"source": "archive"}, points=gone)
    # 5 payroll points are left: bob may see 1 of them, which he has. With the cached size of 10
    # the cap stayed 2 for 30 s, and he was given one more.
    assert _seen(bob) == first


def test_a_write_that_adds_points_raises_the_cap_at_once(tmp_path):
    owner, bob = _payroll(tmp_path)
    assert len(_seen(bob)) == 2
    rng = np.random.default_rng(1)
    owner.upsert("hr", [models.PointStruct(id=100 + i, vector=unit(rng), payload={"source": "payroll"})
                        for i in range(10)])
    assert len(_seen(bob)) == 4  # 20 points now


def test_a_count_that_a_write_overlapped_is_not_cached(tmp_path):
    # A read counts a source while a write ends: that count may be of before the write, so it
    # serves this read but is not kept for the next ones.
    from types import SimpleNamespace

    owner, _ = _payroll(tmp_path)
    guard = owner.guard
    pol = guard.policy("hr")
    op = guard.source_size("hr", pol, "payroll")
    call = next(op)
    assert call.method == "count"
    owner.delete("hr", points_selector=models.PointIdsList(points=[9]))  # the write ends mid-count
    with pytest.raises(StopIteration) as done:
        op.send(SimpleNamespace(count=10))
    assert done.value.value == 10 and guard.cached_source_size("hr", "payroll") is None
    op = guard.source_size("hr", pol, "payroll")  # a count begun after the write is kept
    next(op)
    with pytest.raises(StopIteration):
        op.send(SimpleNamespace(count=9))
    assert guard.cached_source_size("hr", "payroll") == 9
