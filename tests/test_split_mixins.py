"""The mixins reads.py, writes.py and pipeline.py were split into (2026-12-07) override nothing.

Guard's methods come from a chain of mixins (docs/architecture.md); a name defined in two of
them runs whichever comes first in the MRO, so reordering bases would change behaviour silently.
None of the split mixins' names is defined by another class of Guard's MRO, and the names
other code imports from the old modules still import from there.
"""
from __future__ import annotations

import types

from qdrant_guard.guard import Guard

SPLIT = ("ReadOps", "QueryOps", "ReadRelease", "BudgetOps", "WriteOps", "BatchUpdate", "WritePrep",
         "WriteSigning", "Dispatch", "CallChecks", "GuardPipeline")


def test_no_split_mixin_method_is_defined_twice_in_guards_mro():
    where: dict[str, list[str]] = {}
    for cls in Guard.__mro__[:-1]:
        for name, value in vars(cls).items():
            if isinstance(value, (types.FunctionType, staticmethod, classmethod, property)):
                where.setdefault(name, []).append(cls.__name__)
    twice = {n: c for n, c in where.items() if len(c) > 1 and set(c) & set(SPLIT) and not n.startswith("__")}
    assert twice == {}
    assert {c.__name__ for c in Guard.__mro__} >= set(SPLIT)


def test_the_old_modules_still_export_what_is_imported_from_them():
    from qdrant_guard import pipeline, reads, writes

    for module, names in ((reads, ("ReadOps", "ReadPlan", "Exclusion", "project_payload", "asks_vectors", "_sources")),
                          (writes, ("WriteOps", "points_from_any", "points_from_columns", "vector_updates_from_any")),
                          (pipeline, ("GuardPipeline", "Call", "Offload", "Op", "Embedder", "drive_sync",
                                      "mark_audited", "missing_key_files", "store_identity", "describe_collection",
                                      "DESCRIBE_COUNTED", "DESCRIBE_KEPT", "missing_alias_error",
                                      "missing_collection_error", "SOURCE_SIZE_TTL_S", "plain_names", "sent_name"))):
        missing = [n for n in names if not hasattr(module, n)]
        assert missing == [], module.__name__
