"""Older guarantee-sentence wordings only for the mechanism versions that wrote them (2026-12-05).

The git history of ``noise._guarantee`` and ``MECHANISM_VERSION`` (commits 4d86439 v1 + wording 1,
da4ef4b v2, 5af38ee v3, 4de37fa wording 2, 2a63590 wording 3, 729bac9 wording 4) shows wording 1
written under versions 1, 2 and 3, wordings 2 and 3 under version 3 only. Before, a receipt
verified in any of the four wordings whatever its ``mechanism_version``; now an older wording with
a version that never wrote it is ``guarantee_mismatch`` (and ``issue_receipt`` refuses to sign it),
so a version after 3 can only state the current wording. Version 3 keeps all four: each was
written under it, so a trusted signer may still choose wording 1 there (documented).

Receipts are signed with real Ed25519 keys by the real signing code; no mocks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from qdrant_guard import keys
from qdrant_guard.errors import ReceiptError
from qdrant_guard.noise_params import (
    GUARANTEE_WORDINGS,
    WORDING_VERSIONS,
    NoiseParams,
    guarantee_mismatch,
    guarantee_sentence,
)
from qdrant_guard.receipts import ReceiptSigner, issue_receipt, stored_form, verify_receipt

# A gaussian float32 release whose epsilon %g rounds (wordings 1-2 differ from 3-4) and a
# laplace_l2 float64 one (wording 2 adds the float64 note to wording 1).
_GAUSS = dict(mechanism="gaussian", epsilon=0.1234567, delta=1e-06, radius=0.01, clip_norm=1.0,
              scale=0.318759452510826, lattice_step=0.000244140625, dim=8, dtype="float32")
_LAPLACE = dict(mechanism="laplace_l2", epsilon=2.0, delta=0.0, radius=3.0, clip_norm=None,
                scale=1.501381067932005, lattice_step=0.0009765625, dim=8, dtype="float64")
_FIELDS = ("mechanism", "epsilon", "delta", "radius", "clip_norm", "scale", "lattice_step", "dim", "dtype")
_VEC = stored_form(np.asarray([0.25, -0.5, 0.125, 0.0, 0.5, -0.25, 0.375, 0.1]), distance="Euclid")


def _params(fields, version, wording):
    sentence = guarantee_sentence(*(fields[k] for k in _FIELDS), wording=wording)
    return NoiseParams(mechanism_version=version, rng_id="chacha20-getrandom-v1", guarantee=sentence, **fields)


def _signed(sk, params):
    """Signed as a writer outside this library would (it signs whatever it is given)."""
    from qdrant_guard import receipts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(receipts, "_refuse_lying_sentence", lambda p: None)
        return issue_receipt(ReceiptSigner(sk), params=params, vector=_VEC, collection="c", point_id=1)


@pytest.fixture(scope="module")
def key():
    sk, pk = keys.generate_keypair()
    return sk, {ReceiptSigner(sk).key_id: pk}


# (fields, version, wording): never written by this library.
NEVER = [
    pytest.param(_GAUSS, "1", 3, id="v1-wording3"),
    pytest.param(_GAUSS, "2", 3, id="v2-wording3"),
    pytest.param(_LAPLACE, "1", 2, id="v1-wording2-float64"),
    pytest.param(_LAPLACE, "2", 3, id="v2-wording3-float64"),
    pytest.param(_GAUSS, "4", 1, id="future-v4-wording1"),
    pytest.param(_LAPLACE, "4", 2, id="future-v4-wording2"),
]


@pytest.mark.parametrize("fields, version, wording", NEVER)
def test_an_older_wording_with_a_version_that_never_wrote_it_is_a_mismatch(key, fields, version, wording):
    sk, trusted = key
    params = _params(fields, version, wording)
    check = verify_receipt(_signed(sk, params), vector=_VEC, collection="c", point_id=1, trusted_keys=trusted)
    assert (check.ok, check.reason) == (False, "guarantee_mismatch")
    assert "guarantee sentence is in wording" in check.detail
    assert f"mechanism_version={version!r}" in check.detail and "current wording" in check.detail
    with pytest.raises(ReceiptError, match="mechanism_version"):  # and the library will not sign it
        issue_receipt(ReceiptSigner(sk), params=params, vector=_VEC, collection="c", point_id=1)
    # The same fields in the current wording verify under that version.
    current = dataclasses.replace(params, guarantee=guarantee_sentence(*(fields[k] for k in _FIELDS)))
    assert verify_receipt(issue_receipt(ReceiptSigner(sk), params=current, vector=_VEC, collection="c", point_id=1),
                          vector=_VEC, collection="c", point_id=1, trusted_keys=trusted).ok


@pytest.mark.parametrize("wording", GUARANTEE_WORDINGS)
@pytest.mark.parametrize("version", ["1", "2", "3"])
@pytest.mark.parametrize("fields", [_GAUSS, _LAPLACE], ids=["gauss-f32", "laplace-f64"])
def test_every_pair_the_history_shows_still_verifies_and_no_other(key, fields, version, wording):
    sk, trusted = key
    params = _params(fields, version, wording)
    ok = wording not in WORDING_VERSIONS or version in WORDING_VERSIONS[wording]
    # A sentence that reads the same in a wording this version wrote is that wording.
    ok = ok or any(params.guarantee == guarantee_sentence(*(fields[k] for k in _FIELDS), wording=w)
                   for w in WORDING_VERSIONS if version in WORDING_VERSIONS[w])
    check = verify_receipt(_signed(sk, params), vector=_VEC, collection="c", point_id=1, trusted_keys=trusted)
    assert check.ok is ok, check
    assert (guarantee_mismatch(dataclasses.asdict(params)) is None) is ok


def test_the_history_table_is_what_the_commits_show():
    # Wording 1 under versions 1-3; 2 and 3 under 3 only; the current one is open to every version.
    assert WORDING_VERSIONS == {1: ("1", "2", "3"), 2: ("3",), 3: ("3",)}
    assert GUARANTEE_WORDINGS[-1] not in WORDING_VERSIONS


def test_a_float32_sentence_reads_the_same_in_wordings_1_and_2_and_stays_valid_for_version_1(key):
    sk, trusted = key
    params = _params(_GAUSS, "1", 2)
    assert params.guarantee == _params(_GAUSS, "1", 1).guarantee
    assert verify_receipt(_signed(sk, params), vector=_VEC, collection="c", point_id=1, trusted_keys=trusted).ok


def test_version_3_still_takes_wording_1_as_history_wrote_it(key):
    # Left open on purpose: version 3 wrote all four wordings (the wording changed without a
    # version bump), so a %g sentence without the float64 and ideal-noise notes is genuine there.
    sk, trusted = key
    for fields in (_GAUSS, _LAPLACE):
        params = _params(fields, "3", 1)
        assert verify_receipt(_signed(sk, params), vector=_VEC, collection="c", point_id=1, trusted_keys=trusted).ok
