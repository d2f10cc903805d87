"""Four items earlier sessions left open in docs/security-testing.md (2026-12-06, branch h-left3).

1. A query refused for its embedding model (a Document's or Image's ``model``, the embedder's
   model for the vector ``using=`` names) raised a ConfigError and left no audit entry.
2. ``qdrant-guard calibrate --policy`` embedded text queries ``generalized`` whatever the policy's
   ``query.redact_query_text``, ``redact_pii`` and ``generalize_identifiers`` said.
3. The left-behind count took a receipt of stronger noise than the policy's on a lattice coarser
   than its own calibration, or with a scale below its own, as receipted; reads strip both.
4. ``names.toml_str`` wrote a lone surrogate as ``\\uD800``, which TOML (``tomllib``) refuses.

Each test fails on the code before. Real local Qdrant, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from guardkit import DIM, Recorder, audit_records, make_kit, models, unit

from qdrant_guard import AsyncQdrantClient, ConfigError, GuardRefusal, cli
from qdrant_guard.audit_verify import verify_audit_file
from tests.test_utility_model_reads import MODEL_A, MODEL_B, QUERIES, _clients, _doc, _policy, _query

HASHING = f"qg-hashing-v1-{DIM}"


# -- 1. query model refusals are audited ---------------------------------------------------------

def _assert_model_entry(kit, err, *, op, form, by, model, declared=MODEL_A, vector="", where="query",
                        key="utility.embedding_model") -> None:
    rec = audit_records(kit)[-1]
    assert rec["op"] == op and rec["collection"] == "pii" and rec["verdict"] == "QUERY_REJECTED"
    assert rec["principal"] == "bob@support" and rec["manifest"]["embedding_sensitivity_class"] == "PII"
    assert rec["directive"] == str(err)
    assert rec["details"] == {"reason": "model_mismatch", "where": where, "form": form, "embedded_by": by,
                              "vector_name": vector, "model": model, "declared": declared, "key": key}
    assert err.manifest_digest == json.loads((kit.tmp / "audit.jsonl").read_text().splitlines()[-1])["hash"]
    assert verify_audit_file(kit.tmp / "audit.jsonl").ok


@pytest.mark.parametrize("method", QUERIES)
def test_a_query_refused_for_its_embedders_model_is_audited(tmp_path, method):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit), embedder=Recorder())  # the embedder names HASHING
    before = len(audit_records(kit))
    with pytest.raises(ConfigError) as ei:  # raised as before
        _query(bob, method, _doc())
    assert "embedder's model" in str(ei.value) and "Nothing was embedded or sent" in str(ei.value)
    assert len(audit_records(kit)) == before + 1
    _assert_model_entry(kit, ei.value, op=method, form="Document", by="embedder", model=HASHING)


@pytest.mark.parametrize("method", QUERIES)
def test_a_query_document_refused_for_its_model_is_audited(tmp_path, method):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit), embedder=None)  # qdrant-client's inference would embed it
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, models.Document(text="the plan", model=MODEL_B))
    assert f"naming model {MODEL_B!r}" in str(ei.value)
    where = "requests[0].query" if method == "query_batch_points" else "query"  # a batch names its request
    _assert_model_entry(kit, ei.value, op=method, form="Document", by="inference", model=MODEL_B, where=where)


def test_an_image_refused_for_its_model_is_audited_with_its_path_and_vector(tmp_path):
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, embedding_models={"image": MODEL_A}), named=("text", "image"),
                          embedder=None)
    image = models.Image(image="https://example.invalid/a.png", model=MODEL_B)
    pre = models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
        positive=[[0.1] * DIM], negative=[image])), using="image", limit=5)
    with pytest.raises(ConfigError) as ei:
        bob.query_points("pii", prefetch=[pre], query=[0.3] * DIM, using="text", limit=3)
    _assert_model_entry(kit, ei.value, op="query_points", form="Image", by="inference", model=MODEL_B,
                        vector="image", where="prefetch[0].query.recommend.negative[0]",
                        key="utility.embedding_models.image")


def test_the_async_client_audits_a_model_refusal_alike(tmp_path):
    kit = make_kit(tmp_path)
    cfg = _policy(kit)

    async def main():
        owner = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await owner.create_collection("pii", vectors_config=models.VectorParams(size=DIM,
                                                                                 distance=models.Distance.EUCLID))
        bob = owner.with_principal(kit.principal("bob", "support"))
        with pytest.raises(ConfigError) as ei:
            await bob.query_points("pii", query=models.Document(text="plan", model=MODEL_B), limit=3)
        return ei.value

    err = asyncio.run(main())
    _assert_model_entry(kit, err, op="query_points", form="Document", by="inference", model=MODEL_B)


def test_programming_errors_and_accepted_models_add_no_model_entry(tmp_path):
    # Not every ConfigError is a decision: a client built with a wrong embedder= is refused before
    # any call, and a query whose model matches (case folded) is no refusal.
    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    with pytest.raises(ConfigError):
        QdrantClient(":memory:", guard=_policy(kit), principal=kit.principal("alice", "hr"), embedder=42)
    owner, bob = _clients(kit, _policy(kit, HASHING.upper()), embedder=Recorder())
    owner.upsert("pii", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"t": "x"})])
    bob.query_points("pii", query=_doc(), limit=3)
    assert not [r for r in audit_records(kit) if r["details"].get("reason") == "model_mismatch"]
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"


# -- 2. calibrate takes --query-text from the policy ---------------------------------------------

class _SeenEmbedder:
    """Stands in for the eval model (not installed here): the hashing embedder at the staging
    collection's dimension, keeping every text calibrate embedded."""

    seen: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        from qdrant_guard.hashing_embedder import HashingEmbedder

        self._e = HashingEmbedder(8)

    def encode(self, texts):
        _SeenEmbedder.seen.extend(texts)
        return self._e(list(texts))


TEXT = "email jane.doe@example.com about ticket 48213 for Alice"


def _calibrate(tmp: Path, monkeypatch, policy_extra: str, *flags: str) -> tuple[int, list[str]]:
    from qdrant_client import QdrantClient as RawClient

    import qdrant_guard.evaluation.embed as embed_mod
    from qdrant_guard.evaluation.embed import MODEL_ID
    from qdrant_guard.hashing_embedder import HashingEmbedder

    monkeypatch.setattr(embed_mod, "Embedder", _SeenEmbedder)
    _SeenEmbedder.seen = []
    kit = make_kit(tmp)
    store = tmp / "store"
    if not store.exists():
        raw = RawClient(path=str(store))
        raw.create_collection("kb", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
        texts = [f"document {i} about topic {i % 7} and plan {i % 3}" for i in range(40)]
        raw.upsert("kb", [models.PointStruct(id=i, vector=v.tolist())
                          for i, v in enumerate(HashingEmbedder(8)(texts))])
        raw.close()
    (tmp / "q.jsonl").write_text(json.dumps(TEXT) + "\n" + json.dumps("the plan for topic 3") + "\n")
    pol = tmp / "policy.toml"
    pol.write_text(f"""signing_key = "{kit.guard_key_path}"
[collections.kb]
class = "PII"
{policy_extra}
[collections.kb.noise]
epsilon = 1.0
[collections.kb.utility]
k = 3
metric = "overlap"
max_recall_drop = 0.99
min_queries = 2
embedding_model = "{MODEL_ID}"
""")
    args = ["calibrate", "--path", str(store), "--collection", "kb", "--queries", str(tmp / "q.jsonl"),
            "--no-progress", "--seed", "0", "--epsilons", "1,2", "--out", str(tmp / "u.json"),
            "--policy", str(pol), *flags]
    return cli.main(args), [t for t in _SeenEmbedder.seen if "plan for topic" not in t]


def _guard_embeds(tmp: Path, redact_query_text: bool, redact_pii: bool, generalize: bool) -> str:
    """The text a guard under these settings embeds for a query ``models.Document`` of TEXT."""
    from qdrant_guard import QdrantClient

    (tmp / "guard").mkdir()
    kit = make_kit(tmp / "guard")
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False},
                              "redact_pii": redact_pii, "generalize_identifiers": generalize,
                              "query": {"redact_query_text": redact_query_text}}})
    embed = Recorder()
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=embed)
    client.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.query_points("pii", query=models.Document(text=TEXT, model="any"), limit=1)
    return embed.seen[-1]


def _policy_lines(redact_query_text: bool, redact_pii: bool, generalize: bool) -> str:
    # Top-level keys of the collection before its sub-tables; [query] goes after them.
    return (f"redact_pii = {str(redact_pii).lower()}\ngeneralize_identifiers = {str(generalize).lower()}\n"
            f"[collections.kb.query]\nredact_query_text = {str(redact_query_text).lower()}")


@pytest.mark.parametrize("settings, want", [
    ((True, True, True), "email [EMAIL] about ticket [NUMBER] for [NAME]"),
    ((True, True, False), "email [EMAIL] about ticket 48213 for Alice"),
    ((False, True, False), TEXT),
    ((True, False, False), TEXT),
    ((False, True, True), "email [CODE]@[CODE] about ticket [NUMBER] for [NAME]"),
], ids=["defaults", "no-generalize", "no-query-redaction", "no-redact-pii", "generalize-only"])
def test_calibrate_embeds_query_text_as_the_policys_guard_does(tmp_path, monkeypatch, capsys, settings, want):
    from qdrant_guard.detect import redact
    from qdrant_guard.identifiers import generalize_identifiers

    # The expectations are the guard's own text functions, pinned here as strings.
    assert generalize_identifiers(redact(TEXT)) == "email [EMAIL] about ticket [NUMBER] for [NAME]"
    rc, seen = _calibrate(tmp_path, monkeypatch, _policy_lines(*settings))
    assert rc == 0, capsys.readouterr().err
    assert seen == [want]
    assert _guard_embeds(tmp_path, *settings) == want  # what a guard under those settings embeds
    assert "warning: --query-text" not in capsys.readouterr().err


def test_an_explicit_query_text_flag_wins_with_a_warning(tmp_path, monkeypatch, capsys):
    rc, seen = _calibrate(tmp_path, monkeypatch, _policy_lines(False, True, False), "--query-text", "generalized")
    assert rc == 0 and seen == ["email [EMAIL] about ticket [NUMBER] for [NAME]"]
    err = capsys.readouterr().err
    assert "warning: --query-text generalized embeds the queries otherwise than the guard of --policy" in err
    assert "(raw)" in err and "drop --query-text" in err
    rc, seen = _calibrate(tmp_path, monkeypatch, _policy_lines(True, True, True), "--query-text", "generalized")
    assert rc == 0 and "warning" not in capsys.readouterr().err  # the policy's own mode: no warning


def test_calibrate_help_names_the_policys_query_text_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["calibrate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "generalized-unredacted" in out and "Default: what --policy's collection does to query text" in out


# -- 4. toml_str writes valid TOML for a lone surrogate ------------------------------------------

@pytest.mark.parametrize("name", ["a\ud800b", "\udfff", "\ud83d\ude00", "x\ud800\n\u202e", "é\udc80"])
def test_toml_str_and_toml_key_of_a_lone_surrogate_parse(name):
    from qdrant_guard.names import toml_key, toml_str

    value = tomllib.loads(f"k = {toml_str(name)}")["k"]
    table = tomllib.loads(f"[collections.{toml_key(name)}]\nx = 1")["collections"]
    # The surrogate reads back as its escape's text (as the audit log spells it); the rest as given.
    escaped = name.encode("utf-8", "backslashreplace").decode("utf-8")
    assert value == escaped and list(table) == [escaped]


def test_toml_str_keeps_every_other_name_exact():
    from qdrant_guard.names import toml_str

    for name in ["plain", 'quo"te', "back\\slash", "new\nline", "\u202e", "\U0001f600", "\x7f", "\x85"]:
        assert tomllib.loads(f"k = {toml_str(name)}")["k"] == name


def test_an_unlisted_collections_refusal_names_a_parseable_section(tmp_path):
    # The refusal's fix names the section to add: for a name from code with a lone surrogate it
    # now parses (before, the pasted section made the whole policy file unreadable).
    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr"}}, unlisted="refuse")
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    with pytest.raises(ConfigError) as ei:
        client.count("odd\ud800")
    section = str(ei.value).split("add a ", 1)[1].split(" section", 1)[0]
    assert tomllib.loads(section + "\nclass = \"PII\"")["collections"]
    assert audit_records(kit)[-1]["verdict"] == "REFUSED_CROSS_BOUNDARY"


# -- 3. the left-behind count holds each receipt to its own calibration ----------------------------

def _lb_policy(kit, mechanism="gaussian"):
    noise = {"mechanism": mechanism, "epsilon": 1.0, "radius": 0.01, "delta": 1e-6 if mechanism == "gaussian" else 0.0}
    return kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                               "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
                               "intent": {"enabled": False}, "diversity": {"enabled": False}, "noise": noise}})


def _lb_clients(kit, cfg):
    from guardkit import create

    from qdrant_guard import QdrantClient

    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(owner, "pii", distance=models.Distance.EUCLID)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _noised_point(kit, pid, rng, *, mechanism="gaussian", epsilon=1.0, radius=0.01, delta=1e-6, scale_x=1.0,
                  step_x=1.0, vname=""):
    """A point noised at these parameters (clip_norm 1), its signed scale and lattice step scaled
    by ``scale_x`` and ``step_x`` (the guarantee restated), signed by the guard's own key (with
    ``vname``: that vector's stored form and receipt)."""
    import dataclasses

    from guardkit import guard_signer

    from qdrant_guard.noise import privatize
    from qdrant_guard.noise_params import guarantee_sentence
    from qdrant_guard.receipts import RECEIPT_KEY, ReceiptItem, issue_receipts_batch, receipts_for_payload, stored_form

    noised, params = privatize(np.asarray([unit(rng)], dtype=np.float32), mechanism=mechanism, epsilon=epsilon,
                               radius=radius, delta=delta if mechanism == "gaussian" else None, clip_norm=1.0)
    params = dataclasses.replace(params, scale=params.scale * scale_x, lattice_step=params.lattice_step * step_x)
    params = dataclasses.replace(params, guarantee=guarantee_sentence(
        params.mechanism, params.epsilon, params.delta, params.radius, params.clip_norm, params.scale,
        params.lattice_step, params.dim, params.dtype))
    vec = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=vec, collection="pii",
                                                               point_id=pid, vector_name=vname)])[0]
    if vname:
        return vec.tolist(), rec
    return models.PointStruct(id=pid, vector=vec.tolist(), payload={"t": "x", RECEIPT_KEY: receipts_for_payload({"": rec})})


def _stripped(bob, ids) -> int:
    return sum(p.vector is None for p in bob.retrieve("pii", ids, with_vectors=True))


def _by_id_left(bob) -> int:
    """The count of left-behind points a query by point id 1 reports (0: it ran)."""
    import re

    try:
        bob.query_points("pii", query=1, limit=5)
    except GuardRefusal as err:
        assert err.verdict == "QUERY_REJECTED", err
        return int(re.search(r"still holds (\d+) point\(s\)", str(err)).group(1))
    return 0


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace_l2"])
@pytest.mark.parametrize("case, counted", [
    ({"epsilon": 0.125, "step_x": 2.0}, True),  # stronger noise, a lattice coarser than its own
    ({"epsilon": 0.125, "scale_x": 0.75}, True),  # stronger noise, a scale below its own
    ({"radius": 0.05, "scale_x": 0.75}, True),
    ({"scale_x": 0.5}, True),  # the policy's own noise at a scale below its own
    ({"epsilon": 0.125}, False),  # stronger noise on its own lattice and scale: released
    ({"epsilon": 0.125, "step_x": 0.5, "scale_x": 1.5}, False),  # a finer lattice, more noise: released
    ({"scale_x": 1.5}, False),
], ids=["coarser-lattice", "scale-below-own", "radius-scale-below-own", "policy-scale-below", "own-calibration",
        "finer-and-more", "policy-more-noise"])
def test_the_count_holds_a_receipt_to_its_own_calibration(tmp_path, mechanism, case, counted):
    # Before: a receipt of stronger noise was never held to its own lattice, and no receipt to its
    # scale, so a query by point id compared a stored vector that every read strips (unsound_noise).
    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit, mechanism))
    rng = np.random.default_rng(7)
    from qdrant_client import QdrantClient as Raw

    Raw.upsert(owner, "pii", [_noised_point(kit, 1, rng, mechanism=mechanism),
                              _noised_point(kit, 2, rng, mechanism=mechanism, **case)])
    assert _stripped(bob, [1, 2]) == int(counted)  # what reads release
    assert _by_id_left(bob) == int(counted)  # what the count finds


def test_the_count_equals_what_reads_strip_over_many_parameter_sets(tmp_path):
    # A differential: 48 receipts over 16 parameter sets (stronger noise in epsilon, radius and
    # delta), each with its scale and lattice step kept, raised or lowered; the count equals the
    # number of points reads strip. Then the stripped ones are deleted and queries by id run.
    from qdrant_client import QdrantClient as Raw

    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit))
    rng = np.random.default_rng(11)
    pts = [_noised_point(kit, 1, rng)]
    for pid in range(2, 50):
        pts.append(_noised_point(kit, pid, rng, epsilon=float(rng.choice([0.125, 0.25, 0.5, 1.0])),
                                 radius=float(rng.choice([0.01, 0.02])), delta=float(rng.choice([1e-6, 1e-7])),
                                 scale_x=float(rng.choice([1.0, 1.0, 1.5, 0.9, 1 - 1e-9])),
                                 step_x=float(rng.choice([1.0, 1.0, 0.5, 2.0]))))
    Raw.upsert(owner, "pii", pts)
    ids = [p.id for p in pts]
    stripped = [p.id for p in bob.retrieve("pii", ids, with_vectors=True) if p.vector is None]
    assert 5 < len(stripped) < 40
    assert _by_id_left(bob) == len(stripped)
    Raw.delete(owner, "pii", models.PointIdsList(points=stripped))
    assert _by_id_left(bob) == 0


def test_parameter_sets_beyond_the_cap_are_counted(tmp_path):
    # At most 32 sets besides the policy's are learnt per collection: receipts of further sets
    # are counted though reads release them (errs towards refusing), and the count still ends.
    from qdrant_client import QdrantClient as Raw

    from qdrant_guard.policy import NoisePolicy
    _MAX_PARAMS = NoisePolicy.model_fields["max_receipt_param_sets"].default

    kit = make_kit(tmp_path)
    owner, bob = _lb_clients(kit, _lb_policy(kit))
    rng = np.random.default_rng(12)
    pts = [_noised_point(kit, 1, rng)] + [_noised_point(kit, pid, rng, epsilon=0.5 + pid / 1000)
                                           for pid in range(2, 2 + _MAX_PARAMS + 8)]
    Raw.upsert(owner, "pii", pts)
    assert _stripped(bob, [p.id for p in pts]) == 0
    assert _by_id_left(bob) == 8


@pytest.mark.parametrize("bad", ["text", "image"])
def test_named_vectors_are_each_held_to_their_own_calibration(tmp_path, bad):
    from guardkit import create

    from qdrant_client import QdrantClient as Raw

    from qdrant_guard import QdrantClient
    from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=_lb_policy(kit), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID, named=("text", "image"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    rng = np.random.default_rng(13)
    pts = []
    for pid in (1, 2):
        vecs, recs = {}, {}
        for vname in ("text", "image"):
            coarse = {"step_x": 2.0} if (pid == 2 and vname == bad) else {}
            vecs[vname], recs[vname] = _noised_point(kit, pid, rng, epsilon=0.25 if vname == "text" else 0.5,
                                                     vname=vname, **coarse)
        pts.append(models.PointStruct(id=pid, vector=vecs, payload={RECEIPT_KEY: receipts_for_payload(recs)}))
    Raw.upsert(owner, "pii", pts)
    kept = {p.id: sorted(p.vector) for p in bob.retrieve("pii", [1, 2], with_vectors=True)}
    assert kept == {1: ["image", "text"], 2: sorted({"text", "image"} - {bad})}
    assert _by_id_left(bob) == 1
