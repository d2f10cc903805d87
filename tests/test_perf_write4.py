"""The guarded upsert's receipt batch shortcuts give what the paths they replace gave.

* ``merkle.audit_paths`` builds every leaf's audit path in one pass; it must equal
  ``merkle.audit_path`` leaf by leaf (odd sizes promote a node, powers of two do not).
* ``receipts._batch_bodies`` builds each body and its canonical encoding inline (int point ids
  normalised without ``normalize_point_id``, the batch's repeated strings encoded once, the salts
  base64-encoded in one call by ``_b64_salts``); with the salts and clock fixed, every body and
  encoding must equal what the item-by-item helpers (``_body_dict``, ``_b64``,
  ``vector_commitment``, ``canonical_json``) give for the same salt.
"""
from __future__ import annotations

import hashlib
import math
import types
import uuid

import numpy as np
import pytest

from qdrant_guard import merkle, receipt_format, receipts, storedform
from qdrant_guard.canonical import canonical_json
from qdrant_guard.keys import generate_keypair, key_id
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import ReceiptItem, ReceiptSigner, issue_receipts_batch, stored_form_batch, verify_receipt

NOW = 1_800_000_000.25


def make_params(dim: int, epsilon: float = 2.0) -> NoiseParams:
    return NoiseParams(
        mechanism="gaussian", mechanism_version="1", epsilon=epsilon, delta=1e-6, radius=0.5,
        clip_norm=1.0, scale=0.31, lattice_step=2.0 ** -20, rng_id="chacha20-getrandom-v1",
        dim=dim, dtype="float32",
        guarantee=guarantee_sentence("gaussian", epsilon, 1e-6, 0.5, 1.0, 0.31, 2.0 ** -20, dim, "float32"),
    )


SIZES = list(range(1, 40)) + [63, 64, 65, 127, 128, 129, 255, 256, 257, 1024, 1025]


@pytest.mark.parametrize("n", SIZES)
def test_audit_paths_equal_audit_path_leaf_by_leaf(n):
    levels = merkle.build_levels([merkle.leaf_hash(i.to_bytes(4, "little")) for i in range(n)])
    paths = merkle.audit_paths(levels)
    assert paths == [merkle.audit_path(levels, i) for i in range(n)]
    assert len({id(p) for p in paths}) == n  # no two receipts share a path list
    root = levels[-1][0]
    for i in (0, n // 2, n - 1):
        assert merkle.root_from_path(levels[0][i], i, n, paths[i]) == root


def test_audit_paths_keep_the_node_form():
    levels = merkle.build_levels([merkle.leaf_hash(bytes([i])) for i in range(5)])
    hexed = [[h.hex() for h in level] for level in levels]
    assert merkle.audit_paths(hexed) == [[h.hex() for h in p] for p in merkle.audit_paths(levels)]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 256])
def test_b64_salts_equal_b64_of_each_salt(n):
    rng = np.random.default_rng(n)
    for salts in (rng.bytes(16 * n), b"\x00" * 16 * n, b"\xff" * 16 * n):
        assert receipts._b64_salts(salts, n) == [receipt_format._b64(salts[16 * i:16 * (i + 1)]) for i in range(n)]


def _fixed_salts():
    state = [0]

    def urandom(k: int) -> bytes:
        out = b""
        while len(out) < k:
            state[0] += 1
            out += hashlib.sha256(b"salt-%d" % state[0]).digest()
        return out[:k]
    return urandom


@pytest.fixture
def fixed(monkeypatch):
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=_fixed_salts()))
    monkeypatch.setattr(receipts, "time", types.SimpleNamespace(time=lambda: NOW))


def _slow_bodies(signer, items, salts):
    """The bodies and encodings as the item-by-item helpers build them, with the same salts."""
    bodies = []
    for i, item in enumerate(items):
        salt = salts[16 * i:16 * (i + 1)]
        issued = NOW if item.issued_at is None else item.issued_at
        bodies.append(receipts._body_dict(signer, item, receipts._signed_params(item.params), receipt_format._b64(salt),
                                          receipts.vector_commitment(item.vector, salt), issued))
    return bodies, [canonical_json(b) for b in bodies]


U = uuid.UUID("8c1a5a2e-6b0c-4a43-9d4e-1f3b2d6c7e90")
COLLECTIONS = ["docs", 'q"uote\\d', "é名\u2028", "docs"]
NAMES = ["", "v", "docs", 'n"\n']
MODELS = [None, "model-é", "docs", 'm"\\']
IDS = [0, 7, 2 ** 64 - 1, str(U), str(U).upper(), U, 12345678901234567890]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 31, 32, 33, 64, 65, 256])
def test_batch_bodies_equal_the_item_by_item_bodies(fixed, n):
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    vecs = stored_form_batch(np.random.default_rng(n).normal(size=(n, 8)), distance="Cosine")
    shared, other = make_params(8), make_params(8, 0.5)
    items = [ReceiptItem(shared if i % 3 else other, vecs[i], COLLECTIONS[i % 4], IDS[i % len(IDS)],
                         NAMES[(i // 2) % 4], MODELS[(i // 3) % 4],
                         None if i % 4 else (NOW - i if i % 8 else int(NOW) - i))
             for i in range(n)]
    salts = _fixed_salts()(16 * n)
    fast = receipts._batch_bodies(signer, items)
    assert fast is not None
    bodies, encoded = fast
    want_bodies, want_encoded = _slow_bodies(signer, items, salts)
    assert bodies == want_bodies
    assert [list(b) for b in bodies] == [list(b) for b in want_bodies]
    assert [type(b["issued_at"]) for b in bodies] == [int] * n
    assert encoded == want_encoded
    # Bodies share no mutable state (each has its own params dict).
    assert len({id(b["params"]) for b in bodies}) == n
    trusted = {key_id(pk): pk}
    for item, rec in zip(items, issue_receipts_batch(signer, items)):
        # now=NOW: the signer's clock (receipts.time) reads NOW, after the real one.
        assert verify_receipt(rec, vector=item.vector, collection=item.collection, point_id=item.point_id,
                              vector_name=item.vector_name, trusted_keys=trusted, now=NOW).ok


@pytest.mark.parametrize("pid", [-1, 2 ** 64, True, "nope", 1.0])
def test_batch_point_id_errors_are_normalize_point_ids(pid):
    sk, _ = generate_keypair()
    vecs = stored_form_batch(np.ones((3, 4)), distance="Dot")
    items = [ReceiptItem(make_params(4), v, "c", i) for i, v in enumerate(vecs)]
    items[1] = ReceiptItem(make_params(4), vecs[1], "c", pid)
    with pytest.raises(Exception) as got:
        receipts._batch_bodies(ReceiptSigner(sk), items)
    with pytest.raises(Exception) as want:
        receipts.normalize_point_id(pid)
    assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))


# -- the Cosine stored form's row norms: np.vecdot instead of a loop of ndarray.dot ---------------------

def _outcome(fn):
    try:
        return fn().tobytes()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return type(exc), str(exc)


@pytest.mark.parametrize("d", [1, 2, 3, 16, 17, 384, 385, 1536])
def test_row_norms_by_vecdot_equal_the_row_loop(monkeypatch, d):
    if storedform._ROW_DOTS is None:
        pytest.skip("numpy without vecdot: only the row loop exists")
    rng = np.random.default_rng(d)
    for scale in (1e-160, 1e-3, 1.0, 7.5, 1e3, 1e150):
        m = rng.standard_normal((33, d)) * scale
        m[5, 0] = 1e-300  # squares below the normal range next to normal ones (d = 1: a zero norm)
        want = np.array([math.sqrt(row.dot(row)) for row in m])
        assert storedform._row_norms(m).tobytes() == want.tobytes()
        assert storedform._row_norms(m[7:8]).tobytes() == want[7:8].tobytes()
        for rows in (m, m[:1], m[1:]):
            fast = (_outcome(lambda: storedform._unit_grid_rows(rows.copy(), "t", False)),
                    _outcome(lambda: stored_form_batch(rows, distance="Cosine")),
                    _outcome(lambda: receipts.stored_form(rows[0], distance="Cosine")))
            monkeypatch.setattr(storedform, "_ROW_DOTS", None)
            slow = (_outcome(lambda: storedform._unit_grid_rows(rows.copy(), "t", False)),
                    _outcome(lambda: stored_form_batch(rows, distance="Cosine")),
                    _outcome(lambda: receipts.stored_form(rows[0], distance="Cosine")))
            monkeypatch.undo()
            assert fast == slow


def test_row_norm_overflow_takes_the_row_loop(monkeypatch):
    # A finite row whose square overflows: the row loop's own result (inf, rescaled by the caller).
    m = np.array([[1e200, 1e200, 0.5], [0.6, 0.8, 0.0]])
    fast = stored_form_batch(m, distance="Cosine")
    assert storedform._row_norms(m)[0] == np.inf
    monkeypatch.setattr(storedform, "_ROW_DOTS", None)
    slow = stored_form_batch(m, distance="Cosine")
    assert storedform._row_norms(m)[0] == np.inf
    assert fast.tobytes() == slow.tobytes()


# -- issue_receipts_rows: the guarded upsert's receipts without a ReceiptItem per slot -----------------

def _groups(n: int, rng: np.random.Generator) -> list[tuple]:
    a, b = make_params(8), make_params(8, 0.5)
    vecs = stored_form_batch(rng.normal(size=(n + 3, 8)), distance="Cosine")
    ids = [IDS[i % len(IDS)] for i in range(n + 3)]
    models_ = [MODELS[i % 4] for i in range(n + 3)]
    groups = [(a, list(vecs[:n]), "docs", ids[:n], "", models_[:n])]
    if n > 1:  # a second vector name, other params, in one batch with the first
        groups.append((b, list(vecs[n:]), "docs", ids[n:], 'v"2', models_[n:]))
    return groups


def _as_items(groups):
    return [ReceiptItem(prm, v, coll, pid, vname, m)
            for prm, vecs, coll, pids, vname, models_ in groups for v, pid, m in zip(vecs, pids, models_)]


@pytest.mark.parametrize("n", [1, 2, 3, 32, 33, 256])
def test_issue_receipts_rows_equal_issue_receipts_batch(monkeypatch, n):
    sk, pk = generate_keypair()
    signer = ReceiptSigner(sk)
    groups = _groups(n, np.random.default_rng(n))
    monkeypatch.setattr(receipts, "time", types.SimpleNamespace(time=lambda: NOW))
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=_fixed_salts()))
    got = receipts.issue_receipts_rows(signer, groups)
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=_fixed_salts()))
    want = issue_receipts_batch(signer, _as_items(groups))
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]
    assert [canonical_json(r) for r in got] == [canonical_json(r) for r in want]
    trusted = {key_id(pk): pk}
    for item, rec in zip(_as_items(groups), got):
        # now=NOW: the signer's clock (receipts.time) reads NOW, after the real one.
        assert verify_receipt(rec, vector=item.vector, collection=item.collection, point_id=item.point_id,
                              vector_name=item.vector_name, trusted_keys=trusted, now=NOW).ok


@pytest.mark.parametrize("change", [
    lambda g: (g[0], g[1], "", g[3], g[4], g[5]),                                  # empty collection
    lambda g: (g[0], g[1], g[2], g[3], None, g[5]),                                # vector name not a str
    lambda g: (g[0], g[1], g[2], g[3], g[4], [3] + list(g[5][1:])),                # model id not a str
    lambda g: (g[0], [np.full(8, 0.1)] + list(g[1][1:]), g[2], g[3], g[4], g[5]),  # off the grid
    lambda g: (make_params(9), g[1], g[2], g[3], g[4], g[5]),                      # params of another dim
    lambda g: (g[0], [list(g[1][0])] + list(g[1][1:]), g[2], g[3], g[4], g[5]),    # a list, not an array
    lambda g: (g[0], g[1], g[2], [-1] + list(g[3][1:]), g[4], g[5]),               # a negative point id
    lambda g: ("gaussian", g[1], g[2], g[3], g[4], g[5]),                          # params not NoiseParams
])
def test_issue_receipts_rows_outside_the_fast_path_are_issue_receipts_batchs(monkeypatch, change):
    # The same error, or (a list vector on the grid, which the item path takes) the same receipts.
    sk, _ = generate_keypair()
    signer = ReceiptSigner(sk)
    groups = _groups(3, np.random.default_rng(0))
    groups[0] = change(groups[0])
    monkeypatch.setattr(receipts, "time", types.SimpleNamespace(time=lambda: NOW))
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=_fixed_salts()))
    got = _outcome_of(lambda: receipts.issue_receipts_rows(signer, groups))
    monkeypatch.setattr(receipts, "os", types.SimpleNamespace(urandom=_fixed_salts()))
    want = _outcome_of(lambda: issue_receipts_batch(signer, _as_items(groups)))
    assert got == want


def _outcome_of(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return type(exc), str(exc)


def test_container_equals_receipts_for_payload_and_copies_only_the_writers():
    from types import MappingProxyType

    from qdrant_guard import writereceipts
    own = {"sig": "a", "batch": {"index": 0}}
    writer = {"sig": "w"}
    proxy = MappingProxyType({"sig": "p"})
    by_name = {"w": writer, "": own, "p": proxy}
    got = writereceipts._container(by_name, {id(own)})
    want = receipts.receipts_for_payload(by_name)
    assert got == want and list(got["vectors"]) == list(want["vectors"]) == ["w", "", "p"]
    assert canonical_json(got) == canonical_json(want)
    assert got["vectors"][""] is own
    assert got["vectors"]["w"] is not writer and type(got["vectors"]["p"]) is dict
    assert writereceipts._container(by_name, set()) == want


# -- the whole guarded write with this file's shortcuts on and off ----------------------------------------

def _reference_rows(signer, groups):
    return issue_receipts_batch(signer, [
        ReceiptItem(prm, v, coll, pid, vname, m)
        for prm, vecs, coll, pids, vname, models_ in groups for v, pid, m in zip(vecs, pids, models_)])


def test_guarded_writes_send_and_store_what_the_paths_they_replace_did(tmp_path, monkeypatch):
    # PointStruct, dict, Batch, upload_collection and upload_points writes, unnamed and two named
    # vectors (test_perf_write3._writes), with: receipts from the noised matrix, the guard's receipts
    # stored uncopied, the native reader's array as it is, np.vecdot row norms; then with each
    # replaced by the path it skips.
    from test_perf_write3 import _run

    from qdrant_guard import vectors, writeprep, writesign
    fast, fast_stored, info = _run(tmp_path / "fast", monkeypatch, shortcuts=True)
    monkeypatch.setattr(writesign, "issue_receipts_rows", _reference_rows)
    monkeypatch.setattr(writeprep, "_container", lambda by_name, own: receipts.receipts_for_payload(by_name))
    monkeypatch.setattr(vectors, "_DENSE_FLOATS", None)
    monkeypatch.setattr(storedform, "_ROW_DOTS", None)
    slow, slow_stored, _ = _run(tmp_path / "slow", monkeypatch, shortcuts=True)
    assert info["noised"] > 20
    assert len(fast) == len(slow) >= 10
    for a, b in zip(fast, slow):
        assert a == b
    assert fast_stored == slow_stored


@pytest.mark.parametrize("value", [
    [0.5, -1.25, 3.0], [0.5, float("inf"), 1.0], [float("nan"), 0.0, 1.0], [1e39, 0.0, 1.0], [0.5, 1.0],
    [0.5, 1.0, 2.0, 3.0], [1, 2, 3], [True, 0.0, 1.0], np.array([0.5, 1.0, 2.0], dtype=np.float32), [],
])
def test_as_dense_shortcut_equals_the_checked_path(monkeypatch, value):
    from qdrant_guard import vectors
    spec = vectors.VectorSpec(name="v", size=3, distance="Cosine", multivector=False)

    def outcome():
        try:
            arr = vectors.as_dense(value, spec, where="point 1")
            return arr.dtype.str, arr.shape, arr.tobytes()
        except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
            return type(exc), str(exc), getattr(exc, "reason", None)
    fast = outcome()
    monkeypatch.setattr(vectors, "_DENSE_FLOATS", None)
    assert fast == outcome()


def test_noise_batch_cast_equals_stack_then_astype():
    rng = np.random.default_rng(3)
    rows = [r for r in rng.standard_normal((33, 17)) * np.logspace(-45, 38, 33)[:, None]]
    rows[0][:4] = [np.nextafter(np.float32(1.0), np.float32(2.0)) * 1.0 + 2.0 ** -30, -0.0, 3.4028234e38, 1e-46]
    assert (np.array(rows, dtype=np.float32).tobytes() == np.stack(rows).astype(np.float32).tobytes())
