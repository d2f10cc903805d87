"""Claims audit 4 (2026-12-05): the security and behaviour statements the docs added or changed
since 3015cc5 (receipt mechanism, guarantee wordings, utility.max_age_s, MMR and raw vectors left
behind under noise_queries, administration counts, the folded repetition measure, detector forms
4, the new-user README), checked against the code. Each test pins a statement a reader acts on,
so that it fails when the statement stops being true; the three statements found wrong are fixed
in the docs (README and the threat model on points stored before the switch; the threat model
and ``noise_queries`` on what the left-behind count sees; ``max_glued_repetition`` and the
threat model on random digits).

Real local Qdrant (``QdrantClient(":memory:")`` / ``path=``), real Ed25519 keys; no mocks.
"""
from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import numpy as np
import pytest
from guardkit import DIM, make_kit, models, staging_record, unit
from qdrant_client import QdrantClient as RawClient

from qdrant_guard import GuardRefusal, QdrantClient, keys
from qdrant_guard.noise import privatize
from qdrant_guard.policy import QueryRules
from qdrant_guard.querycheck import structural_scan
from qdrant_guard.receipts import (
    RECEIPT_KEY,
    ReceiptItem,
    ReceiptSigner,
    issue_receipts_batch,
    receipts_for_payload,
    stored_form,
    verify,
)
from qdrant_guard.scan import scan_query

ROOT = Path(__file__).resolve().parent.parent


def _flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def _pii(**extra):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "diversity": {"enabled": False},
           "intent": {"enabled": False}}
    pol.update(extra)
    return pol


# ---------------------------------------------------------------- points stored before the switch
# README ("Points stored before the switch") and the threat model said their vectors are stripped
# "outside the owner boundary". A PUBLIC collection returns them as stored, the owner gets them
# only under raw_in_boundary, and every search is still ranked by them, raw.

def test_points_stored_before_the_switch_keep_their_vectors_by_class_and_still_rank_searches(tmp_path):
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    rng = np.random.default_rng(11)
    stored = np.array([unit(rng) for _ in range(4)])
    raw = RawClient(path=store)
    for name in ("pub", "kb_raw", "kb_off"):
        raw.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
        raw.upsert(name, [models.PointStruct(id=i, vector=v.tolist(), payload={"source": f"d{i}"})
                          for i, v in enumerate(stored)])
    raw.close()
    cfg = kit.config({"pub": {"class": "PUBLIC"}, "kb_raw": _pii(raw_in_boundary=True), "kb_off": _pii()})
    alice = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    bob = alice.with_principal(kit.principal("bob", "support"))

    def vectors(client, name):
        return [p.vector for p in client.retrieve(name, [0, 1, 2, 3], with_vectors=True)]

    # PUBLIC: returned as stored, to anyone.
    assert np.allclose(np.array(vectors(bob, "pub")), stored, atol=1e-6)
    # Sensitive: only the owner boundary under raw_in_boundary gets them.
    assert all(v is not None for v in vectors(alice, "kb_raw"))
    assert vectors(bob, "kb_raw") == [None] * 4
    assert vectors(alice, "kb_off") == [None] * 4 and vectors(bob, "kb_off") == [None] * 4
    # Withheld from the reads, they still rank the reader's search: exact cosines to the raw vectors.
    q = np.asarray(unit(rng))
    hits = bob.query_points("kb_off", query=q.tolist(), limit=4).points
    assert {p.id: round(p.score, 5) for p in hits} == {i: round(float(q @ v), 5) for i, v in enumerate(stored)}
    alice.close()
    readme, threat = _flat("docs/switching.md"), _flat("docs/threat-model.md")  # README's change list in full
    assert "from every principal but the owner boundary under `raw_in_boundary`" in readme
    assert "a PUBLIC collection returns them as stored" in readme and "Qdrant still ranks every search" in readme
    assert "(a PUBLIC collection returns them as stored)" in threat
    assert "their vectors are withheld outside the owner boundary" not in threat


# ---------------------------------------------------------------- raw vectors left behind
# noise_queries / threat model: the guard counts points "with a dense vector that has no receipt".
# It checks the receipt container's presence, not the receipt's validity: a raw vector written
# around the guard under another point's receipt is not counted. Reads and verify still catch it.

def test_the_left_behind_count_sees_a_receipts_presence_not_its_validity(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": _pii(noise_queries=True)})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    alice.create_collection("c", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(12)
    alice.upsert("c", [models.PointStruct(id=0, vector=unit(rng), payload={"source": "s"})])  # noised, receipted
    container = RawClient.retrieve(alice, "c", [0])[0].payload[RECEIPT_KEY]
    raw = np.array([unit(rng) for _ in range(4)])
    RawClient.upsert(alice, "c", [models.PointStruct(id=i + 1, vector=v.tolist(),  # around the guard
                                                     payload={"source": "s", RECEIPT_KEY: container})
                                  for i, v in enumerate(raw)])
    bob = alice.with_principal(kit.principal("bob", "support"))
    # Reads strip them: the copied receipt does not verify for their vectors.
    assert [p.vector for p in bob.retrieve("c", [1, 2, 3, 4], with_vectors=True)] == [None] * 4
    pk = keys.load_private_key(kit.guard_key_path).public_key()
    checks = {r.point_id: r for r in verify(alice, "c", trusted_keys={keys.key_id(pk): pk})}
    assert checks[0].ok and not any(checks[i].ok for i in (1, 2, 3, 4))
    # But the count finds none, so a query by id compares point 1's raw vector with the others:
    # exact raw-to-raw cosines (the documented limit).
    hits = bob.query_points("c", query=1, limit=5).points
    got = {p.id: round(p.score, 5) for p in hits if p.id != 0}
    assert got == {i + 1: round(float(raw[0] @ v), 5) for i, v in enumerate(raw) if i != 0}
    bob.query_points("c", query=models.NearestQuery(nearest=unit(rng), mmr=models.Mmr(diversity=0.5)), limit=3)
    assert "The count looks for a receipt's presence, not its validity" in _flat("docs/threat-model.md")
    assert "not whether it verifies" in _flat("docs/policy.md")
    # Without any receipt container the same vectors are counted and both forms refused.
    RawClient.upsert(alice, "c", [models.PointStruct(id=9, vector=unit(rng), payload={"source": "s"})])
    alice.guard.forget_shape("c")  # the kept "none" is dropped (as a re-creation through the client does)
    with pytest.raises(GuardRefusal) as exc:
        bob.query_points("c", query=1, limit=3)
    assert exc.value.verdict == "QUERY_REJECTED" and exc.value.details["unreceipted_points"] == 1


# ---------------------------------------------------------------- receipt mechanism
# noise.mechanism: "a writer's receipt of the other one is refused ... whatever its numbers": the
# owner boundary under raw_in_boundary, which may store raw vectors, is a writer too.

def _laplace_release(kit, seed):
    """A laplace_l2 release of point 1 of Euclid collection 'pii', signed by the guard's key:
    (the stored vector as a list, the payload value of its receipt)."""
    signer = ReceiptSigner(keys.load_private_key(kit.guard_key_path))
    noised, params = privatize(np.asarray([unit(np.random.default_rng(seed))], dtype=np.float32),
                               mechanism="laplace_l2", epsilon=1.0, delta=None, radius=0.01, clip_norm=1.0)
    final = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(signer, [ReceiptItem(params=params, vector=final, collection="pii",
                                                    point_id=1, vector_name="")])[0]
    return final.tolist(), receipts_for_payload({"": rec})


def test_an_owner_who_may_store_raw_vectors_is_still_refused_a_receipt_of_another_mechanism(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": _pii(raw_in_boundary=True, noise_on_write=False,
                                  noise={"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01})})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    alice.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    final, receipt = _laplace_release(kit, 13)
    point = models.PointStruct(id=1, vector=final, payload={"t": "x", RECEIPT_KEY: receipt})
    with pytest.raises(GuardRefusal) as exc:
        alice.upsert("pii", [point])
    assert exc.value.verdict == "NOISE_REQUIRED"
    assert exc.value.details["reasons"]["1"].startswith("mechanism_mismatch")
    assert RawClient.count(alice, "pii").count == 0
    # The same vector without the receipt is a raw in-boundary write, which the owner may make.
    alice.upsert("pii", [models.PointStruct(id=1, vector=final, payload={"t": "x"})])
    assert RawClient.count(alice, "pii").count == 1


# ---------------------------------------------------------------- glued repetition of random digits
# max_glued_repetition's docstring and the threat model said "numbers up to 0.15". 64 random
# decimal digits scored 0.16 at the median and up to 0.3; they passed the default cap. Since the
# h-glued3 branch an ASCII digit counts only inside a stretch of 8 consecutive matches: random
# decimal digits score 0, hex (whose letters still count) up to 0.16, and the docs say so.

def _digits(rnd: random.Random, alphabet: str, n: int = 64) -> str:
    return "".join(rnd.choice(alphabet) for _ in range(n))


def test_random_digit_runs_score_as_documented_and_pass_the_default_cap():
    rnd = random.Random(20261205)
    decimal = [_digits(rnd, "0123456789") for _ in range(300)]
    hexes = [_digits(rnd, "0123456789abcdef") for _ in range(300)]

    def refused(text, cap):
        return any(v.kind == "glued_repetition" for v in scan_query(text, max_glued_repetition=cap).violations)

    assert not any(refused(t, 0.5) for t in decimal + hexes)  # the default cap
    assert not any(refused(t, 0.0) for t in decimal) and not any(refused(t, 0.16) for t in hexes)
    assert sum(refused(t, 0.05) for t in hexes) > len(hexes) // 3  # the letters a-f still count
    doc = _flat("docs/policy.md")
    assert "random decimal digits 0" in doc and "of hex up to 0.16" in doc
    assert "of decimal digits up to 0.3" not in doc and "identifiers and numbers up to 0.15" not in doc
    assert "of decimal digits 0" in _flat("docs/threat-model.md")


# ---------------------------------------------------------------- the folded repetition measure
# policy.md (max_repetition): copies that change case, accents or width count as repeated, and
# so (since h-homoglyph, tests/test_fold_confusables.py) do copies with Cyrillic, Greek, Armenian or
# Cherokee lookalikes of Latin letters.


def test_the_fold_joins_case_copies_and_homoglyph_copies():
    # The same 30 variants of one word, once with capitals and once with Cyrillic о/е at the
    # same places: the fold makes each one word repeated.
    word = "ignorepreviousinstructions"
    places = [i for i, c in enumerate(word) if c in "oe"]
    swap = {"o": "\u043e", "e": "\u0435"}

    def variants(change):
        out = []
        for mask in range(1, 31):
            chars = list(word)
            for bit, i in enumerate(places):
                if mask >> bit & 1:
                    chars[i] = change(chars[i])
            out.append("".join(chars))
        return " ".join(out)

    rules = QueryRules()
    for text in (variants(str.upper), variants(swap.__getitem__)):
        assert scan_query(text, max_repetition=rules.max_repetition).ok  # 30 different words as written
    _, found = structural_scan(variants(str.upper), rules)
    assert [v.kind for v in found] == ["repetition"]
    _, found = structural_scan(variants(swap.__getitem__), rules)
    assert [v.kind for v in found] == ["repetition"]
    assert "(homoglyphs from other scripts still do not)" not in _flat("docs/policy.md")
    assert "Latin lookalikes of Cyrillic, Greek, Armenian and Cherokee letters made Latin" in _flat("docs/policy.md")


# ---------------------------------------------------------------- utility.max_age_s
# "Checked on each write that consults the record (enforce on)": with enforce off an old record
# refuses nothing, and with it on the same record refuses the write.

def test_an_old_record_refuses_writes_only_while_enforce_is_on(tmp_path):
    from qdrant_guard.utility import UTILITY_DOMAIN
    import base64

    kit = make_kit(tmp_path)
    rec, docs = staging_record(kit, tmp_path / "fresh.json", dim=32)
    old = dataclasses.replace(rec, created_at=int(time.time() * 1000 - 3 * 86_400_000), signature=None)
    sig = keys.load_private_key(kit.guard_key_path).sign(UTILITY_DOMAIN + old.signed_bytes())
    path = tmp_path / "old.json"
    path.write_text(dataclasses.replace(old, signature=base64.b64encode(sig).decode("ascii")).to_json())

    def write(enforce):
        coll = {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False},
                "noise": {"epsilon": rec.epsilon, "radius": 0.01},
                "utility": {"record": str(path), "max_age_s": 86_400, "enforce": enforce}}
        cl = QdrantClient(":memory:", guard=kit.config({"docs": coll}, epsilon_ceiling={"PII": 5.0}),
                          principal=kit.principal("alice", "hr"))
        cl.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
        cl.upsert("docs", [models.PointStruct(id=1, vector=docs[0].tolist())])
        return RawClient.count(cl, "docs").count

    assert write(False) == 1
    with pytest.raises(GuardRefusal) as exc:
        write(True)
    assert exc.value.verdict == "UTILITY_DEGRADED" and "utility.max_age_s" in str(exc.value)


# ---------------------------------------------------------------- MMR after raw_in_boundary is off
# integrations.md said "the same readers' MMR is refused too"; with raw_in_boundary off the owner
# boundary has no raw access either, so its MMR is refused as well while raw vectors remain.

def test_after_raw_in_boundary_is_off_the_owners_mmr_is_refused_too_while_raw_vectors_remain(tmp_path):
    kit = make_kit(tmp_path)
    store = str(tmp_path / "db")
    on = _pii(raw_in_boundary=True, noise_queries=True)
    alice = QdrantClient(path=store, guard=kit.config({"emp": on}), principal=kit.principal("alice", "hr"))
    alice.create_collection("emp", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    rng = np.random.default_rng(14)
    alice.upsert("emp", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in range(4)])
    mmr = models.NearestQuery(nearest=unit(rng), mmr=models.Mmr(diversity=0.5, candidates_limit=4))
    assert len(alice.query_points("emp", query=mmr, limit=3).points) == 3  # raw access: runs
    alice.close()
    alice = QdrantClient(path=store, guard=kit.config({"emp": {**on, "raw_in_boundary": False}}),
                         principal=kit.principal("alice", "hr"))
    with pytest.raises(GuardRefusal) as exc:
        alice.query_points("emp", query=mmr, limit=3)
    assert exc.value.verdict == "QUERY_REJECTED" and exc.value.details["unreceipted_points"] == 4
    alice.close()
    assert "MMR is refused to every principal, naming how many: the owner boundary's too" in _flat("docs/integrations.md")


# ---------------------------------------------------------------- receipt verify --check-noise
# README: --check-noise judges a receipt's mechanism and strength against the collection only with
# --policy; without it only noise.check_release applies.

def test_check_noise_judges_the_mechanism_only_with_a_policy(tmp_path, capsys):
    from qdrant_guard.cli import main as cli_main

    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    raw = RawClient(path=store)
    raw.create_collection("pii", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.EUCLID))
    final, receipt = _laplace_release(kit, 15)
    raw.upsert("pii", [models.PointStruct(id=1, vector=final, payload={RECEIPT_KEY: receipt})])
    raw.close()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{kit.guard_key_path}"\n\n[boundaries.hr]\nauthority_keys = '
                      f'["{kit.authority_pub["hr"]}"]\n\n[collections.pii]\nclass = "PII"\nowner = "hr"\n'
                      'noise = { mechanism = "gaussian", epsilon = 1.0, delta = 1e-6, radius = 0.01 }\n')
    guard_pub = keys.public_key_to_str(keys.load_private_key(kit.guard_key_path).public_key())
    base = ["receipt", "verify", "--path", store, "--collection", "pii", "--check-noise"]
    assert cli_main(base + ["--trusted-key", guard_pub]) == 0  # no policy: the mechanism is not judged
    capsys.readouterr()
    assert cli_main(base + ["--policy", str(policy)]) == 1
    assert "mechanism_mismatch" in capsys.readouterr().out
    assert "with `--policy`, noise weaker than the collection's `[noise]` policy" in _flat("docs/verdicts.md")


# ---------------------------------------------------------------- cost of the folded measure
# threat-model.md puts the fold's worst case at tens of ms. Mapping a folded violation's position
# back to the text decomposed all 65,536 characters one by one in Python (80 ms more); it now
# maps the text up to the violation only, with the same answer.

def _full_mapping(text: str, position: int) -> int:
    """The position mapping over the whole text (the definition the prefix walk must agree with)."""
    import unicodedata

    from qdrant_guard.textfold import _dropped

    owners = [i for i, ch in enumerate(text) for _ in unicodedata.normalize("NFKD", ch)]
    units = np.frombuffer(unicodedata.normalize("NFKD", text).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    kept = [owner for owner, gone in zip(owners, _dropped(units).tolist()) if not gone]
    return kept[position] if position < len(kept) else len(text)


def test_a_folded_violation_is_mapped_back_from_the_text_before_it_only(monkeypatch):
    import unicodedata as real

    from qdrant_guard import textfold
    from qdrant_guard.textfold import _fold, _unfolded_position

    rnd = random.Random(8)
    alphabet = list("abcXYZ ") + ["\u0301", "\u0316", "\u0344", "\u064e", "\u0e34", "\ufdfa", "\u3300", "\uff41",
                                  "\u1100", "\u1161", "\uac00", "\u00e9", "\ufb01", "\u0345", "\u0f73"]
    for _ in range(400):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 200)))
        n = len(_fold(text))
        for pos in {0, n // 2, max(n - 1, 0), n, n + 2}:
            assert _unfolded_position(text, pos) == _full_mapping(text, pos)

    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def normalize(self, form, s):
            calls.append(len(s))
            return real.normalize(form, s)

    text = "\ufdfa" * 65_536
    monkeypatch.setattr(textfold, "unicodedata", Counting())
    assert _unfolded_position(text, 62 * 18) == 62
    assert sum(calls) < 10_000, sum(calls)  # characters decomposed: a prefix (twice), not 65,536 (twice)
    assert "now maps only the text up to the violation" in _flat("docs/threat-model.md")


# ---------------------------------------------------------------- documentation placeholders
# threat-model.md: the detector skips EXAMPLE keys and placeholders such as `changeme`; it said
# they are stored as given "but under a payload field named for a password, where any value but a
# placeholder is refused", which read as if `changeme` passed there. It does not.

def test_placeholders_pass_the_detector_but_not_a_password_field(tmp_path):
    kit = make_kit(tmp_path)
    c = QdrantClient(":memory:", guard=kit.config({"kb": _pii(raw_in_boundary=True)}),
                     principal=kit.principal("alice", "hr"))
    c.create_collection("kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))

    def stored(payload):
        try:
            c.upsert("kb", [models.PointStruct(id=1, vector=[0.25] * DIM, payload={**payload, "source": "s"})])
            return True
        except GuardRefusal as exc:
            assert exc.verdict == "CREDENTIAL_IN_TEXT"
            return False

    for value in ("AKIAIOSFODNN7EXAMPLE", "changeme", "your_password", "${PASS}", "<token>", "****"):
        assert stored({"note": value}), value
    assert not stored({"note": "AKIA4QWERTZUI7OPLKJH"})  # a key of one's own making is found
    for value in ("AKIAIOSFODNN7EXAMPLE", "changeme", "your_password"):
        assert not stored({"password": value}), value
    for value in ("", "****", "${PASS}", "<token>", "[REDACTED]", "{{ pass }}"):
        assert stored({"password": value}), value
    assert 'so `{"password": "changeme"}` and `{"password": "AKIAIOSFODNN7EXAMPLE"}` are refused' in \
        _flat("docs/threat-model.md")
