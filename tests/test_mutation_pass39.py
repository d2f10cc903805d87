"""Mutation pass 39 (docs/security-testing.md): tests that kill mutants of today's changes which
the tests written with them let survive. warnsite.py: where a qdrant-client warning lands when
the import machinery's frames, or guard frames past the caller's (a callback the guard calls that
calls the guard again), are on the stack; sparseslots.py / dispatch.py: a slot name that is a str
subclass, a ``vector_name_config`` that does not validate, the audit entry of a config refused as
invalid; audit.py: the entry at ``audit_signed_from`` before the most recent checkpoint carrying a
checkpoint that does not verify, or this writer's id without its MAC; sentpoints.py: what a
vector that is no vector is said to be. Real files, real keys, qdrant-client local mode."""
from __future__ import annotations

import functools
import json
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from guardkit import DIM, RawClient, audit_records, make_kit, models

from qdrant_guard import GuardArgumentTypeError, InvalidVectorError, QdrantClient, warnsite
from qdrant_guard.audit import AuditLog
from qdrant_guard.canonical import canonical_json
from qdrant_guard.errors import AuditIntegrityError, AuditUnauthenticatedError
from test_audit_signed_from_open import FAKE_MAC, _signer

# -- warnsite: the frame a warning lands on ------------------------------------------------------------

_CALL = "def f(next_):\n    return next_()\n"  # the call is on line 2 of each made-up file
_BOOTSTRAP = "<frozen importlib._bootstrap>"


def _frame(filename: str, module: str) -> Callable[[Callable[[], Any]], Any]:
    """A function whose code lives in ``filename`` and whose module is ``module``, calling its argument."""
    ns: dict[str, Any] = {"__name__": module}
    exec(compile(_CALL, filename, "exec"), ns)
    return ns["f"]


def _landing(chain: list[tuple[str, str]], warn: Callable[..., None]) -> tuple[str, int]:
    """Where a warning lands that a qdrant-client frame issues with ``warn`` at stacklevel 2 (its
    caller), called under the frames ``chain`` (outermost first, as (filename, module))."""
    ns: dict[str, Any] = {"__name__": "qdrant_client.fake"}
    exec(compile("def f(warn):\n    warn('deprecated', DeprecationWarning, stacklevel=2)\n",
                 "qdrant_client/fake.py", "exec"), ns)
    # functools.partial adds no Python frame: each made-up frame calls the next one itself.
    inner: Callable[[], Any] = functools.partial(ns["f"], warn)
    for filename, module in reversed(chain):
        inner = functools.partial(_frame(filename, module), inner)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inner()
    (w,) = caught
    return w.filename, w.lineno


_GUARD = ("qdrant_guard/fake.py", "qdrant_guard.fake")
_GUARD2 = ("qdrant_guard/outer.py", "qdrant_guard.outer")


@pytest.mark.parametrize("chain", [
    # the guard called from a module being imported, qdrant-client reached through the import machinery
    [("app.py", "app"), _GUARD, (_BOOTSTRAP, "importlib._bootstrap")],
    # a callback the guard calls (guard frames past the caller's) that calls the guard again
    [_GUARD2, ("app.py", "app"), _GUARD],
    [_GUARD2, ("app.py", "app"), _GUARD, _GUARD],
    # file names that hold one of the two words CPython's internal-frame test needs, not both
    [_GUARD2, ("my_importlib_app.py", "app"), _GUARD],
    [_GUARD2, ("app_bootstrap.py", "app"), _GUARD],
], ids=["through-import", "callback", "callback-2", "importlib-named", "bootstrap-named"])
def test_a_client_warning_lands_where_it_would_without_the_guard(chain):
    app = next(f for f, m in chain if m == "app")
    # The warning as qdrant-client issues it with no guard frame on the stack: at the app's call.
    assert _landing([c for c in chain if c[1] == "app" or "importlib" in c[1]], warnings.warn) == (app, 2)
    # Through the guard's view of the warnings module, with the guard's frames: the same line.
    assert _landing(chain, warnsite.CLIENT_WARNINGS.warn) == (app, 2)


def test_a_client_warning_without_a_stacklevel_lands_on_the_clients_line():
    # qdrant-client's warnings.warn(msg, category): level 1, the client's own line, as without the guard.
    chain = [_GUARD2, ("app.py", "app"), _GUARD]
    ns: dict[str, Any] = {"__name__": "qdrant_client.fake"}
    exec(compile("def f(warn):\n    warn('deprecated', DeprecationWarning)\n", "qdrant_client/fake.py", "exec"), ns)
    inner: Callable[[], Any] = functools.partial(ns["f"], warnsite.CLIENT_WARNINGS.warn)
    for filename, module in reversed(chain):
        inner = functools.partial(_frame(filename, module), inner)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inner()
    assert [(w.filename, w.lineno) for w in caught] == [("qdrant_client/fake.py", 2)]


def test_the_client_view_reads_the_warnings_module_when_used(monkeypatch):
    view = warnsite.CLIENT_WARNINGS
    assert view.catch_warnings is warnings.catch_warnings and view.simplefilter is warnings.simplefilter
    with warnings.catch_warnings():  # swaps warnings.filters: the view reads the new list
        assert view.filters is warnings.filters
    marker = object()
    monkeypatch.setattr(warnings, "_qg_added_later", marker, raising=False)  # a name added after import
    assert view._qg_added_later is marker
    assert repr(view) == "<qdrant_guard.warnsite's view of module 'warnings'>"


def test_install_passes_over_a_module_blocked_in_sys_modules(monkeypatch):
    # sys.modules[name] = None blocks an import (an optional dependency turned off): no __dict__.
    monkeypatch.setitem(sys.modules, "qdrant_client._qg_blocked", None)
    warnsite.install()
    assert sys.modules["qdrant_client._qg_blocked"] is None


# -- sparseslots / dispatch --------------------------------------------------------------------------

_VP = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
_OWNED = {"owner": "hr", "readers": ["support"], "intent": {"enabled": False}}


class _Renamed(str):
    """A slot name whose repr is another name's: what the message and the audit entry show must be
    the name as sent (its characters), not what the object says of itself."""

    def __repr__(self) -> str:
        return "'other'"

    def __str__(self) -> str:
        return "other"


@pytest.fixture
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit) -> QdrantClient:
    return QdrantClient(":memory:", guard=kit.config({"docs": {"class": "PII", **_OWNED}}),
                        principal=kit.principal("alice", "hr"))


def test_a_slot_name_that_is_a_str_subclass_is_named_by_its_characters(kit):
    c = _client(kit)
    with pytest.raises(InvalidVectorError) as ei:
        c.create_collection("docs", vectors_config={"d": _VP},
                            sparse_vectors_config={_Renamed("kw"): models.SparseVectorParams()})
    assert "sparse vector slot(s) ['kw'] would hold" in str(ei.value) and "other" not in str(ei.value)
    c.create_collection("docs", vectors_config={"d": _VP})
    with pytest.raises(InvalidVectorError) as ei:
        c.create_vector_name("docs", _Renamed("kw"), models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()))
    assert "sparse vector slot(s) ['kw'] would hold" in str(ei.value) and "other" not in str(ei.value)
    assert not RawClient.get_collection(c, "docs").config.params.sparse_vectors
    assert [r["details"]["sparse_vectors"] for r in audit_records(kit) if r["verdict"] == "UNSUPPORTED_WRITE"] \
        == [["kw"], ["kw"]]


def test_a_slot_name_that_is_no_str_is_refused_as_a_slot(kit):
    # Not a name Qdrant takes, but a slot asked for on a sensitive collection all the same: the
    # guard's refusal naming it, not a TypeError from reading it.
    c = _client(kit)
    with pytest.raises(InvalidVectorError, match=re.escape("sparse vector slot(s) [1] would hold")):
        c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config={1: models.SparseVectorParams()})
    c.create_collection("docs", vectors_config={"d": _VP})
    with pytest.raises(InvalidVectorError, match=re.escape("sparse vector slot(s) [1] would hold")):
        c.create_vector_name("docs", 1, models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()))
    assert not RawClient.get_collection(c, "docs").config.params.sparse_vectors


@pytest.mark.parametrize("config", ["sparse", {"sparse": {"modifier": "no such modifier"}}], ids=["str", "bad-dict"])
def test_a_vector_name_config_that_does_not_validate_is_refused_and_audited(kit, config):
    c = _client(kit)
    c.create_collection("docs", vectors_config={"d": _VP})
    with pytest.raises(GuardArgumentTypeError) as ei:
        c.create_vector_name("docs", "kw", config)
    assert str(ei.value).startswith("create_vector_name() argument 'vector_name_config' must be a "
                                    "models.DenseVectorNameConfig or models.SparseVectorNameConfig, not ")
    assert not RawClient.get_collection(c, "docs").config.params.sparse_vectors
    (entry,) = [r for r in audit_records(kit) if r["verdict"] == "UNSUPPORTED_WRITE"]
    assert (entry["op"], entry["details"]) == ("create_vector_name", {"error": "GuardArgumentTypeError",
                                                                      "reason": "invalid_input"})


def test_a_sparse_config_that_does_not_validate_is_audited(kit):
    c = _client(kit)
    with pytest.raises(GuardArgumentTypeError):
        c.create_collection("docs", vectors_config={"d": _VP}, sparse_vectors_config=[("kw", {})])
    (entry,) = [r for r in audit_records(kit) if r["verdict"] == "UNSUPPORTED_WRITE"]
    assert (entry["op"], entry["collection"]) == ("create_collection", "docs")
    assert entry["details"] == {"error": "GuardArgumentTypeError", "reason": "invalid_input"}
    assert not RawClient.collection_exists(c, "docs")


# -- sentpoints: what a vector that is no vector is said to be ------------------------------------------

@pytest.mark.parametrize("vector, said", [
    (("x",), "(Input should be a valid number): it is a list holding a str;"),  # pydantic's first error
    ((None, "x"), "it is a list holding None;"),  # the first value that is no number, None included
    ({"": None}, "it is a dict whose '' is None;"),
], ids=["first-error", "none-first", "named-none"])
def test_a_vector_that_is_no_vector_is_described_by_its_first_odd_value(kit, vector, said):
    c = QdrantClient(":memory:", guard=kit.config({"pii": {"class": "PII", **_OWNED, "raw_in_boundary": True}}),
                     principal=kit.principal("alice", "hr"))
    c.create_collection("pii", vectors_config=_VP)
    with pytest.raises(InvalidVectorError) as ei:
        c.upsert("pii", [models.PointStruct.model_construct(id=2, vector=vector)])
    assert "points[0] (point id 2): its vector cannot be read as qdrant-client would send it" in str(ei.value)
    assert said in str(ei.value)
    assert RawClient.count(c, "pii").count == 0


# -- audit: the entry at signed_from, before the most recent checkpoint ---------------------------------

_S = 11  # the first entry the signing writer wrote: its checkpoint


def _signed_log(tmp_path, kit):
    """Seq 1..10 without a key (format v1), 11..120 signed by the guard's key, a checkpoint every 50
    (at 11, 50, 100): the open's window is 101..120, seq 11 is found by bisection."""
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as keyless:
        for i in range(_S - 1):
            keyless.append({"event": "legacy", "i": i})
    with AuditLog(log, signer=_signer(kit), checkpoint_every=50) as signed:
        for i in range(_S - 1, 120):
            signed.append({"event": "signed", "i": i})
    return log, log.read_bytes().splitlines(keepends=True)


def _with_entry_at_s(log, lines, edit: Callable[[dict[str, Any]], None]) -> None:
    entry = json.loads(lines[_S - 1])
    edit(entry)  # ckpt and mac are outside the hash: the chain still holds
    log.write_bytes(b"".join(lines[:_S - 1]) + canonical_json(entry) + b"\n" + b"".join(lines[_S:]))


def _open(kit, log) -> AuditLog:
    return AuditLog(log, signer=_signer(kit), checkpoint_every=50, signed_from=_S)


def test_control_the_signed_log_opens(tmp_path):
    kit = make_kit(tmp_path)
    log, lines = _signed_log(tmp_path, kit)
    assert "ckpt" in json.loads(lines[_S - 1]) and "ckpt" in json.loads(lines[99])
    _open(kit, log).close()


def test_a_checkpoint_at_s_that_does_not_verify_is_refused(tmp_path):
    kit = make_kit(tmp_path)
    log, lines = _signed_log(tmp_path, kit)

    def bad_signature(e: dict[str, Any]) -> None:
        sig = e["ckpt"]["sig"]
        e["ckpt"]["sig"] = ("0" if sig[0] != "0" else "1") + sig[1:]

    _with_entry_at_s(log, lines, bad_signature)
    before = log.read_bytes()
    with pytest.raises(AuditUnauthenticatedError) as err:
        _open(kit, log)
    assert err.value.seqs == (_S,)
    assert f"seq {_S} carries a checkpoint that does not verify" in str(err.value)
    assert "the checkpoint at seq 100 signs over it" in str(err.value)
    assert log.read_bytes() == before


def test_this_writers_id_at_s_without_its_mac_is_refused(tmp_path):
    # Checkpoint stripped and MAC made up: the entry claims this writer's id, which anyone who can
    # write the file can put there; only the MAC shows the writer made it.
    kit = make_kit(tmp_path)
    log, lines = _signed_log(tmp_path, kit)

    def forged(e: dict[str, Any]) -> None:
        del e["ckpt"]
        e["mac"] = FAKE_MAC

    _with_entry_at_s(log, lines, forged)
    with pytest.raises(AuditUnauthenticatedError) as err:
        _open(kit, log)
    assert err.value.seqs == (_S,) and "but carries no checkpoint" in str(err.value)
    # Control: the checkpoint stripped, the MAC kept: this writer's own entry, accepted.
    _with_entry_at_s(log, lines, lambda e: e.pop("ckpt"))
    _open(kit, log).close()


def test_an_s_missing_before_the_checkpoint_is_named_missing_wherever_it_was(tmp_path):
    # Each S from 2 to 99 deleted in turn: the bisection ends between S - 1 and S + 1 on every
    # layout (the lines differ in length), never reading from inside a line.
    kit = make_kit(tmp_path)
    log = tmp_path / "audit.jsonl"
    with AuditLog(log, signer=_signer(kit), checkpoint_every=50) as signed:
        for i in range(120):
            signed.append({"event": "signed", "pad": "y" * ((i * 7919) % 300)})
    lines = log.read_bytes().splitlines(keepends=True)
    for s in range(2, 100):
        log.write_bytes(b"".join(lines[:s - 1] + lines[s:]))
        with pytest.raises(AuditIntegrityError) as err:
            AuditLog(log, signer=_signer(kit), checkpoint_every=50, signed_from=s)
        assert f"no line before the most recent checkpoint (seq 100) holds seq {s}," in str(err.value), s
