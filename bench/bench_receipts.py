"""Receipt issuing for one upsert batch vs the raw upsert of the same points, in the same run.

Run: python -m pytest bench/bench_receipts.py -p no:cacheprovider --benchmark-only -q
Group ``receipts-256x384``: 256 seeded 384-d vectors (noise-like, float32). The baseline is
``qdrant_client.QdrantClient(":memory:").upsert`` of those 256 points (ids 0-255, overwritten
every round) into a Cosine collection, i.e. what an application pays without the guard. The
candidates are what the guard adds for receipts on that batch: ``stored_form_batch`` +
``issue_receipts_batch`` (the path the pipeline uses), and the same with ``stored_form`` called
per row. The printed ratio is baseline median / candidate median (> 1: the receipts cost less
than the upsert itself).
"""
from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from qdrant_guard.keys import generate_keypair
from qdrant_guard.noise_params import NoiseParams, guarantee_sentence
from qdrant_guard.receipts import ReceiptItem, ReceiptSigner, issue_receipts_batch, stored_form, stored_form_batch

N, DIM, GROUP = 256, 384, "receipts-256x384"


@pytest.fixture(scope="module")
def data():
    vectors = np.random.default_rng(0).normal(size=(N, DIM)).astype(np.float32)
    # The sentence its fields give: issue_receipts_batch refuses to sign any other (ReceiptError).
    params = NoiseParams("gaussian", "1", 2.0, 1e-6, 0.5, 1.0, 0.31, 2.0 ** -20, "chacha20-getrandom-v1", DIM,
                         "float32",
                         guarantee_sentence("gaussian", 2.0, 1e-6, 0.5, 1.0, 0.31, 2.0 ** -20, DIM, "float32"))
    return vectors, params, ReceiptSigner(generate_keypair()[0])


def _issue(signer, params, stored):
    return issue_receipts_batch(signer, [ReceiptItem(params, stored[i], "bench", i, "", "model")
                                         for i in range(len(stored))])


def test_baseline_raw_upsert(benchmark, data):
    benchmark.group = GROUP
    vectors = data[0]
    client = QdrantClient(":memory:")
    client.create_collection("bench", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    points = [models.PointStruct(id=i, vector=v.tolist(), payload={"source": f"s{i % 50}"})
              for i, v in enumerate(vectors)]
    benchmark(lambda: client.upsert("bench", points))


def test_stored_form_batch_and_issue(benchmark, data):
    benchmark.group = GROUP
    vectors, params, signer = data
    benchmark(lambda: _issue(signer, params, stored_form_batch(vectors, distance="Cosine")))


def test_stored_form_per_row_and_issue(benchmark, data):
    benchmark.group = GROUP
    vectors, params, signer = data
    benchmark(lambda: _issue(signer, params, [stored_form(v, distance="Cosine") for v in vectors]))


def test_stored_form_batch_only(benchmark, data):
    benchmark.group = GROUP
    benchmark(lambda: stored_form_batch(data[0], distance="Cosine"))


def test_issue_receipts_batch_only(benchmark, data):
    benchmark.group = GROUP
    vectors, params, signer = data
    stored = stored_form_batch(vectors, distance="Cosine")
    benchmark(lambda: _issue(signer, params, stored))
