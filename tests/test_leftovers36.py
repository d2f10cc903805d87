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


_QUERIES = [[1.0, 0.5, 0.0, 0.1], [3.0, 0.5, 0.5, 0.1]]


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
