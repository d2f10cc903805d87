"""Mutation pass 21 (branch h-mut21, 2026-12-06): tests killing mutants no earlier test did, in
qdrant_guard/_cosine_repair.py (pass 19's C92), querycheck.py's ``raw_vectors_left`` (pass 19's Q5)
and utility.py (the recall@10 guard's utility record). Each fails on its mutant and passes on the
code as it is (docs/security-testing.md, "Mutation pass 21")."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from guardkit import create, make_kit, models, unit
from qdrant_client import QdrantClient as Raw

from qdrant_guard import GuardRefusal, QdrantClient


# -- C92: the first (16-step) window's winner taken only when it is within TARGET -------------------

@pytest.mark.parametrize("vector", [[1.0, 1005.75 / 2 ** 20], [1005.75 / 2 ** 20, 1.0],
                                    [1.0, 1005.75 / 2 ** 20, 1.0 / 2 ** 20]])
def test_a_row_with_nothing_within_target_in_the_first_window_is_searched_from_where_it_was(vector):
    """Kernel output (2^20, 990): no grid point within 16 steps of it is within 1/4 step of its exact
    normalisation. With the first window's result taken anyway (``| (window != _SMALL)``), the row
    moved to that window's best drift and the whole search started from there: it stored (2^20, 724),
    266 steps away like the reference's (2^20 - 1, 1255) but of a larger drift (0.24995 against
    0.24897), so writer and reference would commit to different stored forms."""
    from test_stored_form import _ref_unit_grid, _reference_stored_form

    from qdrant_guard import _cosine_repair
    from qdrant_guard.receipts import stored_form

    k = _ref_unit_grid(np.asarray(vector, dtype=np.float64)).astype(np.float64)
    assert sorted(np.abs(k).tolist())[-2:] == [990.0, 2.0 ** 20]
    assert _cosine_repair.drift(k[None, :])[0] > 0.25
    got = stored_form(vector, distance="Cosine")
    assert got.tobytes() == _reference_stored_form(vector, "Cosine").tobytes()
    assert sorted(np.abs(np.rint(got.astype(np.float64) * 2 ** 20)).tolist())[-2:] == [1255.0, 2.0 ** 20 - 1]


# -- Q5: a learnt set among a point's sets does not take the last room under the cap ----------------

def _two_vector_clients(kit, cap: int):
    noise = {"mechanism": "gaussian", "epsilon": 1.0, "radius": 0.01, "delta": 1e-6, "max_receipt_param_sets": cap}
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
                              "intent": {"enabled": False}, "diversity": {"enabled": False}, "noise": noise}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID, named=("text", "image"))
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _point(kit, pid, rng, eps_text: float, eps_image: float) -> models.PointStruct:
    from test_leftovers37 import _noised_point

    from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

    vecs, recs = {}, {}
    for vname, eps in (("text", eps_text), ("image", eps_image)):
        vecs[vname], recs[vname] = _noised_point(kit, pid, rng, epsilon=eps, vname=vname)
    return models.PointStruct(id=pid, vector=vecs, payload={RECEIPT_KEY: receipts_for_payload(recs)})


def test_a_point_with_a_learnt_and_an_unknown_set_at_one_below_the_cap_learns_the_unknown_one(tmp_path):
    """Cap 2, set A = epsilon 0.25 learnt by an earlier query (refused for a raw point then), then a
    point whose text vector has A and whose image vector has B = epsilon 0.5, both stronger noise
    than the policy's 1.0. The room left (1) must go to B. With ``new = stored`` instead of ``stored
    - seen`` the room went to A (sorted first, already known), B was never learnt and the guard asked
    count and scroll again for ever: the query never returned."""
    kit = make_kit(tmp_path)
    owner, bob = _two_vector_clients(kit, cap=2)
    rng = np.random.default_rng(21)
    raw = models.PointStruct(id=9, vector={"text": unit(rng), "image": unit(rng)}, payload={"t": "raw"})
    Raw.upsert(owner, "pii", [_point(kit, 1, rng, 0.25, 0.25), raw])
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, using="text", limit=5)
    assert err.value.details["unreceipted_points"] == 1  # the raw point; A is learnt now
    Raw.delete(owner, "pii", points_selector=models.PointIdsList(points=[9]))
    Raw.upsert(owner, "pii", [_point(kit, 2, rng, 0.25, 0.5)])

    done: dict = {}

    def query() -> None:
        try:
            done["points"] = [p.id for p in bob.query_points("pii", query=1, using="text", limit=5).points]
        except BaseException as exc:  # noqa: BLE001 - reported below
            done["error"] = exc

    worker = threading.Thread(target=query, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the left-behind count kept scrolling: the unknown set was never learnt"
    assert done == {"points": [2]}  # point 1 is the query itself


# -- utility.py: what a record's signature covers, per version --------------------------------------

_ADDED_IN = {"dim": 2, "vector_name": 3, "distance": 4, "embedding_model": 5, "n_measured_queries": 6}


def _record(version: int):
    import dataclasses

    from qdrant_guard.utility import UtilityRecord

    rec = UtilityRecord(
        collection="docs", mechanism="gaussian", epsilon=2.0, delta=1e-6, radius=0.01, clip_norm=1.0, scale=0.003,
        k=10, threshold=0.05, metric="recall", mode="known_item", epsilon_ceiling=None, clean={"recall": 1.0},
        measured=[{"epsilon": 2.0, "scale": 0.003, "recall": 0.97, "drop": 0.03, "feasible": True}], chosen_level=0,
        query_sample_digest="0" * 64, n_queries=40, n_documents=500, created_at=1_765_000_000_000, dim=32,
        vector_name="text", distance="Cosine", embedding_model="all-MiniLM-L6-v2", n_measured_queries=40)
    later = {f: None for f, since in _ADDED_IN.items() if since > version}
    return dataclasses.replace(rec, version=version, **later)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_a_record_signs_every_field_its_version_carries_and_no_later_one(version):
    """``UtilityRecord.body`` drops only the fields added after a record's version: a version-v record
    signed by the calibrate of its day still verifies (its signature never covered a later field), and
    every field it carries is covered. Pass 21's mutants of the five version tests (``<`` as ``<=``,
    the bound +-1) signed a version-2..5 record without its own newest field (editable unsigned) or a
    version 1..4 record with a later one (old records no longer verify); no test checked either."""
    import dataclasses

    from qdrant_guard.canonical import canonical_json

    rec = _record(version)
    want = {k: v for k, v in dataclasses.asdict(rec).items()
            if k != "signature" and _ADDED_IN.get(k, 0) <= version}
    assert rec.signed_bytes() == canonical_json(want)
    assert set(rec.body()) == set(want)


@pytest.mark.parametrize("field,edited", [("dim", 64), ("vector_name", "image"), ("distance", "Dot"),
                                          ("embedding_model", "other-model"), ("n_measured_queries", 20)])
def test_editing_any_versioned_field_of_a_current_record_breaks_its_signature(field, edited):
    import base64
    import dataclasses

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.utility import UTILITY_DOMAIN, UtilityRecord, verify_utility_record

    key = Ed25519PrivateKey.generate()
    rec = dataclasses.replace(_record(6), signer_key_id="k1")
    signed = dataclasses.replace(rec, signature=base64.b64encode(
        key.sign(UTILITY_DOMAIN + rec.signed_bytes())).decode("ascii"))
    back = UtilityRecord.from_json(signed.to_json())
    assert verify_utility_record(back, {"k1": key.public_key()})
    assert not verify_utility_record(dataclasses.replace(back, **{field: edited}), {"k1": key.public_key()})


# -- utility.py: the record's refusals, each on its own ---------------------------------------------

@pytest.mark.parametrize("n_documents,refused", [(10, True), (11, False)])
def test_a_record_of_no_more_points_than_k_is_refused_and_one_more_is_not(n_documents, refused):
    """The boundary of ``small_collection_refusal``: a record measured on exactly k points saw every
    top-k hold every point. The selection run never reached it (``>`` as ``>=`` and the refusal as
    ``return None`` survived)."""
    import dataclasses

    rec = dataclasses.replace(_record(6), n_documents=n_documents)
    why = rec.small_collection_refusal("u.json")
    if refused:
        assert why is not None and why.startswith("small_collection: utility record 'u.json' was calibrated on "
                                                  "10 point(s), no more than its k 10")
    else:
        assert why is None


@pytest.mark.parametrize("change,named", [
    ({"mechanism": "laplace_l2"}, "mechanism 'laplace_l2' (record: 'gaussian')"),
    ({"radius": 0.02}, "radius 0.02 (record: 0.01)"),
    ({"delta": 1e-5}, "delta 1e-05 (record: 1e-06)"),
    ({"clip_norm": None}, "clip_norm None (record: 1.0)"),
])
def test_noise_parameters_the_record_never_measured_are_named_and_refused(change, named):
    """Each of mechanism, radius, delta and clip_norm on its own: a gaussian record at radius 0.01
    says nothing of Laplace noise or of another radius. With any one ``diffs.append`` deleted (or
    ``parameter_mismatch`` returning None, or ``level_refusal``'s mismatch refusal as ``return None``)
    the level was admitted on the drop measured under other parameters."""
    rec = _record(6)
    same = {"mechanism": "gaussian", "radius": 0.01, "delta": 1e-6, "clip_norm": 1.0}
    assert rec.parameter_mismatch(**same) is None
    assert rec.level_refusal(epsilon=2.0, max_drop=0.05, **same) is None
    asked = {**same, **change}
    assert rec.parameter_mismatch(**asked) == named
    why = rec.level_refusal(epsilon=2.0, max_drop=0.05, **asked)
    assert why is not None and why.startswith(f"noise with {named} was never measured")


def test_more_noise_than_any_measured_passing_level_is_refused():
    """Measured: epsilon 2.0 passes (drop 0.03), epsilon 0.5 fails (drop 0.2). Epsilon 1.0 has more
    noise than the passing level and less than the failing one: nothing measured shows its drop, so
    it is refused; epsilon 2.0 and 4.0 (no more noise than the passing level) are not. With the
    passing-level test's ``and`` as ``or`` (any passing level at all) or its refusal as ``return
    None``, epsilon 1.0 was admitted."""
    import dataclasses

    rec = dataclasses.replace(_record(6), measured=[
        {"epsilon": 0.5, "scale": 0.012, "recall": 0.8, "drop": 0.2, "feasible": False},
        {"epsilon": 2.0, "scale": 0.003, "recall": 0.97, "drop": 0.03, "feasible": True}], chosen_level=1)
    same = {"mechanism": "gaussian", "radius": 0.01, "delta": 1e-6, "clip_norm": 1.0, "max_drop": 0.05}
    why = rec.level_refusal(epsilon=1.0, **same)
    assert why is not None and why.startswith("epsilon 1.0: no level with at least this much noise (epsilon <= 1.0) "
                                              "was measured to pass")
    assert rec.level_refusal(epsilon=2.0, **same) is None
    assert rec.level_refusal(epsilon=4.0, **same) is None


def test_an_unclipped_record_vouches_for_unclipped_noise_only():
    """``_same`` with None: a record calibrated without clipping (clip_norm None) matches a policy
    without clipping and no clipped one. ``a is b`` as ``a is not b`` or as ``return None``
    (survivors of the selection run) refused every unclipped policy."""
    import dataclasses

    rec = dataclasses.replace(_record(6), clip_norm=None)
    same = {"mechanism": "gaussian", "radius": 0.01, "delta": 1e-6}
    assert rec.parameter_mismatch(clip_norm=None, **same) is None
    assert rec.level_refusal(epsilon=2.0, clip_norm=None, max_drop=0.05, **same) is None
    assert rec.parameter_mismatch(clip_norm=1.0, **same) == "clip_norm 1.0 (record: None)"


_SAME = {"mechanism": "gaussian", "radius": 0.01, "delta": 1e-6, "clip_norm": 1.0, "max_drop": 0.05}


def test_a_receipts_scale_above_its_epsilons_calibrated_one_is_refused_and_the_calibrated_one_is_not():
    """``level_refusal`` with a receipt's ``scale`` and ``dim``: the calibrated scale passes, more noise than the epsilon names was never measured and is refused (the
    check skipped by ``dim is None``, ``want is None and ...`` or its refusal as ``return None``)."""
    from qdrant_guard.utility_record import _calibrated_scale

    rec = _record(6)
    want = _calibrated_scale("gaussian", 2.0, 0.01, 1e-6, 1.0, 32)
    assert want is not None and want > 0
    assert rec.level_refusal(epsilon=2.0, scale=want, dim=32, **_SAME) is None
    # The allowance for rounding is part of the bound (``<=`` as ``<`` refused exactly this scale).
    assert rec.level_refusal(epsilon=2.0, scale=want * (1.0 + 1e-12), dim=32, **_SAME) is None
    for scale in (want * 1.01, float("nan")):
        why = rec.level_refusal(epsilon=2.0, scale=scale, dim=32, **_SAME)
        assert why is not None and why.startswith(f"epsilon 2.0 with noise scale {scale!r}: the calibrated scale "
                                                  f"of that epsilon is {want!r}")


def test_a_refusal_for_a_failing_level_names_the_first_failing_one_measured():
    """Two measured levels fail at no more noise than epsilon 0.5 asks: the refusal names the first
    measured (0.5, drop 0.2), as its message says; ``failing[0]`` as ``failing[1]`` or ``[-1]``
    named epsilon 1.0 (or failed on an index with one)."""
    import dataclasses

    rec = dataclasses.replace(_record(6), measured=[
        {"epsilon": 0.5, "scale": 0.012, "recall": 0.8, "drop": 0.2, "feasible": False},
        {"epsilon": 1.0, "scale": 0.006, "recall": 0.9, "drop": 0.1, "feasible": False},
        {"epsilon": 2.0, "scale": 0.003, "recall": 0.97, "drop": 0.03, "feasible": True}], chosen_level=2)
    why = rec.level_refusal(epsilon=0.5, **_SAME)
    assert why is not None and why.startswith("epsilon 0.5: the record measured a drop of 0.2000 > 0.05 at "
                                              "epsilon 0.5, which has no more noise")
    why = rec.level_refusal(epsilon=1.0, **_SAME)
    assert why is not None and why.startswith("epsilon 1.0: the record measured a drop of 0.1000 > 0.05 at "
                                              "epsilon 1.0")


def test_a_drop_at_the_threshold_plus_its_rounding_allowance_passes():
    """``_within`` allows 1e-12 of float rounding over the threshold (1 - 38/40 is
    0.050000000000000044): a drop of exactly ``max_drop + 1e-12`` passes, one a little above fails.
    ``<=`` as ``<`` and the allowance subtracted both refused the first."""
    import dataclasses

    edge = 0.05 + 1e-12
    for drop, ok in ((1 - 38 / 40, True), (edge, True), (0.05 + 1e-9, False)):
        rec = dataclasses.replace(_record(6), measured=[
            {"epsilon": 2.0, "scale": 0.003, "recall": 1 - drop, "drop": drop, "feasible": ok}])
        assert (rec.level_refusal(epsilon=2.0, **_SAME) is None) is ok, drop


# -- sources.py: which sources a point names -------------------------------------------------------

def test_a_source_list_names_only_its_non_empty_scalar_values():
    """Only non-empty scalars name a source: None, "" and nested values count as missing (a budget
    key needs a name). With the filter's ``and`` as ``or`` "None", "" and "{'a': 1}" became sources,
    budgets of their own a writer could spread points over."""
    from qdrant_guard.sources import payload_sources

    payload = {"source": ["memo", "", None, {"a": 1}, ["x"], "q3", "memo", 7]}
    assert payload_sources(payload, "source") == ("memo", "q3", "7")


def test_a_point_without_a_payload_or_with_a_dotted_literal_key_names_no_source():
    """``point_sources``' fast path reads one top-level key of a plain dict only: a point without a
    payload names no source (the fast path taken for it raised AttributeError), and a dotted field
    is a nested path as Qdrant reads it, not a literal key "meta.source" (the fast path taken for it
    named "x")."""
    from qdrant_client.http.models import Record

    from qdrant_guard.sources import field_value, point_sources

    assert point_sources(Record(id=1, payload=None), "source") == ()
    assert field_value(None, "source") is None
    flat = Record(id=2, payload={"meta.source": "x", "source": "memo"})
    assert point_sources(flat, "meta.source") == ()
    assert point_sources(flat, "source") == ("memo",)
    assert point_sources(Record(id=3, payload={"meta": {"source": "y"}}), "meta.source") == ("y",)


def test_a_budget_without_restricted_sources_lets_a_writer_clear_payloads_selected_by_any_filter(tmp_path):
    """``restricts_sources`` needs both a coverage cap and restricted sources: on a budgeted collection
    without restricted sources (valid only where no boundary both reads and writes) a writer outside the
    owner boundary may overwrite the payload of points
    picked by a filter on another field (nothing is restricted, so the answer tells nothing). With
    its ``and`` as ``or`` the guard refused it as a probe of restricted sources."""
    from guardkit import count as n_points

    kit = make_kit(tmp_path)
    budgeted = {"class": "PII", "owner": "hr", "writers": ["support"],
                "noise_on_write": True, "intent": {"enabled": False},
                "diversity": {"max_source_coverage": 0.25, "max_source_fraction": 1.0}}
    alice = QdrantClient(":memory:", guard=kit.config({"kb": budgeted}), principal=kit.principal("alice", "hr"))
    create(alice, "kb")
    rng = np.random.default_rng(5)
    alice.upsert("kb", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "memo", "t": "x"})
                        for i in range(4)])
    sam = alice.with_principal(kit.principal("sam", "support"))
    picked = models.Filter(must=[models.FieldCondition(key="t", match=models.MatchValue(value="x"))])
    sam.overwrite_payload("kb", payload={"source": "tickets", "t": "y"}, points=picked)
    assert n_points(alice, "kb") == 4
    assert {p.payload["source"] for p in Raw.scroll(alice, "kb", limit=10)[0]} == {"tickets"}


def test_a_record_no_trusted_key_signed_is_not_verified_as_false():
    """``verify_utility_record`` returns a bool: False, not None, for a signer no trusted key names."""
    import dataclasses

    from qdrant_guard.utility import verify_utility_record

    rec = dataclasses.replace(_record(6), signer_key_id="k1", signature="AAAA")
    assert verify_utility_record(rec, {}) is False
    assert verify_utility_record(dataclasses.replace(rec, signature=None), {}) is False


def test_a_signature_with_characters_outside_base64_does_not_verify():
    """The signature is read as strict base64: a character outside the alphabet inside it is a bad
    signature, not one skipped (``validate=True`` as ``False`` verified the record)."""
    import base64
    import dataclasses

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.utility import UTILITY_DOMAIN, verify_utility_record

    key = Ed25519PrivateKey.generate()
    rec = dataclasses.replace(_record(6), signer_key_id="k1")
    sig = base64.b64encode(key.sign(UTILITY_DOMAIN + rec.signed_bytes())).decode("ascii")
    assert verify_utility_record(dataclasses.replace(rec, signature=sig), {"k1": key.public_key()}) is True
    bad = dataclasses.replace(rec, signature=sig[:8] + "*" + sig[8:])
    assert verify_utility_record(bad, {"k1": key.public_key()}) is False


def _restricted_policy(kit, **div):
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"],
                             "noise_on_write": True, "intent": {"enabled": False},
                             "diversity": {"max_source_coverage": 0.25, "restricted_sources": ["memo"],
                                           "max_source_fraction": 1.0}, **div}})
    return cfg.collections["kb"]


def test_a_point_whose_source_is_a_list_names_each_entry(tmp_path):
    """``point_sources``' fast path for one plain string only: a list is read entry by entry (the fast
    path taken for any value named the list itself as one source)."""
    from qdrant_client.http.models import Record

    from qdrant_guard.sources import point_sources

    assert point_sources(Record(id=1, payload={"source": ["memo", "q3"]}), "source") == ("memo", "q3")


def test_a_payload_holding_nan_is_checked_for_restricted_sources_as_qdrant_client_sends_it(tmp_path):
    """qdrant-client sends NaN in a payload (local mode stores it): ``reserved_claims`` reads such a
    payload like any other. With ``allow_nan`` off it raised ValueError instead of naming the claim."""
    from qdrant_guard.sources import reserved_claims

    pol = _restricted_policy(make_kit(tmp_path))
    assert reserved_claims(pol, "support", {"score": float("nan"), "source": "memo"}) == ["memo"]
    assert reserved_claims(pol, "support", {"score": float("nan"), "source": "q3"}) == []
    assert reserved_claims(pol, "hr", {"score": float("nan"), "source": "memo"}) == []


def test_a_key_path_qdrant_may_read_otherwise_is_refused_when_it_starts_at_a_dotted_source_fields_head(tmp_path):
    """``set_payload(key=...)`` with a path of quotes or [] indexing: refused for every restricted
    source when it names the top-level key the (dotted) source field is under, ``metadata`` of
    ``metadata.source``; not when it names neither. ``split(".")[0]`` as ``[-1]`` looked for
    ``source`` and let ``metadata[0]`` through; as ``[1]`` it failed on an undotted field."""
    from qdrant_guard.sources import reserved_claims

    kit = make_kit(tmp_path)
    pol = _restricted_policy(kit, source_field="metadata.source")
    assert reserved_claims(pol, "support", {"x": 1}, key="metadata[0]") == ["memo"]
    assert reserved_claims(pol, "support", {"x": 1}, key='"other".x[0]') == []
    (tmp_path / "plain").mkdir()
    plain = _restricted_policy(make_kit(tmp_path / "plain"))
    assert reserved_claims(plain, "support", {"x": 1}, key='"source"') == ["memo"]


def test_verifying_something_else_than_a_record_is_a_type_error_naming_it():
    from qdrant_guard.errors import GuardArgumentTypeError
    from qdrant_guard.utility import verify_utility_record

    with pytest.raises(GuardArgumentTypeError, match="argument 'record' must be UtilityRecord, not dict"):
        verify_utility_record({"signature": "AAAA", "signer_key_id": "k1"}, {})


@pytest.mark.parametrize("key, head", [('""', ""), ('"".x', ""), ("abc.d", "abc"), ("x[0]", "x"), ("a-b_c.d", "a-b_c")])
def test_path_head_reads_an_empty_quoted_key_and_stops_at_the_first_other_character(key, head):
    """Beyond tests/test_review_reads.py's cases: the empty quoted key ``""`` is a key (``find('"', 1)``
    as ``find('"', 2)``, or ``end > 0`` as ``end > 1``, made it None), and the plain head ends at the
    first character that is not a letter, digit, ``_`` or ``-`` wherever it falls (``n += 2``
    stepped over a ``.`` or ``[`` at an odd position)."""
    from qdrant_guard.sources import path_head

    assert path_head(key) == head
