"""Claims audit 9 (branch h-claims9, 2026-12-06): the statements a user acts on first, checked
against the code, the committed eval results and a real local-mode qdrant-client.

Wrong and corrected, pinned here:

1. docs/privacy.md cited ``tests/test_claims_audit2.py`` for its one-token edit distances; that
   test was lost in a merge (9b029df). It is measured again here (real model, ``eval`` marker),
   and the page now says which SSN digit it changed and the range over every one-digit change.
2. docs/atomicity.md: "the guard issues exactly one Qdrant call per decided write" —
   ``delete_vector_name`` sends two (the collection change, then the receipt clean-up).
3. docs/eval.md: utility records "are verified against the guard's key and receipts.trusted_keys,
   also for a collection that sets receipt_keys (which scope receipts only)" — such a collection
   takes records from the guard's keys and its receipt_keys only.
4. qdrant_guard/_noise_py.py named ``tests/test_noise_oracle.py``, which does not exist.
5. README: "12 of the 20 attack queries are also refused as INTENT_BLOCKED" through the guarded
   client — 11 since the classifier was retrained (d68cb22; the model before it blocks 12).
6. docs/intent.md's API example showed the old model's cue order in its reasoning comment (claims
   audit 8 fixed the same example further down the page).
7. README's first list said the noise is drawn "on a CSPRNG (AES-256-CTR with AES-NI, else
   ChaCha20, keyed by getrandom)": that is ``keyed = false``; by default the guard draws keyed
   noise, ChaCha20 keyed by HMAC-SHA256 of its noise key and the vector (``rng_id``
   ``chacha20-keyed-hmac-sha256-v1``), the same noise for the same vector.
8. README's quick start: on PUBLIC collections "the one exception" to qdrant-client's behaviour was
   the text screen; a lookup into another collection is checked as a read of it, and the raw
   handles are refused on any guarded client.
9. The policy reference (``NoisePolicy`` docstrings, so docs/policy.md) called ``laplace_l2`` "a pure
   guarantee" without saying it is the ideal distribution's: docs/privacy.md states that the bounded
   sampler makes it (epsilon, 1.3e-34) at 384-d and adds about d * 2.3e-34 to the Gaussian's delta.

The rest (the worked-number table and the sampler bounds of docs/privacy.md, the README's and
docs/eval.md's eval figures against docs/eval-report/results.json) are pinned as stated.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from guardkit import make_kit, models, record_sent, staging_store, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import ConfigError, QdrantClient, keys
from qdrant_guard.noise import analytic_gaussian_delta, privatize
from qdrant_guard.receipts import RECEIPT_KEY

ROOT = Path(__file__).resolve().parent.parent
RESULTS = json.loads((ROOT / "docs/eval-report/results.json").read_text())


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def _shows(shown: str, value: float) -> bool:
    """Whether ``shown`` (a figure as printed, commas, sign and ``−`` allowed) is ``value`` rounded
    to the digits shown."""
    s = shown.replace(",", "").replace("−", "-").lstrip("+")
    # an integer's last zero can be rounding to tens (1,210 for 1,209.1; 380 for 382.7)
    decimals = len(s.split(".")[1]) if "." in s else -int(s.endswith("0"))
    return abs(float(s) - value) <= 0.5 * 10.0 ** -decimals + 1e-12


def _default_sigma() -> float:
    _, params = privatize(np.full(384, 384 ** -0.5), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01,
                          clip_norm=1.0)
    return params.scale


def _epsilon_at(sigma: float, distance: float, delta: float = 1e-6) -> float:
    """The smallest epsilon whose delta at L2 ``distance`` is within ``delta`` for noise ``sigma``."""
    lo, hi = 0.0, 1e5
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if analytic_gaussian_delta(sigma, mid, distance) > delta else (lo, mid)
    return hi


# ------------------------------------------------------------------ docs/privacy.md


def test_the_worked_number_of_docs_privacy_is_the_default_calibration() -> None:
    doc = _flat("docs/privacy.md")
    _, params = privatize(np.full(384, 384 ** -0.5), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01,
                          clip_norm=1.0)
    m = re.search(r"The calibration gives `sigma = ([\d.]+)` per coordinate \(`Λ = 2\^(-\d+)`\), a noise vector of "
                  r"norm ≈ ([\d.]+)", doc)
    assert m is not None
    assert _shows(m.group(1), params.scale) and params.lattice_step == 2.0 ** int(m.group(2))
    assert _shows(m.group(3), params.scale * math.sqrt(384))
    table = doc[doc.index("| L2 distance between the two embeddings |"):doc.index("So the worst case")]
    rows = re.findall(r"\| ([\d.]+)[^|]* \| ([\d.,]+) \|", table)
    assert len(rows) == 5
    for distance, eps in rows:
        assert _shows(eps, _epsilon_at(params.scale, float(distance))), (distance, eps)
    worst = re.search(r"So the worst case over arbitrary texts is epsilon ≈ ([\d,]+)", doc)
    assert worst is not None and worst.group(1) == rows[-1][1]
    # the lattice margin's share of the sensitivity, at the default and at the two small epsilons named
    margin = re.search(r"\((\d+) % more at the default PII policy; .*?: (\d+) % at epsilon ([\d.]+) and (\d+) % "
                       r"at ([\d.]+) for the Gaussian at radius 0\.01, 384-d", doc)
    assert margin is not None
    share = {}
    for eps in (1.0, float(margin.group(3)), float(margin.group(5))):
        _, p = privatize(np.full(384, 384 ** -0.5), mechanism="gaussian", epsilon=eps, delta=1e-6, radius=0.01,
                         clip_norm=1.0)
        share[eps] = 100 * math.sqrt(384) * p.lattice_step / 0.01
    assert all(_shows(margin.group(i), v) for i, v in zip((1, 2, 4), share.values())), share


def test_the_bounded_sampler_figures_of_docs_privacy_follow_from_the_kernels_constants() -> None:
    doc = _flat("docs/privacy.md")
    tables = (ROOT / "native/ziggurat_tables.h").read_text()
    r = float.fromhex(re.search(r"QG_ZIG_R = (0x[0-9a-fp.+-]+);", tables).group(1))
    # Marsaglia's tail: x = -log(u1)/r accepted when -2 log(u2) > x², u ≥ 2^-53, so x² < 2·53·ln 2.
    bound = r + math.sqrt(2 * 53 * math.log(2))
    m = re.search(r"so `\|z\| <= ([\d.]+)` \(the ideal mass beyond is ([\d.e-]+)\)", doc)
    assert m is not None and _shows(m.group(1), bound)
    mass = math.erfc(bound / math.sqrt(2))
    assert f"{mass:.1e}" == m.group(2)
    # Marsaglia-Tsang's norm d'·(1 + c·z)³, d' = d − 1/3, c = 1/sqrt(9d'), at |z| = bound
    g = re.search(r"for d = 384 it lies in \[([\d.]+), ([\d.]+)\]·scale, ideal mass outside ([\d.e-]+)\)", doc)
    assert g is not None
    dd = 384 - 1 / 3
    c = 1 / math.sqrt(9 * dd)
    assert _shows(g.group(1), dd * (1 - c * bound) ** 3) and _shows(g.group(2), dd * (1 + c * bound) ** 3)
    stats = pytest.importorskip("scipy.stats")
    outside = stats.gamma.cdf(dd * (1 - c * bound) ** 3, 384) + stats.gamma.sf(dd * (1 + c * bound) ** 3, 384)
    assert f"{outside:.1e}" == g.group(3)
    # and the sentence every receipt carries adds d times the normal's mass to delta
    _, params = privatize(np.full(384, 384 ** -0.5), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01)
    assert f"adds about {float(m.group(2)) * 384:.2g} or less to delta" in params.guarantee


_SSN = "Customer John Doe, SSN 123-45-6789, asks why his refund is late."


@pytest.mark.eval
def test_one_token_edits_are_as_far_apart_as_docs_privacy_and_the_readme_say(tmp_path: Path) -> None:
    from qdrant_guard.evaluation.embed import Embedder, model_available

    if not model_available():
        pytest.skip("evaluation model not installed: run scripts/install_eval_deps.sh")
    doc = _flat("docs/privacy.md")
    m = re.search(r"changing the SSN's last digit \(6789 to 6780\) moves the embedding by ([\d.]+) \(epsilon ([\d.]+) "
                  r"at this sigma; over every one-digit change of the SSN, ([\d.]+) to ([\d.]+), epsilon ([\d.]+) to "
                  r"([\d.]+)\), one changed letter of the surname \(`Doe` to `Dae`\) by ([\d.]+) \(epsilon ([\d.]+)\); "
                  r"in a sentence about a hospital admission, another day of the date by ([\d.]+) \(epsilon ([\d.]+)\)",
                  doc)
    assert m is not None
    shown = m.groups()
    digits = [i for i, ch in enumerate(_SSN) if ch.isdigit()]
    variants = [_SSN[:i] + d + _SSN[i + 1:] for i in digits for d in "0123456789" if d != _SSN[i]]
    date = ("The patient Maria Lopez was admitted on 2024-03-02 with chest pain.",
            "The patient Maria Lopez was admitted on 2024-03-09 with chest pain.")
    emb = Embedder(tmp_path, threads=1)
    try:
        vecs = np.asarray(emb.encode([_SSN, _SSN.replace("6789", "6780"), _SSN.replace("Doe", "Dae"), *date,
                                      *variants]), dtype=np.float64)
    finally:
        emb.close()
    last, surname, day = (float(np.linalg.norm(vecs[0] - vecs[1])), float(np.linalg.norm(vecs[0] - vecs[2])),
                          float(np.linalg.norm(vecs[3] - vecs[4])))
    spread = np.linalg.norm(vecs[5:] - vecs[0], axis=1)
    sigma = _default_sigma()
    measured = [last, _epsilon_at(sigma, last), float(spread.min()), float(spread.max()),
                _epsilon_at(sigma, float(spread.min())), _epsilon_at(sigma, float(spread.max())),
                surname, _epsilon_at(sigma, surname), day, _epsilon_at(sigma, day)]
    assert all(_shows(s, v) for s, v in zip(shown, measured)), list(zip(shown, measured))
    readme = _flat("README.md")
    r = re.search(r"\(the last SSN digit: ([\d.]+), epsilon (\d+); one letter of a surname: ([\d.]+), epsilon (\d+);",
                  readme)
    assert r is not None
    assert [r.group(i) for i in (1, 3)] == [shown[0], shown[6]]
    assert _shows(r.group(2), measured[1]) and _shows(r.group(4), measured[7])


# ------------------------------------------------------------------ eval figures


def _level(sigma_shown: str, redaction: bool) -> dict:
    hits = [lv for lv in RESULTS["levels"] if lv["redaction"] is redaction
            and f"{lv['scale']:.4f}" == f"{float(sigma_shown):.4f}"]
    assert len(hits) == 1, (sigma_shown, redaction)
    return hits[0]


def _with_interval(cell: str, value: float, interval: list[float] | None) -> bool:
    nums = re.findall(r"[+−-]?\d[\d.,]*", cell)
    if not _shows(nums[0], value):
        return False
    return interval is None or (len(nums) == 3 and _shows(nums[1], interval[0]) and _shows(nums[2], interval[1]))


def test_the_readme_eval_table_is_the_committed_run() -> None:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| sigma (epsilon at r = 0.01) |"):text.index("¹ from `qdrant-guard eval")]
    rows = [[c.strip().replace("*", "") for c in line.strip("|").split("|")]
            for line in table.splitlines()[2:] if line.startswith("|") and "¹" not in line]
    assert len(rows) == 7
    for cells in rows:
        sigma = cells[0].split()[0]
        on, off = _level(sigma, True), _level(sigma, False)
        u = on["utility"]
        if "(" in cells[1]:  # a noised level: the mean of its draws (min .. max)
            draws = u["recall_ratio_draws"]
            assert _with_interval(cells[1], u["recall_ratio_mean"], [min(draws), max(draws)]), cells
            assert _shows(cells[0].split("(")[1].split()[0].rstrip(",)"), on["epsilon"]), cells
        else:
            assert _shows(cells[1], u["recall_ratio"]), cells
        assert _shows(cells[2], u["overlap"]), cells
        assert _shows(cells[3].rstrip(" %"), 100 * off["secret"]["all"]["top1"]), cells
        assert _shows(cells[4].rstrip(" %"), 100 * on["secret"]["all"]["top1"]), cells
        assert _shows(cells[5], off["planted"]["adaptive"]["advantage"]), cells
        planted = on["planted"]["adaptive"]
        assert _with_interval(cells[6], planted["advantage"], planted["advantage_ci"] if "(" in cells[6] else None)
        ident = on["bow_adaptive"]["identifier"]
        assert _with_interval(cells[7], ident["advantage"], ident["advantage_ci"]), cells
        assert _with_interval(cells[8], ident["over_reference"], ident["over_reference_ci"]), cells


def test_the_targets_stated_in_readme_and_eval_md_are_the_committed_run() -> None:
    default = next(lv for lv in RESULTS["levels"] if lv.get("policy_default") and lv["redaction"])
    u, ident = default["utility"], default["bow_adaptive"]["identifier"]
    planted = default["planted"]["adaptive"]
    draws = u["recall_ratio_draws"]
    under = sum(d < 0.95 for d in draws)
    readme = _flat("README.md")
    frontier_page = _flat("docs/privacy-utility.md")  # the README section's prose, moved there 2026-12-08
    m = re.search(r"\| known-item recall@10 ≥ 95 % of clean \| ([\d.]+) % \(mean of (\d+) noise draws; ([\d.]+) \.\. "
                  r"([\d.]+) %, (\d+) draws under 95 %\)", readme)
    assert m is not None
    assert _shows(m.group(1), 100 * u["recall_ratio_mean"]) and int(m.group(2)) == len(draws)
    assert _shows(m.group(3), 100 * min(draws)) and _shows(m.group(4), 100 * max(draws)) and int(m.group(5)) == under
    assert f"the detector removed {RESULTS['detector']['redacted']:,} of {RESULTS['detector']['planted']:,}" in readme
    assert re.search(rf"\(98\.2 % at the default\)", frontier_page) and _shows("98.2", 100 * default["reid"]["top1"])
    m = re.search(r"scores identifier F1 ([\d.]+), and the adaptive attacker on the default policy's vectors scores "
                  r"([\d.]+), (−[\d.]+) \((−[\d.]+) \.\. (−[\d.]+)\)", frontier_page)
    assert m is not None
    assert _shows(m.group(1), ident["reference_f1"]) and _shows(m.group(2), ident["f1"])
    assert _with_interval(" ".join(m.groups()[2:]), ident["over_reference"], ident["over_reference_ci"])
    # docs/eval.md's target table
    doc = _flat("docs/eval.md")
    rows = {
        "planted identifiers: adaptive F1 - prior": (planted["advantage"], planted["advantage_ci"]),
        "corpus identifiers: adaptive F1 - prior": (ident["advantage"], ident["advantage_ci"]),
        "corpus identifiers: adaptive F1 - topic-only reference (reported, not a target)":
            (ident["over_reference"], ident["over_reference_ci"]),
    }
    for label, (value, ci) in rows.items():
        row = re.search(re.escape(f"| {label} | ") + r"([^|]+) \| ([^|]+) \|", doc)
        assert row is not None, label
        assert _with_interval(f"{row.group(1)} {row.group(2)}", value, ci), label
    row = re.search(r"\| known-item recall@10 / clean, mean of (\d+) noise draws \| ([\d.]+) \| draws ([\d.]+) \.\. "
                    r"([\d.]+), (\d+) of (\d+) under 0\.95", doc)
    assert row is not None
    assert int(row.group(1)) == len(draws) == int(row.group(6)) and int(row.group(5)) == under
    assert all(_shows(row.group(i), v) for i, v in ((2, u["recall_ratio_mean"]), (3, min(draws)), (4, max(draws))))
    off = next(lv for lv in RESULTS["levels"] if lv.get("policy_default") and not lv["redaction"])
    m = re.search(r"Without redaction at the policy default the attacker recovers ([\d.]+) % of planted secrets "
                  r"\((\d+)x chance\)", doc)
    assert m is not None
    assert _shows(m.group(1), 100 * off["secret"]["all"]["top1"]) and _shows(m.group(2), off["secret"]["all"]["x_chance"])


# ------------------------------------------------------------------ docs/atomicity.md


def _named_vectors_store(tmp_path: Path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                              "intent": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    vp = models.VectorParams(size=16, distance=models.Distance.COSINE)
    owner.create_collection("pii", vectors_config={"a": vp, "b": vp})
    rng = np.random.default_rng(0)
    owner.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=i, vector={"a": unit(rng), "b": unit(rng)}) for i in range(3)])
    return kit, owner


def _receipted_names(owner) -> set[str]:
    records, _ = RawClient.scroll(owner, "pii", limit=10, with_payload=True)
    return {n for r in records for n in r.payload[RECEIPT_KEY]["vectors"]}


def test_delete_vector_name_is_the_one_decided_write_sent_as_two_requests(tmp_path: Path, monkeypatch) -> None:
    doc = _flat("docs/atomicity.md")
    assert "the guard issues exactly one Qdrant call per decided write" not in doc
    assert ("The one exception is `delete_vector_name`, whose receipt clean-up is a second request after the "
            "collection change") in doc
    _, owner = _named_vectors_store(tmp_path)
    sent = record_sent(monkeypatch, ("delete_vector_name", "batch_update_points", "set_payload", "scroll", "retrieve"))
    owner.set_payload("pii", {"y": 1}, points=[0])
    assert sent == ["retrieve", "set_payload"]  # a look-up, then the one write
    sent.clear()
    owner.delete_vector_name("pii", "b")
    assert sent == ["scroll", "delete_vector_name", "batch_update_points"]
    assert _receipted_names(owner) == {"a"}


def test_a_failure_between_delete_vector_names_two_requests_leaves_the_receipts(tmp_path: Path, monkeypatch) -> None:
    kit, owner = _named_vectors_store(tmp_path)

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(RawClient, "batch_update_points", interrupted)
    with pytest.raises(KeyboardInterrupt):
        owner.delete_vector_name("pii", "b")
    monkeypatch.undo()
    assert "b" not in RawClient.get_collection(owner, "pii").config.params.vectors
    assert _receipted_names(owner) == {"a", "b"}
    entries = [json.loads(line)["record"] for line in (kit.tmp / "audit.jsonl").read_text().splitlines()]
    assert [e.get("verdict") for e in entries if e.get("op") == "delete_vector_name"][-2:] == ["ALLOW", "QDRANT_ERROR"]


# ------------------------------------------------------------------ docs/eval.md, utility records


def test_a_collection_with_receipt_keys_takes_utility_records_from_those_keys_only(tmp_path: Path) -> None:
    doc = _flat("docs/eval.md")
    assert "(which scope receipts only)" not in doc
    assert ("or, for a collection that sets `receipt_keys`, the guard's own and those only "
            "(`tests/test_utility_record_scope.py`)") in doc
    from qdrant_guard.utility import calibrate

    kit = make_kit(tmp_path)
    raw, docs, queries = staging_store(32)
    sk, pk = keys.generate_keypair()  # an outside key, listed in receipts.trusted_keys below
    other = calibrate(raw, "staging", queries, k=10, radius=0.01, epsilons=(0.02, 0.1, 0.5, 2.0), threshold=0.05,
                      signer=sk, progress=False, seed=1)
    path = tmp_path / "other.json"
    path.write_text(other.to_json())

    def writer(receipt_keys):
        coll = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True,
                "intent": {"enabled": False}, "noise": {"epsilon": other.epsilon, "radius": 0.01},
                "utility": {"record": str(path)}}
        if receipt_keys is not None:
            coll["receipt_keys"] = receipt_keys
        cfg = kit.config({"pii": coll}, epsilon_ceiling={"PII": 5.0},
                         receipts={"trusted_keys": [keys.public_key_to_str(pk)]})
        owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
        owner.create_collection("pii", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
        return owner.with_principal(kit.principal("bob", "support"))

    point = [models.PointStruct(id=1, vector=docs[0].tolist())]
    writer(None).upsert("pii", point)  # the key is in receipts.trusted_keys: the record vouches
    with pytest.raises(ConfigError, match="receipts.trusted_keys lists it"):
        writer([]).upsert("pii", point)


# ------------------------------------------------------------------ cited files


def test_every_test_file_the_library_and_scripts_cite_exists() -> None:
    cited = {}
    for folder in ("qdrant_guard", "scripts", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in re.findall(r"tests/[A-Za-z0-9_/]+\.py", path.read_text()):
                cited.setdefault(name, path.relative_to(ROOT).as_posix())
    assert cited and {n: p for n, p in cited.items() if not (ROOT / n).exists()} == {}


# ------------------------------------------------------------------ README, extraction through the guard


def test_the_attack_queries_the_guard_refuses_for_intent_are_as_many_as_the_readme_says(tmp_path: Path) -> None:
    import extraction_scenario as sc
    from test_retrieval_defenses import _corpus_client

    from qdrant_guard import GuardRefusal

    m = re.search(r"Through the guarded client with intent on, (\d+) of the (\d+) attack queries are also refused as "
                  r"`INTENT_BLOCKED` \(`tests/test_retrieval_defenses\.py::"
                  r"test_extraction_attack_through_the_guard_stays_under_coverage`\)", _flat("docs/retrieval-defences.md"))
    assert m is not None and int(m.group(2)) == len(sc.ATTACK_QUERIES)
    kit = make_kit(tmp_path)
    owner, corpus = _corpus_client(kit, diversity={"max_source_coverage": 0.25,
                                                   "restricted_sources": [sc.RESTRICTED_SOURCE]})
    mallory = owner.with_principal(kit.principal("mallory", "support"))
    verdicts = []
    for text in sc.ATTACK_QUERIES:
        try:
            mallory.query_points(sc.COLLECTION, query=sc.embed(text), query_text=text, limit=10)
        except GuardRefusal as exc:
            verdicts.append(exc.verdict)
    assert verdicts.count("INTENT_BLOCKED") == int(m.group(1))


def test_the_api_example_of_docs_intent_shows_what_the_model_says() -> None:
    from qdrant_guard.intent import load_classifier

    m = re.search(r"res = clf\.classify\(\"([^\"]+)\"\)\nres\.label, res\.confidence, res\.reasoning  # '(\w+)', "
                  r"([\d.]+)…, \"(\w+ \([\d.]+)…\): ([^…]+)…\"", (ROOT / "docs/intent.md").read_text())
    assert m is not None
    query, label, confidence, head, cues = m.groups()
    res = load_classifier("builtin").classify(query)
    assert res.label == label and f"{res.confidence:.3f}".startswith(confidence)
    assert res.reasoning.startswith(head) and res.reasoning[len(head):].split(": ", 1)[1].startswith(cues)


@pytest.mark.parametrize("keyed", [None, False])
def test_the_generator_the_readme_names_is_the_one_a_guarded_write_uses(tmp_path: Path, keyed) -> None:
    from qdrant_guard import noise

    readme = _flat("docs/features.md")  # the README's opening list in full
    m = re.search(r"noise in C from a stream cipher \(by default keyed: ChaCha20 keyed by HMAC-SHA256 of the guard's "
                  r"noise key and the vector, so a vector written again gets the same noise; fresh under `keyed = "
                  r"false`: AES-256-CTR with AES-NI, else ChaCha20, keyed by `getrandom`\)", readme)
    assert m is not None
    kit = make_kit(tmp_path)
    coll = {"class": "PII", "owner": "hr", "writers": ["support"], "intent": {"enabled": False}}
    if keyed is not None:
        coll["noise"] = {"keyed": keyed}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": coll}), principal=kit.principal("alice", "hr"))
    owner.create_collection("pii", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    v = unit(np.random.default_rng(0))
    owner.with_principal(kit.principal("bob", "support")).upsert(
        "pii", [models.PointStruct(id=1, vector=v), models.PointStruct(id=2, vector=v)])
    records, _ = RawClient.scroll(owner, "pii", with_payload=True, with_vectors=True)
    rng_ids = {r.payload[RECEIPT_KEY]["vectors"][""]["params"]["rng_id"] for r in records}
    if keyed is None:  # the default: keyed, one vector gets one noise
        assert rng_ids == {noise.RNG_KEYED} and records[0].vector == records[1].vector
    else:
        assert rng_ids == {noise.RNG_PRODUCTION} and records[0].vector != records[1].vector
        assert noise.RNG_PRODUCTION in (noise.RNG_PRODUCTION_AES, noise.RNG_PRODUCTION_CHACHA20)


def test_the_eval_figures_in_docs_eval_prose_are_the_committed_run() -> None:
    doc = _flat("docs/eval.md")
    default = next(lv for lv in RESULTS["levels"] if lv.get("policy_default") and lv["redaction"])
    draws = default["utility"]["recall_ratio_draws"]
    m = re.search(r"([\d.]+) % in the cold run of 2026-12-04, whose (\d+) draws span ([\d.]+) \.\. ([\d.]+) %", doc)
    assert m is not None and int(m.group(2)) == len(draws)
    assert all(_shows(m.group(i), 100 * v) for i, v in ((1, draws[0]), (3, min(draws)), (4, max(draws))))
    off = next(lv for lv in RESULTS["levels"] if lv.get("policy_default") and not lv["redaction"])
    m = re.search(r"\+([\d.]+) over the prior at the default noise without redaction, .*?, \+([\d.]+) even at sigma "
                  r"([\d.]+)\. .*?recall ([\d.]+) % of clean instead of 100 % before any noise", doc)
    assert m is not None
    far = [lv for lv in RESULTS["levels"] if not lv["redaction"] and _shows(m.group(3), lv["scale"])]
    assert len(far) == 1
    clean_on = next(lv for lv in RESULTS["levels"] if lv["scale"] == 0 and lv["redaction"])
    assert _shows(m.group(1), off["planted"]["adaptive"]["advantage"])
    assert _shows(m.group(2), far[0]["planted"]["adaptive"]["advantage"])
    assert _shows(m.group(4), 100 * clean_on["utility"]["recall_ratio"])


def test_on_a_public_collection_lookups_and_raw_handles_are_the_readmes_other_exceptions(tmp_path: Path) -> None:
    from qdrant_guard import GuardRefusal

    readme = _flat("docs/quick-start.md")  # the quick start's paragraph in full
    assert all("the one exception is that secrets or PII written as text to a PUBLIC" not in _flat(page)
               for page in ("README.md", "docs/quick-start.md", "docs/switching.md"))
    assert ("with these exceptions on PUBLIC collections: secrets or PII written as text there are refused as "
            "`SENSITIVITY_MISMATCH` unless the policy allows redaction there; in what a query would send to "
            "inference (a `models.Document` anywhere in the query, its options), a credential is refused as "
            "`CREDENTIAL_IN_TEXT` unless `credentials_in_text = \"redact\"`, and PII as `SENSITIVITY_MISMATCH` "
            "unless the policy allows redaction there; a `lookup_from`/`with_lookup` into "
            "another collection is checked as a read of that one; and a guarded client refuses its raw handles "
            "(`client.http`, `grpc_*`) whatever the collection") in readme
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}, "pub": {"class": "PUBLIC"}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    rng = np.random.default_rng(0)
    for name in ("pii", "pub"):
        owner.create_collection(name, vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        owner.upsert(name, [models.PointStruct(id=1, vector=unit(rng), payload={"g": 1})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert len(bob.query_points("pub", query=1).points) == 0  # as qdrant-client: a point's own id is left out
    with pytest.raises(GuardRefusal) as lookup:
        bob.query_points("pub", query=1, lookup_from=models.LookupLocation(collection="pii"))
    with pytest.raises(GuardRefusal) as grouped:
        bob.query_points_groups("pub", query=unit(rng), group_by="g", with_lookup=models.WithLookup(collection="pii"))
    assert lookup.value.verdict == grouped.value.verdict == "REFUSED_CROSS_BOUNDARY"
    with pytest.raises(GuardRefusal) as credential:  # before qdrant-client's inference (none here) runs
        bob.query_points("pub", query=models.Document(text="why does AKIAJ2QW7XRT5LNPV3YB fail", model="m"))
    assert credential.value.verdict == "CREDENTIAL_IN_TEXT"
    for handle in ("http", "grpc_points"):
        with pytest.raises(GuardRefusal, match="raw API handle"):
            getattr(bob, handle)
    # qdrant-client answers the same lookup (point 1's vector read from pii ranks pub's point 1)
    assert len(RawClient.query_points(bob, "pub", query=1, lookup_from=models.LookupLocation(collection="pii")).points) == 1


def test_the_policy_reference_states_the_pure_guarantee_as_the_ideal_distributions() -> None:
    from qdrant_guard.policy import NoisePolicy

    privacy = _flat("docs/privacy.md")
    bound = re.search(r"the implemented `laplace_l2` is `\(epsilon, delta\)` with delta of that order \(([\d.e-]+) at "
                      r"d = 384\)", privacy)
    per_coordinate = re.search(r"the Gaussian's delta grows by about `d · ([\d.e-]+)`", privacy)
    assert bound is not None and per_coordinate is not None
    reference = _flat("docs/policy.md")
    section = reference[reference.index("## [collections.NAME.noise]"):reference.index("## [collections.NAME.query]")]
    assert "pure metric DP (epsilon at ``radius``) for the ideal distribution" in section
    assert f"(the bounded sampler makes it (epsilon, {bound.group(1)}) at 384-d)" in section
    assert (f"``laplace_l2`` needs 0 (a pure guarantee for the ideal noise; the bounded sampler adds "
            f"{bound.group(1)} at 384-d, as it adds about dim * {per_coordinate.group(1)} to the Gaussian's)") in section
    doc = " ".join((NoisePolicy.__doc__ or "").split())
    assert f"which adds at most about dim * {per_coordinate.group(1)} to delta, ``laplace_l2``'s zero included" in doc
