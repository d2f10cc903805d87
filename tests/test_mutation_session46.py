"""Mutation pass 26: tests that kill the mutants of pubquery.py, decision.py, vectors.py and
replay.py that the earlier tests let survive (docs/security-testing.md, "Mutation pass 26"). Each
names the mutant it kills.

Real local-mode Qdrant, real keys and policies (guardkit), real audit files; no mocks.
"""
from __future__ import annotations

import enum
import io
import json
import pathlib
import uuid

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, models, record_sent, unit

from qdrant_guard import GuardRefusal, InvalidVectorError, QdrantClient, QdrantGuardError

AWS = "AKIAJ2QW7XRT5LNPV3YB"


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _doc(text):
    return models.Document(text=text, model="sentence-transformers/all-MiniLM-L6-v2")


def _public(kit, **pub):
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", **pub}}),
                      principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    rng = np.random.default_rng(5)
    cl.upsert("pub", [models.PointStruct(id=i, vector=unit(rng), payload={"g": i % 2}) for i in (1, 2, 3)])
    return cl


def _sent_query(monkeypatch, call):
    """The query_points kwargs that reached qdrant-client (a call it fails itself, as a Document
    query does here without fastembed, still records them)."""
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    try:
        call()
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001, S110 - qdrant-client's own failure, after the call was recorded
        pass
    assert [name for name, _ in sent] == ["query_points"]
    return sent[0][1]


# -- pubquery.py: the walk over a PUBLIC query's inputs leaves everything but a credential as given

_NO_INPUTS = {
    # 26 (`if t in _LEAVES: return None`): the point id 1 in a list was sent as None;
    # 39 (a float vector returned as None), 40 (an unchanged list as None), 34 (`not items and
    # ...`: an empty list raised IndexError in the guard).
    "recommend": lambda: dict(
        prefetch=[models.Prefetch(query=[0.1] * DIM, limit=3),
                  models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
                      positive=[1], negative=[[0.2] * DIM])), limit=3),
                  models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
                      positive=[2], negative=[])), limit=3)],
        query=models.RecommendQuery(recommend=models.RecommendInput(positive=[1, 3]))),
    # 47 (the last `return value`): the Fusion enum, neither leaf, model, list nor dict, went as None.
    "fusion": lambda: dict(prefetch=models.Prefetch(query=[0.1] * DIM, limit=3),
                           query=models.FusionQuery(fusion=models.Fusion.RRF)),
    # 44 (an unchanged dict returned as None): the formula's defaults went as None.
    "formula": lambda: dict(prefetch=models.Prefetch(query=[0.1] * DIM, limit=3),
                            query=models.FormulaQuery(formula=models.SumExpression(sum=["$score", "x"]),
                                                      defaults={"x": 1.5})),
}


@pytest.mark.parametrize("case", sorted(_NO_INPUTS))
def test_a_public_query_without_a_credential_reaches_qdrant_client_as_given(kit, monkeypatch, case):
    cl = _public(kit)
    given = _NO_INPUTS[case]()
    sent = _sent_query(monkeypatch, lambda: cl.query_points("pub", limit=3, **given))
    assert {k: sent[k] for k in given} == given


def test_a_credential_in_a_list_of_a_public_query_is_redacted_where_it_is(kit, monkeypatch):
    # 41/42 (`not all(a is b ...)`, `a is not b`): a list whose Document was redacted was sent as
    # the original list, the credential with it.
    cl = _public(kit, credentials_in_text="redact", allow_redaction_on_public=True)
    query = models.RecommendQuery(recommend=models.RecommendInput(positive=[_doc(f"why does {AWS} fail")]))
    sent = _sent_query(monkeypatch, lambda: cl.query_points(
        "pub", prefetch=models.Prefetch(query=[0.1] * DIM, limit=3), query=query, limit=3))
    text = sent["query"].recommend.positive[0].text
    assert AWS not in text and text.startswith("why does ") and text.endswith(" fail")
    assert AWS in query.recommend.positive[0].text  # the caller's object is not changed


def test_a_public_document_credential_refusal_says_it_is_never_sent_to_inference(kit):
    # 15 (`inference=True -> False`): the refusal said credentials are never "stored".
    cl = _public(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pub", query=_doc(f"why does {AWS} fail"), limit=3)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert "credentials are never sent to inference" in ei.value.directive


# -- decision.py: what a decision's audit record holds

def _record(**kw):
    from qdrant_guard.decision import Decision, Verdict

    return Decision(**{"op": "query_points", "collection": "c", "verdict": Verdict.ALLOW, "directive": "ok",
                       "principal": "alice@hr", **kw}).record()


def test_a_record_escapes_lone_surrogates_and_keeps_other_text_as_it_is():
    # 14/16/18/20 (the fast path taken for any exact str, negated, the encode check deleted, the
    # escape returned as None) and 9 (the principal escaped only when it is no str): a lone
    # surrogate made the append fail (the decision unaudited) or was lost; 19: valid non-ASCII
    # text came back None.
    rec = _record(directive="caf\u00e9 \ud800", principal="b\u00f6b\udfff@hr", collection="caf\u00e9")
    assert rec["directive"] == "caf\u00e9 \\ud800" and rec["principal"] == "b\u00f6b\\udfff@hr"
    assert rec["collection"] == "caf\u00e9"
    assert _record(principal=None)["principal"] is None
    json.dumps(rec).encode("utf-8")


def test_a_record_names_point_ids_as_json():
    # 31 (a str id recorded as None), 33 (`isinstance(pid, int) or not bool`: a UUID object or a
    # bool kept as it is, not JSON).
    pid = uuid.UUID(int=7)
    rec = _record(point_ids=["x\ud800", pid, True, 3])
    assert rec["point_ids"] == ["x\\ud800", str(pid), "True", 3]
    json.dumps(rec).encode("utf-8")


class _Str(str):
    pass


class _Int(int):
    pass


class _Colour(enum.Enum):
    RED = "red"


def test_a_record_makes_every_detail_json():
    # 47-52 (the float branch: NaN and infinities kept, or every float as str or None), 53/54 (a
    # str subclass not escaped, or None), 55-58 (an int subclass as str or None; 56: every object
    # reaching the last lines kept as it is), 59/60 (an Enum as str(obj) or None).
    details = {"f": 1.5, "nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
               "s": _Str("a\ud800"), "t": _Str("b"), "i": _Int(5), "e": _Colour.RED,
               "p": pathlib.PurePosixPath("/x"), "seq": (1, [2.5], {"k": None})}
    rec = _record(details=details)
    assert rec["details"] == {"f": 1.5, "nan": "nan", "inf": "inf", "-inf": "-inf", "s": "a\\ud800", "t": "b",
                              "i": 5, "e": "red", "p": "/x", "seq": [1, [2.5], {"k": None}]}
    json.dumps(rec, allow_nan=False).encode("utf-8")


def test_a_record_escapes_the_vector_names_of_a_utility_hash_dict():
    # 7 (the dict form of the utility hash not escaped): a vector name with a lone surrogate made
    # the append fail; one that starts with the escape marker read as an escaped name.
    rec = _record(utility_hash={"v\ud800": "h1", "\\escaped:w": None, "plain": "h2"})
    assert rec["manifest"]["retrieval_utility_guard_hash"] == {
        "\\escaped:v\\ud800": "h1", "\\escaped:\\\\escaped:w": None, "plain": "h2"}
    assert _record(utility_hash="h")["manifest"]["retrieval_utility_guard_hash"] == "h"


def test_a_record_holds_the_manifest_and_no_monitor_mark_unless_monitoring(kit):
    # 6 (manifest() returning None), 2 (`monitor: bool = True`: every decision marked monitor).
    cl = QdrantClient(":memory:", guard=kit.config({"docs": {
        "class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False},
        "diversity": {"max_source_fraction": 1.0, "min_unique_sources": 1}}}), principal=kit.principal("alice", "hr"))
    create(cl, "docs")
    cl.query_points("docs", query=[0.1] * DIM, limit=2)
    rec = audit_records(kit)[-1]
    assert rec["op"] == "query_points" and rec["verdict"] == "ALLOW" and "monitor" not in rec
    assert set(rec["manifest"]) == {"embedding_sensitivity_class", "differential_privacy_epsilon",
                                    "reconstruction_resistance_receipt", "retrieval_utility_guard_hash"}
    assert rec["manifest"]["embedding_sensitivity_class"] == "PROPRIETARY"


def test_a_rejected_credential_that_cannot_be_audited_fails_closed(kit):
    # 3 (`fail_closed: bool = False`): the INVALID_CREDENTIAL decision, built without a policy,
    # failed open when the log could not take it (the rejection went unaudited, logged only).
    from qdrant_guard import AuditError, CredentialError, Principal

    cl = _public(kit)
    support = kit.principal("bob", "support")
    log = kit.tmp / "audit.jsonl"
    log.rename(kit.tmp / "moved.jsonl")  # the path no longer names the file the writer holds
    log.write_text("")
    with pytest.raises(AuditError) as ei:
        cl.with_principal(Principal(agent_id="bob", boundary="hr", credential=support.credential))
    assert not isinstance(ei.value, CredentialError)


# -- vectors.py: what a write's vectors are checked against and sent as

def _sensitive(kit, vectors_config=None, sparse=None):
    cl = QdrantClient(":memory:", guard=kit.config({"docs": {
        "class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False}}}), principal=kit.principal("alice", "hr"))
    cl.create_collection("docs", vectors_config=vectors_config or models.VectorParams(size=DIM, distance=models.Distance.COSINE),
                         sparse_vectors_config=sparse)
    return cl


def _refused_vector(cl, vector):
    with pytest.raises(InvalidVectorError) as ei:
        cl.upsert("docs", [models.PointStruct(id=1, vector=vector)])
    return str(ei.value)


def test_a_numpy_vector_is_checked_for_nan_range_and_stored_when_sound(kit):
    # 63/72 (the last bad index named, not the first), 70 (`>=`: the largest float32, which
    # Qdrant stores as itself, named as the bad value).
    cl = _sensitive(kit)
    v = np.full(DIM, 0.1)
    v[3] = v[5] = np.nan
    assert "non-finite value (nan) at index 3;" in _refused_vector(cl, v)
    big = np.full(DIM, 0.1)
    big[1], big[2], big[4] = float(np.finfo(np.float32).max), 1e39, -1e39
    assert "value 1e+39 at index 2, outside the float32 range" in _refused_vector(cl, big)
    rng = np.random.default_rng(2)
    cl.upsert("docs", [models.PointStruct(id=2, vector=np.asarray(unit(rng)))])
    assert [p.id for p in cl.retrieve("docs", [2])] == [2]


def test_an_unknown_vector_name_lists_the_collection_s_names(kit):
    # 8 (`n and "<unnamed>"`): the names listed were '' and '<unnamed>' for 'a' and 'b'.
    cl = _sensitive(kit, {n: models.VectorParams(size=DIM, distance=models.Distance.COSINE) for n in ("a", "b")})
    msg = _refused_vector(cl, {"c": [0.1] * DIM})
    assert "unknown vector name 'c'; this collection has: ['a', 'b']" in msg


def test_a_sparse_value_for_a_dense_vector_and_a_multivector_are_refused_by_name(kit):
    # 32, 34 (their raises deleted): refused later as a bad dtype or shape, or not at all.
    cl = _sensitive(kit, {"d": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
                          "m": models.VectorParams(size=2, distance=models.Distance.COSINE,
                                                   multivector_config=models.MultiVectorConfig(
                                                       comparator=models.MultiVectorComparator.MAX_SIM))})
    msg = _refused_vector(cl, {"d": models.SparseVector(indices=[1], values=[0.5])})
    assert "sparse vector given for dense vector 'd'" in msg
    msg = _refused_vector(cl, {"m": [[0.6, 0.8], [0.8, 0.6]]})
    assert "multivector 'm' on a sensitive collection is not supported" in msg


def test_a_public_document_vector_is_sent_redacted_as_a_bare_document(kit, monkeypatch):
    # 29 (join_vector_struct returning None: the point went with no vector), 28 (`!=`: the
    # unnamed vector went as a dict keyed "", which a collection of one unnamed vector refuses).
    cl = _public(kit, credentials_in_text="redact", allow_redaction_on_public=True)
    sent = record_sent(monkeypatch, ("upsert",), with_kwargs=True)
    try:
        cl.upsert("pub", [models.PointStruct(id=9, vector=_doc(f"key {AWS} here"))])
    except QdrantGuardError:
        raise
    except Exception:  # noqa: BLE001, S110 - qdrant-client's own (no fastembed here), after the call
        pass
    (point,) = sent[0][1]["points"]
    assert isinstance(point.vector, models.Document) and AWS not in point.vector.text
    assert point.vector.text.startswith("key ") and point.vector.text.endswith(" here")


# -- replay.py: which logged lines are replayed, and what each logged outcome was

SHORT, LONG = "short query", "a much longer query with many words in it"


def _replay_lines(kit, records, extra=""):
    """``audit replay --mode unverified`` of a hand-written log holding ``records`` (a str is
    written as the raw line); the report."""
    from guardkit import replay_policy_file

    from qdrant_guard.replay import replay_log

    log = kit.tmp / "hand.jsonl"
    log.write_text("".join((r if isinstance(r, str) else json.dumps({"seq": i, "record": r})) + "\n"
                           for i, r in enumerate(records)))
    out = io.StringIO()
    assert replay_log(str(log), str(replay_policy_file(kit, extra)), out=out, mode="unverified") == 1
    return out.getvalue()


def _query(details, verdict="ALLOW"):
    return {"op": "query_points", "collection": "docs", "verdict": verdict, "principal": "alice@hr",
            "details": details}


def test_replay_counts_unreadable_lines_and_replays_the_rest(kit):
    # 117-121 (the unreadable count changed by -1, +2 or 0 per line), 22/23 (an entry without
    # details unreadable), 27 (the query ops' field checks applied to other ops and not to
    # queries), 10 (`isinstance(many, list) or all(...)`: a query_texts of non-objects replayed,
    # the replay crashing), 42 (`isinstance(many, list) or many`: an empty query_texts hid the
    # query_text), 47 (no text place: None, the replay crashing).
    report = _replay_lines(kit, [
        "not json",
        {"op": "query_points", "details": "x"},
        {"op": "upsert", "collection": "docs", "verdict": "ALLOW", "details": None},
        {"op": "upsert", "collection": "docs", "verdict": "ALLOW", "details": {"query_text": 5}},
        _query({"query_text": SHORT, "query_texts": [5]}),
        _query({"query_text": SHORT, "query_texts": []}),
        _query({}),
    ])
    assert "replayed 1 logged queries (1 texts)" in report, report
    assert "skipped: 0 with redacted text, 1 without text, 3 unreadable, 0 with only some texts" in report, report


def test_replay_reads_what_a_monitor_note_would_have_refused(kit):
    # 36/39 (_flagged's verdicts as None), 58/59 (the first text's outcome taken whether flagged
    # or not; the pair as None), 62/63 (a note on the top-level fields alone: its text lost from
    # the example). The replay policy lets every text through: each note is newly allowed.
    report = _replay_lines(kit, [
        _query({"query_text": LONG, "scan": {"would_reject": True}}),
        _query({"query_text": SHORT, "intent": {"would_block": True}}),
        _query({"query_text": SHORT, "query_texts": [
            {"query_text": SHORT, "from": "query_text"},
            {"query_text": "third text", "from": "query", "scan": {"would_reject": True}}]}),
        _query({"query_text": "fourth text", "scan": {"would_reject": True},
                "query_texts": [{"query_text": "fourth text", "from": "query_text"}]}),
    ])
    assert "replayed 4 logged queries (5 texts)" in report, report
    assert f"newly_allowed  QUERY_REJECTED        3   e.g. {LONG!r}" in report, report
    assert f"newly_allowed  INTENT_BLOCKED        1   e.g. {SHORT!r}" in report, report
    only = _replay_lines(kit, [_query({"query_text": SHORT, "query_texts": [
        {"query_text": SHORT, "from": "query_text"},
        {"query_text": "third text", "from": "query", "scan": {"would_reject": True}}]})])
    assert "newly_allowed  QUERY_REJECTED        1   e.g. 'third text'" in only, only
    top = _replay_lines(kit, [_query({"query_text": "fourth text", "scan": {"would_reject": True},
                                      "query_texts": [{"query_text": "fourth text", "from": "query_text"}]})])
    assert "newly_allowed  QUERY_REJECTED        1   e.g. 'fourth text'" in top, top


def test_replay_names_where_an_entry_s_unreplayable_text_came_from(kit):
    # 13 (_shown returning None): the place read "(from None)".
    report = _replay_lines(kit, [_query({"query_text": SHORT, "query_texts": [
        {"query_text": SHORT, "from": "query_text"}, {"query_text": None, "from": "query"}]})])
    assert "query_texts[1] (from query) (text not logged); replayable alone: query_texts[0] (from query_text)" \
        in report, report


def test_replay_shows_the_first_80_characters_of_an_example(kit):
    # 159/160 (`[:81]`, `[:79]`).
    text = "".join(f"w{i:02d} " for i in range(30))  # 120 characters
    report = _replay_lines(kit, [_query({"query_text": text, "scan": {"would_reject": True}})])
    assert f"e.g. {text[:80]!r}\n" in report, report


# -- intent.py: load_classifier

class _Nameless:
    name = 5

    def classify(self, text):
        return None


_NAMELESS = _Nameless()


class _CallableClassifier:
    name = "callable"

    def classify(self, text):
        return None

    def __call__(self):
        return "called"


_CALLABLE = _CallableClassifier()


def test_load_classifier_builds_the_builtin_and_llm_classifiers(monkeypatch):
    # 0/4 (`spec is None and ...`, the built-in returned as None), 8/9 (the LLM classifier as
    # None, or built with timeout_s=None / without the timeout given).
    from qdrant_guard.intent import BuiltinIntentClassifier, LLMIntentClassifier, load_classifier

    assert isinstance(load_classifier(None), BuiltinIntentClassifier)
    assert isinstance(load_classifier("builtin"), BuiltinIntentClassifier)
    monkeypatch.setenv("QDRANT_GUARD_INTENT_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("QDRANT_GUARD_INTENT_MODEL", "m")
    default, given = load_classifier("llm"), load_classifier("llm", timeout_s=2.5)
    assert isinstance(default, LLMIntentClassifier) and (default._timeout, given._timeout) == (5.0, 2.5)


def test_load_classifier_takes_an_instance_as_it_is_and_refuses_one_without_a_str_name():
    # 16 (`callable(obj) or not hasattr(...)`: a callable instance with classify was called),
    # 18/20 (a classifier whose name is no str accepted).
    from qdrant_guard.intent import load_classifier

    assert load_classifier("test_mutation_session46:_CALLABLE") is _CALLABLE
    with pytest.raises(TypeError, match="has no str 'name' and classify"):
        load_classifier("test_mutation_session46:_NAMELESS")
