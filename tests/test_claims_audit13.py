"""Claims audit 13: the statements added or changed since b4abbef, run against the code.

Each test runs what a README, docs/*.md or docstring sentence states, in real qdrant-client local
mode or against the detector and receipt code it names, and fails when the sentence stops being
true. Claims already pinned elsewhere are named in docs/security-testing.md's "Claims audit 13".
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from guardkit import DIM, RawClient, create, make_kit, models, record_sent, unit

from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError, detect, keys
from qdrant_guard.diversity import enforce_group_caps, source_cap
from qdrant_guard.errors import InvalidVectorError
from qdrant_guard.noise import privatize
from qdrant_guard.receipts import (COMMIT_GRID, ReceiptItem, ReceiptSigner, issue_receipts_batch, stored_form,
                                   verify_receipt)

ROOT = Path(__file__).resolve().parent.parent
OWNED = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
         "text_field": "text", "intent": {"enabled": False}}


def _doc(text):
    return models.Document(text=text, model="sentence-transformers/all-MiniLM-L6-v2")


def _through(call):
    try:
        return call()
    except QdrantGuardError:
        raise
    except Exception as exc:  # noqa: BLE001 - qdrant-client's own (no fastembed here)
        return exc


# collection_policy.py's allow_redaction_on_public docstring: "the PII (SSN, e-mail, phone, card
# number, IBAN) in what a query on a PUBLIC collection the policy lists would send to inference
# ... false refuses it (SENSITIVITY_MISMATCH) ... true sends it redacted"; quick-start.md: "PII as
# SENSITIVITY_MISMATCH unless the policy allows redaction there"; threat model: "a question naming
# a person passes".
PII_QUERIES = {"SSN": "why was 123-45-6789 rejected", "EMAIL": "mail alice@corp.io",
               "PHONE": "call +1 415 555 0132 today", "CREDIT_CARD": "card 4111 1111 1111 1111 declined",
               "IBAN": "pay to DE89 3704 0044 0532 0130 00"}


def test_each_pii_type_the_docstring_lists_is_refused_in_a_public_query_then_redacted(tmp_path, monkeypatch):
    assert set(PII_QUERIES) == set(detect._PII_TYPES)  # the docstring's list is the detector's PII
    base = make_kit(tmp_path)
    refuse = QdrantClient(":memory:", guard=base.config({"pub": {"class": "PUBLIC"}}),
                          principal=base.principal("a", "hr"))
    create(refuse, "pub")
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    for kind, text in PII_QUERIES.items():
        assert [f.type for f in detect.find_sensitive(text)] == [kind]
        with pytest.raises(GuardRefusal) as ei:
            refuse.query_points("pub", query=_doc(text), limit=3)
        assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert sent == []
    _through(lambda: refuse.query_points("pub", query=_doc("what did Alice Smith write about tides"), limit=3))
    assert sent[-1][1]["query"].text == "what did Alice Smith write about tides"
    (tmp_path / "r").mkdir()
    kit = make_kit(tmp_path / "r")
    redact = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", "allow_redaction_on_public": True}}),
                          principal=kit.principal("a", "hr"))
    create(redact, "pub")
    for kind, text in PII_QUERIES.items():
        _through(lambda: redact.query_points("pub", query=_doc(text), limit=3))
        assert f"[{kind}]" in sent[-1][1]["query"].text


# threat-model.md: "an Image's path or URL, a pathlib.Path or bytes as the string qdrant-client
# sends"; "a path or URL ... holding either is refused whatever the knob says".
@pytest.mark.parametrize("image", [Path("/img/123-45-6789.png"), b"/img/alice@corp.io.png"])
def test_an_image_given_as_a_path_or_bytes_is_screened_as_the_string_sent(tmp_path, image):
    kit = make_kit(tmp_path)
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", "allow_redaction_on_public": True}}),
                      principal=kit.principal("a", "hr"))
    create(cl, "pub")
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pub", query=models.Image(image=image, model="m"), limit=3)
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"


# detect.py's docstring and threat-model.md's list of what is not found, each example as written.
@pytest.mark.parametrize("text,redacted", [
    ("https://x.example?who=a@corp.io", "https://x.example?who=[EMAIL]"),
    ("https://x.example#to=a@corp.io", "https://x.example#to=[EMAIL]"),
    ("mongodb://u:p?w#d@corp.io", "mongodb://u:[DATABASE_URL_PASSWORD]@corp.io"),
    ("https://x.example/p?who=a@corp.io", "https://x.example/p?who=[EMAIL]"),
    ("logo@2x.png", "logo@2x.png"),
    ("hero@3x.webp", "hero@3x.webp"),
    ("a@1.5x.png", "a@1.5x.png"),
    ("alice@example.com.png", "[EMAIL]"),
    ("josé.garcía@corp.io", "josé.garcí[EMAIL]"),
    ("john@münchen.de", "john@münchen.de"),
])
def test_the_email_rule_examples_as_written(text, redacted):
    assert detect.redact(text) == redacted


# README "Unchanged": a warning qdrant-client raises (local mode's "Payload indexes have no
# effect") names your call, with or without guard=, as without the guard; a filter by module sees
# the caller's module (qdrant_guard.warnsite).
@pytest.mark.parametrize("guarded", [False, True])
def test_a_qdrant_client_warning_names_the_caller(tmp_path, monkeypatch, guarded):
    # qdrant-client shows this warning once per process (client_warnings.SEEN_MESSAGES): emptied
    # before each check.
    from qdrant_client.common import client_warnings

    kit = make_kit(tmp_path)

    def client():
        kw = {"guard": kit.config({"pub": {"class": "PUBLIC"}}), "principal": kit.principal("a", "hr")} if guarded else {}
        cl = QdrantClient(":memory:", **kw)
        create(cl, "pub")
        return cl

    monkeypatch.setattr(client_warnings, "SEEN_MESSAGES", set())
    cl = client()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cl.create_payload_index("pub", "g", field_schema=models.PayloadSchemaType.KEYWORD)
    hit = [w for w in got if "Payload indexes have no effect" in str(w.message)]
    assert hit and all(w.filename == __file__ for w in hit)
    monkeypatch.setattr(client_warnings, "SEEN_MESSAGES", set())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Payload indexes", module=__name__)
        with pytest.raises(UserWarning):
            cl.create_payload_index("pub", "h", field_schema=models.PayloadSchemaType.KEYWORD)


def _owned_store(kit, n_by_source):
    owner = QdrantClient(":memory:", guard=kit.config({"t": OWNED}), principal=kit.principal("alice", "hr"))
    create(owner, "t")
    rng = np.random.default_rng(3)
    pts, pid = [], 0
    for source, n in n_by_source.items():
        for _ in range(n):
            pts.append(models.PointStruct(id=pid, vector=unit(rng), payload={"text": f"t{pid}", "source": source}))
            pid += 1
    owner.upsert("t", pts)
    # README: "(but the owner boundary's under raw_in_boundary, stored raw)": no noise, no receipt.
    stored = RawClient.retrieve(owner, "t", [0], with_vectors=True, with_payload=True)[0]
    assert np.allclose(stored.vector, pts[0].vector, atol=1e-6) and "_qdrant_guard_receipt" not in stored.payload
    return owner, unit(rng)


# README: "the owner boundary's queries are capped too, so a query filtered to one source returns at
# most max(1, floor(limit × max_source_fraction)) points ...; to list one source's points, scroll
# with a filter on the source field, which is not capped".
def test_the_owner_filtered_to_one_source_gets_its_cap_and_scroll_gets_all(tmp_path):
    owner, q = _owned_store(make_kit(tmp_path), {"s1": 12, "s2": 3})
    one = models.Filter(must=[models.FieldCondition(key="source", match=models.MatchValue(value="s1"))])
    for limit in (10, 2, 1):
        got = owner.query_points("t", query=q, query_filter=one, limit=limit).points
        assert len(got) == max(1, int(limit * 0.4))
    pts, _ = owner.scroll("t", scroll_filter=one, limit=100)
    assert len(pts) == 12


# docs/diversity-budget.md's worked example, as the library call and as a guarded owner's read.
def test_the_grouped_by_source_worked_example(tmp_path):
    assert (source_cap(6, 0.4), source_cap(4, 0.4)) == (2, 1)
    groups = [[("s1", i) for i in range(4)], [("s2", 0)], [("s3", 0)]]
    out = enforce_group_caps(groups, group_size=4, source_of=lambda h: h[0], max_source_fraction=0.4)
    assert [len(g.kept) for g in out.groups] == [1, 1, 1]
    # diversity.py: "Grouped by the source field, each group is one source, so the caps leave each at
    # most source_cap(group_size, fraction)", whatever the groups hold.
    rng = np.random.default_rng(4)
    for _ in range(30):
        size, frac = int(rng.integers(1, 12)), float(rng.choice([0.1, 0.25, 0.4, 0.5, 0.9]))
        groups = [[(f"s{g}", i) for i in range(int(rng.integers(1, size + 1)))] for g in range(int(rng.integers(1, 6)))]
        out = enforce_group_caps(groups, group_size=size, source_of=lambda h: h[0], max_source_fraction=frac)
        assert all(1 <= len(o.kept) <= source_cap(size, frac) for o in out.groups)
    owner, q = _owned_store(make_kit(tmp_path), {"s1": 4, "s2": 1, "s3": 1})
    raw = RawClient(":memory:")
    create(raw, "t")
    raw.upsert("t", [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                     for p in owner.scroll("t", limit=10, with_vectors=True)[0]])
    ask = {"query": q, "group_by": "source", "limit": 3, "group_size": 4}
    assert sorted(len(g.hits) for g in raw.query_points_groups("t", **ask).groups) == [1, 1, 4]
    assert [len(g.hits) for g in owner.query_points_groups("t", **ask).groups] == [1, 1, 1]


# README: "sparse vectors (and multivectors) are refused in every write (InvalidVectorError)".
def test_sparse_and_multivectors_are_refused_in_every_write_on_a_sensitive_collection(tmp_path):
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"t": OWNED}), principal=kit.principal("alice", "hr"))
    # Made before the guard: the guard refuses sparse slots on sensitive collections.
    RawClient.create_collection(owner, "t", vectors_config={
        "d": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
        "m": models.VectorParams(size=DIM, distance=models.Distance.COSINE,
                                 multivector_config=models.MultiVectorConfig(
                                     comparator=models.MultiVectorComparator.MAX_SIM))},
        sparse_vectors_config={"kw": models.SparseVectorParams()})
    rng = np.random.default_rng(5)
    owner.upsert("t", [models.PointStruct(id=1, vector={"d": unit(rng)}, payload={"text": "x", "source": "s"})])
    sparse = {"kw": models.SparseVector(indices=[1, 7], values=[1.0, 0.5])}
    multi = {"m": [unit(rng), unit(rng)]}
    for extra in (sparse, multi):
        writes = (
            lambda: owner.upsert("t", [models.PointStruct(id=2, vector={"d": unit(rng), **extra}, payload={"source": "s"})]),
            lambda: owner.upload_points("t", [models.PointStruct(id=3, vector={"d": unit(rng), **extra}, payload={"source": "s"})]),
            lambda: owner.update_vectors("t", [models.PointVectors(id=1, vector=extra)]),
            lambda: owner.batch_update_points("t", [models.UpsertOperation(upsert=models.PointsList(points=[
                models.PointStruct(id=4, vector={"d": unit(rng), **extra}, payload={"source": "s"})]))]),
        )
        for write in writes:
            with pytest.raises(InvalidVectorError):
                write()
    assert owner.count("t").count == 1


# docs/receipt-format.md: "a value less than half a grid step (2^-21) from the stored one rounds to
# the same integer (one exactly half a step away does when that integer is even: the rounding is
# half to even)".
def test_half_a_grid_step_rounds_half_to_even():
    sk, pk = keys.generate_keypair()
    noised, params = privatize(np.asarray([unit(np.random.default_rng(2))]), mechanism="gaussian", epsilon=1.0,
                               delta=1e-6, radius=0.01, clip_norm=1.0)
    v = stored_form(noised[0], distance="Euclid").astype(np.float64)
    v[1] += COMMIT_GRID  # the noise lattice may be coarser than the grid: one coordinate of each parity
    ints = np.rint(v / COMMIT_GRID).astype(np.int64)
    assert ints[0] % 2 != ints[1] % 2
    even, odd = (0, 1) if ints[0] % 2 == 0 else (1, 0)
    rec = issue_receipts_batch(ReceiptSigner(sk), [ReceiptItem(params=params, vector=v, collection="c", point_id=9)])[0]

    def check(i, delta):
        moved = v.copy()
        moved[i] += delta
        return verify_receipt(rec, vector=moved, collection="c", point_id=9, trusted_keys={keys.key_id(pk): pk})

    assert check(odd, 0.999 * COMMIT_GRID / 2).ok and check(odd, -0.999 * COMMIT_GRID / 2).ok
    assert check(even, COMMIT_GRID / 2).ok and check(even, -COMMIT_GRID / 2).ok
    assert check(odd, COMMIT_GRID / 2).reason == "vector_mismatch"
    assert check(odd, -COMMIT_GRID / 2).reason == "vector_mismatch"


# README's error table: one row per code (two rows for CREDENTIAL_IN_TEXT / SENSITIVITY_MISMATCH and
# BUDGET_EXCEEDED, one of each stale, came out of a merge).
def test_the_readme_error_table_has_one_row_per_code():
    rows = re.findall(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \|", (ROOT / "README.md").read_text(), re.M)
    assert rows and len(rows) == len(set(rows)), [r for r in rows if rows.count(r) > 1]


# README's migration: "Leave their sparse vectors out of that upsert (... the upsert replaces the
# point, sparse vector included)"; "matches words with a models.MatchText filter on the payload text
# (the text_field is stored redacted, but under keep_payload_text_in_boundary, where only the owner
# boundary may match on it)".
@pytest.mark.parametrize("keep", [False, True])
def test_a_legacy_point_upserted_again_loses_its_sparse_vector_and_match_text_follows_the_text_rule(tmp_path, keep):
    kit = make_kit(tmp_path)
    dense = {"d": models.VectorParams(size=DIM, distance=models.Distance.COSINE)}
    legacy = RawClient(path=str(tmp_path / "store"))
    legacy.create_collection("t", vectors_config=dense, sparse_vectors_config={"kw": models.SparseVectorParams()})
    rng = np.random.default_rng(8)
    legacy.upsert("t", [models.PointStruct(id=1, vector={"d": unit(rng), "kw": models.SparseVector(indices=[3], values=[1.0])},
                                           payload={"text": "refund to alice@corp.io not received", "source": "c1"})])
    legacy.close()
    owner = QdrantClient(path=str(tmp_path / "store"), guard=kit.config({"t": {**OWNED, "keep_payload_text_in_boundary": keep}}),
                         principal=kit.principal("alice", "hr"))
    support = owner.with_principal(kit.principal("bob", "support"))
    probe = models.SparseVector(indices=[3], values=[1.0])
    assert [p.id for p in support.query_points("t", query=probe, using="kw", limit=3).points] == [1]
    owner.upsert("t", [models.PointStruct(id=1, vector={"d": unit(rng)},
                                          payload={"text": "refund to alice@corp.io not received", "source": "c1"})])
    assert support.query_points("t", query=probe, using="kw", limit=3).points == []
    words = models.Filter(must=[models.FieldCondition(key="text", match=models.MatchText(text="refund"))])
    assert [r.id for r in owner.scroll("t", scroll_filter=words, limit=5)[0]] == [1]
    if keep:
        with pytest.raises(GuardRefusal):
            support.scroll("t", scroll_filter=words, limit=5)
    else:
        assert [r.id for r in support.scroll("t", scroll_filter=words, limit=5)[0]] == [1]
        stored = RawClient.retrieve(owner, "t", [1], with_payload=True)[0].payload["text"]
        assert stored == "refund to [EMAIL] not received"
    owner.close()


# docs/audit-log.md "Not checked on open": "a log of fewer entries rewritten whole in format v1 is
# UNSIGNED under audit verify with any key (exit 1 ...), but once the guard has appended to it (its
# first entry there is a checkpoint over the rewritten lines) it verifies with --key, and --writer-key
# notes those entries as unauthenticated pre-v2 ones (exit 0). Only --signed-from SEQ ... and
# --every-entry-signed ... then fail on them".
def test_a_short_log_rewritten_in_v1_verifies_with_key_then_is_signed_over(tmp_path, capsys):
    from test_review55 import _as_v1, _key, _signed_log

    from qdrant_guard.audit import AuditLog
    from qdrant_guard.cli import main

    _, signer = _key(tmp_path, "a.key")
    p = _signed_log(tmp_path, signer)
    _as_v1(p)
    pub = ["audit", "verify", str(p), "--key", str(tmp_path / "a.key.pub"), "--checkpoint-every", "5"]
    assert main(pub) == 1
    assert "UNSIGNED" in capsys.readouterr().out
    log = AuditLog(p, signer=signer, checkpoint_every=5)
    assert "ckpt" in log.append({"event": "after"})
    log.close()
    assert main(pub) == 0
    assert "--key checked no signature" not in capsys.readouterr().out
    assert main([*pub, "--writer-key", str(tmp_path / "a.key")]) == 0
    assert "the first 4 entries (before the first with a writer MAC) are unauthenticated" in capsys.readouterr().out
    assert main([*pub, "--every-entry-signed"]) == 1
    assert main([*pub, "--signed-from", "1"]) == 1


# docs/receipt-format.md: "receipts.max_age_s bounds how old such a pair can be on guarded writes
# (and verify(..., max_age_s=...) for a verifier); a guarded read releases a stored vector whatever
# its receipt's age" (the write half: tests/test_review55.py).
def test_an_old_receipt_still_releases_its_vector_on_a_guarded_read_and_verify_bounds_it(tmp_path):
    import time

    from test_review55 import _replay_clients, _stored

    from qdrant_guard.collection_verify import verify

    owner, bob, _ = _replay_clients(tmp_path, max_age_s=60)
    stored = _stored(owner)
    later = time.time() + 300  # within the credential's 600 s, past max_age_s
    bob.guard.clock = lambda: later
    got = bob.retrieve("pii", [1], with_vectors=True)[0]
    assert got.vector == stored.vector  # released, five minutes past max_age_s
    pk = keys.load_private_key(tmp_path / "guard.key").public_key()
    trusted = {keys.key_id(pk): pk}
    assert verify(owner, "pii", [1], trusted_keys=trusted, now=later)[0].ok
    old = verify(owner, "pii", [1], trusted_keys=trusted, now=later, max_age_s=60)[0]
    assert not old.ok and "expired" in str(old.reason)


# detect.one_value_reader's docstring: "The kernel's spans depend on the text alone, so every
# reading's findings are find_sensitive's"; docs/performance-notes.md: the shared reader is a
# speed-up with the same findings. Each value read by the payload screen with and without it.
LINES = ["contact alice@corp.io about the refund", "db_password: hunter2hunter2hunter2",
         "aws AKIAJ2QW7XRT5LNPV3YB rotated", "C:\\Users\\bob\\notes.txt", 'he said "call 415-555-0132"',
         "SSN 123-45-6789 on file", "plain line with nothing in it at all", "token: ghp_" + "a1B2c3D4" * 4 + "zz99",
         "card 4111 1111 1111 1111", "\tindented\x01control"]


@pytest.mark.parametrize("seed", range(6))
def test_the_shared_reader_finds_what_the_detector_finds(seed, monkeypatch):
    from qdrant_guard import field_screen

    rng = np.random.default_rng(seed)
    for _ in range(8):
        value = "\n".join(rng.choice(LINES, size=int(rng.integers(2, 12))).tolist())
        reader = detect.one_value_reader()
        for text in (value, value, f'summary: "{value}"', value.replace("\n", "\\n")):
            assert reader(text) == detect.find_sensitive(text)
        for name in ("summary", "password", "notes"):
            shared = field_screen.value_findings(name, value)
            monkeypatch.setattr(field_screen, "_SHARED_READ_MIN", 10 ** 9)
            assert field_screen.value_findings(name, value) == shared
            monkeypatch.undo()


# callchecks.py (review of today): a PII-filter refusal on a collection the [default] section
# governs names `filter_pii = "owner" in [default.query]`, and that setting is the fix.
def test_the_pii_filter_refusal_names_the_default_section_and_its_fix_works(tmp_path):
    kit = make_kit(tmp_path)
    probe = models.Filter(must=[models.FieldCondition(key="email", match=models.MatchValue(value="alice@corp.io"))])
    base = {"owner": "hr", "intent": {"enabled": False}}
    for fix in (False, True):
        cfg = kit.config({}, unlisted="strict", default={**base, **({"query": {"filter_pii": "owner"}} if fix else {})})
        cl = QdrantClient(":memory:", guard=cfg, principal=kit.principal("a", "hr"))
        create(cl, "x")
        if fix:
            assert cl.scroll("x", scroll_filter=probe, limit=3) == ([], None)
        else:
            with pytest.raises(GuardRefusal) as ei:
                cl.scroll("x", scroll_filter=probe, limit=3)
            assert ei.value.verdict == "QUERY_REJECTED" and 'filter_pii = "owner" in [default.query]' in str(ei.value)
