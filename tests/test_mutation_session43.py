"""Mutation pass 23 (branch h-mut23, 2026-12-06): tests killing the survivors of
``budget_stores.normalize_point_id`` (docs/security-testing.md, "Mutation pass 23"). An int
subclass is counted by its value: before this pass its id was the text of its ``__str__``
(``f"i:{point_id}"`` formats through it), so one point could be charged under two ids."""
from __future__ import annotations

import enum
import uuid

import pytest

U = uuid.UUID("550e8400-e29b-41d4-a716-446655440000")


class LyingInt(int):
    def __str__(self) -> str:
        return "9"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return "9"

    def __lt__(self, other: object) -> bool:
        return False


class Mixed(int, enum.Enum):
    A = 5
    ZERO = 0


class PlainSub(int):
    pass


class StrSub(str):
    pass


def test_an_int_subclass_is_counted_by_its_value_not_its_text():
    from qdrant_guard.budget_stores import normalize_point_id

    assert normalize_point_id(LyingInt(5)) == "i:5"
    assert normalize_point_id(Mixed.A) == "i:5"  # its format() is "Mixed.A"
    assert normalize_point_id(PlainSub(5)) == "i:5"  # `return None` for a subclass survived


def test_an_int_subclass_zero_is_a_point_id_and_a_negative_one_is_refused():
    from qdrant_guard import GuardArgumentValueError
    from qdrant_guard.budget_stores import normalize_point_id

    assert normalize_point_id(PlainSub(0)) == normalize_point_id(Mixed.ZERO) == "i:0"  # `<= 0`, `< 1`
    with pytest.raises(GuardArgumentValueError, match="got -1"):
        normalize_point_id(LyingInt(-1))  # its __lt__ says it is not below 0


def test_a_str_subclass_is_read_as_its_uuid():
    from qdrant_guard.budget_stores import normalize_point_id

    assert normalize_point_id(StrSub(str(U).upper())) == f"u:{U}"
    assert normalize_point_id(StrSub(U.hex)) == normalize_point_id(U)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_one_point_is_one_charge_whatever_int_type_names_it(store_kind, tmp_path):
    from qdrant_guard.budget import ExtractionBudget
    from qdrant_guard.budget_stores import MemoryBudgetStore, SqliteBudgetStore

    store = MemoryBudgetStore() if store_kind == "memory" else SqliteBudgetStore(str(tmp_path / "b.db"))
    budget = ExtractionBudget(store, window_s=3600.0, clock=lambda: 1000.0)
    args = dict(principal="bob", collection="c", source="s", source_size=10, max_source_coverage=0.2)
    first = budget.admit(point_ids=[5, 6], **args)
    assert first.admitted == [5, 6]
    again = budget.admit(point_ids=[LyingInt(5), Mixed.A], **args)  # point 5 again: free
    assert list(again.admitted) == [LyingInt(5), Mixed.A] and again.withheld == []
    assert budget.admit(point_ids=[7], **args).withheld == [7]  # cap 2 of 10: still two points held
