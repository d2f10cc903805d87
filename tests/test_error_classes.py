"""A bad argument to a public function raises a subclass of ``QdrantGuardError`` that is still the
builtin it was (``TypeError`` or ``ValueError``), and the message names the argument.

One representative call per function that raised a bare builtin before (real objects: local
Qdrant, Ed25519 keys from ``cryptography``, files in a tmp directory). The native kernels and
their pure-Python twins raise the same class (both are called).
"""
from __future__ import annotations

import io
import json
import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

import qdrant_guard
from qdrant_guard import (
    ConfigError,
    GuardArgumentTypeError,
    GuardArgumentValueError,
    QdrantGuardError,
    audit,
    audit_verify,
    boundary,
    budget,
    budget_stores,
    canonical,
    detect,
    diversity,
    identifiers,
    intent,
    intent_builtin,
    intent_llm,
    intent_train,
    keys,
    merkle,
    noise,
    noise_params,
    receipts,
    replay,
    scan,
    utility,
)
from qdrant_guard import _detect_py, _noise_py, _scan_py
from qdrant_guard._impl import load_kernel
from qdrant_guard.evaluation.embed import Embedder
from qdrant_guard.evaluation.planted import plant_identifiers
from qdrant_guard.evaluation.sweep import EvalConfig, make_levels, run_sweep
from qdrant_guard.hashing_embedder import HashingEmbedder
from qdrant_guard.receipts import ReceiptSigner
from tests.guardkit import DIM, create, hr_policy, make_kit, unit

_native_scan = load_kernel("_scan", "_scan_py")
_native_detect = load_kernel("_detect", "_detect_py")
_native_noise = load_kernel("_noise", "_noise_py")


@dataclass
class Ctx:
    tmp: Path
    sk: Any
    pk: Any

    @property
    def signer(self) -> ReceiptSigner:
        return ReceiptSigner(self.sk)

    def log_path(self) -> Path:
        path = self.tmp / "audit.jsonl"
        log = audit.AuditLog(path)
        log.append({"event": "x"})
        log.close()
        return path

    def params(self) -> Any:
        _, params = noise.privatize(np.zeros(4, dtype=np.float32), mechanism="gaussian", epsilon=1.0,
                                    delta=1e-6, radius=0.1)
        return params

    def guarded(self) -> Any:
        kit = make_kit(self.tmp)
        client = qdrant_guard.QdrantClient(":memory:", guard=kit.config({"hr": hr_policy({})}),
                                           principal=kit.principal("alice", "hr"))
        create(client, "hr")
        return client

    def raw(self) -> Any:
        client = RawClient(":memory:")
        client.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT))
        return client


Call = Callable[[Ctx], Any]
T, V = TypeError, ValueError


def _bad_dataset(c: Ctx) -> Any:
    path = c.tmp / "data.jsonl"
    path.write_text("not json\n")
    return intent_train.load_dataset(str(path))


def _bad_replay_mode(c: Ctx) -> Any:
    policy = c.tmp / "policy.toml"
    policy.write_text("")
    return replay.replay_log(str(c.log_path()), str(policy), out=io.StringIO(), mode="fast")


def _bad_utility_record(c: Ctx) -> Any:
    return utility.UtilityRecord.from_json(json.dumps({"nonsense": 1}))


def _calibrate(c: Ctx, **kw: Any) -> Any:
    args: dict[str, Any] = {"radius": 0.1, "progress": False}
    args.update(kw)
    return utility.calibrate(c.raw(), "c", [[0.1, 0.2, 0.3, 0.4]], **args)


# (id, builtin it was, call, words the message must hold)
CASES: list[tuple[str, type, Call, tuple[str, ...]]] = [
    # audit log
    ("AuditLog-path", T, lambda c: audit.AuditLog(1), ("AuditLog()", "path")),
    ("AuditLog-checkpoint", V, lambda c: audit.AuditLog(None, checkpoint_every=0), ("checkpoint_every",)),
    ("AuditLog-signer", T, lambda c: audit.AuditLog(None, signer=c.pk), ("signer",)),
    ("AuditLog.append", T, lambda c: audit.AuditLog(None).append([1]), ("append()", "record")),
    ("AuditLog.append_encoded", V, lambda c: audit.AuditLog(None).append_encoded({}, b"[]"), ("record_bytes",)),
    ("repair_audit_file-path", T, lambda c: audit.repair_audit_file(1), ("repair_audit_file()", "path")),
    ("repair_audit_file-checkpoint", V, lambda c: audit.repair_audit_file(c.log_path(), checkpoint_every=0),
     ("checkpoint_every",)),
    ("repair_audit_file-keep_chain_from", V, lambda c: audit.repair_audit_file(c.log_path(), keep_chain_from=3),
     ("keep_chain_from",)),
    ("verify_audit_file-path", T, lambda c: audit_verify.verify_audit_file(1), ("verify_audit_file()", "path")),
    ("verify_audit_file-trusted_keys", T, lambda c: audit_verify.verify_audit_file(c.log_path(), trusted_keys=[c.pk]),
     ("verify_audit_file()", "trusted_keys")),
    ("verify_audit_file-checkpoint", V, lambda c: audit_verify.verify_audit_file(c.log_path(), checkpoint_every=-1),
     ("checkpoint_every",)),
    # credentials
    ("issue_credential-key", T, lambda c: boundary.issue_credential(c.pk, agent_id="a", boundary="hr", ttl_s=60),
     ("authority_key",)),
    ("issue_credential-ttl", V, lambda c: boundary.issue_credential(c.sk, agent_id="a", boundary="hr", ttl_s=0),
     ("issue_credential()", "ttl_s")),
    ("issue_credential-now", T, lambda c: boundary.issue_credential(c.sk, agent_id="a", boundary="hr", ttl_s=1,
                                                                      now=math.nan), ("now",)),
    ("verify_credential-token", T, lambda c: boundary.verify_credential(b"qgc1", authorities={}), ("token",)),
    ("verify_credential-authorities", T, lambda c: boundary.verify_credential("qgc1.a.b", authorities=[c.pk]),
     ("verify_credential()", "authorities")),
    ("verify_credential-revoked", T, lambda c: boundary.verify_credential("qgc1.a.b", authorities={},
                                                                            revoked_keys="ed25519:00"),
     ("revoked_keys",)),
    ("verify_credential-authority-entry", T, lambda c: boundary.verify_credential(
        boundary.issue_credential(c.sk, agent_id="a", boundary="hr", ttl_s=60), authorities={"hr": ["key"]}),
     ("authorities['hr']",)),
    # keys
    ("public_key_from_str", T, lambda c: keys.public_key_from_str(b"ed25519:"), ("public_key_from_str()",)),
    ("private_key_to_pem", T, lambda c: keys.private_key_to_pem(c.pk), ("private_key_to_pem()",)),
    ("key_id", T, lambda c: keys.key_id("ed25519:00"), ("key_id()", "Ed25519PublicKey")),
    ("load_private_key", T, lambda c: keys.load_private_key(1), ("load_private_key()", "path")),
    # budget and its stores
    ("make_store-type", T, lambda c: budget.make_store(1), ("spec",)),
    ("make_store-spec", V, lambda c: budget.make_store("mongodb://x"), ("spec", "sqlite:///path.db")),
    ("ExtractionBudget-store", T, lambda c: budget.ExtractionBudget(object()), ("store",)),
    ("ExtractionBudget-clock", T, lambda c: budget.ExtractionBudget(budget.MemoryBudgetStore(), clock=1), ("clock",)),
    ("ExtractionBudget-window", V, lambda c: budget.ExtractionBudget(budget.MemoryBudgetStore(), window_s=0),
     ("window_s",)),
    ("ExtractionBudget.admit-point_ids", T, lambda c: budget.ExtractionBudget(budget.MemoryBudgetStore()).admit(
        principal="p", collection="c", source="s", point_ids="12", source_size=2, max_source_coverage=0.5),
     ("point_ids",)),
    ("ExtractionBudget.admit-coverage", V, lambda c: budget.ExtractionBudget(budget.MemoryBudgetStore()).admit(
        principal="p", collection="c", source="s", point_ids=[1], source_size=2, max_source_coverage=2.0),
     ("max_source_coverage",)),
    ("ExtractionBudget.admit_many", T, lambda c: budget.ExtractionBudget(budget.MemoryBudgetStore()).admit_many(
        principal="p", collection="c", requests=[], max_source_coverage=0.5), ("requests",)),
    ("MemoryBudgetStore.admit-key", T, lambda c: budget.MemoryBudgetStore().admit(
        1, ["i:1"], cap=1, window_s=1.0, now=0.0), ("key",)),
    ("MemoryBudgetStore.admit-empty-key", V, lambda c: budget.MemoryBudgetStore().admit(
        "", ["i:1"], cap=1, window_s=1.0, now=0.0), ("key",)),
    ("MemoryBudgetStore.admit-window", V, lambda c: budget.MemoryBudgetStore().admit(
        "k", ["i:1"], cap=1, window_s=-1.0, now=0.0), ("window_s",)),
    ("MemoryBudgetStore.admit-cap", V, lambda c: budget.MemoryBudgetStore().admit(
        "k", ["i:1"], cap=-1, window_s=1.0, now=0.0), ("cap",)),
    ("MemoryBudgetStore.admit_points", V, lambda c: budget.MemoryBudgetStore().admit_points(
        [("k", 1), ("k", 1)], [], window_s=1.0, now=0.0), ("keys",)),
    ("SqliteBudgetStore-memory", V, lambda c: budget.SqliteBudgetStore(":memory:"), ("SqliteBudgetStore",)),
    ("SqliteBudgetStore-timeout", T, lambda c: budget.SqliteBudgetStore(c.tmp / "b.db", timeout_s="1"),
     ("timeout_s",)),
    ("normalize_point_id-type", T, lambda c: budget.normalize_point_id(1.5), ("point id",)),
    ("normalize_point_id-negative", V, lambda c: budget.normalize_point_id(-1), ("point id",)),
    ("normalize_point_id-uuid", V, lambda c: budget_stores.normalize_point_id("not-a-uuid"), ("point id",)),
    ("denormalize_point_id", V, lambda c: budget.denormalize_point_id("x:1"), ("normalised point id",)),
    # diversity
    ("enforce_diversity-k", T, lambda c: diversity.enforce_diversity([], k=1.5, source_of=str), ("k",)),
    ("enforce_diversity-fraction", V, lambda c: diversity.enforce_diversity([], k=1, source_of=str,
                                                                             max_source_fraction=2.0),
     ("max_source_fraction",)),
    ("source_cap", V, lambda c: diversity.source_cap(-1, 0.5), ("k",)),
    # canonical JSON
    ("canonical_json-nan", V, lambda c: canonical.canonical_json({"x": math.nan}), ("canonical_json", "$.x")),
    ("canonical_json-key", T, lambda c: canonical.canonical_json({1: 2}), ("canonical_json", "key")),
    ("canonical_json-type", T, lambda c: canonical.canonical_json({"x": {1, 2}}), ("canonical_json", "set")),
    ("decode_canonical-type", T, lambda c: canonical.decode_canonical("{}"), ("decode_canonical()",)),
    ("decode_canonical-form", V, lambda c: canonical.decode_canonical(b'{"b":1,"a":2}'), ("canonical form",)),
    ("decode_canonical-nan", V, lambda c: canonical.decode_canonical(b'{"a":NaN}'), ("NaN",)),
    ("is_canonical-type", T, lambda c: canonical.is_canonical("{}"), ("decode_canonical()",)),
    # Merkle trees
    ("build_levels", V, lambda c: merkle.build_levels([]), ("build_levels()", "leaves")),
    ("audit_path", V, lambda c: merkle.audit_path([[b"x"]], 3), ("leaf index 3",)),
    ("root_from_path", V, lambda c: merkle.root_from_path(b"x", 0, 2, []), ("audit path",)),
    # receipts
    ("stored_form-distance", V, lambda c: receipts.stored_form([1.0], distance="Hamming"), ("distance",)),
    ("stored_form-vector", T, lambda c: receipts.stored_form("1.0", distance="Dot"), ("vector",)),
    ("stored_form-zero", V, lambda c: receipts.stored_form([0.0, 0.0], distance="Cosine"), ("zero vector",)),
    ("stored_form_batch", V, lambda c: receipts.stored_form_batch([1.0], distance="Dot"), ("matrix",)),
    ("vector_commitment-salt", V, lambda c: receipts.vector_commitment([0.5], b"short"), ("salt",)),
    ("receipts.normalize_point_id", V, lambda c: receipts.normalize_point_id(2 ** 64), ("point_id",)),
    ("ReceiptSigner-key", T, lambda c: ReceiptSigner(c.pk), ("private_key",)),
    ("ReceiptSigner-key_id", T, lambda c: ReceiptSigner(c.sk, key_id=""), ("key_id",)),
    ("issue_receipt-signer", T, lambda c: receipts.issue_receipt(c.sk, params=c.params(), vector=[0.0] * 4,
                                                                   collection="c", point_id=1), ("signer",)),
    ("issue_receipt-grid", V, lambda c: receipts.issue_receipt(c.signer, params=c.params(), vector=[0.1] * 4,
                                                                 collection="c", point_id=1), ("vector", "grid")),
    ("issue_receipt-collection", T, lambda c: receipts.issue_receipt(c.signer, params=c.params(), vector=[0.0] * 4,
                                                                       collection="", point_id=1), ("collection",)),
    ("issue_receipts_batch", T, lambda c: receipts.issue_receipts_batch(c.signer, [1]), ("items[0]",)),
    ("receipts_for_payload", T, lambda c: receipts.receipts_for_payload([]), ("receipts_for_payload()",)),
    ("receipts_from_payload", T, lambda c: receipts.receipts_from_payload([]), ("payload",)),
    ("verify_receipt-collection", T, lambda c: receipts.verify_receipt({}, vector=[0.0], collection=1, point_id=1,
                                                                        trusted_keys={}), ("collection",)),
    ("verify_receipt-now", V, lambda c: receipts.verify_receipt({}, vector=[0.0], collection="c", point_id=1,
                                                                 trusted_keys={}, now=math.inf), ("now",)),
    ("verify_receipt-trusted", T, lambda c: receipts.verify_receipt({}, vector=[0.0], collection="c", point_id=1,
                                                                     trusted_keys={"k": c.sk}),
     ("trusted_keys['k']",)),
    ("verify-collection_name", T, lambda c: receipts.verify(c.raw(), 1, trusted_keys={}), ("collection_name",)),
    ("verify-batch_size", V, lambda c: receipts.verify(c.raw(), "c", trusted_keys={}, batch_size=0), ("batch_size",)),
    ("verify-ids", V, lambda c: receipts.verify(c.raw(), "c", ["x"], trusted_keys={}), ("verify(ids=...)",)),
    ("verify-check_noise", T, lambda c: receipts.verify(c.raw(), "c", trusted_keys={}, check_noise=1),
     ("check_noise",)),
    ("verify-policy", T, lambda c: receipts.verify(c.raw(), "c", trusted_keys={}, policy=object()), ("policy",)),
    # noise
    ("privatize-mechanism", V, lambda c: noise.privatize(np.zeros(4), mechanism="uniform", epsilon=1.0, radius=0.1),
     ("mechanism",)),
    ("privatize-epsilon", T, lambda c: noise.privatize(np.zeros(4), mechanism="laplace_l2", epsilon="1", radius=0.1),
     ("epsilon",)),
    ("privatize-delta", V, lambda c: noise.privatize(np.zeros(4), mechanism="gaussian", epsilon=1.0, radius=0.1,
                                                     delta=2.0), ("delta",)),
    ("privatize-key", V, lambda c: noise.privatize(np.zeros(4), mechanism="laplace_l2", epsilon=1.0, radius=0.1,
                                                   key=b"short"), ("key",)),
    ("privatize-vectors", T, lambda c: noise.privatize([0.0] * 4, mechanism="laplace_l2", epsilon=1.0, radius=0.1),
     ("vectors",)),
    ("privatize_seeded_for_tests", T, lambda c: noise.privatize_seeded_for_tests(
        np.zeros(4), seed="1", mechanism="laplace_l2", epsilon=1.0, radius=0.1), ("seed",)),
    ("query_noise_key", T, lambda c: noise.query_noise_key("k" * 32), ("key",)),
    ("snap_to_lattice", V, lambda c: noise.snap_to_lattice(np.zeros(4), 0.3), ("step",)),
    ("calibrate_gaussian_sigma", V, lambda c: noise.calibrate_gaussian_sigma(1.0, 1e-6, -1.0), ("sensitivity",)),
    ("guarantee_sentence", V, lambda c: noise_params.guarantee_sentence(
        "gaussian", 1.0, 1e-6, 0.1, None, 1.0, 0.001, 4, "float32", wording=99), ("wording",)),
    # text scanners (native kernels and their twins)
    ("scan_query-text", T, lambda c: scan.scan_query(1), ("scan_query()", "'text'")),
    ("scan_query-rule", V, lambda c: scan.scan_query("x", max_tokens=-1), ("'max_tokens'",)),
    ("scan_query-native-text", T, lambda c: _native_scan.scan_query(1), ("'text'",)),
    ("scan_query-native-rule", T, lambda c: _native_scan.scan_query("x", encoded_payloads=1),
     ("'encoded_payloads'",)),
    ("scan_query-twin-rule", V, lambda c: _scan_py.scan_query("x", max_repetition=2.0), ("'max_repetition'",)),
    ("find_sensitive", T, lambda c: detect.find_sensitive(b"123-45-6789"), ("find_sensitive()", "'text'")),
    ("redact", T, lambda c: detect.redact(None), ("'text'",)),
    ("find_spans-native", T, lambda c: _native_detect.find_spans(1), ("find_spans()", "'text'")),
    ("find_spans-twin", T, lambda c: _detect_py.find_spans(1), ("find_spans()", "'text'")),
    ("gammas-native", V, lambda c: _native_noise.gammas(bytes(32), bytes(12), 0.5, 1), ("shape",)),
    ("gammas-twin", V, lambda c: _noise_py.gammas(bytes(32), bytes(12), 0.5, 1), ("shape",)),
    ("noise-kernel-native-key", V, lambda c: _native_noise.gammas(bytes(31), bytes(12), 1.5, 1), ("stream_key",)),
    ("noise-kernel-twin-key", T, lambda c: _noise_py.gammas("k", bytes(12), 1.5, 1), ("stream_key",)),
    ("generalize_identifiers", T, lambda c: identifiers.generalize_identifiers(1), ("generalize_identifiers()",)),
    # calibration and utility records
    ("UtilityRecord.from_json-type", T, lambda c: utility.UtilityRecord.from_json(1), ("from_json()",)),
    ("UtilityRecord.from_json-fields", V, _bad_utility_record, ("unknown fields",)),
    ("verify_utility_record", T, lambda c: utility.verify_utility_record({}, {}), ("'record'",)),
    ("calibrate-collection", T, lambda c: utility.calibrate(c.raw(), "", [[0.1]], radius=0.1), ("'collection'",)),
    ("calibrate-radius", V, lambda c: _calibrate(c, radius=-1.0), ("'radius'",)),
    ("calibrate-metric", V, lambda c: _calibrate(c, metric="mrr"), ("metric",)),
    ("calibrate-threshold", V, lambda c: _calibrate(c, threshold=1.5), ("threshold",)),
    ("calibrate-vector_name", V, lambda c: _calibrate(c, vector_name="image"), ("vector_name",)),
    ("query_text_transform", V, lambda c: utility.query_text_transform("lower"), ("query text mode",)),
    ("replay_log-mode", V, _bad_replay_mode, ("replay_log()", "mode")),
    ("HashingEmbedder-dim", V, lambda c: HashingEmbedder(dim=4), ("dim",)),
    ("HashingEmbedder-call", T, lambda c: HashingEmbedder()("one text"), ("list of texts",)),
    # intent classifiers
    ("load_classifier-type", T, lambda c: intent.load_classifier(1), ("load_classifier()", "'spec'")),
    ("BuiltinIntentClassifier-model_path", T, lambda c: intent_builtin.BuiltinIntentClassifier(model_path=1),
     ("model_path",)),
    ("BuiltinIntentClassifier.classify", T, lambda c: intent_builtin.BuiltinIntentClassifier().classify(None),
     ("classify()", "'text'")),
    ("LLMIntentClassifier-base_url", V, lambda c: intent_llm.LLMIntentClassifier(
        base_url="ftp://x", model="m", api_key="k"), ("base_url",)),
    ("LLMIntentClassifier-timeout", T, lambda c: intent_llm.LLMIntentClassifier(
        base_url="http://x", model="m", api_key="k", timeout_s="1"), ("timeout_s",)),
    ("LLMIntentClassifier-retries", V, lambda c: intent_llm.LLMIntentClassifier(
        base_url="http://x", model="m", api_key="k", max_retries=-1), ("max_retries",)),
    ("load_dataset", V, _bad_dataset, ("data.jsonl:1",)),
    # the evaluation harness (qdrant-guard eval)
    ("Embedder.encode", T, lambda c: Embedder(c.tmp).encode("one text"), ("encode()", "list of texts")),
    ("plant_identifiers", V, lambda c: plant_identifiers(["a"], np.random.default_rng(0), pool=1), ("pool",)),
    ("make_levels", V, lambda c: make_levels([-1.0], {}), ("noise level",)),
    ("run_sweep", V, lambda c: run_sweep(EvalConfig(utility_draws=0), lambda *a, **k: None, str),
     ("utility_draws",)),
    # the guarded client's own argument checks
    ("guarded-collection_name", T, lambda c: c.guarded().upsert(
        collection_name=1, points=[models.PointStruct(id=1, vector=[0.0] * DIM)]), ("'collection_name'",)),
    ("guarded-points", T, lambda c: c.guarded().upsert("hr", points=[1]), ("points",)),
    ("guarded-batch", V, lambda c: c.guarded().upsert(
        "hr", points=models.Batch(ids=[1, 2], vectors=[unit(np.random.default_rng(0))])), ("models.Batch",)),
    ("guarded-upload_collection", V, lambda c: c.guarded().upload_collection(
        "hr", vectors=[unit(np.random.default_rng(0))], ids=[1, 2]), ("upload_collection",)),
]


@pytest.fixture
def ctx(tmp_path: Path) -> Ctx:
    sk, pk = keys.generate_keypair()
    return Ctx(tmp_path, sk, pk)


@pytest.mark.parametrize(("builtin", "call", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_raises_the_base_class_and_the_builtin(ctx: Ctx, builtin: type, call: Call,
                                                            words: tuple[str, ...]) -> None:
    with pytest.raises(builtin) as info:
        call(ctx)
    err = info.value
    assert isinstance(err, QdrantGuardError), f"{type(err).__name__}: {err}"
    want = GuardArgumentTypeError if builtin is TypeError else (GuardArgumentValueError, ConfigError)
    assert isinstance(err, want), f"{type(err).__name__}: {err}"
    for word in words:
        assert word in str(err), f"{word!r} not in {str(err)!r}"


@pytest.mark.parametrize(("call", "words"), [
    (lambda c: budget.make_store("mongodb://x"), ("spec",)),
    (lambda c: intent.load_classifier("no_colon"), ("'no_colon'", "module:attr")),
    (lambda c: intent.load_classifier("qdrant_guard_no_such_module:X"), ("cannot be loaded",)),
    (lambda c: intent_llm.LLMIntentClassifier(base_url="", model="m", api_key="k"), ("base_url",)),
], ids=["make_store", "load_classifier-spec", "load_classifier-import", "LLMIntentClassifier-no-url"])
def test_a_bad_setting_is_a_config_error(ctx: Ctx, call: Call, words: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        call(ctx)
    for word in words:
        assert word in str(info.value)


def test_the_new_class_is_exported_and_a_value_error() -> None:
    assert "GuardArgumentValueError" in qdrant_guard.__all__
    assert issubclass(GuardArgumentValueError, QdrantGuardError) and issubclass(GuardArgumentValueError, ValueError)
    assert not issubclass(GuardArgumentValueError, TypeError)


@pytest.mark.parametrize(("native", "python", "args", "kwargs"), [
    (_native_scan.scan_query, _scan_py.scan_query, (1,), {}),
    (_native_scan.scan_query, _scan_py.scan_query, ("x",), {"min_blob_len": 7}),
    (_native_detect.find_spans, _detect_py.find_spans, (b"x",), {}),
    (_native_noise.gammas, _noise_py.gammas, (bytes(32), bytes(12), 0.5, 1), {}),
    (_native_noise.gammas, _noise_py.gammas, (bytes(32), b"short", 1.5, 1), {}),
], ids=["scan-text", "scan-rule", "detect", "noise-shape", "noise-nonce"])
def test_the_twins_raise_the_same_class(native: Callable[..., Any], python: Callable[..., Any],
                                        args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    errors = []
    for fn in (native, python):
        with pytest.raises(QdrantGuardError) as info:
            fn(*args, **kwargs)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1]), errors


def test_is_canonical_still_answers_false_for_bytes_and_raises_for_text() -> None:
    # GuardArgumentTypeError is a ValueError too: is_canonical's `except ValueError` must not
    # turn "not bytes" into False.
    assert canonical.is_canonical(b'{"a":1}') and not canonical.is_canonical(b'{"a": 1}')
    with pytest.raises(TypeError):
        canonical.is_canonical("{}")


def test_a_signing_key_pub_file_of_another_key_is_a_config_error(ctx: Ctx) -> None:
    from qdrant_guard import cli_policy_keys

    key = ctx.tmp / "guard.key"
    key.write_bytes(keys.private_key_to_pem(ctx.sk))
    key.chmod(0o600)
    _, other = keys.generate_keypair()
    (ctx.tmp / "guard.key.pub").write_text(keys.public_key_to_str(other) + "\n")
    with pytest.raises(ConfigError, match="not the public key of"):
        cli_policy_keys._signing_public_key(str(key))


@pytest.mark.parametrize(("builtin", "call", "word"), [
    (ValueError, lambda s: s.admit("\x00qg-index", ["i:1"], cap=1, window_s=1.0, now=0.0), "reserved"),
    (TypeError, lambda s: s.admit("k", "i:1", cap=1, window_s=1.0, now=0.0), "point_ids"),
], ids=["reserved-key", "point_ids"])
def test_redis_budget_store_bad_arguments(redis_url: str, builtin: type, call: Callable[[Any], Any],
                                          word: str) -> None:
    store = budget.RedisBudgetStore(redis_url, prefix=f"qg:test:{uuid.uuid4().hex}:")
    with pytest.raises(builtin) as info:
        call(store)
    assert isinstance(info.value, QdrantGuardError) and word in str(info.value)
