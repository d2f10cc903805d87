"""Receipt guarantee sentence (2026-12-05): a receipt's human-readable ``params.guarantee`` must
state its signed fields.

A trusted writer could sign a receipt whose sentence says ``epsilon=0.1`` over ``epsilon=8.0``:
it verified, a guarded write accepted it, and every reader that shows the sentence (it is what
people read) was misled. Verification now recomputes the sentence from the fields with the
function that writes it (``noise_params.guarantee_sentence``) in each wording this library has
written, and refuses anything else as ``guarantee_mismatch`` naming the contradiction. The lying
receipts here are signed with a trusted key by the real signing code; the stores are real
qdrant-client local mode; the CLI runs as a subprocess.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, keys
from qdrant_guard.noise import privatize
from qdrant_guard.noise_params import GUARANTEE_WORDINGS, NoiseParams, guarantee_mismatch, guarantee_sentence
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipt,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    verify,
    verify_receipt,
)
from tests.guardkit import DIM, count, create, make_kit, models, unit
from tests.guardkit import QdrantClient as GuardedClient


@pytest.fixture(autouse=True)
def _sign_lies(monkeypatch):
    # issue_receipt refuses to sign a lying sentence (tested last in this file); a writer outside
    # this library, or an older version of it, signs whatever it is given, which is what these
    # tests play. Verification is untouched: it calls guarantee_mismatch directly.
    from qdrant_guard import receipts

    monkeypatch.setattr(receipts, "_refuse_lying_sentence", lambda params: None)


_SENTENCE_FIELDS = ("mechanism", "epsilon", "delta", "radius", "clip_norm", "scale", "lattice_step", "dim", "dtype")


@pytest.fixture(scope="module")
def signer():
    sk, pk = keys.generate_keypair()
    s = ReceiptSigner(sk)
    return s, {s.key_id: pk}


def _release(mechanism="gaussian", epsilon=8.0, seed=0, dtype=np.float32, **kw):
    """A real release of a unit vector and its stored form (what a receipt commits to)."""
    args = dict(delta=1e-6 if mechanism == "gaussian" else None, radius=0.01, clip_norm=1.0)
    args.update(kw)
    vec = np.asarray(unit(np.random.default_rng(seed)), dtype=dtype)
    noised, params = privatize(vec, mechanism=mechanism, epsilon=epsilon, **args)
    return stored_form(noised, distance="Cosine"), params


def _said(params: NoiseParams, **say) -> str:
    """The current-wording sentence of ``params`` with some of its numbers replaced by ``say``."""
    values = {k: getattr(params, k) for k in _SENTENCE_FIELDS}
    values.update(say)
    return guarantee_sentence(*(values[k] for k in _SENTENCE_FIELDS))


def _check(receipt, final, trusted, point_id=1):
    return verify_receipt(receipt, vector=final.tolist(), collection="c", point_id=point_id, trusted_keys=trusted)


def _signed(signer_, params, final, point_id=1):
    return issue_receipt(signer_, params=params, vector=final, collection="c", point_id=point_id)


# ------------------------------------------------------------------ verify_receipt

def test_an_unchanged_receipt_verifies(signer):
    s, trusted = signer
    for mechanism, dtype in (("gaussian", np.float32), ("laplace_l2", np.float64)):
        final, params = _release(mechanism, epsilon=2.0, dtype=dtype)
        check = _check(_signed(s, params, final), final, trusted)
        assert check.ok, check
        assert check.params.guarantee == params.guarantee


def _lies(params: NoiseParams):
    """(what the lying sentence says, sentence, the detail verify must give) for a gaussian release
    at epsilon 8, delta 1e-6, radius 0.01, clip_norm 1."""
    low = params.scale / 10
    laplace = guarantee_sentence("laplace_l2", params.epsilon, params.delta, params.radius, params.clip_norm,
                                 params.scale, params.lattice_step, params.dim, params.dtype)
    return [
        ("epsilon", _said(params, epsilon=0.1), "guarantee sentence says epsilon=0.1, fields say epsilon=8.0"),
        ("delta", _said(params, delta=1e-9), "guarantee sentence says delta=1e-09, fields say delta=1e-06"),
        ("radius", _said(params, radius=1.0), "guarantee sentence says radius=1, fields say radius=0.01"),
        ("sigma", _said(params, scale=low),
         f"guarantee sentence says sigma={low:.9g}, fields say scale={params.scale!r}"),
        ("mechanism", laplace, "guarantee sentence says mechanism='laplace_l2', fields say mechanism='gaussian'"),
        ("clip_norm", _said(params, clip_norm=0.5), "guarantee sentence says clip_norm=0.5, fields say clip_norm=1.0"),
        ("appended", params.guarantee + " In short: epsilon=0.1.",
         "guarantee sentence says epsilon=0.1, fields say epsilon=8.0"),
        ("reworded", params.guarantee + " Independently audited.",
         "guarantee sentence is not one this library writes for these fields"),
    ]


@pytest.mark.parametrize("lie", ["epsilon", "delta", "radius", "sigma", "mechanism", "clip_norm", "appended",
                                 "reworded"])
@pytest.mark.parametrize("batched", [False, True])
def test_a_trusted_receipt_whose_sentence_contradicts_its_fields_fails_naming_the_mismatch(signer, lie, batched):
    s, trusted = signer
    final, params = _release()
    (said, sentence, detail), = [x for x in _lies(params) if x[0] == lie]
    assert sentence != params.guarantee
    lying = dataclasses.replace(params, guarantee=sentence)
    if batched:
        other, _ = _release(seed=1)
        rec = issue_receipts_batch(s, [ReceiptItem(lying, final, "c", 1), ReceiptItem(params, other, "c", 2)])[0]
    else:
        rec = _signed(s, lying, final)
    check = _check(rec, final, trusted)
    assert (check.ok, check.reason) == (False, "guarantee_mismatch"), check
    assert detail in check.detail, check.detail
    assert check.params is None


def test_a_laplace_receipt_whose_delta_field_is_not_zero_contradicts_its_delta_0_sentence(signer):
    s, trusted = signer
    final, params = _release("laplace_l2", epsilon=2.0)
    weak = dataclasses.replace(params, delta=1e-6)
    assert weak.guarantee == guarantee_sentence(*(getattr(weak, k) for k in _SENTENCE_FIELDS))
    check = _check(_signed(s, weak, final), final, trusted)
    assert check.reason == "guarantee_mismatch"
    assert "says delta=0" in check.detail and "fields say delta=1e-06" in check.detail


# ------------------------------------------------------------------ older wordings still verify

# The sentences earlier versions wrote, produced by noise._guarantee as it was at each commit that
# changed it (git log -L on the function), for the two releases below; all receipts of format
# qg-receipt/1. Versions 1 and 2 only ever carried wording 1; version 3 carries any of the four.
_GAUSS = dict(mechanism="gaussian", epsilon=0.1234567, delta=1e-06, radius=0.01, clip_norm=1.0,
              scale=0.318759452510826, lattice_step=0.000244140625, dim=8, dtype="float32")
_LAPLACE = dict(mechanism="laplace_l2", epsilon=2.0, delta=0.0, radius=3.0, clip_norm=None,
                scale=1.501381067932005, lattice_step=0.0009765625, dim=8, dtype="float64")
_G = ("gaussian: (epsilon={e}, delta=1e-06)-differential privacy per released vector between any two inputs within "
      "L2 distance radius=0.01 (rows are first clipped to L2 norm 1, which never increases distances); analytic "
      "Gaussian mechanism with sigma=0.318759453 per coordinate, calibrated for L2 sensitivity 0.010690534 = "
      "radius + sqrt(8)*{s} to cover snapping the output to multiples of {s}.")
_L = ("laplace_l2: epsilon=2 at L2 distance radius=3 (metric DP, delta=0: log-likelihood ratio <= "
      "epsilon*distance/radius) per released vector between any two inputs (as given, not clipped) within L2 "
      "distance radius=3; multivariate L2 Laplace with Gamma(8) norm scale=1.50138107, calibrated for L2 "
      "sensitivity 3.00276214 = radius + sqrt(8)*{s} to cover snapping the output to multiples of {s}.")
_F64 = " Inputs are float64: coordinates below 2^-511 in magnitude are read as 0 first."
_IDEAL = (" Stated for the ideal noise distribution: the sampler's noise is bounded, which adds about 1.8e-33 or "
          "less to delta (docs/privacy.md).")
# commit 4d86439 (wording 1, %g), 4de37fa (2, + float64), 2a63590 (3, exact), 729bac9 (4, + ideal noise)
_OLD = [
    ("1", 1, _GAUSS, _G.format(e="0.123457", s="0.000244141")),
    ("1", 1, _LAPLACE, _L.format(s="0.000976562")),
    ("2", 1, _GAUSS, _G.format(e="0.123457", s="0.000244141")),
    ("2", 1, _LAPLACE, _L.format(s="0.000976562")),
    ("3", 1, _LAPLACE, _L.format(s="0.000976562")),
    ("3", 2, _GAUSS, _G.format(e="0.123457", s="0.000244141")),
    ("3", 2, _LAPLACE, _L.format(s="0.000976562") + _F64),
    ("3", 3, _GAUSS, _G.format(e="0.1234567", s="0.000244140625")),
    ("3", 3, _LAPLACE, _L.format(s="0.0009765625") + _F64),
    ("3", 4, _GAUSS, _G.format(e="0.1234567", s="0.000244140625") + _IDEAL),
    ("3", 4, _LAPLACE, _L.format(s="0.0009765625") + _F64 + _IDEAL),
]


def _old_params(version, fields, sentence):
    return NoiseParams(mechanism_version=version, rng_id="chacha20-getrandom-v1", guarantee=sentence, **fields)


@pytest.mark.parametrize("version,wording,fields,sentence", _OLD)
def test_receipts_in_every_older_wording_still_verify(signer, version, wording, fields, sentence):
    s, trusted = signer
    assert sentence == guarantee_sentence(*(fields[k] for k in _SENTENCE_FIELDS), wording=wording)
    params = _old_params(version, fields, sentence)
    vec = stored_form(np.random.default_rng(3).normal(size=8), distance="Cosine")
    check = _check(_signed(s, params, vec), vec, trusted)
    assert check.ok, check
    assert check.params == params


def test_the_current_wording_is_what_privatize_writes_and_the_last_of_the_known_ones():
    assert GUARANTEE_WORDINGS[-1] == 4
    final, params = _release(epsilon=1.0)
    assert params.guarantee == guarantee_sentence(*(getattr(params, k) for k in _SENTENCE_FIELDS))
    assert guarantee_mismatch(dataclasses.asdict(params)) is None


@pytest.mark.parametrize("wording", [1, 3])
def test_an_old_wording_with_a_changed_number_still_fails(signer, wording):
    # The old wordings are not a blanket pass: a %g sentence must print the fields' own %g numbers.
    s, trusted = signer
    version, _, fields, sentence = next(x for x in _OLD if x[1] == wording and x[2] is _GAUSS)
    lying = sentence.replace("epsilon=0.123457", "epsilon=0.1").replace("epsilon=0.1234567", "epsilon=0.1")
    assert lying != sentence
    vec = stored_form(np.random.default_rng(3).normal(size=8), distance="Cosine")
    check = _check(_signed(s, _old_params(version, fields, lying), vec), vec, trusted)
    assert check.reason == "guarantee_mismatch"
    assert "guarantee sentence says epsilon=0.1, fields say epsilon=0.1234567" in check.detail


# ------------------------------------------------------------------ the guarded write

def _writer_client(kit, agent_pk):
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
                              "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}},
                     receipts={"trusted_keys": [keys.public_key_to_str(agent_pk)]})
    owner = GuardedClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    return owner.with_principal(kit.principal("bob", "support"))


def _point(signer_, pid, seed, *, lie=False):
    vec = np.asarray(unit(np.random.default_rng(seed)), dtype=np.float32)
    noised, params = privatize(vec, mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    final = stored_form(noised, distance="Cosine")
    if lie:
        params = dataclasses.replace(params, guarantee=_said(params, epsilon=0.1))
    rec = issue_receipts_batch(signer_, [ReceiptItem(params, final, "pii", pid)])[0]
    return models.PointStruct(id=pid, vector=final.tolist(), payload={"source": "s",
                                                                      RECEIPT_KEY: receipts_for_payload({"": rec})})


def _last_audit_record(kit):
    lines = (kit.tmp / "audit.jsonl").read_text().splitlines()
    return json.loads(lines[-1])["record"]


def test_a_guarded_write_refuses_a_lying_sentence_atomically_as_an_invalid_receipt(tmp_path):
    kit = make_kit(tmp_path)
    agent_sk, agent_pk = keys.generate_keypair()
    client = _writer_client(kit, agent_pk)
    agent = ReceiptSigner(agent_sk)
    honest, liar = _point(agent, 1, 10), _point(agent, 2, 11, lie=True)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pii", [honest, liar])
    assert ei.value.verdict == "INVALID_RECEIPT"
    assert ei.value.point_ids == [2]
    assert ei.value.details["reasons"] == {"2": "guarantee_mismatch"}
    assert count(client, "pii") == 0  # the honest point of the call was not written either
    record = _last_audit_record(kit)
    assert record["verdict"] == "INVALID_RECEIPT" and record["details"]["reasons"] == {"2": "guarantee_mismatch"}
    client.upsert("pii", [honest])  # the same receipt without the liar is accepted
    assert count(client, "pii") == 1


# ------------------------------------------------------------------ verify() and the CLI

def test_verify_and_the_cli_report_a_lying_sentence_stored_around_the_guard(tmp_path, signer):
    s, trusted = signer
    final, params = _release()
    good, _ = _release(seed=1)
    lying = dataclasses.replace(params, guarantee=_said(params, epsilon=0.1))
    raw = RawClient(path=str(tmp_path / "store"))
    raw.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    points = [models.PointStruct(id=pid, vector=v.tolist(), payload={RECEIPT_KEY: receipts_for_payload({"": rec})})
              for pid, v, rec in ((1, final, _signed(s, lying, final, 1)), (2, good, _signed(s, params, good, 2)))]
    raw.upsert("c", points)
    reports = {r.point_id: r for r in verify(raw, "c", trusted_keys=trusted)}
    assert reports[2].ok
    assert reports[1].reason == "guarantee_mismatch"
    assert "guarantee sentence says epsilon=0.1, fields say epsilon=8.0" in reports[1].check.detail
    raw.close()
    pub = keys.public_key_to_str(next(iter(trusted.values())))
    proc = subprocess.run([sys.executable, "-m", "qdrant_guard.cli", "receipt", "verify", "--path",
                           str(tmp_path / "store"), "--collection", "c", "--trusted-key", pub],
                          capture_output=True, text=True, env={**os.environ}, timeout=300)
    assert proc.returncode == 1, proc.stderr
    line = json.loads(proc.stdout.splitlines()[0])
    assert (line["id"], line["reason"]) == ("1", "guarantee_mismatch")
    assert "guarantee sentence says epsilon=0.1, fields say epsilon=8.0" in line["detail"]
    assert "1/2 receipted vectors verify" in proc.stdout


# ------------------------------------------------------------------ the guarded read

def test_a_guarded_read_withholds_a_vector_whose_receipt_sentence_lies(tmp_path):
    # Outside the owner boundary a vector is released only with a receipt that verifies; one with
    # a lying sentence, signed with the guard's own key and stored around the guard, is stripped.
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False},
           "raw_in_boundary": True, "noise": {"epsilon": 1.0, "delta": 1e-6, "radius": 0.01}}
    owner = GuardedClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    guard_signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    for pid, lie in ((1, True), (2, False)):
        point = _point(guard_signer, pid, 20 + pid, lie=lie)
        RawClient.upsert(owner, "pii", points=[point])
    reader = owner.with_principal(kit.principal("bob", "support"))
    released = {r.id: r.vector is not None for r in reader.retrieve("pii", [1, 2], with_vectors=True)}
    assert released == {1: False, 2: True}


def test_a_negative_zero_field_is_not_taken_for_the_sentence_of_zero():
    # The recomputed sentences are cached by the fields; 0.0 == -0.0, but the sentence prints
    # -0.0 as "-0", so the two must not share an entry either way round.
    _, params = _release(epsilon=1.0)
    zero = dict(dataclasses.asdict(params), delta=0.0)
    zero["guarantee"] = guarantee_sentence(*(zero[k] for k in _SENTENCE_FIELDS))
    assert "delta=0)" in zero["guarantee"]
    assert guarantee_mismatch(zero) is None
    assert guarantee_mismatch(dict(zero, delta=-0.0)) is not None
    negative = dict(zero, delta=-0.0, guarantee=zero["guarantee"].replace("delta=0)", "delta=-0)"))
    assert guarantee_mismatch(negative) is None
    assert guarantee_mismatch(dict(negative, delta=0.0)) is not None


@pytest.mark.parametrize("dim", [10 ** 400, 2 ** 1100])
def test_a_signed_dim_beyond_float_range_is_a_mismatch_not_an_exception(signer, dim):
    # sqrt(dim) in the sentence overflows for such an int; verify_receipt never raises for a bad
    # receipt. issue_receipt refuses a dim that is not the vector's, so the body is signed here by
    # the documented signature input with the trusted key.
    from qdrant_guard.canonical import canonical_json
    from qdrant_guard.receipts import SIGNATURE_PREFIX

    s, trusted = signer
    final, params = _release()
    rec = _signed(s, params, final)
    body = {k: v for k, v in rec.items() if k != "sig"}
    body["params"] = dict(body["params"], dim=dim)
    sig = s.sign(SIGNATURE_PREFIX + canonical_json(body))
    forged = dict(body, sig=base64.b64encode(sig).decode())
    check = _check(forged, final, trusted)
    assert check.reason == "guarantee_mismatch" and "beyond float64" in check.detail


def test_issue_receipt_refuses_to_sign_a_sentence_its_fields_contradict(monkeypatch, signer):
    # A receipt the library signs must be one its verifier accepts: the lie is refused at signing,
    # with the fix, single and batch; the truthful params still sign.
    from qdrant_guard.errors import ReceiptError

    monkeypatch.undo()  # the real signer, without this file's _sign_lies
    s, trusted = signer
    final, params = _release(epsilon=8.0)
    lying = dataclasses.replace(params, guarantee=_said(params, epsilon=0.1))
    with pytest.raises(ReceiptError, match=r"says epsilon=0\.1, fields say epsilon=8\.0.*guarantee_sentence"):
        issue_receipt(s, params=lying, vector=final, collection="c", point_id=1)
    with pytest.raises(ReceiptError, match=r"says epsilon=0\.1"):
        issue_receipts_batch(s, [ReceiptItem(params, final, "c", 1), ReceiptItem(lying, final, "c", 2)])
    good = issue_receipt(s, params=params, vector=final, collection="c", point_id=1)
    assert _check(good, final, trusted).ok
