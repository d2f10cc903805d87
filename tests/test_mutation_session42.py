"""Mutation pass 22 (branch h-mut22, 2026-12-06): tests killing mutants no earlier test did, in
qdrant_guard/filterpaths.py, boundary.py, budget_stores.py (the SQLite store's set-up and sweep
clock), canonical.py and identifiers.py. Each fails on its mutant and passes on the code as it is
(docs/security-testing.md, "Mutation pass 22")."""
from __future__ import annotations

import pytest
from qdrant_client import QdrantClient as Raw
from qdrant_client.http import models as M


# -- filterpaths: a nested key's "[]" is read as local mode reads it ----------------------------------

def _nested(key: str) -> M.Filter:
    return M.Filter(must=[M.NestedCondition(nested=M.Nested(
        key=key, filter=M.Filter(must=[M.FieldCondition(key="k", match=M.MatchValue(value=1))])))])


def _local_mode_fails(flt: M.Filter) -> bool:
    raw = Raw(":memory:")
    raw.create_collection("c", vectors_config=M.VectorParams(size=2, distance=M.Distance.COSINE))
    raw.upsert("c", [M.PointStruct(id=1, vector=[1.0, 0.0],
                                   payload={"people": [{"k": 1}], "a b": [{"k": 1}], "x": [{"k": 1}]})])
    try:
        raw.count("c", count_filter=flt)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("key, fault_key", [
    ("people[]", None),     # key[:-2] as key[:-1] read "people[": refused
    ('"a b"[]', None),      # as key[:-3] read '"a b': refused
    ("x[]", None),
    ("[]", "[]"),           # len(key) >= 2 named the key '' (local mode reads '[]' itself)
    ('"[]', '"'),           # len(key) > 3 named '"[]' (local mode strips it to '"')
    (".[]", "."),
])
def test_a_nested_keys_brackets_are_dropped_as_local_mode_drops_them(key, fault_key):
    from qdrant_guard.filterpaths import unevaluable

    flt = _nested(key)
    fault = unevaluable(flt, "filter")
    assert _local_mode_fails(flt) is (fault_key is not None)
    if fault_key is None:
        assert fault is None
    else:
        assert fault == ("filter.must[0].nested.key", "is no JSON path", fault_key)


# -- boundary: Principal's messages and repr, VerifiedPrincipal ---------------------------------------

def test_a_principals_repr_shows_whether_it_holds_a_credential_never_the_token():
    from qdrant_guard import Principal

    assert repr(Principal("agent-7", "hr")).endswith("credential=None)")
    shown = repr(Principal("agent-7", "hr", "qgc1.secret.token"))
    assert shown.endswith("credential='<credential>')") and "secret" not in shown


def test_only_a_path_as_the_credential_is_told_to_read_the_file():
    from pathlib import Path

    from qdrant_guard import GuardArgumentTypeError, Principal

    with pytest.raises(GuardArgumentTypeError, match=r"Path\(file\)\.read_text\(\)\.strip\(\)"):
        Principal("agent-7", "hr", Path("agent-7.cred"))  # type: ignore[arg-type]
    with pytest.raises(GuardArgumentTypeError) as ei:
        Principal("agent-7", "hr", 7)  # type: ignore[arg-type]
    assert str(ei.value) == "Principal.credential must be str or None, not int"


def test_a_verified_principal_cannot_be_changed_after_verification():
    import dataclasses

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import issue_credential, verify_credential

    key = Ed25519PrivateKey.generate()
    token = issue_credential(key, agent_id="agent-7", boundary="support", now=1000)
    who = verify_credential(token, authorities={"support": [key.public_key()]}, now=1001)
    with pytest.raises(dataclasses.FrozenInstanceError):
        who.boundary = "hr"  # type: ignore[misc]
    assert who.boundary == "support"


# -- budget_stores: SqliteBudgetStore's argument checks ----------------------------------------------

def test_a_sqlite_store_refuses_a_bytes_path_a_non_positive_timeout_and_an_uncallable_clock(tmp_path):
    from qdrant_guard import GuardArgumentTypeError, GuardArgumentValueError
    from qdrant_guard.budget import SqliteBudgetStore

    with pytest.raises(GuardArgumentTypeError, match=r"path must be a str or os\.PathLike\[str\], not bytes"):
        SqliteBudgetStore(str(tmp_path / "b.db").encode())  # type: ignore[arg-type]
    for bad in (0, -1.0):
        with pytest.raises(GuardArgumentValueError, match=r"timeout_s must be a finite number > 0"):
            SqliteBudgetStore(tmp_path / "t.db", timeout_s=bad)
    with pytest.raises(GuardArgumentTypeError, match=r"monotonic must be callable, not int"):
        SqliteBudgetStore(tmp_path / "m.db", monotonic=5)  # type: ignore[arg-type]


def test_a_file_whose_budget_table_cannot_be_created_is_a_budget_store_error(tmp_path):
    import sqlite3

    from qdrant_guard.budget import BudgetStoreError, SqliteBudgetStore

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:  # another program's table under the store's name
        db.execute("CREATE TABLE qg_budget (name TEXT)")
    db.close()
    with pytest.raises(BudgetStoreError, match=r"cannot create the budget table in .*other\.db.*no such column"):
        SqliteBudgetStore(path)



def test_key_count_on_a_file_whose_table_was_dropped_is_a_budget_store_error(tmp_path):
    import sqlite3

    from qdrant_guard.budget import BudgetStoreError, SqliteBudgetStore

    store = SqliteBudgetStore(tmp_path / "b.db")
    assert store.key_count() == 0
    other = sqlite3.connect(tmp_path / "b.db")
    other.execute("DROP TABLE qg_budget")
    other.commit()
    other.close()
    with pytest.raises(BudgetStoreError, match=r"b\.db.*no such table"):
        store.key_count()
    store.close()


# -- budget_stores: the sweep clock takes the larger of this process's and the file's advance ------

def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _keys_left(path):
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {key for (key,) in db.execute("SELECT key FROM qg_budget")}
    finally:
        db.close()


def _set_meta(path, **values):
    import sqlite3

    db = sqlite3.connect(path)
    with db:
        db.executemany("INSERT OR REPLACE INTO qg_budget_meta (name, value) VALUES (?, ?)", list(values.items()))
    db.close()


@pytest.mark.skipif(_boot_id() is None, reason="needs Linux's boot id")
def test_a_process_whose_first_sweep_did_not_advance_the_clock_still_counts_the_time_down(tmp_path):
    """The file's clock was last advanced 500 s ago on this boot. A new process's first admission
    (its now only 0.01 s past the clock, under the 0.1 s step) leaves it and anchors the process at
    the clock; its next admission, at now 1400, must still advance the clock by the 500 s the file
    measured (to 1400), not by the milliseconds since the anchor, so rows of 1000 are swept
    (``clock - (mono - advanced_at)``: the process's own advance was taken, and nothing was)."""
    import time

    from qdrant_guard.budget import SqliteBudgetStore

    path = str(tmp_path / "b.db")
    first = SqliteBudgetStore(path)
    first.admit("old", ["i:1"], cap=5, window_s=100, now=1000.0)
    first.close()
    _set_meta(path, clock=1000.0, mono=time.monotonic() - 500.0)
    store = SqliteBudgetStore(path)
    store.admit("b1", ["i:1"], cap=5, window_s=100, now=1000.01)
    assert "old" in _keys_left(path)
    store.admit("b2", ["i:1"], cap=5, window_s=100, now=1400.0)
    assert _keys_left(path) == {"b2"}
    store.close()


@pytest.mark.skipif(_boot_id() is None, reason="needs Linux's boot id")
def test_a_process_keeps_its_own_advance_when_the_file_was_last_set_behind_it(tmp_path):
    """Another process (its wall clock behind) set the file's clock to 1000 just now; this process
    anchored at 1000 half a second earlier, so it may take the clock to 1000.5 and sweep the rows
    of 1000 under a 0.05 s window (``mono + advanced_at``: the file's advance was always taken,
    the few milliseconds since it was set, and the row stayed)."""
    import time

    from qdrant_guard.budget import SqliteBudgetStore

    path = str(tmp_path / "b.db")
    store = SqliteBudgetStore(path)
    store.admit("old", ["i:1"], cap=5, window_s=0.05, now=1000.0)
    time.sleep(0.5)
    _set_meta(path, clock=1000.0, mono=time.monotonic())
    store.admit("new", ["i:1"], cap=5, window_s=0.05, now=2000.0)
    assert _keys_left(path) == {"new"}
    store.close()


def test_the_files_clock_is_written_once_it_has_moved_a_thousandth_of_the_window(tmp_path):
    """Window 1000 s: an advance of 0.9995 s is not written (``clock - window / 1000`` and a
    thousandth as 1/1001 wrote it), one of exactly 1 s is (``>``, 1/999 and a deleted
    ``_set_clock`` left the file's clock where it was)."""
    import sqlite3

    from qdrant_guard.budget import SqliteBudgetStore

    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    def file_clock():
        db = sqlite3.connect(path)
        try:
            return db.execute("SELECT value FROM qg_budget_meta WHERE name = 'clock'").fetchone()[0]
        finally:
            db.close()

    path = str(tmp_path / "b.db")
    mono = Clock()
    store = SqliteBudgetStore(path, monotonic=mono)
    store.admit("a", ["i:1"], cap=5, window_s=1000, now=1000.5)
    assert file_clock() == 1000.5
    mono.t = 0.9995
    store.admit("b", ["i:1"], cap=5, window_s=1000, now=5000.0)
    assert file_clock() == 1000.5
    mono.t = 1.0
    store.admit("c", ["i:1"], cap=5, window_s=1000, now=5000.0)
    assert file_clock() == 1001.5
    store.close()


@pytest.mark.skipif(_boot_id() is None, reason="needs Linux's boot id")
def test_a_store_with_its_own_clock_drops_the_files_boot_time_when_it_moves_the_clock(tmp_path):
    """A store with an injected monotonic clock moves the file's clock to 1990; the boot's
    monotonic time of the clock's last advance (10000 s ago, at 1000) no longer belongs to it.
    Left in the file, the next process on this boot took the clock 10000 s past 1990 and, with a
    wall clock that jumped ahead, swept rows still in the window."""
    import time

    from qdrant_guard.budget import SqliteBudgetStore

    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    path = str(tmp_path / "b.db")
    first = SqliteBudgetStore(path)
    first.admit("x", ["i:1"], cap=5, window_s=100, now=1000.0)
    first.close()
    _set_meta(path, mono=time.monotonic() - 10000.0)
    mono = Clock()
    own = SqliteBudgetStore(path, monotonic=mono)
    own.admit("y", ["i:1"], cap=5, window_s=100, now=1000.0)
    mono.t = 1000.0
    own.admit("keep", ["i:1"], cap=5, window_s=100, now=1990.0)
    own.close()
    later = SqliteBudgetStore(path)
    later.admit("other", ["i:1"], cap=5, window_s=100, now=1e6)
    assert "keep" in _keys_left(path)
    later.close()

# -- boundary: the default lifetime ----------------------------------------------------------------

def test_a_credential_lives_an_hour_by_default():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import issue_credential, verify_credential

    key = Ed25519PrivateKey.generate()
    who = verify_credential(issue_credential(key, agent_id="a", boundary="b", now=5000.5),
                            authorities={"b": key.public_key()}, now=5001, leeway_s=0)
    assert who.expires_at == 5000 + 3600



@pytest.mark.parametrize("ttl, lives", [(0.5, 1), (1, 1), (1.5, 2)])
def test_a_credential_lives_its_ttl_rounded_up_to_whole_seconds(ttl, lives):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import issue_credential, verify_credential

    key = Ed25519PrivateKey.generate()
    who = verify_credential(issue_credential(key, agent_id="a", boundary="b", ttl_s=ttl, now=7000),
                            authorities={"b": key.public_key()}, now=7000, leeway_s=0)
    assert who.expires_at == 7000 + lives


def test_a_credential_id_holds_128_random_bits():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import _unb64url, issue_credential, verify_credential

    key = Ed25519PrivateKey.generate()
    ids = {verify_credential(issue_credential(key, agent_id="a", boundary="b", now=7000),
                             authorities={"b": key.public_key()}, now=7000).jti for _ in range(20)}
    assert len(ids) == 20 and {len(_unb64url(j)) for j in ids} == {16}


def test_an_unknown_key_is_not_said_to_be_the_authority_of_a_malformed_boundary_entry():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential

    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    token = issue_credential(key, agent_id="a", boundary="b", now=7000)
    for broken in ("not a key", [b"raw bytes"]):
        with pytest.raises(CredentialRejected) as ei:
            verify_credential(token, authorities={"b": [other.public_key()], "x": broken}, now=7000)
        assert ei.value.reason == "unknown_key" and "it is an authority of" not in str(ei.value)
    with pytest.raises(CredentialRejected, match=r"\(it is an authority of 'x'\)"):
        verify_credential(token, authorities={"b": [other.public_key()], "x": [key.public_key()]}, now=7000)


def test_a_rejection_names_a_time_out_of_datetimes_range_as_its_number():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.boundary import CredentialRejected, issue_credential, verify_credential

    key = Ed25519PrivateKey.generate()
    auth = {"b": key.public_key()}
    old = issue_credential(key, agent_id="a", boundary="b", now=-1e20)
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(old, authorities=auth, now=0)
    assert ei.value.reason == "expired" and "expired at -99999999999999996400 (exp -99999999999999996400)" in str(ei.value)
    later = issue_credential(key, agent_id="a", boundary="b", now=1e20)
    with pytest.raises(CredentialRejected) as ei:
        verify_credential(later, authorities=auth, now=0)
    assert ei.value.reason == "not_yet_valid" and "valid from 100000000000000000000 (iat" in str(ei.value)

# -- identifiers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("word", ["os.py", "ab.cd", "x.yz"])
def test_a_dotted_name_with_a_part_of_two_letters_is_a_code(word):
    from qdrant_guard.identifiers import generalize_identifiers, identifier_kind

    assert identifier_kind(word, sentence_start=False) == "CODE"
    assert generalize_identifiers(f"then run {word} again") == "then run [CODE] again"


@pytest.mark.parametrize("word", ["Jo", "Al", "Li"])
def test_a_capitalised_word_of_two_letters_is_a_name_mid_sentence(word):
    from qdrant_guard.identifiers import generalize_identifiers, identifier_kind

    assert identifier_kind(word, sentence_start=False) == "NAME"
    assert identifier_kind(word, sentence_start=True) is None
    assert generalize_identifiers(f"{word} asked {word} twice") == f"{word} asked [NAME] twice"


@pytest.mark.parametrize("text", [' "Alice said so', "\t(Alice said so", "  Alice said so", "'Bob'"])
def test_a_word_after_only_spaces_and_openers_at_the_start_starts_a_sentence(text):
    from qdrant_guard.identifiers import generalize_identifiers

    assert generalize_identifiers(text) is text


def test_a_placeholder_word_at_the_start_is_not_kept_by_a_bracket_at_the_end():
    from qdrant_guard.identifiers import drop_identifiers, generalize_identifiers

    # text[start - 1] at start 0 is the text's last character: "[" there does not open "SSN]".
    assert generalize_identifiers("SSN] see [") == "[CODE]] see ["
    assert drop_identifiers("NAME] of [") == "] of ["
    assert generalize_identifiers("x [SSN] see [") == "x [SSN] see ["
    # A word ending the text after a "[" has no "]" after it (end <= len(text) read past the end).
    assert generalize_identifiers("call [Alice") == "call [[NAME]"
    assert generalize_identifiers("see [SSN") == "see [[CODE]"


@pytest.mark.parametrize("text, expected", [
    ("Alice went home", "Alice went home"),        # the text's start (j < -1 read its last character)
    ("x Alice went home", "x [NAME] went home"),   # a word at position 0 ends no sentence (j <= 0)
    ("ok. Alice went", "ok. Alice went"),
])
def test_only_the_texts_start_or_a_sentence_end_starts_a_sentence(text, expected):
    from qdrant_guard.identifiers import generalize_identifiers

    assert generalize_identifiers(text) == expected


@pytest.mark.parametrize("members", [{0, 1}, {0: "a", 1: "b"}, frozenset({1}), [True], (0, True)])
def test_key_indices_that_are_no_list_or_tuple_of_plain_ints_are_refused(tmp_path, members):
    """_plain_members' fast path: a set or dict taken as key indices (``kind is list``, ``kind is
    tuple`` or the negated test) and a bool taken as an index (``type(k) is int``)."""
    from qdrant_guard import GuardArgumentTypeError, GuardArgumentValueError
    from qdrant_guard.budget import MemoryBudgetStore

    store = MemoryBudgetStore()
    with pytest.raises((GuardArgumentTypeError, GuardArgumentValueError)):
        store.admit_points([("a", 2), ("b", 2)], [("i:1", members)], window_s=10, now=0)
    assert store.admit_points([("a", 2), ("b", 2)], [("i:1", [0, 1])], window_s=10, now=0) == ([True], [(0, 1), (0, 1)])


# -- canonical -------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"{", b"\xff", b"nope", b'{"a":1}x'])
def test_bytes_that_are_no_utf8_json_are_a_value_error_and_not_canonical(data):
    from qdrant_guard import GuardArgumentValueError
    from qdrant_guard.canonical import decode_canonical, is_canonical

    with pytest.raises(GuardArgumentValueError, match="not valid UTF-8 JSON"):
        decode_canonical(data)
    assert is_canonical(data) is False
    assert is_canonical(b'{"a":1}') is True and is_canonical(b'{"a": 1}') is False
