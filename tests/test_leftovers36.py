"""The items the thirty-second review and earlier closing notes left open (branch h-left).

Each test fails on the code before its fix: calibrate signing a record measured on no more than k
points, issue_receipts_rows zipping columns of unequal length, ...
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client import models

from qdrant_guard import cli, receipts
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.keys import generate_keypair
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import ReceiptSigner, stored_form_batch


# -- 1. calibrate refuses to sign a record measured on no more than k points ---------------------

def _small_store(points: int, dim: int = 4) -> RawClient:
    raw = RawClient(":memory:")
    raw.create_collection("kb", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
    raw.upsert("kb", [models.PointStruct(id=i, vector=[1.0 + i, 0.5, 0.25 * i, 0.1 * (i % 3)])
                      for i in range(points)])
    return raw


# 20 queries: calibrate signs no record on fewer (min_queries).
_QUERIES = [[1.0 + 0.1 * i, 0.5, 0.025 * i, 0.1] for i in range(20)]


@pytest.mark.parametrize("points,k", [(6, 10), (10, 10), (1, 1)])
def test_calibrate_refuses_a_collection_of_no_more_than_k_points(points: int, k: int) -> None:
    # Before: a record was signed (the CLI only warned), its drops 0 at every level because every
    # top-k held every point, so it vouched for the strongest noise tried.
    from qdrant_guard.utility import calibrate

    raw = _small_store(points)
    with pytest.raises(GuardArgumentValueError) as err:
        calibrate(raw, "kb", _QUERIES, k=k, radius=0.01, progress=False, seed=0)
    msg = str(err.value)
    assert f"holds {points} point(s), no more than k={k}" in msg
    assert "add points" in msg and "lower k" in msg and "allow_small_collection=True" in msg
    # The opt-in signs it, as before; one point more than k needs none.
    rec = calibrate(raw, "kb", _QUERIES, k=k, radius=0.01, progress=False, seed=0, allow_small_collection=True)
    assert rec.n_documents == points
    raw.upsert("kb", [models.PointStruct(id=100 + i, vector=[0.3, 1.0 + i, 0.2, 0.4]) for i in range(k + 1 - points)])
    assert calibrate(raw, "kb", _QUERIES, k=k, radius=0.01, progress=False, seed=0).n_documents == k + 1


def test_calibrate_allow_small_collection_must_be_a_bool() -> None:
    from qdrant_guard.utility import calibrate

    with pytest.raises(GuardArgumentTypeError, match="allow_small_collection' must be a bool, not str"):
        calibrate(_small_store(12), "kb", _QUERIES, k=3, radius=0.01, progress=False, allow_small_collection="no")


def _cli_args(tmp: Path, points: int, k: int) -> list[str]:
    store = tmp / "store"
    raw = RawClient(path=str(store))
    raw.create_collection("kb", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    raw.upsert("kb", [models.PointStruct(id=i, vector=[1.0 + i, 0.5, 0.25 * i, 0.1 * (i % 3)]) for i in range(points)])
    raw.close()
    (tmp / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in _QUERIES))
    return ["calibrate", "--path", str(store), "--collection", "kb", "--queries", str(tmp / "q.jsonl"),
            "--no-progress", "--seed", "0", "--k", str(k), "--out", str(tmp / "u.json")]


def test_calibrate_cli_refuses_a_small_collection_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _cli_args(tmp_path, 6, 10)
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "holds 6 point(s), no more than k=10" in err and "--allow-small-collection" in err
    assert not (tmp_path / "u.json").exists()
    assert cli.main(args + ["--allow-small-collection"]) == 0
    assert "(signed under --allow-small-collection)" in capsys.readouterr().err
    assert (tmp_path / "u.json").exists()


# -- 4. issue_receipts_rows checks that each group's columns have one entry per vector ------------

def _rows_group(n_vecs: int, n_ids: int, n_models: int) -> tuple:
    _, params = privatize(np.ones((1, 8)) / np.sqrt(8), mechanism="gaussian", epsilon=2.0, radius=0.01,
                          delta=1e-6, clip_norm=1.0)
    vecs = list(stored_form_batch(np.random.default_rng(0).normal(size=(n_vecs, 8)), distance="Cosine"))
    return (params, vecs, "docs", list(range(n_ids)), "", ["m"] * n_models)


@pytest.mark.parametrize("shape", [(3, 2, 3), (3, 3, 2), (2, 3, 3), (0, 1, 0)])
def test_issue_receipts_rows_refuses_columns_of_unequal_length(shape: tuple[int, int, int]) -> None:
    # Before: the columns were flattened and zipped; a short id column shifted every later
    # row's point id (receipts naming other points) or dropped rows silently.
    signer = ReceiptSigner(generate_keypair()[0])
    groups = [_rows_group(2, 2, 2), _rows_group(*shape)]
    with pytest.raises(GuardArgumentValueError) as err:
        receipts.issue_receipts_rows(signer, groups)
    n_vecs, n_ids, n_models = shape
    assert (f"group 1 has {n_vecs} vector(s), {n_ids} point id(s) and {n_models} model id(s)"
            in str(err.value))
    assert len(receipts.issue_receipts_rows(signer, [_rows_group(2, 2, 2), _rows_group(3, 3, 3)])) == 5


# -- 3. the left-behind count holds a receipt's dtype, mechanism_version and lattice_step --------
# -- 6. model names compare as qdrant-client's inference resolves them: but for case -------------

MODEL = "BAAI/bge-small-en-v1.5"


def _lb_policy(kit, model=None):
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
           "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
           "intent": {"enabled": False}, "diversity": {"enabled": False},
           "noise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01}, "utility": {}}
    if model is not None:
        pol["utility"]["embedding_model"] = model
    return kit.config({"pii": pol})


def _lb_clients(kit, cfg):
    from guardkit import Recorder, create

    from qdrant_guard import QdrantClient

    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(owner, "pii", distance=models.Distance.EUCLID)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _signed_point(kit, pid, rng, *, epsilon=1.0, model_id=None, **change):
    """A point noised at ``epsilon`` (radius 0.01, delta 1e-6, clip_norm 1), its params changed by
    ``change`` and the guarantee sentence restated for them, signed by the guard's own key."""
    import dataclasses

    from guardkit import guard_signer, unit

    from qdrant_guard.noise_params import guarantee_sentence
    from qdrant_guard.receipts import RECEIPT_KEY, ReceiptItem, issue_receipts_batch, receipts_for_payload, stored_form

    noised, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism="gaussian", epsilon=epsilon,
                               radius=0.01, delta=1e-6, clip_norm=1.0)
    params = dataclasses.replace(params, **change)
    params = dataclasses.replace(params, guarantee=guarantee_sentence(
        params.mechanism, params.epsilon, params.delta, params.radius, params.clip_norm, params.scale,
        params.lattice_step, params.dim, params.dtype))
    vec = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=vec, collection="pii",
                                                               point_id=pid, vector_name="", model_id=model_id)])[0]
    return models.PointStruct(id=pid, vector=vec.tolist(), payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})})


def _by_id(c):
    return c.query_points("pii", query=1, limit=5)


def _policy_step() -> float:
    from qdrant_guard.noise import calibrated_lattice_step

    return calibrated_lattice_step("gaussian", 1.0, 1e-6, 0.01)


@pytest.mark.parametrize("change", [
    {"mechanism_version": "0"}, {"mechanism_version": "4"},
    {"lattice_step": "x2"}, {"lattice_step": 0.0}, {"lattice_step": "neg"},
], ids=["version-0", "version-4", "coarser-lattice", "zero-lattice", "negative-lattice"])
def test_a_receipt_of_an_unknown_version_or_a_coarser_lattice_counts_as_left_behind(tmp_path, change):
    # Before: the count's filter read the mechanism, epsilon, radius, delta, clip_norm, rng_id and
    # model only, so a receipt reads strip as unsound_noise (check_release) passed it, and a query
    # by point id compared that stored vector as if it were noised.
    from guardkit import make_kit
    from qdrant_client import QdrantClient as Raw

    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit))
    rng = np.random.default_rng(3)
    step = _policy_step()
    value = next(iter(change.values()))
    field = next(iter(change))
    value = {"x2": 2 * step, "neg": -step}.get(value, value) if isinstance(value, str) and field == "lattice_step" else value
    Raw.upsert(owner, "pii", [_signed_point(kit, i, rng) for i in (1, 2, 3)]
               + [_signed_point(kit, 4, rng, **{field: value})])
    stripped = {p.id: p.vector is None for p in bob.retrieve("pii", [1, 2, 3, 4], with_vectors=True)}
    assert stripped == {1: False, 2: False, 3: False, 4: True}
    with pytest.raises(GuardRefusal) as err:
        _by_id(bob)
    assert err.value.verdict == "QUERY_REJECTED" and "still holds 1 point(s)" in str(err.value)


def test_a_receipt_of_another_dtype_counts_as_left_behind(tmp_path):
    # dtype cannot be signed as another (the issuer refuses a float16 release), so it is edited in
    # the stored payload: the count reads fields, not the signature.
    from guardkit import make_kit
    from qdrant_client import QdrantClient as Raw

    from qdrant_guard import GuardRefusal
    from qdrant_guard.receipts import RECEIPT_KEY

    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit))
    rng = np.random.default_rng(4)
    pts = [_signed_point(kit, i, rng) for i in (1, 2, 3, 4)]
    pts[3].payload[RECEIPT_KEY]["vectors"][""]["params"]["dtype"] = "float16"
    Raw.upsert(owner, "pii", pts)
    with pytest.raises(GuardRefusal) as err:
        _by_id(bob)
    assert "still holds 1 point(s)" in str(err.value)


def test_stronger_noise_on_its_own_coarser_lattice_and_a_model_spelt_in_another_case_are_not_counted(tmp_path):
    # A receipt of stronger noise (its lattice coarser than the policy's, as calibrated) and one
    # naming the declared model lowercased are released by reads, so they must not block queries:
    # the filter holds only a receipt at the policy's own noise to the policy's step.
    from guardkit import make_kit
    from qdrant_client import QdrantClient as Raw

    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit, MODEL))
    rng = np.random.default_rng(5)
    strong = _signed_point(kit, 2, rng, epsilon=0.125)
    from qdrant_guard.receipts import RECEIPT_KEY

    assert strong.payload[RECEIPT_KEY]["vectors"][""]["params"]["lattice_step"] > _policy_step()
    Raw.upsert(owner, "pii", [_signed_point(kit, 1, rng, model_id=MODEL), strong,
                              _signed_point(kit, 3, rng, model_id=MODEL.lower())])
    assert all(p.vector is not None for p in bob.retrieve("pii", [1, 2, 3], with_vectors=True))
    _by_id(bob)  # runs


def test_a_receipt_naming_the_declared_model_in_other_case_is_accepted_and_released(tmp_path):
    # Before: 'baai/bge-small-en-v1.5' was refused as another model than 'BAAI/bge-small-en-v1.5',
    # though qdrant-client's inference (fastembed_common.is_supported_text_model) and fastembed's
    # TextEmbedding look both up lowercased: one model.
    from guardkit import make_kit

    from qdrant_guard.receipts import model_mismatch

    kit = make_kit(tmp_path)
    cfg = _lb_policy(kit, MODEL)
    util = cfg.collections["pii"].utility
    assert model_mismatch(MODEL.lower(), util, "pii", "") is None
    assert model_mismatch("BAAI/bge-small-en", util, "pii", "") is not None  # another model still is
    owner, bob = _lb_clients(kit, cfg)
    rng = np.random.default_rng(6)
    bob.upsert("pii", [_signed_point(kit, 1, rng, model_id=MODEL.upper())])
    assert bob.retrieve("pii", [1], with_vectors=True)[0].vector is not None


def test_an_inference_document_and_an_embedder_naming_the_declared_model_in_other_case_pass(tmp_path):
    # Before: each was a ConfigError ("naming model 'baai/...'", "embed with its embedder's model").
    from guardkit import make_kit
    from tests.test_utility_model_reads import _clients, _policy

    from qdrant_guard.errors import ConfigError
    from qdrant_guard.hashing_embedder import HashingEmbedder

    kit = make_kit(tmp_path)
    _, bob = _clients(kit, _policy(kit, MODEL))
    with pytest.raises(Exception) as ei:  # no inference backend in local mode: it fails inside qdrant-client
        bob.query_points("pii", query=models.Document(text="the plan", model=MODEL.lower()), limit=3)
    assert not isinstance(ei.value, ConfigError), ei.value
    with pytest.raises(ConfigError, match="naming model 'BAAI/bge-small-en'"):
        bob.query_points("pii", query=models.Document(text="the plan", model="BAAI/bge-small-en"), limit=3)
    emb = HashingEmbedder(dim=16)
    emb.model_id = MODEL.lower()
    owner, _ = _clients(kit, _policy(kit, MODEL), embedder=emb)
    owner.upsert("pii", [models.PointStruct(id=1, vector=models.Document(text="the plan", model=MODEL.lower()),
                                            payload={"t": "x"})])


def test_calibrate_takes_an_embedding_model_its_embedder_names_in_other_case() -> None:
    from qdrant_guard.utility import calibrate

    class Emb:
        model_id = MODEL.lower()

        def __call__(self, texts):
            return np.asarray([[1.0 + len(t), 0.5, 0.2, 0.1] for t in texts])

    rec = calibrate(_small_store(12), "kb", ["a", "bb"], k=3, radius=0.01, progress=False, seed=0,
                    embedder=Emb(), embedding_model=MODEL, allow_few_queries=True)
    assert rec.embedding_model == MODEL


# -- 5. an agent id, boundary or collection name with control characters stays on one line ------

CONTROL = ["ops\nbot", "ops\rbot", "ops\x1b[31mbot"]


def _no_control(text: str) -> bool:
    return all(ch.isprintable() or ch == " " for ch in text)


@pytest.mark.parametrize("revoke", [True, False], ids=["revoked", "expired"])
@pytest.mark.parametrize("name", CONTROL, ids=["newline", "cr", "escape"])
def test_a_credential_rejection_escapes_control_characters_and_its_command_still_pastes(name, revoke) -> None:
    # Before: "credential of ops\nbot@hr\nx expired ..." and `--agent 'ops\nbot'`: the message
    # broke across lines (or, with \r and \x1b[31m, overwrote or recoloured the terminal). Since
    # h-left2 no such credential is issued, and a token naming one (issued before, or forged by an
    # authority) is rejected as malformed before its revocation or expiry is looked at: that
    # message stays on one line too (tests/test_leftovers36b.py has the rest).
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from test_leftovers36b import _forged

    from qdrant_guard.boundary import CredentialRejected, verify_credential

    sk = Ed25519PrivateKey.generate()
    tok = _forged(sk, name, name + "-b")
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(tok, authorities={name + "-b": [sk.public_key()]},
                          revoked_credentials=["abcDEF_-12"] if revoke else (),
                          now=1_700_000_000 + (0 if revoke else 7200))
    assert ei.value.reason == "malformed"
    assert _no_control(str(ei.value)) and f"claim agent_id {name!r} holds" in str(ei.value)


@pytest.mark.parametrize("name", ["o'ps", 'o"ps', "o\\ps"], ids=["quote", "double-quote", "backslash"])
def test_credential_issue_prints_its_note_on_one_line(tmp_path: Path, capsys, name) -> None:
    # A name with control characters is refused since h-left2 (test_leftovers36b); one that needs
    # quoting is still shown quoted.
    assert cli.main(["keys", "new", "--out", str(tmp_path / "a.key")]) == 0
    capsys.readouterr()
    assert cli.main(["credential", "issue", "--authority", str(tmp_path / "a.key"), "--agent", name,
                     "--boundary", name]) == 0
    err = capsys.readouterr().err
    assert _no_control(err.rstrip("\n")), err
    assert f"note: {name!r}@{name!r} until" in err
    assert f"[boundaries.{json.dumps(name)}] revoked_credentials" in err


@pytest.mark.parametrize("name", CONTROL, ids=["newline", "cr", "escape"])
def test_the_left_behind_fix_quotes_the_collection_for_the_shell(name) -> None:
    from qdrant_guard.policy import CollectionPolicy
    from qdrant_guard.querycheck import raw_stored_way_out

    text = raw_stored_way_out(CollectionPolicy(), name, 2)
    assert _no_control(text) and "receipt verify --collection $'ops" in text


@pytest.mark.parametrize("name", ["hr\u2028x", "hr\u202ex", "hr\x85x"], ids=["line-separator", "bidi-override", "c1-nel"])
def test_a_policy_section_name_is_one_printable_line_that_toml_reads_back(name) -> None:
    # C0 controls were escaped already (JSON's escapes); these were written raw into a message.
    import tomllib

    from qdrant_guard.policy import toml_key

    key = toml_key(name)
    assert _no_control(key), key
    assert tomllib.loads(f"[boundaries.{key}]\nx = 1\n")["boundaries"] == {name: {"x": 1}}


# -- 2. calibrate --policy reads the collection's noise and utility settings from the policy -----

def _policy_file(kit, tmp: Path) -> Path:
    pol = tmp / "policy.toml"
    pol.write_text(f"""signing_key = "{kit.guard_key_path}"
[boundaries.hr]
authority_keys = ["{kit.authority_pub['hr']}"]
[collections.kb]
class = "PII"
owner = "hr"
[collections.kb.noise]
mechanism = "laplace_l2"
epsilon = 1.0
delta = 0.0
radius = 0.02
clip_norm = 0.5
[collections.kb.utility]
k = 3
metric = "overlap"
max_recall_drop = 0.5
embedding_model = "{MODEL}"
""")
    return pol


def _staging_args(tmp: Path) -> list[str]:
    store = tmp / "staging"
    raw = RawClient(path=str(store))
    raw.create_collection("kb_staging", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    rng = np.random.default_rng(1)
    raw.upsert("kb_staging", [models.PointStruct(id=i, vector=rng.normal(size=4).tolist()) for i in range(40)])
    raw.close()
    (tmp / "q.jsonl").write_text("".join(json.dumps(rng.normal(size=4).tolist()) + "\n" for _ in range(20)))
    return ["calibrate", "--path", str(store), "--collection", "kb_staging", "--queries", str(tmp / "q.jsonl"),
            "--no-progress", "--seed", "0", "--epsilons", "0.5,2,8", "--out", str(tmp / "u.json")]


def test_calibrate_policy_takes_the_collections_settings_and_signing_key(tmp_path: Path, capsys) -> None:
    # Before: calibrate had no --policy (every other command reading a policy takes one), so each
    # setting was retyped and a slip (k, metric, clip_norm) gave a record the guard refuses.
    from guardkit import make_kit

    from qdrant_guard.keys import key_id, load_private_key
    from qdrant_guard.utility import UtilityRecord

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    assert cli.main(_staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb"]) == 0
    out = capsys.readouterr()
    assert f"(the settings of --policy {pol} [collections.kb])" in out.out
    assert "unsigned" not in out.err and "warning" not in out.err
    rec = UtilityRecord.from_json((tmp_path / "u.json").read_text())
    assert (rec.mechanism, rec.radius, rec.delta, rec.clip_norm, rec.k, rec.metric, rec.threshold,
            rec.embedding_model) == ("laplace_l2", 0.02, 0.0, 0.5, 3, "overlap", 0.5, MODEL)
    assert rec.epsilon_ceiling == 2.0  # the PII class's default ceiling
    assert rec.signer_key_id == key_id(load_private_key(kit.guard_key_path).public_key())


@pytest.mark.parametrize("extra,flag", [
    (["--k", "5"], "--k 5 disagrees"), (["--metric", "recall"], "--metric 'recall' disagrees"),
    (["--mechanism", "gaussian"], "--mechanism 'gaussian' disagrees"), (["--radius", "0.01"], "--radius 0.01 disagrees"),
    (["--clip-norm", "1"], "--clip-norm 1.0 disagrees"), (["--threshold", "0.6"], "--threshold 0.6 disagrees"),
    (["--embedding-model", "other/model"], "--embedding-model 'other/model' disagrees"),
])
def test_calibrate_policy_refuses_an_option_that_disagrees(tmp_path: Path, capsys, extra, flag) -> None:
    from guardkit import make_kit

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    assert cli.main(_staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb", *extra]) == 2
    err = capsys.readouterr().err
    assert flag in err and f"--policy {pol}" in err and "[collections.kb]" in err
    assert not (tmp_path / "u.json").exists()


def test_calibrate_policy_takes_a_lower_threshold_and_warns_when_its_epsilon_is_not_covered(tmp_path, capsys) -> None:
    from guardkit import make_kit

    from qdrant_guard.utility import UtilityRecord

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    args = _staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb"]
    assert cli.main(args + ["--epsilon-ceiling", "4"]) == 2  # above the PII ceiling 2
    assert "--epsilon-ceiling 4.0 disagrees" in capsys.readouterr().err
    args[args.index("--epsilons") + 1] = "2"  # only weaker noise than the policy's epsilon 1
    assert cli.main(args + ["--threshold", "0.4"]) == 3  # 0 with a warning before h-left2 (test_leftovers36b)
    err = capsys.readouterr().err
    assert UtilityRecord.from_json((tmp_path / "u.json").read_text()).threshold == 0.4
    assert "noises at epsilon 1, which this record does not cover" in err and "UTILITY_DEGRADED" in err
