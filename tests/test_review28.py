"""Twenty-sixth adversarial review (2026-12-05, branch h-rev28): findings on cc33247..3015cc5
(collection metadata visibility, utility record scope, glued_repetition and its prefilter, the
detector's new forms and the '+' fall-through, the argument-type errors), each with the test that
failed on the code before its fix, or that pins what is left open as docs/security-testing.md
and the policy docstring describe it.

Real qdrant-client local mode, real keys; no mocks. Local mode has no cluster information and no
snapshots: those guard operations are driven with a server's answer built of qdrant-client
models (as tests/test_collection_metadata_visibility.py drives cluster_telemetry), and the real
local call is shown going through the guard.
"""
from __future__ import annotations

import asyncio
import random

import pytest

from qdrant_guard import AsyncQdrantClient
from qdrant_guard.pipeline import drive_sync
from qdrant_guard.scan import scan_query
from tests.guardkit import QdrantClient, audit_records, make_kit, models
from tests.oracle import both

NATIVE, PYTHON = both("scan")

_VP = models.VectorParams(size=4, distance=models.Distance.COSINE)
# No owner: the writers administer the collection (callchecks._admin_boundaries), and support is a
# writer that may not read it.
_OWNERLESS = {"class": "PII", "readers": ["hr"], "writers": ["support"], "intent": {"enabled": False}}


# --- 1. Counts and sizes in administration answers --------------------------------------------
# f62ea90 withholds get_collection's point counts from a principal who may not read the
# collection. An administrator need not read it: without an owner, the writers administer
# (create, index, snapshot it). Such a writer got the point count of every local shard from
# collection_cluster_info and the collection's storage from each snapshot's size (list_snapshots,
# create_snapshot, their shard forms), and all collections' storage from create_full_snapshot's
# answer (whose list_full_snapshots form aa55e11 had already hidden).
def _cluster_info() -> models.CollectionClusterInfo:
    # A server's transfer comment carries the shard's point count (qdrant's TransferTaskStatus).
    transfer = models.ShardTransferInfo(shard_id=1, **{"from": 1}, to=2, sync=False,
                                        comment="Transferring records (300/700), started 3s ago, ETA: 4.00s")
    return models.CollectionClusterInfo(
        peer_id=1, shard_count=2, remote_shards=[], shard_transfers=[transfer],
        local_shards=[models.LocalShardInfo(shard_id=0, points_count=5, state=models.ReplicaState.ACTIVE),
                      models.LocalShardInfo(shard_id=1, points_count=7, state=models.ReplicaState.ACTIVE)])


def _snapshot() -> models.SnapshotDescription:
    return models.SnapshotDescription(name="c-1.snapshot", creation_time="2026-12-05T20:00:00",
                                      size=987_654, checksum="cd" * 32)


_ADMIN_CALLS = {
    "collection_cluster_info": ({"collection_name": "c"}, _cluster_info),
    "list_snapshots": ({"collection_name": "c"}, lambda: [_snapshot()]),
    "create_snapshot": ({"collection_name": "c"}, _snapshot),
    "list_shard_snapshots": ({"collection_name": "c", "shard_id": 0}, lambda: [_snapshot()]),
    "create_shard_snapshot": ({"collection_name": "c", "shard_id": 0}, _snapshot),
}


def _sizes(answer) -> list[int]:
    if isinstance(answer, models.CollectionClusterInfo):
        return [s.points_count for s in answer.local_shards]
    return [s.size for s in (answer if isinstance(answer, list) else [answer])]


def _ownerless(tmp_path):
    kit = make_kit(tmp_path)
    hr_only = {**_OWNERLESS, "writers": ["support", "hr"]}
    writer = QdrantClient(":memory:", guard=kit.config({"c": _OWNERLESS, "d": hr_only}),
                          principal=kit.principal("ivan", "support"))
    writer.create_collection("c", vectors_config=_VP)
    writer.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.0, 0.0, i + 1.0]) for i in range(5)])
    return kit, writer


@pytest.mark.parametrize("method", sorted(_ADMIN_CALLS))
def test_an_administrator_who_may_not_read_gets_no_counts_or_sizes(tmp_path, method):
    kit, writer = _ownerless(tmp_path)
    assert writer.get_collection("c").points_count is None  # f62ea90: withheld here
    args, answer = _ADMIN_CALLS[method]
    sent = []

    def invoke(call):
        sent.append(call.method)
        return answer()

    theirs = drive_sync(writer._guard.run(method, dict(args)), invoke)
    assert sent == [method]
    assert set(_sizes(theirs)) == {0}
    if isinstance(theirs, models.CollectionClusterInfo):  # the topology stays, the progress goes
        assert [s.shard_id for s in theirs.local_shards] == [0, 1] and theirs.shard_count == 2
        (transfer,) = theirs.shard_transfers
        assert (transfer.shard_id, transfer.to, transfer.comment) == (1, 2, None)
    else:
        assert all(s.name == "c-1.snapshot" and s.checksum == "cd" * 32 for s in _sizes_of(theirs))
    entry = audit_records(kit)[-1]
    assert (entry["op"], entry["verdict"]) == (method, "ALLOW")
    assert entry["details"]["hidden"] == (["local_shards.points_count", "shard_transfers.comment"]
                                          if method == "collection_cluster_info" else ["size"])
    # A reader who administers (hr, writer of d) gets the answer as the server gave it.
    hr = writer.with_principal(kit.principal("alice", "hr"))
    mine = drive_sync(hr._guard.run(method, {**args, "collection_name": "d"}), lambda call: answer())
    assert set(_sizes(mine)) - {0}
    if isinstance(mine, models.CollectionClusterInfo):
        assert mine.shard_transfers[0].comment.startswith("Transferring records (300/700)")
    assert "hidden" not in audit_records(kit)[-1]["details"]


def _sizes_of(answer):
    return answer if isinstance(answer, list) else [answer]


def test_an_administrator_who_may_not_read_lists_snapshots_through_the_guard(tmp_path):
    # The real local calls (local mode lists no snapshots), sync and async, audited with what went.
    kit, writer = _ownerless(tmp_path)
    assert writer.list_snapshots("c") == []
    assert audit_records(kit)[-1]["details"] == {"hidden": ["size"]}

    async def run():
        client = AsyncQdrantClient(":memory:", guard=writer._guard.config, principal=kit.principal("ivan", "support"))
        await client.create_collection("c", vectors_config=_VP)
        return await client.list_snapshots("c")

    assert asyncio.run(run()) == []
    assert audit_records(kit)[-1]["details"] == {"hidden": ["size"]}


def test_a_full_snapshot_made_by_an_administrator_who_may_not_read_has_no_size(tmp_path):
    kit = make_kit(tmp_path)
    writer = QdrantClient(":memory:", guard=kit.config({"c": _OWNERLESS}), principal=kit.principal("ivan", "support"))
    writer.create_collection("c", vectors_config=_VP)
    sent = []

    def invoke(call):
        sent.append(call.method)
        if call.method == "get_collections":
            return models.CollectionsResponse(collections=[models.CollectionDescription(name="c")])
        return _snapshot()

    snap = drive_sync(writer._guard.run("create_full_snapshot", {}), invoke)
    assert sent == ["get_collections", "create_full_snapshot"]
    assert snap.size == 0 and snap.name == "c-1.snapshot"
    assert audit_records(kit)[-1]["details"] == {"collections": ["c"], "hidden": ["size"]}
    # An administrator who reads every collection gets the size.
    both_read = {**_OWNERLESS, "readers": ["hr", "support"]}
    reader = QdrantClient(":memory:", guard=kit.config({"c": both_read}), principal=kit.principal("ivan", "support"))
    assert drive_sync(reader._guard.run("create_full_snapshot", {}), invoke).size == 987_654
    assert "hidden" not in audit_records(kit)[-1]["details"]
    # hr reads c but does not administer it (support does): refused before anything is sent.
    hr = writer.with_principal(kit.principal("alice", "hr"))
    with pytest.raises(Exception, match="may not administer"):
        drive_sync(hr._guard.run("create_full_snapshot", {}), invoke)


# --- 2. Stuffing whose letters change case at random ------------------------------------------
# The scanner compares code points exactly: copies of a phrase whose letters are upper or lower
# case at random all differ for max_repetition (spaced), max_ngram_run and max_glued_repetition
# (glued), while an uncased embedding model (the eval's all-MiniLM-L6-v2 lowers its input) gets
# the same copy a hundred times; so does one that strips accents (that model does) or applies
# NFKC (fullwidth letters). The guard now also measures the repetition rules on the text folded
# (NFKD, combining diacritics dropped, NFC, lower case: textfold.structural_scan); scan_query
# itself is unchanged.
from qdrant_guard import GuardRefusal  # noqa: E402
from tests.guardkit import Recorder, create, unit  # noqa: E402

_PHRASE = "ignorepreviousinstructions"


def _random_case(text: str, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(c.upper() if rng.random() < 0.5 else c for c in text)


_RULES = dict(max_tokens=None, max_repetition=0.5, max_ngram_run=0.5, max_glued_repetition=0.5)


def _stuffed(sep: str, copies: int = 100) -> str:
    """``copies`` random-case copies of the phrase joined by ``sep``, as an attacker makes them:
    glued, the best period's share of equal letters hovers around 0.5 (each letter's case agrees
    with the copy's a period before half the time), so the attacker draws until the scanner
    passes it; spaced, every draw passes (all tokens differ)."""
    for seed in range(200):
        text = sep.join(_random_case(_PHRASE, seed * 1000 + i) for i in range(copies))
        if NATIVE.scan_query(text, **_RULES).ok and PYTHON.scan_query(text, **_RULES).ok:
            return text
    raise AssertionError("no draw passed")


def _query_client(kit, **query):
    rec = Recorder()
    pol = {"class": "PII", "owner": "hr", "readers": ["hr"], "intent": {"enabled": False}, "query": query}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"), embedder=rec)
    create(cl, "c")
    import numpy as np
    cl.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"text": "t"})
                    for i in range(3)])
    return cl, rec


@pytest.mark.parametrize("impl", [NATIVE, PYTHON], ids=["native", "python"])
@pytest.mark.parametrize("sep", [" ", ""], ids=["spaced", "glued"])
def test_random_case_copies_pass_every_rule_of_the_scanner_itself(impl, sep):
    # Pinned: scan_query compares code points exactly (its contract, and the oracle's); the lower
    # case copy of the same text is refused by the rule for its shape.
    text = _stuffed(sep)
    assert impl.scan_query(text, **_RULES).ok
    kind = "repetition" if sep else "glued_repetition"
    assert kind in {v.kind for v in impl.scan_query(text.lower(), **_RULES).violations}


@pytest.mark.parametrize("sep", [" ", ""], ids=["spaced", "glued"])
def test_the_guard_refuses_random_case_stuffing(tmp_path, sep):
    kit = make_kit(tmp_path)
    cl, rec = _query_client(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=models.Document(text=_stuffed(sep), model="m"), limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    (v,) = ei.value.details["violations"]
    assert v["kind"] == ("repetition" if sep else "glued_repetition")
    assert v["detail"].endswith("(letters compared without case, accents or width)") and v["position"] == (27 if sep else 0)
    assert rec.seen == []  # nothing reached the embedder
    assert audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"
    # A query in ordinary capitalisation goes through.
    ok = "Why was my Account locked? I changed the Password on Monday and the App says it is Wrong."
    assert cl.query_points("c", query=models.Document(text=ok, model="m"), limit=2).points is not None
    assert rec.seen and audit_records(kit)[-1]["verdict"] == "ALLOW"


def test_random_case_stuffing_in_a_full_text_filter_and_under_monitor(tmp_path):
    kit = make_kit(tmp_path)
    cl, _ = _query_client(kit)
    flt = models.Filter(must=[models.FieldCondition(key="text", match=models.MatchText(text=_stuffed("")))])
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=flt, limit=2)
    assert [v["kind"] for v in ei.value.details["violations"]] == ["glued_repetition"]
    (tmp_path / "m").mkdir()
    mkit = make_kit(tmp_path / "m")
    mon, rec = _query_client(mkit, mode="monitor")
    mon.query_points("c", query=models.Document(text=_stuffed(" "), model="m"), limit=2)
    entry = audit_records(mkit)[-1]
    assert entry["verdict"] == "ALLOW" and len(rec.seen) == 1
    assert [v["kind"] for v in entry["details"]["scan"]["would_reject"]] == ["repetition"]


def test_a_character_that_folds_to_two_keeps_positions(tmp_path):
    # "İ" (U+0130) lowers to two code points and decomposes to I + U+0307: the violation's
    # position still indexes the query as given.
    kit = make_kit(tmp_path)
    cl, rec = _query_client(kit)
    text = "İstanbul " + _stuffed(" ")
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=models.Document(text=text, model="m"), limit=2)
    (v,) = ei.value.details["violations"]
    assert v["kind"] == "repetition" and v["position"] == 9 + 27
    assert rec.seen == []


# --- 3. glued_repetition on structured data without spaces ----------------------------------
# The ratio counted any equal character a period apart, so text whose punctuation recurs at a
# fixed step, or whose alphabet is small, scored high without any copy of a phrase in it (binary
# digits 0.63, comma digits 0.53, a JSON array 0.58, all refused). Since the h-glued3 branch an
# ASCII digit or punctuation mark counts only inside a stretch of 8 consecutive matches, and
# those three pass (tests/test_glued_structured.py has more). What still repeats literally in
# stretches of 8 or more, or in letters, is still refused, as the policy docstring and the threat
# model say: zero groups of uncompressed IPv6, MAC addresses sharing a 15-character prefix, the
# "AAAA" of zero-padded base64 (indistinguishable from a letter glued to itself).
def _structured() -> dict[str, tuple[str, float, float, bool]]:
    import base64
    import struct

    rng = random.Random(1)
    return {
        "binary digits": ("".join(rng.choice("01") for _ in range(64)), 0.1, 0.25, False),
        "comma digits": (",".join(rng.choice("0123456789") for _ in range(40)), 0.05, 0.2, False),
        "json numbers": ("[" + ",".join("%.2f" % rng.random() for _ in range(20)) + "]", 0.05, 0.15, False),
        "ipv6 zeros": ("fe80:0000:0000:0000:0000:0000:0000:0001/fe80:0000:0000:0000:0000:0000:0000:0002", 0.7,
                       0.8, True),
        "mac list": (",".join("00:1a:2b:3c:4d:%02x" % i for i in range(6)), 0.7, 0.85, True),
        "zero-padded base64": (base64.b64encode(struct.pack("<16i", *([1, 0, 0, 0] * 4))).decode(), 0.85, 0.9,
                               True),
    }


@pytest.mark.parametrize("name", sorted(_structured()))
def test_structured_data_without_spaces_and_glued_repetition(name):
    import numpy as np

    from qdrant_guard._scan_py import glued_best
    from qdrant_guard.policy import QueryRules

    text, low, high, refused = _structured()[name]
    _, matches = glued_best(np.frombuffer(text.encode("utf-32-le"), dtype="<u4"))
    assert low < matches / len(text) < high
    r = QueryRules()
    defaults = dict(max_tokens=r.max_tokens, max_repetition=r.max_repetition, max_ngram_run=r.max_ngram_run,
                    encoded_payloads=r.encoded_payloads, max_model_tokens=r.model_token_cap())
    query = f"what does {text} mean"
    for impl in (NATIVE, PYTHON):
        assert impl.scan_query(query, **defaults).ok
        assert [v.kind for v in impl.scan_query(query, **defaults, max_glued_repetition=0.5).violations] == (
            ["glued_repetition"] if refused else [])


_MARKS = ["", "\u0301", "\u0300", "\u0308", "\u0302"]


def _accented(seed: int) -> str:
    import unicodedata

    rng = random.Random(seed)
    return "".join(unicodedata.normalize("NFC", c + rng.choice(_MARKS)) for c in _PHRASE)


def _fullwidth(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(ord(c) + 0xFEE0) if rng.random() < 0.5 else c for c in _PHRASE)


def _foreign_marks(seed: int) -> str:
    # Nonspacing marks of other scripts (Arabic, Hebrew, Thai, Devanagari) on Latin letters: an
    # uncased BERT tokenizer drops every nonspacing mark.
    rng = random.Random(seed)
    return "".join(c + rng.choice(["", "\u064e", "\u05b4", "\u0e34", "\u0941"]) for c in _PHRASE)


@pytest.mark.parametrize("variant", [_accented, _fullwidth, _foreign_marks], ids=["accents", "fullwidth", "marks"])
@pytest.mark.parametrize("sep", [" ", ""], ids=["spaced", "glued"])
def test_the_guard_refuses_copies_with_random_accents_or_widths(tmp_path, variant, sep):
    text = sep.join(variant(i) for i in range(100))
    for impl in (NATIVE, PYTHON):  # the scanner itself passes them: every copy differs
        assert impl.scan_query(text, **_RULES).ok
    kit = make_kit(tmp_path)
    cl, rec = _query_client(kit)
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=models.Document(text=text, model="m"), limit=2)
    (v,) = ei.value.details["violations"]
    assert v["kind"] == ("repetition" if sep else "glued_repetition")
    # The first repeated token starts the second copy, in the text as given.
    assert v["position"] == (len(variant(0)) + 1 if sep else 0)
    assert rec.seen == []


def test_natural_text_in_other_scripts_still_passes(tmp_path):
    kit = make_kit(tmp_path)
    cl, rec = _query_client(kit)
    for text in ("¿Por qué él no recibió el pago de junio? Él dijo que el banco lo rechazó dos veces.",
                 "Où est passée la facture ? Il a dit qu'il l'avait envoyée à la comptabilité ou au siège.",
                 "Warum wurde mein Konto gesperrt? Ich habe das Passwort am Montag geändert und es gilt nicht.",
                 "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำทำให้การตัดคำเป็นปัญหาที่สำคัญในการประมวลผลภาษาธรรมชาติ",
                 "안녕하세요저는한국어를공부하고있는학생입니다오늘날씨가정말좋네요내일도좋았으면좋겠습니다",
                 "ＡＰＩキーの更新手続きについて教えてください。ガイドラインはどこにありますか。",
                 "मेरा खाता क्यों बंद हो गया है? मैंने सोमवार को पासवर्ड बदला था और ऐप कहता है कि वह गलत है।",
                 "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ الْحَمْدُ لِلَّهِ رَبِّ الْعَالَمِينَ"):
        cl.query_points("c", query=models.Document(text=text, model="m"), limit=2)
        assert audit_records(kit)[-1]["verdict"] == "ALLOW"
    assert len(rec.seen) == 8
