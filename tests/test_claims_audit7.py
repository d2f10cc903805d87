"""Claims audit 7 (branch h-claims7, 2026-12-06): the statements this session added to the README,
docs/diversity-budget.md, docs/server.md, docs/threat-model.md and the policy docstrings, checked
against what the code does.

Three were wrong or misleading and are corrected; the tests pin what the corrected text states:

1. README: the async client's guard "never blocks the event loop" -- ``upload_points`` and
   ``upload_collection`` are plain methods (as in qdrant-client) and run their guard steps, the
   audit append included, on the caller's thread, the loop's when called from it.
2. README and docs/diversity-budget.md: "3 steps for a budgeted ``query_points``, 2 for an
   ``upsert``" -- a call takes one step more than its guard's requests, so the intent classifier
   (on by default) with a ``query_text`` adds one, and an ``upsert`` that first reads the
   collection's layout takes 3.
3. README: ``bench --source NAME`` fills the rest of the sources with ``doc1``, ``doc2``, ... --
   it is ``doc0``, ``doc1``, ... (:func:`qdrant_guard.overhead_setup.source_labels`).

The rest are pinned as stated: the card rules' examples, and the cost each extra receipt
parameter set adds to the left-behind count (``noise.max_receipt_param_sets``).

Real qdrant-client local mode, the real detector; the step count wraps the driver's step function
only to count its calls.
"""
from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardkit import PAYROLL_DIVERSITY, hr_policy, make_kit, models, unit
from qdrant_guard import AsyncQdrantClient, async_driver, audit
from qdrant_guard.detect import redact
from qdrant_guard.overhead_setup import source_labels
from qdrant_guard.policy import config_from_dict
from qdrant_guard.querycheck import left_behind_filter
from qdrant_guard.vectors import CollectionShape, VectorSpec

ROOT = Path(__file__).resolve().parent.parent


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def _steps(monkeypatch: Any) -> list[str]:
    """What each step of the async driver ended in: a request's method, or 'return'."""
    seen: list[str] = []
    advance = async_driver._advance

    def counting(*args: Any) -> Any:
        kind, out = advance(*args)
        seen.append(getattr(out, "method", type(out).__name__) if kind == "yield" else kind)
        return kind, out

    monkeypatch.setattr(async_driver, "_advance", counting)
    return seen


def _points(first: int, rng: np.random.Generator, n: int = 10) -> list[models.PointStruct]:
    return [models.PointStruct(id=first + i, vector=unit(rng), payload={"source": "payroll"}) for i in range(n)]


@pytest.mark.parametrize("intent", [False, True])
def test_the_async_step_counts_the_docs_state(tmp_path: Path, monkeypatch: Any, intent: bool) -> None:
    kit = make_kit(tmp_path)
    pol = hr_policy(PAYROLL_DIVERSITY)
    if intent:
        pol = {**pol, "intent": {"enabled": True}}
    cfg = kit.config({"hr": pol}, audit_log=str(tmp_path / "audit.jsonl"))
    from qdrant_guard import writeprep

    monkeypatch.setattr(writeprep, "LAYOUT_FRESH_S", 3600.0)
    seen = _steps(monkeypatch)
    counts: dict[str, list[Any]] = {"upsert": [], "query": []}

    async def main() -> None:
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        rng = np.random.default_rng(0)
        await owner.create_collection("hr", vectors_config=models.VectorParams(size=len(unit(rng)),
                                                                               distance=models.Distance.COSINE))
        for j in range(2):
            seen.clear()
            await owner.upsert("hr", _points(100 * j, rng, 50))  # a budget of 20 points: none runs out
            counts["upsert"].append(len(seen))
        reader = owner.with_principal(kit.principal("bob", "support"))  # a reader the budget charges
        for _ in range(3):
            seen.clear()
            await reader.query_points("hr", query=unit(rng), limit=3, query_text="what is the pay scale")
            counts["query"].append(list(seen))
        await owner.close()

    asyncio.run(main())
    # One step more than the requests: the first upsert reads the layout (get_collection); the
    # second, within writeprep.LAYOUT_FRESH_S (made long here), uses it.
    assert counts["upsert"] == [3, 2]
    # Commonly get_aliases and the query (3), the classifier one more; the first read of a
    # source also asks its size (a count).
    common = [*(["Offload"] if intent else []), "get_aliases", "query_points", "return"]
    assert counts["query"][1:] == [common, common], counts
    assert counts["query"][0] == [*common[:-1], "count", "return"], counts
    readme = _flat("docs/performance.md")  # the README's async paragraph, moved there 2026-12-08
    assert all("(3 for a budgeted `query_points`, 2 for an `upsert`)" not in _flat(p)
               for p in ("README.md", "docs/performance.md"))
    assert ("a budgeted `query_points` commonly 3 (the alias look-up and the query), 4 with the intent "
            "classifier on (the default) and a `query_text`") in readme
    assert "a budgeted `query_points` has 3 steps, an `upsert` 2" not in _flat("docs/diversity-budget.md")


def test_async_upload_points_runs_its_guard_on_the_callers_thread(tmp_path: Path, monkeypatch: Any) -> None:
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy(PAYROLL_DIVERSITY)}, audit_log=str(tmp_path / "audit.jsonl"))
    threads: list[str] = []
    append = audit.AuditLog.append

    def where(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return append(self, *args, **kwargs)

    monkeypatch.setattr(audit.AuditLog, "append", where)
    loop_thread: list[str] = []

    async def main() -> None:
        loop_thread.append(threading.current_thread().name)
        client = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        rng = np.random.default_rng(0)
        await client.create_collection("hr", vectors_config=models.VectorParams(size=len(unit(rng)),
                                                                                distance=models.Distance.COSINE))
        threads.clear()
        await client.upsert("hr", _points(0, rng))
        assert threads and all(t.startswith("qdrant_guard-step_") for t in threads), threads
        threads.clear()
        client.upload_points("hr", _points(100, rng))  # a plain method: no await
        assert threads and set(threads) == {loop_thread[0]}, threads
        await client.close()

    asyncio.run(main())
    assert ("a stalled store or audit file does not block the event loop (but for `upload_points` and "
            "`upload_collection`, plain methods in qdrant-client too, whose steps run on the caller's thread)"
            ) in _flat("docs/performance.md")


def test_bench_source_names_come_first_then_doc0() -> None:
    assert source_labels(["board-memo-2026-q3"], 4) == ["board-memo-2026-q3", "doc0", "doc1", "doc2"]
    assert source_labels(["a", "doc0"], 3) == ["a", "doc0", "doc1"]
    readme = _flat("docs/performance.md")  # the README's bench section in full
    assert all("then `doc1`, `doc2`, ...;" not in _flat(p) for p in ("README.md", "docs/performance.md"))
    assert ("the run's `--sources` values are the names given first, then `doc0`, `doc1`, ... for the rest"
            ) in readme


# docs/threat-model.md and qdrant_guard/detect.py's docstring, the card rules this session added.
@pytest.mark.parametrize("text, redacted", [
    ("555.123.4111111111111111", "[CREDIT_CARD]"),
    ("555 123.4111111111111111", "[CREDIT_CARD]"),
    ("10.0.0.1.4111111111111111", "10.0.0.1.[CREDIT_CARD]"),
    ("4111 1111 1111 1111 555.1234", "[CREDIT_CARD]"),
    ("4111 1111 1111 1111 2.5", "[CREDIT_CARD] 2.5"),
    ("4111 1111 1111 1111.10.0.0.1", "[CREDIT_CARD].10.0.0.1"),
    ("+1 4111 1111 1149 9", "+1 [CREDIT_CARD]"),
    ("+1 4111 1111 1111 1111", "+1 [CREDIT_CARD]"),
    ("(555) 123-4111-1111-1111-1111", "([CREDIT_CARD]"),
])
def test_the_new_card_rules_examples(text: str, redacted: str) -> None:
    assert redact(text) == redacted
    # Each is an example the docs give (the threat model writes the decimal's card as "...").
    assert text.replace("4111 1111 1111 1111 2.5", "... 2.5") in _flat("docs/threat-model.md") + _flat(
        "qdrant_guard/detect.py"), text


def test_each_extra_receipt_param_set_costs_six_payload_conditions_per_vector() -> None:
    # noise.max_receipt_param_sets' docstring (and the refusal's fix): "about six payload conditions
    # per vector for each set".
    pol = config_from_dict({"collections": {"kb": {"class": "PII", "owner": "hr", "noise_queries": True}}},
                           source="t").collections["kb"]
    spec = VectorSpec(name="", size=8, distance="Cosine", multivector=False)
    for shape, vectors in ((CollectionShape(dense={"": spec}, sparse=frozenset(), unnamed=True), 1),
                           (CollectionShape(dense={"a": spec, "b": spec}, sparse=frozenset(), unnamed=False), 2)):
        def conditions(n_sets: int) -> int:
            seen = [(0.5 / (i + 1), 1e-6, 0.01, 8) for i in range(n_sets)]
            return json.dumps(left_behind_filter(shape, pol, seen).model_dump(exclude_none=True)).count('"key"')

        assert [conditions(n + 1) - conditions(n) for n in range(3)] == [6 * vectors] * 3


def test_the_per_stage_profile_is_where_the_readme_sends_a_reader() -> None:
    # The README sent readers to performance-notes.md for "the per-stage profiles", which that file
    # says benchmarks.md holds (and which `make bench` writes there).
    readme = _flat("README.md")
    assert "the experiments that did not pay and the per-stage profiles are in" not in readme
    assert "and its per-stage profile (*Where the guard's time goes*)" in readme
    assert "\n## Where the guard's time goes\n" in (ROOT / "docs/benchmarks.md").read_text()
