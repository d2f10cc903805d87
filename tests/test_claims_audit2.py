"""Claims audit 2 (2026-12-05): security and behaviour claims of the README, the docs and the
public modules' docstrings, checked by running them after ~200 commits since the first claims
audit (tests/test_claims_audit.py).

Each test names the doc and the claim it holds to, and executes the claimed behaviour: real
qdrant-client local mode, real Ed25519 keys, real budget stores, no mocks.
"""
from __future__ import annotations

import numpy as np
import pytest

from qdrant_guard import GuardRefusal, keys
from qdrant_guard.budget_stores import MemoryBudgetStore, SqliteBudgetStore
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipts_batch,
                                   receipts_for_payload, stored_form, verify_receipt)
from tests.guardkit import (DIM, QdrantClient, audit_records, create, hr_policy, make_kit, models,
                            snapshot, staging_record, unit)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# qdrant_guard/budget.py's docstring said "A clock that steps back ... therefore never shortens a
# window" and that a store "can never admit more than cap distinct ids for one key within the
# window". True while the store holds the key; false once the idle sweep (memory: keys; SQLite:
# rows) has dropped it, as docs/diversity-budget.md says for each store. The docstring now says so;
# this pins both halves for both stores.
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_clock_step_back_is_held_until_the_sweep_drops_the_key(tmp_path, kind):
    mono = Clock()
    store = (MemoryBudgetStore(monotonic=mono) if kind == "memory"
             else SqliteBudgetStore(tmp_path / "b.db", monotonic=mono))
    w = 100.0
    assert store.admit("src|p|c|memo", ["a"], cap=1, window_s=w, now=1000.0) == (["a"], [])
    # While the key is held, a callers' clock 50 s behind does not shorten the window.
    assert store.admit("src|p|c|memo", ["b"], cap=1, window_s=w, now=950.0) == ([], ["b"])
    # Both clocks move well past the window; other keys' admissions sweep the idle one.
    mono.t = 10_000.0
    for i in range(4):
        store.admit(f"src|p|c|other{i}", ["x"], cap=1, window_s=w, now=1000.0 + 500.0 + i)
        mono.t += 10.0
    if kind == "memory":
        assert store.key_count() == 4  # the memo key is gone
    else:
        assert store.seen("src|p|c|memo", window_s=1e9, now=1510.0) == 0  # its row is deleted
    # A callers' clock that now steps back to within a window of the dropped entry finds it empty:
    # a second distinct id is admitted 50 s after the first on that clock, past cap 1.
    assert store.admit("src|p|c|memo", ["b"], cap=1, window_s=w, now=1050.0) == (["b"], [])


def _utility_write(kit, tmp_path, utility, distance=models.Distance.COSINE):
    rec_path = tmp_path / "u.json"
    if not rec_path.exists():
        staging_record(kit, rec_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "intent": {"enabled": False},
           "utility": {"record": str(rec_path), **utility}}
    owner = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "c", dim=32, distance=distance)
    bob = owner.with_principal(kit.principal("bob", "support"))
    v = unit(np.random.default_rng(5), 32)
    bob.upsert("c", [models.PointStruct(id=1, vector=v)])
    return owner


# README, verdict table: UTILITY_DEGRADED when "the utility record does not show the noise level
# within the threshold (... other noise parameters, a record of another metric or cut-off than the
# policy's utility.metric and utility.k, ..., vectors of another dimension or distance ...)", and
# qdrant_guard/utility.py's docstring, which listed neither the metric and cut-off nor the distance.
@pytest.mark.parametrize("utility, distance, needle", [
    ({"k": 5}, models.Distance.COSINE, "measured recall@10, but the policy limits the drop of recall@5"),
    ({"metric": "overlap"}, models.Distance.COSINE, "measured recall@10, but the policy limits the drop of overlap@10"),
    ({}, models.Distance.EUCLID, "calibrated on a vector compared by Cosine, but vector '<unnamed>' of this collection is compared by Euclid"),
    ({}, models.Distance.DOT, "compared by Dot"),
])
def test_utility_degraded_covers_the_metric_the_cut_off_and_the_distance(tmp_path, utility, distance, needle):
    kit = make_kit(tmp_path)
    with pytest.raises(GuardRefusal) as ei:
        _utility_write(kit, tmp_path, utility, distance)
    assert ei.value.verdict == "UTILITY_DEGRADED" and needle in str(ei.value)
    assert audit_records(kit)[-1]["verdict"] == "UTILITY_DEGRADED"


def test_the_same_record_passes_the_write_it_was_calibrated_for(tmp_path):
    # The control of the test above: the refusals come from the mismatch alone.
    kit = make_kit(tmp_path)
    owner = _utility_write(kit, tmp_path, {})
    assert len(snapshot(owner, "c")) == 1
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_NOISED"


# README, defaults table ("500 whitespace tokens and 4,000 estimated subword tokens ... about 4,000
# CJK characters or 16,000 ASCII letters without spaces"), and docs/threat-model.md, "Scan limits:
# text without whitespace", which said 56,000 CJK characters "pass the token cap": under the
# default max_model_tokens = "auto" they are refused as token_cap. The length figures are measured
# on text without repetition (seeded random CJK characters and lowercase letters): the glued phrases
# this test first passed are refused since glued_repetition (default 0.5) joined the defaults, which
# broke it on the merged branch (h-rev27 found it failing).
_rng = np.random.default_rng(27)
_CJK = "".join(chr(int(c)) for c in _rng.integers(0x4E00, 0x9FA5, size=4001))
_LETTERS = "".join(chr(int(c)) for c in _rng.integers(ord("a"), ord("z") + 1, size=16004))


@pytest.mark.parametrize("text, refused", [
    (_CJK[:4000], None),                                   # 4,000 CJK characters
    (_CJK, "token_cap"),                                   # 4,001
    (_LETTERS[:16000], None),                              # 16,000 ASCII letters
    (_LETTERS, "token_cap"),                               # 16,004
    ("passwordleak" * 400, "glued_repetition"),            # within the token caps, refused as stuffing
    ("数据库密码是什么" * 400, "glued_repetition"),
    ("数据库密码是什么" * 7000, "token_cap"),              # 56,000 CJK characters
    ("a " * 32768 + "b", "size_cap"),                     # 65,537 characters
])
def test_default_query_caps_are_the_documented_figures(tmp_path, text, refused):
    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"c": hr_policy({})}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    query = unit(np.random.default_rng(0))
    if refused is None:
        client.query_points("c", query=query, query_text=text)
        assert audit_records(kit)[-1]["verdict"].startswith("ALLOW")
        return
    with pytest.raises(GuardRefusal) as ei:
        client.query_points("c", query=query, query_text=text)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert refused in [v["kind"] for v in ei.value.details["violations"]]


# qdrant_guard/receipts.py said a receipt commits to "the exact vector stored in Qdrant"; the
# commitment is to each coordinate's point on the 2^-20 grid (docs/receipt-format.md, "The vector
# given to verify_receipt"): a vector within half a step verifies alike, one a step off does not.
def test_a_receipt_commits_to_the_grid_point_not_the_exact_floats():
    sk, pk = keys.generate_keypair()
    v = np.random.default_rng(1).normal(size=DIM)
    noised, params = privatize(v, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Euclid").astype(np.float64)
    receipt = issue_receipts_batch(ReceiptSigner(sk), [ReceiptItem(params=params, vector=final, collection="c",
                                                                    point_id=3)])[0]
    trusted = {keys.key_id(pk): pk}

    def check(vec):
        return verify_receipt(receipt, vector=vec, collection="c", point_id=3, trusted_keys=trusted)

    assert check(final).ok
    near = final.copy()
    near[0] += 2.0 ** -22  # under half a grid step: the same grid point
    assert not np.array_equal(near, final) and check(near).ok
    off = final.copy()
    off[0] += 2.0 ** -20
    assert check(off).reason == "vector_mismatch"


# docs/receipt-format.md, "Writing with a receipt of your own": the example, run as written (its
# `vector` and `client` defined as the page says), under a collection whose receipt_keys lists the
# writer's key: accepted (ALLOW_RECEIPTED); signed instead by a key of receipts.trusted_keys, which
# the collection's receipt_keys replaces, refused as INVALID_RECEIPT naming the collection and the
# key id, nothing written. The page's "verify() trusts exactly the trusted_keys it is given" holds
# for the stored receipt of the scoped key too.
def test_the_receipt_page_example_under_receipt_keys(tmp_path):
    kit = make_kit(tmp_path)
    wsk, wpk = keys.generate_keypair()
    osk, opk = keys.generate_keypair()
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}, "receipt_keys": [keys.public_key_to_str(wpk)]}
    cfg = kit.config({"employee_records": pol}, receipts={"trusted_keys": [keys.public_key_to_str(opk)]})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "employee_records")
    client = owner.with_principal(kit.principal("bob", "support"))
    vector = np.asarray(unit(np.random.default_rng(2)))

    def page_example(private_key, point_id):
        signer = ReceiptSigner(private_key)
        noised, params = privatize(vector, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
        final = stored_form(noised, distance="Cosine")
        receipt = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="employee_records",
                                                            point_id=point_id)])[0]
        client.upsert("employee_records", [models.PointStruct(id=point_id, vector=final.tolist(), payload={
            "text": "refund request", "source": "tickets", RECEIPT_KEY: receipts_for_payload({"": receipt})})])

    # The page: `vector` is a numpy array, "a list is refused with GuardArgumentTypeError".
    from qdrant_guard.errors import GuardArgumentTypeError
    with pytest.raises(GuardArgumentTypeError, match="numpy.ndarray"):
        privatize(vector.tolist(), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    page_example(wsk, 7)
    assert audit_records(kit)[-1]["verdict"] == "ALLOW_RECEIPTED"
    with pytest.raises(GuardRefusal) as ei:
        page_example(osk, 8)
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert "'employee_records'" in str(ei.value) and keys.key_id(opk) in str(ei.value)
    assert [p[0] for p in snapshot(owner, "employee_records")] == [7]
    got = client.retrieve("employee_records", [7], with_vectors=True)
    assert got[0].vector is not None  # support reads the receipted noised vector


# README, verdict table: FAIL_CLOSED is "also audited when the embedder fails on a query's
# models.Document text, which raises EmbedderError whatever fail_closed says" (the row named only
# the classifier and the budget store), and UNSUPPORTED_WRITE covers "an EmbedderError of a
# models.Document write"; policy.md, fail_closed: "A failing embedder ... always refuses".
def test_an_embedder_failure_is_refused_and_audited_as_the_readme_says(tmp_path):
    from qdrant_guard.textguard import EmbedderError

    def broken(texts):
        raise RuntimeError("model down")

    kit = make_kit(tmp_path)
    pol = {**hr_policy({}), "fail_closed": False}
    client = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"),
                          embedder=broken)
    create(client, "c")
    with pytest.raises(EmbedderError):
        client.query_points("c", query=models.Document(text="hello there", model="m"))
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "FAIL_CLOSED" and rec["details"]["error"] == "EmbedderError"
    with pytest.raises(EmbedderError):
        client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text="hello", model="m"))])
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "UNSUPPORTED_WRITE" and rec["details"]["error"] == "EmbedderError"
    assert snapshot(client, "c") == []


# README: "A bad argument to a qdrant_guard function or method is a GuardArgumentTypeError (also a
# TypeError) or a GuardArgumentValueError ...; the message names the argument and the fix."
# load_policy of a non-path raised os.fspath's bare TypeError, and receipts.verify of something
# that is no client an AttributeError from deep inside (after the other checks had passed).
@pytest.mark.parametrize("path", [123, None, b"policy.toml"])
def test_load_policy_of_a_non_path_is_a_guard_argument_error(path):
    from qdrant_guard import GuardArgumentTypeError, load_policy

    with pytest.raises(GuardArgumentTypeError, match=r"load_policy\(\) path must be a str or os.PathLike"):
        load_policy(path)


@pytest.mark.parametrize("client", [None, "http://localhost:6333", object()])
def test_receipt_verify_of_a_non_client_is_a_guard_argument_error(client):
    from qdrant_guard import GuardArgumentTypeError
    from qdrant_guard.receipts import verify

    with pytest.raises(GuardArgumentTypeError, match=r"verify\(\) client must be a qdrant_client.QdrantClient"):
        verify(client, "c", trusted_keys={})


# The same README rule, and its UNSUPPORTED_WRITE row ("when the guard refuses a write's input
# before sending it ...; nothing is sent"): set_payload/overwrite_payload with a payload that is no
# dict raised a bare TypeError or ValueError from the guard's own screen on a sensitive collection,
# unaudited. On a PUBLIC collection qdrant-client's own error passed through unchanged, until
# review 48's leftovers found that local mode stores a pydantic model's or a dataclass's fields
# there unscreened (tests/test_leftovers48.py): refused and audited there too now.
@pytest.mark.parametrize("method", ["set_payload", "overwrite_payload"])
@pytest.mark.parametrize("payload", [5, None, "source=x"])
def test_a_payload_that_is_no_dict_is_refused_audited_on_a_sensitive_collection(tmp_path, method, payload):
    from qdrant_guard import GuardArgumentTypeError

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"c": hr_policy({})}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"source": "s"})])
    before = snapshot(client, "c")
    with pytest.raises(GuardArgumentTypeError, match=rf"{method}\(\) argument 'payload' must be a dict"):
        getattr(client, method)("c", payload=payload, points=[1])
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "UNSUPPORTED_WRITE" and rec["details"] == {"error": "GuardArgumentTypeError",
                                                                       "reason": "invalid_input"}
    assert snapshot(client, "c") == before


def test_a_payload_that_is_no_dict_on_a_public_collection_is_refused_audited(tmp_path):
    from qdrant_guard import GuardArgumentTypeError

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"c": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)))])
    with pytest.raises(GuardArgumentTypeError, match=r"set_payload\(\) argument 'payload' must be a dict"):
        client.set_payload("c", payload=5, points=[1])
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "UNSUPPORTED_WRITE" and rec["details"] == {"error": "GuardArgumentTypeError",
                                                                       "reason": "invalid_input"}


# The same README rule: on a sensitive collection these arguments of a type qdrant-client does not
# take failed in the guard's own checks with a plain TypeError or ValueError, unaudited, unlike
# qdrant-client's own error and unlike a GuardArgument*Error. Now a GuardArgumentTypeError (still a
# TypeError) naming the argument, audited UNSUPPORTED_WRITE, nothing sent.
_BAD_ARGS = {
    "set_payload points=5": lambda c: c.set_payload("c", payload={"a": 1}, points=5),
    "set_payload key=5": lambda c: c.set_payload("c", payload={"a": 1}, points=[1], key=5),
    "overwrite_payload points='1'": lambda c: c.overwrite_payload("c", payload={"a": 1}, points="1"),
    "delete_payload keys=5": lambda c: c.delete_payload("c", keys=5, points=[1]),
    "delete_payload keys=[5]": lambda c: c.delete_payload("c", keys=[5], points=[1]),
    "delete_vectors vectors=5": lambda c: c.delete_vectors("c", vectors=5, points=[1]),
    "delete_vectors points=5": lambda c: c.delete_vectors("c", vectors=[""], points=5),
    "update_vectors points=5": lambda c: c.update_vectors("c", points=5),
    "clear_payload points_selector=5": lambda c: c.clear_payload("c", points_selector=5),
}


@pytest.mark.parametrize("call", sorted(_BAD_ARGS))
def test_malformed_arguments_of_write_methods_are_guard_argument_errors(tmp_path, call):
    from qdrant_guard import GuardArgumentTypeError

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"c": hr_policy({})}), principal=kit.principal("alice", "hr"))
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"source": "s"})])
    before = snapshot(client, "c")
    arg = call.split(" ")[1].split("=")[0]
    with pytest.raises(GuardArgumentTypeError, match=rf"argument '{arg}' must be"):
        _BAD_ARGS[call](client)
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "UNSUPPORTED_WRITE" and rec["details"]["reason"] == "invalid_input"
    assert snapshot(client, "c") == before


def test_the_async_client_refuses_the_same_malformed_write_arguments(tmp_path):
    import asyncio

    from qdrant_guard import AsyncQdrantClient, GuardArgumentTypeError

    kit = make_kit(tmp_path)

    async def run() -> None:
        client = AsyncQdrantClient(":memory:", guard=kit.config({"c": hr_policy({})}), principal=kit.principal("alice", "hr"))
        await client.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        await client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(0)), payload={"source": "s"})])
        with pytest.raises(GuardArgumentTypeError, match="argument 'points' must be"):
            await client.set_payload("c", payload={"a": 1}, points=5)
        with pytest.raises(GuardArgumentTypeError, match="argument 'payload' must be a dict"):
            await client.overwrite_payload("c", payload=5, points=[1])
        await client.close()

    asyncio.run(run())
    assert [r["verdict"] for r in audit_records(kit)[-2:]] == ["UNSUPPORTED_WRITE", "UNSUPPORTED_WRITE"]
