"""Seventeenth review (2026-12-05): defects found in the day's changes (c932c8d..4bb75fd).

Each test fails on the code before its fix (checked, see docs/security-testing.md). Real local
Qdrant, real Ed25519 keys; no mocks."""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard.utility import calibrate


def _sparse_staging():
    """A staging collection whose vector ``image`` only every other point has (Qdrant allows a
    point to lack a named vector)."""
    raw = RawClient(":memory:")
    raw.create_collection("s", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "image": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    rng = np.random.default_rng(0)
    raw.upsert("s", [models.PointStruct(id=i, vector={"text": rng.normal(size=8).tolist(),
                                                      **({"image": rng.normal(size=8).tolist()} if i % 2 else {})})
                     for i in range(100)])
    return raw, rng.normal(size=(20, 8)).tolist()


def test_calibrate_a_named_vector_some_points_lack():
    # `calibrate --vector-name image` raised KeyError('image') on the first point without it.
    raw, queries = _sparse_staging()
    rec = calibrate(raw, "s", queries, k=5, radius=0.01, epsilons=(1.0, 8.0), threshold=0.5, progress=False,
                    seed=1, vector_name="image")
    assert (rec.vector_name, rec.n_documents, rec.dim) == ("image", 50, 8)


def test_calibrate_a_named_vector_no_point_has_says_so():
    raw = RawClient(":memory:")
    raw.create_collection("s", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "image": models.VectorParams(size=8, distance=models.Distance.COSINE)})
    raw.upsert("s", [models.PointStruct(id=1, vector={"text": [1.0] + [0.0] * 7})])
    with pytest.raises(ValueError, match="has no point with vector 'image'"):
        calibrate(raw, "s", [[1.0] + [0.0] * 7], k=1, radius=0.01, epsilons=(8.0,), threshold=0.5,
                  progress=False, seed=1, vector_name="image")


# --------------------------------------------------------------------------- record fixes that parse

_ODD = ("a.b", "ünï", "sp ace")  # a dot nests a TOML table; a space or a non-ASCII letter is no bare key


@pytest.fixture(scope="module")
def odd_records(tmp_path_factory):
    """Signed records of the named vectors of _ODD (and ``plain``) of a real staging collection."""
    from guardkit import make_kit

    from qdrant_guard import keys

    tmp = tmp_path_factory.mktemp("odd")
    kit = make_kit(tmp)
    names = (*_ODD, "plain")
    raw = RawClient(":memory:")
    raw.create_collection("s", vectors_config={n: models.VectorParams(size=8, distance=models.Distance.COSINE)
                                               for n in names})
    rng = np.random.default_rng(0)
    docs = {n: rng.normal(size=(120, 8)) for n in names}
    raw.upsert("s", [models.PointStruct(id=i, vector={n: docs[n][i].tolist() for n in names}) for i in range(120)])
    signer = keys.load_private_key(kit.guard_key_path)
    paths = {}
    for i, n in enumerate(names):
        rec = calibrate(raw, "s", (docs[n][:20] + 0.05 * rng.normal(size=(20, 8))).tolist(), k=10, radius=0.01,
                        epsilons=(2.0, 8.0, 32.0), threshold=0.05, signer=signer, progress=False, seed=1,
                        vector_name=n)
        paths[n] = tmp / f"utility-{i}.json"
        paths[n].write_text(rec.to_json())
    return kit, paths, docs


def _writer(kit, records, names):
    from qdrant_guard import QdrantClient

    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise": {"epsilon": 32.0, "radius": 0.01}, "intent": {"enabled": False},
                              "utility": {"records": records}}}, epsilon_ceiling={"PII": 40.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config={n: models.VectorParams(size=8, distance=models.Distance.COSINE)
                                                   for n in names})
    return owner.with_principal(kit.principal("bob", "support"))


@pytest.mark.parametrize("name", _ODD)
def test_a_vector_without_a_record_is_told_a_command_and_a_toml_line_that_work(odd_records, name):
    # The refusal said `--vector-name sp ace` and `add a.b = "FILE"`: the shell splits the first,
    # and TOML reads the second as the table {a = {b = "FILE"}} (and 'ünï = ...' not at all).
    import re
    import shlex
    import tomllib

    from qdrant_guard import GuardRefusal

    kit, paths, docs = odd_records
    bob = _writer(kit, {"plain": str(paths["plain"])}, ("plain", name))
    with pytest.raises(GuardRefusal) as info:
        bob.upsert("pii", [models.PointStruct(id=1, vector={name: docs[name][1].tolist()})])
    assert info.value.verdict == "UTILITY_DEGRADED"
    said = info.value.directive
    assert shlex.split(re.search(r"--vector-name (.+?) --out", said).group(1)) == [name]
    assert tomllib.loads(re.search(r"and add (.+) to utility\.records", said).group(1)) == {name: "FILE"}


def test_a_record_listed_under_another_vector_is_told_toml_lines_that_work(odd_records):
    import re
    import shlex
    import tomllib

    from qdrant_guard import ConfigError

    kit, paths, docs = odd_records
    bob = _writer(kit, {"a.b": str(paths["sp ace"])}, ("a.b", "sp ace"))
    with pytest.raises(ConfigError) as info:
        bob.upsert("pii", [models.PointStruct(id=1, vector={"a.b": docs["a.b"][1].tolist()})])
    said = str(info.value)
    assert tomllib.loads(re.search(r"the vector it measured \((.+?)\), or", said).group(1)) == {
        "sp ace": str(paths["sp ace"])}
    assert shlex.split(re.search(r"--vector-name (.+?) --out", said).group(1)) == ["a.b"]
    assert tomllib.loads(re.search(r"list that record as (.+)$", said).group(1)) == {"a.b": "FILE"}


# --------------------------------------------------------------------------- the receipts benchmark


def test_the_receipts_benchmark_still_issues_receipts():
    # bench/bench_receipts.py signed NoiseParams whose guarantee was "bench"; issue_receipts_batch
    # now refuses a sentence its fields contradict, so `make bench` failed in that suite (the CI
    # smoke run covers bench_scan and bench_noise only).
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("pytest_benchmark")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-disable",
                           "-k", "issue", str(root / "bench" / "bench_receipts.py")],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 passed" in proc.stdout


# --------------------------------------------------------------------------- a failing level's fix


def test_a_write_at_a_measured_failing_level_is_told_the_fix(tmp_path):
    # 4bb75fd gave a UTILITY_DEGRADED refusal its specific reason alone, dropping the generic
    # advice; for the commonest reason, an epsilon the record measured to fail, that reason named
    # no fix (only "which has no more noise" and the frontier).
    from guardkit import make_kit, staging_record

    from qdrant_guard import GuardRefusal, QdrantClient

    kit = make_kit(tmp_path)
    rec, docs = staging_record(kit, tmp_path / "u.json")
    failing = max(lv["epsilon"] for lv in rec.measured if lv["drop"] > 0.05)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"],
                              "noise": {"epsilon": failing, "radius": 0.01},
                              "utility": {"record": str(tmp_path / "u.json")}}}, epsilon_ceiling={"PII": 5.0})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
    with pytest.raises(GuardRefusal) as info:
        owner.with_principal(kit.principal("bob", "support")).upsert(
            "pii", [models.PointStruct(id=1, vector=docs[0].tolist())])
    assert info.value.verdict == "UTILITY_DEGRADED"
    assert "which has no more noise; use a measured passing epsilon" in info.value.directive
    assert "re-run `qdrant-guard calibrate`" in info.value.directive
