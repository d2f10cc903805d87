"""Thirtieth adversarial review (2026-12-06, branch h-rev30): findings on key roles, the
left-behind count, reads' ``details.stripped``, the declared model on reads and query inference,
and the answers a write-only principal gets.

Real qdrant-client local mode, real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from guardkit import DIM, make_kit, models, record_sent, snapshot, unit

from qdrant_guard import AsyncQdrantClient, ConfigError, QdrantClient
from qdrant_guard.receipts import RECEIPT_KEY
from tests.test_retired_keys import _old_checkpoint, _policy_file, rot  # noqa: F401 (rot: a fixture)
from tests.test_utility_model_inference import _setup as _inference_setup
from tests.test_utility_model_inference import assert_async_refuses
from tests.test_utility_model_reads import MODEL_A, MODEL_B, QUERIES, _clients, _policy, _query

# ------------------------------------------------------------------ 1. a query models.Image names its model too
# qdrant-client's inference embeds a models.Image with the model it names, as it does a Document;
# the Document's model was held to utility.embedding_model(s), the Image's was not.


def _image(model: str) -> models.Image:
    return models.Image(image="https://example.invalid/a.png", model=model)


@pytest.mark.parametrize("method", QUERIES)
def test_a_query_image_naming_another_model_is_refused_before_it_is_sent(tmp_path, monkeypatch, method):
    bob = _inference_setup(tmp_path)
    sent = record_sent(monkeypatch, tuple(QUERIES))
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, _image(MODEL_B))
    text = str(ei.value)
    assert "models.Image" in text and f"naming model {MODEL_B!r}" in text
    assert f'declares utility.embedding_model = "{MODEL_A}"' in text and "Nothing was sent" in text
    assert sent == []


@pytest.mark.parametrize("where", ["prefetch", "recommend", "nearest"])
def test_an_image_elsewhere_in_the_query_is_held_to_its_own_vectors_model(tmp_path, monkeypatch, where):
    # Each Image is held to the model declared for the vector of the query or prefetch it is in.
    bob = _inference_setup(tmp_path)
    sent = record_sent(monkeypatch, ("query_points",))
    image = _image(MODEL_B)
    if where == "prefetch":
        kw = {"prefetch": [models.Prefetch(query=[0.1] * DIM, limit=5),
                           models.Prefetch(query=models.NearestQuery(nearest=image), limit=5)],
              "query": models.FusionQuery(fusion=models.Fusion.RRF)}
    elif where == "recommend":
        kw = {"query": models.RecommendQuery(recommend=models.RecommendInput(positive=[image]))}
    else:
        kw = {"query": models.NearestQuery(nearest=image)}
    with pytest.raises(ConfigError, match="naming model"):
        bob.query_points("pii", limit=3, **kw)
    assert sent == []


def test_an_image_for_a_vector_of_no_declared_model_is_left_alone(tmp_path):
    bob = _inference_setup(tmp_path, None, embedding_models={"image": MODEL_A})
    with pytest.raises(Exception) as ei:  # no inference backend here: it fails inside qdrant-client
        bob.query_points("pii", query=_image(MODEL_B), limit=3)
    assert "naming model" not in str(ei.value)


def test_the_async_client_refuses_an_image_alike(tmp_path):
    assert_async_refuses(tmp_path, _image(MODEL_B))


def test_a_nested_prefetchs_image_is_held_to_the_model_of_its_own_using(tmp_path, monkeypatch):
    # text: no model declared; image: MODEL_A. The Image sits in a prefetch two levels down whose
    # using= is "image", under a top-level query on "text".
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, embedding_models={"image": MODEL_A}), named=("text", "image"),
                          embedder=None)
    sent = record_sent(monkeypatch, ("query_points",))
    inner = models.Prefetch(query=models.NearestQuery(nearest=_image(MODEL_B)), using="image", limit=5)
    outer = [models.Prefetch(query=[0.1] * DIM, using="text", limit=5),
             models.Prefetch(prefetch=[inner], query=[0.2] * DIM, using="text", limit=5)]
    with pytest.raises(ConfigError) as ei:
        bob.query_points("pii", prefetch=outer, query=[0.3] * DIM, using="text", limit=3)
    text = str(ei.value)
    assert "prefetch[1].prefetch[0].query.nearest is a models.Image for vector 'image'" in text
    assert 'declares utility.embedding_models.image = "' in text and sent == []
    # The same Image under using="text" (no model declared there) is not this check's.
    inner = inner.model_copy(update={"using": "text"})
    with pytest.raises(Exception) as ei:
        bob.query_points("pii", prefetch=[inner], query=[0.3] * DIM, using="text", limit=3)
    assert "naming model" not in str(ei.value)


# ------------------------------------------------------------------ 2. operation ids of a write-only principal
# On a server an operation id is the shard's WAL sequence number, one per operation applied. A
# payload rewrite by filter that matches nothing is not sent (h-writer's answers hide that), and a
# vector deletion by filter sends one operation instead of two when no matched point holds a
# receipt; so the ids of the writes before and after told a writer who may not read the collection
# whether its filter matched. Such a writer now gets no operation id from any point update. Local
# mode numbers every update 0, so the tests compare that with None.

_WRITE_ONLY = {"class": "PII", "owner": "hr", "readers": ["hr"], "writers": ["support"], "intent": {"enabled": False}}
_VP = models.VectorParams(size=16, distance=models.Distance.COSINE)


def _sel(team: str) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key="team", match=models.MatchValue(value=team))])


def _writes(c) -> dict:
    rng = np.random.default_rng(7)
    return {
        "upsert": lambda: c.upsert("c", [models.PointStruct(id=9, vector=unit(rng), payload={"team": "z"})]),
        "update_vectors": lambda: c.update_vectors("c", [models.PointVectors(id=3, vector=unit(rng))]),
        "set_payload": lambda: c.set_payload("c", payload={"note": "n"}, points=_sel("a")),
        "delete_payload": lambda: c.delete_payload("c", keys=["note"], points=_sel("a")),
        "delete_vectors": lambda: c.delete_vectors("c", vectors=[""], points=_sel("nobody")),
        "delete": lambda: c.delete("c", points_selector=models.FilterSelector(filter=_sel("nobody"))),
        "create_payload_index": lambda: c.create_payload_index("c", "team", models.PayloadSchemaType.KEYWORD),
        "batch": lambda: c.batch_update_points("c", [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"x": 1}, filter=_sel("a"))),
            models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["x"], filter=_sel("a")))]),
    }


def _write_only_clients(tmp_path):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"c": _WRITE_ONLY}), principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=_VP)
    rng = np.random.default_rng(0)
    alice.upsert("c", [models.PointStruct(id=i, vector=unit(rng), payload={"team": "a" if i < 2 else "b"})
                       for i in range(4)])
    return alice, alice.with_principal(kit.principal("bob", "support"))


def _ids(answer) -> list:
    return [r.operation_id for r in (answer if isinstance(answer, list) else [answer])]


@pytest.mark.parametrize("how", list(_writes(None)))
def test_a_write_only_principal_gets_no_operation_id_from_any_point_update(tmp_path, how):
    alice, bob = _write_only_clients(tmp_path)
    answer = _writes(bob)[how]()
    assert _ids(answer) and all(i is None for i in _ids(answer))
    assert all(r.status == models.UpdateStatus.COMPLETED for r in (answer if isinstance(answer, list) else [answer]))


@pytest.mark.parametrize("how", list(_writes(None)))
def test_a_reader_keeps_qdrants_operation_ids(tmp_path, how):
    alice, _ = _write_only_clients(tmp_path)
    assert all(i == 0 for i in _ids(_writes(alice)[how]()))  # local mode numbers every update 0


def test_the_async_write_only_principal_gets_no_operation_id(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": _WRITE_ONLY})

    async def main():
        alice = AsyncQdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        await alice.create_collection("c", vectors_config=_VP)
        bob = alice.with_principal(kit.principal("bob", "support"))
        rng = np.random.default_rng(3)
        got = await bob.upsert("c", [models.PointStruct(id=1, vector=unit(rng), payload={"team": "a"})])
        assert got.operation_id is None
        got = await bob.set_payload("c", payload={"n": 1}, points=_sel("a"))
        assert got.operation_id is None
        assert (await alice.set_payload("c", payload={"n": 2}, points=_sel("a"))).operation_id == 0

    asyncio.run(main())


# ------------------------------------------------------------------ 3. the restricted-source refusal as a filter oracle
# Outside the owner boundary a payload change that could take points out of a restricted source
# (clear_payload, overwrite_payload, a set/delete_payload reaching the source field, and those in
# batch_update_points) is refused when a point it selects is in one. Selected by a filter on any
# field, that refusal answered whether the filter matched a restricted point: a budgeted reader
# binary-searched the values the budget withholds (count() with such a filter is refused for that
# reason), and a writer who may not read the collection learned whether its filter matched. Nothing
# is written either way (a filter also naming the restricted source matches nothing else).

_BUDGETED = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
             "noise_on_write": True, "intent": {"enabled": False},
             "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"], "max_source_fraction": 1.0}}


def _budgeted_clients(tmp_path, readers=("support",)):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"kb": {**_BUDGETED, "readers": list(readers)}}),
                         principal=kit.principal("alice", "hr"))
    alice.create_collection("kb", vectors_config=_VP)
    rng = np.random.default_rng(5)
    alice.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo", "salary": 100 + i})
                        for i in range(4)]
                 + [models.PointStruct(id=10, vector=unit(rng), payload={"source": "tickets", "salary": 1})])
    return kit, alice, alice.with_principal(kit.principal("sam", "support"))


def _salary_at_least(n: int) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key="salary", range=models.Range(gte=n)),
                               models.FieldCondition(key="source", match=models.MatchValue(value="memo"))])


def _probes(c):
    return {
        "clear": lambda f: c.clear_payload("kb", points_selector=models.FilterSelector(filter=f)),
        "overwrite": lambda f: c.overwrite_payload("kb", payload={"note": "x"}, points=f),
        "set_source": lambda f: c.set_payload("kb", payload={"source": "tickets"}, points=f),
        "delete_source": lambda f: c.delete_payload("kb", keys=["source"], points=f),
        "batch": lambda f: c.batch_update_points("kb", [models.ClearPayloadOperation(
            clear_payload=models.FilterSelector(filter=f))]),
    }


def _visible(c, pid) -> dict:
    """A point's payload without the guard's receipt container."""
    return {k: v for i, p, _ in snapshot(c, "kb") if i == pid for k, v in p.items() if k != RECEIPT_KEY}


def _outcome(fn):
    try:
        return ("answer", fn())
    except Exception as exc:  # the refusal's type and words are the answer
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("who", ["reader-writer", "write-only"])
@pytest.mark.parametrize("how", list(_probes(None)))
def test_the_restricted_source_refusal_does_not_say_whether_a_filter_matched(tmp_path, who, how):
    kit, alice, sam = _budgeted_clients(tmp_path, ("support",) if who == "reader-writer" else ())
    probe = _probes(sam)[how]
    before = snapshot(alice, "kb")
    matched, missed = _outcome(lambda: probe(_salary_at_least(102))), _outcome(lambda: probe(_salary_at_least(999)))
    assert matched == missed
    assert matched[0] == "GuardRefusal" and "filter" in matched[1] and "'source'" in matched[1]
    assert snapshot(alice, "kb") == before  # nothing written either way


def test_a_budgeted_reader_cannot_count_with_that_filter_either(tmp_path):
    # The neighbour the finding is measured against: count() with the same filter is refused.
    _, _, sam = _budgeted_clients(tmp_path)
    with pytest.raises(Exception, match="filter on fields other than 'source'"):
        sam.count("kb", count_filter=_salary_at_least(102))


def test_rewrites_by_ids_or_by_a_source_filter_still_run_and_still_keep_restricted_points(tmp_path):
    kit, alice, sam = _budgeted_clients(tmp_path)
    tickets = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="tickets"))])
    sam.clear_payload("kb", points_selector=models.FilterSelector(filter=tickets))
    assert _visible(alice, 10) == {}
    with pytest.raises(Exception, match="restricted source"):
        sam.clear_payload("kb", points_selector=[1])
    sam.overwrite_payload("kb", payload={"source": "tickets", "n": 1}, points=[10])
    assert _visible(alice, 10) == {"source": "tickets", "n": 1}
    # The owner's filters are not limited.
    alice.set_payload("kb", payload={"flag": 1}, points=_salary_at_least(102))
    assert [i for i, p, _ in snapshot(alice, "kb") if p.get("flag") == 1] == [2, 3]


# ------------------------------------------------------------------ 4. credential issue --policy and retired_keys
# The threat model lists receipts.retired_keys among the roles an authority key may not have, and
# says `credential issue --policy` issues no credential under such a policy; it checked the other
# roles only (check_authority_roles leaves retired_keys to load_retired_keys), so it issued one.


def _issue_policy(tmp_path, body: str):
    from qdrant_guard.cli import main

    for name in ("hr", "support", "guard"):
        if not (tmp_path / f"{name}.key").exists():
            assert main(["keys", "new", "--out", str(tmp_path / f"{name}.key")]) == 0
    policy = tmp_path / "policy.toml"
    policy.write_text(body + '[boundaries.hr]\nauthority_keys = ["hr.key.pub"]\n'
                      '[boundaries.support]\nauthority_keys = ["support.key.pub"]\n')
    return main, ["credential", "issue", "--agent", "a1", "--boundary", "hr", "--authority",
                  str(tmp_path / "hr.key"), "--policy", str(policy)]


@pytest.mark.parametrize("signing", [True, False], ids=["guard-key-readable", "no-signing-key"])
def test_credential_issue_refuses_a_policy_retiring_an_authority_key(tmp_path, capsys, signing):
    from qdrant_guard import keys

    main, argv = _issue_policy(tmp_path, ('signing_key = "guard.key"\n' if signing else "")
                               + '[receipts]\nretired_keys = ["hr.key.pub"]\n')
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no token
    kid = keys.key_id(keys.load_public_key(tmp_path / "hr.key.pub"))
    assert "receipts.retired_keys" in captured.err and kid in captured.err
    assert "boundaries.hr.authority_keys" in captured.err and "would not start" in captured.err


def test_credential_issue_still_issues_under_a_policy_retiring_another_key(tmp_path, capsys):
    main, argv = _issue_policy(tmp_path, 'signing_key = "guard.key"\n[receipts]\nretired_keys = ["support.key.pub"]\n')
    capsys.readouterr()
    # support's authority retired as a guard key is a policy error too (for that boundary), and the
    # guard would not start, so hr's credential is not issued either.
    assert main(argv) == 2 and capsys.readouterr().out == ""
    from qdrant_guard.cli import main as cli

    assert cli(["keys", "new", "--out", str(tmp_path / "older.key")]) == 0
    capsys.readouterr()
    main, argv = _issue_policy(tmp_path, 'signing_key = "guard.key"\n[receipts]\nretired_keys = ["older.key.pub"]\n')
    assert main(argv) == 0 and capsys.readouterr().out.startswith("qgc1.")


# ------------------------------------------------------------------ 5. using= as a str subclass
# The model checks looked the vector's declared model up with using= as given: a str subclass whose
# hash or equality is its own missed utility.embedding_models and fell back to embedding_model
# (unset: not checked), while qdrant-client sends its characters (pydantic makes it a plain str).


class _Odd(str):
    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return False


@pytest.mark.parametrize("form", ["embedder", "document", "image"])
def test_a_using_str_subclass_is_read_as_its_characters(tmp_path, monkeypatch, form):
    from guardkit import Recorder

    kit = make_kit(tmp_path)
    cfg = _policy(kit, None, embedding_models={"image": MODEL_A})
    owner, bob = _clients(kit, cfg, named=("text", "image"), embedder=Recorder() if form == "embedder" else None)
    sent = record_sent(monkeypatch, ("query_points",))
    query = {"embedder": models.Document(text="plan", model="any"), "document": models.Document(text="plan", model=MODEL_B),
             "image": _image(MODEL_B)}[form]
    with pytest.raises(ConfigError, match=r"vector 'image'"):
        bob.query_points("pii", query=query, using=_Odd("image"), limit=3)
    assert sent == []


def test_a_single_prefetchs_image_is_held_to_its_using(tmp_path, monkeypatch):
    # prefetch= given as one Prefetch, not a list: its inputs sit at "prefetch.query...".
    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None, embedding_models={"image": MODEL_A}), named=("text", "image"),
                          embedder=None)
    one = models.Prefetch(query=models.RecommendQuery(recommend=models.RecommendInput(
        positive=[[0.1] * DIM], negative=[_image(MODEL_B)])), using="image", limit=5)
    with pytest.raises(ConfigError, match=r"prefetch\.query\.recommend\.negative\[0\] is a models\.Image for vector 'image'"):
        bob.query_points("pii", prefetch=one, query=[0.3] * DIM, using="text", limit=3)


# ------------------------------------------------------------------ 6. details.stripped of a point in several groups
# A point whose group_by value is a list comes back in each of its groups; the read's entry counts
# it once per group ("N point(s) returned"), and details.stripped does the same. audit-log.md said
# `points` were "the points that lost any" without saying so (doc fix; the behaviour is pinned).


def test_a_point_in_two_groups_is_counted_and_listed_once_per_group(tmp_path):
    from pathlib import Path

    from guardkit import audit_records
    from qdrant_client import QdrantClient as RawClient

    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, None), embedder=None)
    rng = np.random.default_rng(0)
    RawClient.upsert(owner, "pii", [models.PointStruct(id=1, vector=unit(rng), payload={"t": ["a", "b"]})])
    res = bob.query_points_groups("pii", query=unit(rng), group_by="t", limit=3, with_vectors=True)
    assert [(g.id, [h.id for h in g.hits]) for g in res.groups] == [("a", [1]), ("b", [1])]
    entry = audit_records(kit)[-1]
    assert entry["directive"].startswith("2 point(s) returned")
    assert entry["details"]["stripped"] == {"count": 2, "points": 2, "reasons": {"missing_receipt": 2}, "ids": [1, 1]}
    doc = " ".join((Path(__file__).resolve().parent.parent / "docs" / "audit-log.md").read_text().split())
    assert "counts once per group and is listed once per group" in doc


def test_under_noise_queries_an_image_is_refused_and_audited_whatever_its_model(tmp_path):
    # The model check does not pre-empt the audited refusal every Image gets under query noise.
    from guardkit import audit_records

    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    owner, bob = _clients(kit, _policy(kit, noise_queries=True), embedder=None)
    for model in (MODEL_A, MODEL_B):
        with pytest.raises(GuardRefusal, match="is a models.Image"):
            bob.query_points("pii", query=_image(model), limit=3)
        assert audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"


# ------------------------------------------------------------------ 7. an unsent rewrite's status under wait=None
# qdrant-client leaves wait=None out of the request (REST) or the message (gRPC), and a server then
# does not wait: it acknowledges the update. The guard's answer for a rewrite it did not send
# said COMPLETED for wait=None, so on a server the status told a write-only principal whether its
# filter matched. (Local mode completes every update either way; a server is simulated by the
# flag bind_store sets for a url= client, as tests/test_mutation_session34.py does.)


@pytest.mark.parametrize("wait", [None, False, 0])
def test_an_unsent_rewrite_on_a_server_is_acknowledged_when_the_call_does_not_wait(tmp_path, wait):
    alice, _ = _write_only_clients(tmp_path)
    alice.guard.shared["remote"] = True
    got = alice.guard.unsent_result({"wait": wait})
    assert got.status == models.UpdateStatus.ACKNOWLEDGED and got.operation_id is None
    assert alice.guard.unsent_result({"wait": True}).status == models.UpdateStatus.COMPLETED
    assert alice.guard.unsent_result({}).status == models.UpdateStatus.COMPLETED
    alice.guard.shared["remote"] = False
    assert alice.guard.unsent_result({"wait": wait}).status == models.UpdateStatus.COMPLETED


# ------------------------------------------------------------------ 8. audit repair --trust-policy --signing-key
# The repair entry is signed as the log's most recent checkpoint. Under --trust-policy the key set
# the guard trusts for checkpoints is known, yet repair signed with a key outside it (one the
# policy revokes, a boundary's authority key, any other): the log it left verified under neither
# `audit verify --policy` nor the guard, which refuses to open it.


def _torn(rot):  # noqa: F811
    log = _old_checkpoint(rot)
    with open(log, "ab") as fh:
        fh.write(b'{"hash": "torn')
    return log


@pytest.mark.parametrize("key", ["revoked", "authority", "other"])
def test_repair_under_trust_policy_refuses_a_signing_key_the_policy_does_not_trust(rot, tmp_path, capsys,  # noqa: F811
                                                                                   key):
    from qdrant_guard import keys
    from qdrant_guard.cli import main

    log = _torn(rot)
    before = log.read_bytes()
    policy = _policy_file(rot, tmp_path, retired=False)
    if key == "revoked":
        policy.write_text(policy.read_text().replace("[boundaries.", f'[receipts]\nrevoked_keys = ["{rot["a_kid"]}"]\n'
                                                                    "[boundaries.", 1))
        signing = rot["a"]
    elif key == "authority":
        signing = tmp_path / "support-authority.key"
        signing.write_bytes(keys.private_key_to_pem(rot["kit"].authority["support"]))
        signing.chmod(0o600)
    else:
        signing = tmp_path / "stray.key"
        assert main(["keys", "new", "--out", str(signing)]) == 0
    capsys.readouterr()
    rc = main(["audit", "repair", str(log), "--trust-policy", str(policy), "--checkpoint-every", "1",
               "--signing-key", str(signing)])
    err = capsys.readouterr().err
    assert rc == 2 and "--signing-key" in err and "Nothing was changed" in err, err
    assert ("revoked_keys revokes it" in err) == (key == "revoked")
    assert log.read_bytes() == before


def test_repair_under_trust_policy_signs_with_a_key_the_policy_trusts(rot, tmp_path, capsys):  # noqa: F811
    from qdrant_guard.cli import main

    for signing in (rot["b"], rot["a"]):  # the policy's signing_key; a retired key
        log = _torn(rot)
        policy = _policy_file(rot, tmp_path)
        assert main(["audit", "repair", str(log), "--trust-policy", str(policy), "--checkpoint-every", "1",
                     "--signing-key", str(signing)]) == 0, capsys.readouterr()
        assert main(["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(policy)]) == 0
        log.unlink()
