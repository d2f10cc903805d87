"""The thirty-fourth adversarial review (branch h-rev34): today's kept SQLite listings, the
case-insensitive model names, calibrate --policy, names.py and the plain names.

Each test fails on the code before its fix (checked by reverting the source file).
"""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import models

from tests.test_leftovers36 import _by_id, _lb_clients, _lb_policy, _signed_point


# -- the left-behind count's model names: only spellings a read accepts -------------------------

# str.upper() of each of these is a name str.lower() does not bring back: 'ß' -> 'SS' -> 'ss',
# the ligature 'ﬁ' -> 'FI' -> 'fi' ('ς' is not one: lower() restores a final sigma).
# qdrant-client (and fastembed) look a name up lowercased, so the uppercased spelling names
# another model.
_UNFOLDED = ["straße-embed", "ﬁne-embed"]


@pytest.mark.parametrize("declared", _UNFOLDED)
def test_the_count_filter_names_only_spellings_reads_accept(declared: str) -> None:
    from qdrant_guard.querycheck import _accepted_receipt
    from qdrant_guard.utility import same_model

    class _Util:
        @staticmethod
        def declared_model(vname):
            return declared, "embedding_model"

    class _Noise:
        mechanism, epsilon, delta, radius, clip_norm = "gaussian", 1.0, 1e-6, 0.01, None

    class _Pol:
        noise, utility = _Noise(), _Util()

    flt = _accepted_receipt("r", "", _Pol())
    names = [c.match.any for m in flt.must if isinstance(m, models.Filter)
             for c in m.should if isinstance(c, models.FieldCondition) and c.key.endswith("model_id")]
    assert names, flt
    # Before: declared.upper() was matched too, a name same_model (and so every read) refuses.
    assert all(same_model(name, declared) for name in names[0]), names[0]


def test_a_receipt_naming_the_declared_model_uppercased_into_another_name_is_counted(tmp_path) -> None:
    # Before: the count matched 'STRASSE-EMBED' (declared 'straße-embed' uppercased) as the declared
    # model, while reads strip it (model_mismatch: lowercased it is 'strasse-embed', another name
    # qdrant-client would look up), so a query by point id compared its stored vector.
    from guardkit import make_kit

    from qdrant_guard import GuardRefusal
    from qdrant_guard.receipts import model_mismatch

    declared = _UNFOLDED[0]
    kit = make_kit(tmp_path)
    cfg = _lb_policy(kit, declared)
    assert model_mismatch(declared.upper(), cfg.collections["pii"].utility, "pii", "") is not None
    owner, bob = _lb_clients(kit, cfg)
    from qdrant_client import QdrantClient as Raw

    rng = np.random.default_rng(34)
    Raw.upsert(owner, "pii", [_signed_point(kit, 1, rng, model_id=declared),
                              _signed_point(kit, 2, rng, model_id=declared.upper())])
    with pytest.raises(GuardRefusal) as err:
        _by_id(bob)
    assert "still holds 1 point(s)" in str(err.value)
