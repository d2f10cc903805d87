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
    from qdrant_guard.rawstored import _receipt_fields  # _accepted_receipt's fields but the calibration
    from qdrant_guard.utility import same_model

    class _Util:
        @staticmethod
        def declared_model(vname):
            return declared, "embedding_model"

    class _Noise:
        mechanism, epsilon, delta, radius, clip_norm = "gaussian", 1.0, 1e-6, 0.01, None

    class _Pol:
        noise, utility = _Noise(), _Util()

    flt = _receipt_fields("r", "", _Pol())
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


# -- calibrate --policy with a --key the policy's collection does not accept -------------------

def _other_key(tmp_path):
    from qdrant_guard import keys

    sk, _ = keys.generate_keypair()
    path = tmp_path / "other.key"
    path.write_bytes(keys.private_key_to_pem(sk))
    path.chmod(0o600)
    return path


def test_calibrate_policy_refuses_a_key_whose_records_the_guard_refuses(tmp_path, capsys) -> None:
    # Before: --policy checked every other option against the policy but signed with any --key, so
    # the record written was one the guard under that policy refuses (a record verifies only under
    # the keys the collection accepts receipts from); calibrate said nothing.
    from guardkit import make_kit

    from qdrant_guard import cli
    from tests.test_leftovers36 import _policy_file, _staging_args

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    args = _staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb"]
    assert cli.main(args + ["--key", str(_other_key(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "--key" in err and "[collections.kb]" in err and "would refuse the record" in err
    assert not (tmp_path / "u.json").exists()
    assert cli.main(args + ["--key", str(kit.guard_key_path)]) == 0  # the policy's own key is fine


def test_calibrate_policy_takes_a_key_the_collection_trusts(tmp_path, capsys) -> None:
    from guardkit import make_kit

    from qdrant_guard import cli, keys
    from tests.test_leftovers36 import _policy_file, _staging_args

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    other = _other_key(tmp_path)
    pub = tmp_path / "other.key.pub"
    pub.write_bytes(keys.public_key_to_pem(keys.load_private_key(other).public_key()))
    text = pol.read_text().replace("[boundaries.hr]", f'[receipts]\ntrusted_keys = ["{pub}"]\n[boundaries.hr]')
    pol.write_text(text)
    args = _staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb"]
    assert cli.main(args + ["--key", str(other)]) == 0, capsys.readouterr().err
    # A collection's receipt_keys replaces receipts.trusted_keys: the same key is then refused.
    pol.write_text(text.replace('[collections.kb.noise]', 'receipt_keys = []\n[collections.kb.noise]'))
    assert cli.main(args + ["--key", str(other)]) == 2
    assert "would refuse the record" in capsys.readouterr().err


# -- names.shell_quote: a character from U+0080 to U+00FF -------------------------------------

@pytest.mark.parametrize("name", ["kb\x85x", "kb\x9b31mx", "kb\xadx", "kb\nx\x01"],
                         ids=["c1-nel", "c1-csi", "soft-hyphen", "newline-and-c0"])
def test_a_pasted_shell_command_gives_the_name_its_characters(name: str) -> None:
    # Before: U+0080..U+00FF were written \xHH, which bash's $'...' makes the one byte HH, not the
    # character's UTF-8: the command the guard printed named another (missing) collection.
    import shutil
    import subprocess

    from qdrant_guard.names import shell_quote

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    quoted = shell_quote(name)
    assert "\n" not in quoted and "\x85" not in quoted
    out = subprocess.run([bash, "-c", f"printf %s {quoted}"], capture_output=True, check=True,
                         env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}).stdout
    assert out == name.encode("utf-8")


# -- the SQLite store's kept listings against the rows (held: a differential, no defect) --------

def _rows_listing(path, prefix: str, window: float, now: float) -> dict:
    import sqlite3

    from qdrant_guard.budget_store_base import _in_window

    rows: dict = {}
    conn = sqlite3.connect(path)  # a read: it changes no other connection's data_version
    try:
        for key, pid, ts in conn.execute("SELECT key, pid, ts FROM qg_budget"):
            if key.startswith(prefix):
                rows.setdefault(key, []).append((pid, ts))
    finally:
        conn.close()
    found = {key: _in_window(entries, window, now) for key, entries in rows.items()}
    return {key: ids for key, ids in found.items() if ids}


@pytest.mark.parametrize("seed", range(12))
def test_a_kept_sqlite_listing_is_the_listing_the_rows_give(tmp_path, seed: int) -> None:
    # Two stores (two connections) on one file; admissions, admit_points, admit_many, resets and
    # seen under three windows, a wall clock that steps back and ahead, a sweep clock that moves,
    # keys holding '|' anywhere (a budget_key override may): every listing either store answers,
    # kept or read, equals the rows' at that moment.
    import random

    from qdrant_guard.budget_stores import SqliteBudgetStore

    rng = random.Random(seed)
    path = str(tmp_path / "b.db")
    mono = [0.0]
    stores = [SqliteBudgetStore(path, monotonic=lambda: mono[0]) for _ in range(2)]
    keys = ["a|x", "a|y", "a|b|z", "a||q", "b|x", "a|", "ab|x", "a|x|"]
    prefixes = ["a|", "a|b|", "b|", "a||", "ab|", "a|x|", "a"]
    pids = [str(i) for i in range(6)]
    now, answered = 100.0, 0
    for _ in range(300):
        store = stores[0] if rng.random() < 0.9 else stores[1]
        now += rng.choice([0, 0, 0, 0.5, 1, 3, -2, -10, 20])
        mono[0] += rng.choice([0, 1, 5])
        window = rng.choice([5.0, 10.0, 30.0])
        op = rng.random()
        if op < 0.3:
            store.admit(rng.choice(keys), rng.sample(pids, rng.randint(1, 3)), cap=rng.randint(1, 4),
                        window_s=window, now=now)
        elif op < 0.45:
            chosen = [(k, rng.randint(0, 3)) for k in rng.sample(keys, rng.randint(1, 3))]
            points = [(p, rng.sample(range(len(chosen)), rng.randint(0, len(chosen)))) for p in rng.sample(pids, 3)]
            store.admit_points(chosen, points, window_s=window, now=now)
        elif op < 0.5:
            store.admit_many_counted([(rng.choice(keys), rng.sample(pids, 2), rng.randint(0, 3)) for _ in range(2)],
                                     window_s=window, now=now)
        elif op < 0.53:
            store.reset(rng.choice(keys + [None]))
        elif op < 0.56:
            store.seen(rng.choice(keys), window_s=window, now=now)
        else:
            prefix = rng.choice(prefixes)
            assert store.entries_by_prefix(prefix, window_s=window, now=now) == \
                _rows_listing(path, prefix, window, now), (seed, prefix, window, now)
            answered += 1
    for store in stores:
        store.close()
    assert answered > 100


def test_calibrate_policy_refuses_a_revoked_key(tmp_path, capsys) -> None:
    from guardkit import make_kit

    from qdrant_guard import cli, keys
    from tests.test_leftovers36 import _policy_file, _staging_args

    kit = make_kit(tmp_path)
    pol = _policy_file(kit, tmp_path)
    other = _other_key(tmp_path)
    kid = keys.key_id(keys.load_private_key(other).public_key())
    pol.write_text(pol.read_text().replace("[boundaries.hr]", f'[receipts]\nrevoked_keys = ["{kid}"]\n[boundaries.hr]'))
    args = _staging_args(tmp_path) + ["--policy", str(pol), "--policy-collection", "kb", "--key", str(other)]
    assert cli.main(args) == 2
    assert "receipts.revoked_keys revokes it" in capsys.readouterr().err
    assert not (tmp_path / "u.json").exists()
