"""Mutation pass 30 (docs/security-testing.md): tests that kill the survivors of the modules no
earlier pass had mutated. Real audit logs, keys, filters and local-mode Qdrant; nothing mocked."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from qdrant_guard.audit import GENESIS, AuditLog, entry_hash, repair_audit_file, verify_audit_file
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditError, AuditUnauthenticatedError, GuardArgumentValueError
from qdrant_guard.keys import generate_keypair
from qdrant_guard.receipts import ReceiptSigner


def _forged(n: int, prev: str = GENESIS, seq: int = 1) -> list[bytes]:
    """``n`` unsigned entries chained from ``prev``, as anyone who can write the file makes them."""
    out = []
    for k in range(seq, seq + n):
        e = {"seq": k, "ts": 1.0, "prev": prev, "record": {"event": "forged", "i": k}}
        e["hash"] = prev = entry_hash(e)
        out.append(canonical_json(e) + b"\n")
    return out


def _signed_log(path: Path, n: int) -> tuple[list[bytes], ReceiptSigner]:
    """A format-v2 log (each entry carries its writer's MAC) of ``n`` entries."""
    signer = ReceiptSigner(generate_keypair()[0])
    with AuditLog(path, signer=signer) as log:
        for i in range(n):
            log.append({"event": "real", "i": i})
    return path.read_bytes().splitlines(keepends=True), signer


def _side_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".cut-*"))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# --------------------------------------------------------------------------- audit_repair.py

@pytest.mark.parametrize("chains", [1, 2, 3])
def test_keeping_the_later_v2_chain_still_needs_a_signer(tmp_path, chains):
    # The kept chain is written back after the prefix; its last line (not the prefix's) decides
    # whether the repair entry must carry a MAC. Killed: `_last_line` returning None, b"" or the
    # line without its closing brace, or the whole multi-line chain (which does not parse).
    p = tmp_path / "audit.jsonl"
    real, _ = _signed_log(p, chains)
    forged = _forged(4)
    p.write_bytes(b"".join(forged + real))
    before = p.read_bytes()
    assert verify_audit_file(p).fork == (1, 5)
    with pytest.raises(GuardArgumentValueError, match="repair entry must carry one too"):
        repair_audit_file(p, keep_chain_from=5)
    assert p.read_bytes() == before and _side_files(p) == []


def test_keeping_the_later_v2_chain_with_its_signer_repairs(tmp_path):
    p = tmp_path / "audit.jsonl"
    real, signer = _signed_log(p, 3)
    p.write_bytes(b"".join(_forged(4) + real))
    rep = repair_audit_file(p, keep_chain_from=5, signer=signer)
    assert rep.ok and rep.last_seq == 4, rep.detail
    lines = p.read_bytes().splitlines(keepends=True)
    assert lines[:3] == real and json.loads(lines[3])["w"] == signer.key_id


def test_a_side_file_that_cannot_be_created_is_an_audit_error_and_nothing_changes(tmp_path):
    # A log name of 240 bytes: "<name>.cut-<seq>-<time>-<hex>" is past NAME_MAX, so the side file's
    # open fails (ENAMETOOLONG) with an error other than "exists". Killed: that raise deleted (the
    # write then used a descriptor never opened: UnboundLocalError, not AuditError).
    p = tmp_path / ("a" * 240)
    with AuditLog(p) as log:
        log.append({"event": "x"})
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    before = p.read_bytes()
    with pytest.raises(AuditError, match="cannot create the side file .*nothing was changed"):
        repair_audit_file(p)
    assert p.read_bytes() == before and os.listdir(tmp_path) == [p.name]


def test_a_repair_leaves_no_descriptor_open(tmp_path):
    # Killed: the side file's or its directory's os.close deleted (a descriptor leaked per repair).
    p = tmp_path / "audit.jsonl"
    with AuditLog(p) as log:
        log.append({"event": "x"})
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    before = _open_fds()
    assert repair_audit_file(p).ok
    assert _open_fds() == before


def _v2_log_ending_in(path: Path, length: int, before: int = 0) -> None:
    """A v2 log of ``before`` short entries and a last entry whose line is ``length`` bytes (its
    newline not counted). The line's length moves with the timestamp's digits: retried until exact."""
    signer = ReceiptSigner(generate_keypair()[0])
    pad = length
    for _ in range(50):
        path.unlink(missing_ok=True)
        with AuditLog(path, signer=signer) as log:
            for i in range(before):
                log.append({"event": "real", "i": i})
            log.append({"event": "real", "pad": "x" * pad})
        got = len(path.read_bytes().splitlines()[-1])
        if got == length:
            return
        pad += length - got
    raise AssertionError(f"no line of {length} bytes")


@pytest.mark.parametrize("length, before", [
    (600, 0),      # the only kept line, no newline before it: `return buf` as None
    (65537, 0),    # one byte more than a read: the loop's `pos > 0` as `pos > 1`, `cut >= 0` as `cut >= -1`
])
def test_a_v2_log_cut_after_its_last_entry_needs_a_signer_whatever_that_lines_length(tmp_path, length, before):
    # The line before the cut decides whether the repair entry needs a MAC (the log is format v2).
    # It is read backwards in 64 KiB steps; the long case starts the line one byte before a step.
    p = tmp_path / "audit.jsonl"
    _v2_log_ending_in(p, length, before)
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    before_bytes = p.read_bytes()
    with pytest.raises(GuardArgumentValueError, match="repair entry must carry one too"):
        repair_audit_file(p)
    assert p.read_bytes() == before_bytes and _side_files(p) == []


@pytest.mark.parametrize("n", [20, 21])
def test_the_refused_vouch_names_twenty_entries_then_the_count(tmp_path, n):
    # A repair signed by another guard's key would vouch for every entry of this one: refused,
    # naming the first 20 seqs and, past 20, how many in all.
    p = tmp_path / "audit.jsonl"
    with AuditLog(p, signer=ReceiptSigner(generate_keypair()[0])) as log:
        for i in range(n):
            log.append({"event": "real", "i": i})
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    before = p.read_bytes()
    other = ReceiptSigner(generate_keypair()[0])
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=other)
    listed = ", ".join(str(q) for q in range(1, 21))
    tail = ", ... (21 in all)" if n == 21 else ""
    assert f"(seq {listed}{tail}; seq 1 " in str(err.value)
    assert p.read_bytes() == before


# --------------------------------------------------------------------------- filterroots.py

def _guarded(tmp_path):
    """alice@hr, owner of PII collection ``c`` (points 1-3), with the audit log of the kit."""
    from guardkit import make_kit
    from qdrant_client.http import models

    from qdrant_guard import QdrantClient

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "intent": {"enabled": False},
           "diversity": {"enabled": False}}
    c = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    c.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    c.upsert("c", [models.PointStruct(id=i, vector=[1.0, 0.5, 0.25, 0.1 * i], payload={"x": i}) for i in (1, 2, 3)])
    return kit, c


def _forms():
    from qdrant_client import grpc

    return {
        # A dict no filter validates from: qdrant-client's local mode then failed on it with an
        # AttributeError, a remote one would send what the guard never walked.
        "dict filter": lambda c: c.scroll("c", scroll_filter={"must": [{"key": "x", "match": {"value": 1}}],
                                                              "bogus": 1}, limit=5),
        "grpc order_by with an empty start": lambda c: c.scroll(
            "c", order_by=grpc.OrderBy(key="x", start_from=grpc.StartFrom()), limit=5),
        "grpc payload selector without a field": lambda c: c.scroll("c", with_payload=grpc.WithPayloadSelector(),
                                                                     limit=5),
    }


@pytest.mark.parametrize("form", ["dict filter", "grpc order_by with an empty start", "grpc payload selector without a field"])
def test_a_filter_or_field_name_the_guard_cannot_convert_is_refused_and_audited(tmp_path, form):
    # Killed: the UncheckedForm raise of `as_filter` (dict) or `_rest_names` (gRPC) deleted: the
    # value was then walked as it was, naming no key, and passed on unscreened.
    from guardkit import audit_records

    from qdrant_guard import GuardRefusal

    kit, c = _guarded(tmp_path)
    n = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        _forms()[form](c)
    assert ei.value.verdict == "QUERY_REJECTED" and "cannot check" in str(ei.value)
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["QUERY_REJECTED"]


def test_only_a_formulas_expression_fields_name_payload_keys():
    # A formula's strings are payload keys (or $score) only where an expression goes; a datetime
    # literal is not one. Killed: `holds` as `annotation is not models.MultExpression` (every
    # string field of every model walked as a key).
    from qdrant_client.http import models

    from qdrant_guard.filterroots import _iter_keys

    formula = models.FormulaQuery(formula=models.SumExpression(sum=[
        "$score", models.MultExpression(mult=["weight", 2.0]),
        models.DatetimeExpression(datetime="2026-01-02T00:00:00Z"),
        models.DatetimeKeyExpression(datetime_key="at")]), defaults={"weight": 1.0})
    assert sorted(key for _, key, _ in _iter_keys(formula, "query")) == ["$score", "at", "weight", "weight"]


def test_the_write_roots_of_a_batch_are_its_operations_filters():
    # write_filter_roots' documented batch branch (the guard's batch path calls
    # operation_filter_roots itself, so only a direct call reaches it). Killed: `update_operations
    # or ()` as `and ()`, which walked no operation.
    from qdrant_client.http import models

    from qdrant_guard.filterroots import write_filter_roots

    flt = models.Filter(must=[models.FieldCondition(key="x", match=models.MatchValue(value=1))])
    ops = [models.DeleteOperation(delete=models.FilterSelector(filter=flt)),
           models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, filter=flt))]
    roots = list(write_filter_roots("batch_update_points", {"update_operations": ops}))
    assert [where for where, _ in roots] == ["update_operations[0].delete.filter",
                                             "update_operations[1].set_payload.filter"]
    assert all(root is flt for _, root in roots)


# --------------------------------------------------------------------------- storedform.py

def test_the_commitment_grid_holds_the_int32_extremes_and_refuses_2048():
    # The last grid point below 2048 is int32's maximum: committed, not refused. Killed: `worst >
    # _INT32_LIMIT` as `>=`.
    from qdrant_guard.errors import InvalidVectorError
    from qdrant_guard.storedform import commitment_bytes

    top = 2048 - 2.0 ** -20
    assert commitment_bytes([top, -top]) == (2 ** 31 - 1).to_bytes(4, "little") + (1 - 2 ** 31).to_bytes(
        4, "little", signed=True)
    # 2048 itself is refused, named as it is. Killed: `magnitude >= 2048.0` as `>` (which called
    # 2048 "2048.0, which float32 rounds to 2048").
    with pytest.raises(InvalidVectorError, match=r"coordinate of magnitude 2048; the commitment grid"):
        commitment_bytes([2048.0])


@pytest.mark.parametrize("distance", ["Euclid", "Dot", "Manhattan"])
def test_a_stored_form_refuses_from_where_float32_rounds_to_2048(distance):
    # From 2048 - 2^-14 up the float32 cast would store 2048, which no receipt commits to; one grid
    # step below is stored. Killed: `worst >= _FLOAT32_TO_2048` as `>`.
    from qdrant_guard.errors import InvalidVectorError
    from qdrant_guard.storedform import stored_form, stored_form_batch

    edge = 2048 - 2.0 ** -14
    with pytest.raises(InvalidVectorError, match="which float32 rounds to 2048"):
        stored_form([edge, 1.0], distance=distance)
    with pytest.raises(InvalidVectorError, match="row 1 has a coordinate"):
        stored_form_batch([[1.0, 1.0], [1.0, -edge]], distance=distance)
    below = stored_form([edge - 2.0 ** -20, 1.0], distance=distance)
    assert below.dtype == np.float32 and float(below[0]) < 2048.0


@pytest.mark.parametrize("vector, error, words", [
    (["a", 1.0], "GuardArgumentTypeError", "vector must be a 1-D sequence of numbers"),
    ([[1.0, 2.0]], "GuardArgumentValueError", "vector must be 1-D and non-empty, got shape (1, 2)"),
    ([], "GuardArgumentValueError", "vector must be 1-D and non-empty, got shape (0,)"),
])
@pytest.mark.parametrize("call", ["stored_form", "commitment_bytes"])
def test_a_vector_that_is_not_one_dimensional_numbers_is_refused_by_name(vector, error, words, call):
    # Killed: the refusals of `_as_vector` deleted (an unbound local or a later numpy error
    # instead), `or` as `and`, `size == 0` as `size == -1`.
    from qdrant_guard import errors, storedform

    fn = getattr(storedform, call)
    with pytest.raises(getattr(errors, error)) as ei:
        fn(vector, distance="Euclid") if call == "stored_form" else fn(vector)
    assert f"{call}() {words}" in str(ei.value)


def test_a_salt_given_as_text_is_refused_as_the_wrong_type():
    # Killed: the salt type check deleted (a 16-character str then failed inside hashlib's update).
    from qdrant_guard.errors import GuardArgumentTypeError
    from qdrant_guard.storedform import vector_commitment

    with pytest.raises(GuardArgumentTypeError, match="salt must be bytes, not str"):
        vector_commitment([1.0], "s" * 16)
    assert len(vector_commitment([1.0], b"s" * 16)) == 64


def test_a_log_unlinked_while_repair_waits_for_its_lock_is_an_audit_error(tmp_path):
    # The stat after the lock fails (the name is gone): an AuditError naming the log, nothing
    # written. Killed: the outer `raise AuditError(...)` deleted (the OSError was swallowed and
    # the repair went on to an unbound local).
    import fcntl
    import threading
    import time

    p = tmp_path / "audit.jsonl"
    with AuditLog(p) as log:
        log.append({"event": "x"})
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    inode = os.stat(p).st_ino
    outcome: list[BaseException | object] = []

    def repair() -> None:
        try:
            outcome.append(repair_audit_file(p))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    holder = os.open(p, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        t = threading.Thread(target=repair)
        t.start()
        # Wait (no time limit asserted) until the kernel lists the repair's flock as blocked on it.
        for _ in range(6000):
            if any(line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
                   for line in Path("/proc/locks").read_text().splitlines()):
                break
            assert t.is_alive(), outcome
            time.sleep(0.01)
        else:
            pytest.fail("the repair never waited for the log's lock")
        os.unlink(p)
    finally:
        os.close(holder)  # releases the flock
    t.join(60)
    (exc,) = outcome
    assert isinstance(exc, AuditError) and f"cannot repair audit log {str(p)!r}" in str(exc), exc
    assert _side_files(p) == []


@pytest.mark.parametrize("kw, words", [
    ({"signer": "guard.key"}, "signer must be a ReceiptSigner or None, not str"),
    ({"trusted_keys": ["guard"]}, "trusted_keys must be a mapping of key id"),
    ({"keep_chain_from": "5"}, "keep_chain_from must be a line number (int) or None, not str"),
    ({"keep_chain_from": True}, "keep_chain_from must be a line number (int) or None, not bool"),
    ({"sign_every_entry": 1}, "sign_every_entry must be bool, not int"),
])
def test_a_repair_argument_of_the_wrong_type_is_refused_by_name_and_nothing_changes(tmp_path, kw, words):
    # Killed: each of these type checks deleted, and the bool test of keep_chain_from's `or` as
    # `and` (True then reached the fork check as line 1).
    from qdrant_guard.errors import GuardArgumentTypeError

    p = tmp_path / "audit.jsonl"
    with AuditLog(p) as log:
        log.append({"event": "x"})
    with open(p, "ab") as fh:
        fh.write(b"garbage\n")
    before = p.read_bytes()
    with pytest.raises(GuardArgumentTypeError) as ei:
        repair_audit_file(p, **kw)
    assert f"repair_audit_file() {words}" in str(ei.value)
    assert p.read_bytes() == before and _side_files(p) == []


def test_a_repair_of_a_missing_log_or_a_fifo_says_what_it_found(tmp_path):
    # Killed: the open's `raise AuditError(...)` deleted (an unbound descriptor instead), and the
    # not-regular check's `repair=True` as False (the writer's advice, to set audit_log, instead).
    with pytest.raises(AuditError, match=r"cannot open audit log .*missing\.jsonl': No such file"):
        repair_audit_file(tmp_path / "missing.jsonl")
    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(AuditError, match="is a named pipe .FIFO., not a regular file, so it is no log the guard "
                                         "wrote and was not repaired .nothing was changed."):
        repair_audit_file(fifo)


def test_keeping_the_later_branch_of_a_mid_file_fork_writes_it_back_after_the_prefix(tmp_path):
    # A forged branch from entry 3 put before the real entries 4..6, a torn line after them: the
    # operator keeps the real (later) branch. Its bytes are taken from the cut at their offsets past the kept prefix. Killed:
    # `keep.start - valid_bytes` or `keep.end - valid_bytes` as `+` (the second-genesis forks of
    # the older tests have an empty prefix, where the two agree).
    p = tmp_path / "audit.jsonl"
    with AuditLog(p) as log:
        for i in range(6):
            log.append({"event": "real", "i": i})
    real = p.read_bytes().splitlines(keepends=True)
    forged = _forged(5, prev=json.loads(real[2])["hash"], seq=4)
    p.write_bytes(b"".join(real[:3] + forged + real[3:] + [b"torn tail\n"]))
    assert verify_audit_file(p).fork == (4, 9)
    rep = repair_audit_file(p, keep_chain_from=9)
    assert rep.ok and rep.last_seq == 7, rep.detail
    lines = p.read_bytes().splitlines(keepends=True)
    assert lines[:6] == real and len(lines) == 7
    rec = json.loads(lines[6])["record"]
    assert (rec["kept_lines"], rec["cut_lines"], rec["cut_bytes"]) == ([9, 11], 6, len(b"".join(forged)) + 10)


# --------------------------------------------------------------------------- calibration.py

def _named_store(names: tuple[str, ...]):
    """A raw local store ``staging`` of 60 points with the named vectors ``names`` (dim 8) and 20
    queries near its first points."""
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client.http import models

    rng = np.random.default_rng(3)
    docs = rng.normal(size=(60, 8))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config={
        n: models.VectorParams(size=8, distance=models.Distance.COSINE) for n in names})
    raw.upsert("staging", [models.PointStruct(id=i, vector={n: v.tolist() for n in names})
                           for i, v in enumerate(docs)])
    return raw, (docs[:20] + 0.05 * rng.normal(size=(20, 8))).tolist()


_CAL = dict(k=5, radius=0.01, epsilons=(2.0, 8.0), threshold=0.5, progress=False, seed=1)


def test_calibrate_takes_a_collections_only_named_vector_and_asks_which_of_two():
    # Killed: `len(params) != 1` as `== 1`, `!= 2` or `!= 0`, and its refusal deleted (the first
    # of two named vectors was calibrated unasked, or the only one refused).
    from qdrant_guard.utility import calibrate

    raw, queries = _named_store(("text",))
    assert calibrate(raw, "staging", queries, **_CAL).vector_name == "text"
    raw, queries = _named_store(("image", "text"))
    with pytest.raises(GuardArgumentValueError, match=r"has named vectors \['image', 'text'\]; pass vector_name="):
        calibrate(raw, "staging", queries, **_CAL)
    # A name the collection does not have is named with the ones it has. Killed: that refusal
    # deleted (a KeyError instead).
    with pytest.raises(GuardArgumentValueError, match=r"has no vector named 'img'; it has \['image', 'text'\]"):
        calibrate(raw, "staging", queries, vector_name="img", **_CAL)
    assert calibrate(raw, "staging", queries, vector_name="image", **_CAL).vector_name == "image"


def test_calibrate_refuses_a_collection_with_no_vector_to_measure_and_says_which():
    # Killed: the refusal deleted (numpy then failed on no rows), and its `vector_name` test
    # negated (a named vector no point has was called an empty collection).
    from qdrant_client import QdrantClient as RawClient
    from qdrant_client.http import models

    from qdrant_guard.utility import calibrate

    queries = [[1.0] + [0.0] * 7] * 20
    raw = RawClient(":memory:")
    raw.create_collection("staging", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
    with pytest.raises(GuardArgumentValueError, match="collection 'staging' is empty; calibrate needs its clean"):
        calibrate(raw, "staging", queries, **_CAL)
    raw.create_collection("named", vectors_config={
        n: models.VectorParams(size=8, distance=models.Distance.COSINE) for n in ("image", "text")})
    raw.upsert("named", [models.PointStruct(id=i, vector={"image": [1.0] * 8}) for i in range(3)])
    with pytest.raises(GuardArgumentValueError, match="collection 'named' has no point with vector 'text'; calibrate"):
        calibrate(raw, "named", queries, vector_name="text", **_CAL)


def test_a_metric_that_is_zero_before_noise_records_no_drop():
    # Calibrated on overlap, with qrels naming no stored id: clean recall and nDCG are 0, and
    # each level records a drop of 0.0 for them. Killed: `clean <= 0.0` as `< 0.0` (a division
    # by zero) and its `return 0.0` as None.
    from guardkit import staging_store

    from qdrant_guard.utility import calibrate

    raw, _, queries = staging_store(32)
    rec = calibrate(raw, "staging", queries, qrels={i: [99999] for i in range(40)}, metric="overlap",
                    k=10, radius=0.01, epsilons=(2.0, 8.0), threshold=0.5, progress=False, seed=1)
    assert (rec.clean["recall"], rec.clean["ndcg"]) == (0.0, 0.0)
    assert all(lv["drops"]["recall"] == 0.0 and lv["drops"]["ndcg"] == 0.0 for lv in rec.measured)


def test_the_query_digest_binds_query_texts():
    # Killed: `_canonical_queries` dropping text queries (every text sample then had the digest
    # of none, so a record vouched for any).
    from qdrant_guard.utility import query_sample_digest

    assert query_sample_digest(["refund policy"]) != query_sample_digest(["salary of alice"])
    assert query_sample_digest(["refund policy"]) != query_sample_digest([])


@pytest.mark.parametrize("kw, error, words", [
    ({"radius": None}, "GuardArgumentTypeError", "'radius' must be a number, not NoneType"),
    ({"radius": 0.0}, "GuardArgumentValueError", "'radius' must be a finite number > 0, got 0.0"),
    ({"radius": 0.01, "clip_norm": -1.0}, "GuardArgumentValueError", "'clip_norm' must be a finite number > 0"),
    ({"radius": 0.01, "epsilon_ceiling": 0}, "GuardArgumentValueError", "'epsilon_ceiling' must be a finite number > 0"),
])
def test_calibrate_refuses_a_radius_clip_or_ceiling_that_is_not_positive(kw, error, words):
    # Killed: `_check_positive`'s allow_none default as True (radius None passed), its `and` as
    # `or` (clip_norm and epsilon_ceiling, which allow None, were not checked at all), and
    # `value <= 0` as `< 0` or `<= -1` (a radius of 0: no protection, signed).
    from guardkit import staging_store

    from qdrant_guard import errors
    from qdrant_guard.utility import calibrate

    raw, _, queries = staging_store(32)
    args = {"k": 10, "epsilons": (2.0, 8.0), "threshold": 0.5, "progress": False, "seed": 1, **kw}
    with pytest.raises(getattr(errors, error)) as ei:
        calibrate(raw, "staging", queries, **args)
    assert f"calibrate() argument {words}" in str(ei.value)
