"""Tests from mutation pass 12 (h-mut12 branch, 2026-12-06): the in-memory budget store's kept
state (sweep queue, kept spans and listings), the CLI's key trust for ``audit verify --policy``
and ``--trust-policy``, and the audit verifier's key-id display.

Each test kills mutants of ``scripts/mutate.py`` that survived every older test of the code.
docs/security-testing.md ("Mutation pass 12") lists the mutants, which test kills each and the
equivalent ones. Real stores, real keys and files; no mocks.
"""
from __future__ import annotations

import uuid

import pytest
from sweepkit import W, Clock
from test_review24 import _forge_kid
from test_retired_keys import _old_checkpoint, _policy_file, _verify_lines, _write_under_a, rot  # noqa: F401

from qdrant_guard import GuardArgumentTypeError, QdrantGuardError, cli_policy_keys, keys
from qdrant_guard.audit import verify_audit_file
from qdrant_guard.budget import MemoryBudgetStore
from qdrant_guard.receipts import ReceiptSigner, normalize_point_id
from qdrant_guard.cli import main


# ------------------------------------------------------------------ memory store: the sweep queue

def test_a_key_admitted_again_goes_to_the_back_of_the_sweep_queue():
    """``_put`` moves a re-admitted key to the back of the sweep's queue: without
    ``idle.move_to_end`` it kept its old place at the front with a fresh due time, so every sweep
    stopped at it and the idle keys behind it were never dropped."""
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    store.admit("src|p|c|a", ["1"], cap=5, window_s=W, now=clock())
    store.admit("src|p|c|b", ["1"], cap=5, window_s=W, now=clock())
    clock.t = W / 2
    store.admit("src|p|c|a", ["1"], cap=5, window_s=W, now=clock())  # a is fresh again, b is not
    clock.t = W + 1  # b idle on both clocks, a not
    store.admit("src|q|c|z", ["1"], cap=5, window_s=W, now=clock())
    assert store.key_count() == 2  # a and z; b swept


def test_a_key_past_the_window_only_on_the_sweeps_clock_is_kept_until_its_ids_leave():
    """The sweep drops a key only when its newest id is older than ``now - window``: an id
    exactly ``window`` old still counts (an admission keeps ``ts >= now - window``). With ``<=``
    the sweep dropped it, and the key's next admission at that ``now`` released an id past the
    cap."""
    mono = Clock()
    store = MemoryBudgetStore(monotonic=mono)
    assert store.admit("src|p|c|a", ["1"], cap=1, window_s=W, now=0.0) == (["1"], [])
    mono.t = W + 1  # idle on the sweep's clock
    store.admit("src|q|c|z", ["1"], cap=1, window_s=W, now=W)  # sweeps a at now == W
    assert store.admit("src|p|c|a", ["2"], cap=1, window_s=W, now=W) == ([], ["2"])
    assert store.entries_by_prefix("src|p|", window_s=W, now=W) == {"src|p|c|a": frozenset({"1"})}


def test_a_key_the_callers_clock_still_counts_goes_to_the_back_and_the_sweep_goes_on():
    """A key idle on the monotonic clock whose ids the callers' clock still counts (a caller
    whose ``now`` runs ahead) is moved to the back of the queue: without ``idle.move_to_end``
    in ``_sweep`` it stayed at the front, every sweep looked at it alone, and the idle keys
    behind it were never dropped."""
    mono = Clock()
    store = MemoryBudgetStore(monotonic=mono)
    store.admit("src|p|c|ahead", ["1"], cap=5, window_s=W, now=100.0)
    store.admit("src|p|c|idle", ["1"], cap=5, window_s=W, now=0.0)
    mono.t = W + 1
    store.admit("src|q|c|z", ["1"], cap=5, window_s=W, now=W + 1)
    assert store.key_count() == 2  # ahead (its ids count until now 110) and z; idle swept
    assert store.seen("src|p|c|ahead", window_s=W, now=W + 1) == 1


def _admit_point(store, key, pid, now, cap=5):
    released, _ = store.admit_points([(key, cap)], [(pid, [0])], window_s=W, now=now)
    return released


def test_a_key_read_again_goes_to_the_back_of_the_sweep_queue():
    """``admit_points`` updates a held key inline (not through ``_put``) and must move it to the
    back of the queue too: without that ``move_to_end`` the idle key behind it was never swept."""
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    _admit_point(store, "src|p|c|a", "1", clock())
    _admit_point(store, "src|p|c|b", "1", clock())
    clock.t = W / 2
    _admit_point(store, "src|p|c|a", "1", clock())  # held: the inline path
    clock.t = W + 1
    _admit_point(store, "src|q|c|z", "1", clock())
    assert store.key_count() == 2  # a and z; b swept


def test_a_read_from_a_caller_behind_the_newest_id_keeps_the_key_until_its_ids_leave():
    """A caller whose clock is behind a key's newest id (here 100 s) reads it again: the key's
    due time on the monotonic clock is ``mono + (newest - now)``, so it is not swept before its
    ids have left the window on that clock too. With ``mono - (newest - now)`` it was swept at
    once by a caller whose clock had jumped ahead, and a caller back at 100 s then had an id
    released past the cap."""
    mono = Clock()
    store = MemoryBudgetStore(monotonic=mono)
    assert _admit_point(store, "src|p|c|a", "1", 100.0, cap=1) == [True]
    assert _admit_point(store, "src|p|c|a", "1", 0.0, cap=1) == [True]  # a re-read: free
    mono.t = W + 1
    store.admit("src|q|c|z", ["1"], cap=1, window_s=W, now=200.0)  # a clock jumped ahead sweeps
    assert _admit_point(store, "src|p|c|a", "2", 100.0, cap=1) == [False]


def test_keys_read_at_the_callers_now_are_swept_a_window_later():
    """The due time of a key a read admits is ``mono + (newest - now)``, which is ``mono`` when
    the newest id is the read's: with ``newest + now`` the key (new, through ``_put``, or held,
    inline) stayed ``2 * now`` longer than its window and the store held keys it should drop."""
    clock = Clock(50.0)
    store = MemoryBudgetStore(monotonic=lambda: clock.t - 50.0)
    _admit_point(store, "src|p|c|a", "1", clock())
    _admit_point(store, "src|p|c|b", "1", clock())
    _admit_point(store, "src|p|c|a", "1", clock())  # held: the inline path
    clock.t = 50.0 + W + 1
    _admit_point(store, "src|q|c|z", "1", clock())
    assert store.key_count() == 1  # a and b swept


def test_reads_alone_sweep_idle_keys():
    """``admit_points`` (a read's admission) runs the sweep too: without it, or with a budget of
    ``_SWEEP_STEP - 2 * len(keys)`` (none for a read of four sources or more), a process that
    only read held every source key it ever admitted."""
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    most = 0
    for tick in range(200):
        clock.t = float(tick)
        keys = [(f"src|p{tick}|c|s{j}", 5) for j in range(5)]
        store.admit_points(keys, [(f"{j}", [j]) for j in range(5)], window_s=W, now=clock())
        most = max(most, store.key_count())
    assert most <= 5 * (int(W) + 2)


def test_a_reset_store_sweeps_again_without_error():
    """``reset()`` empties the sweep's queue with the keys: a key left queued had no entries to
    look at, and the first sweep to reach it raised KeyError out of an unrelated admission."""
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    store.admit("src|p|c|a", ["1"], cap=5, window_s=W, now=clock())
    store.reset()
    clock.t = W + 1
    assert store.admit("src|q|c|z", ["1"], cap=5, window_s=W, now=clock()) == (["1"], [])
    assert _admit_point(store, "src|q|c|y", "1", clock()) == [True]
    assert store.key_count() == 2


# ------------------------------------------------------------------ memory store: kept listings

def test_a_kept_listing_ends_when_any_keys_oldest_id_leaves_the_window():
    """A listing is kept with the oldest timestamp of all its keys, and is answered again only
    while that id is in the window. With the keys' newest ids compared instead (``span[1] <
    lowest``), a key met after one whose ids are all newer set nothing, the listing was kept
    past its other key's oldest id, and it went on listing that id, gone from the window. Each
    group's keys are a set, met in hash order: twenty groups make one of them meet the late key
    first."""
    store = MemoryBudgetStore(monotonic=lambda: 0.0)
    for g in range(20):
        store.admit(f"src|p|c{g}|early", ["1"], cap=5, window_s=W, now=0.0)
        store.admit(f"src|p|c{g}|late", ["3"], cap=5, window_s=W, now=8.0)
        store.admit(f"src|p|c{g}|early", ["2"], cap=5, window_s=W, now=9.0)
    for g in range(20):
        assert store.entries_by_prefix(f"src|p|c{g}|", window_s=W, now=9.0) == {
            f"src|p|c{g}|early": frozenset({"1", "2"}), f"src|p|c{g}|late": frozenset({"3"})}
    for g in range(20):
        assert store.entries_by_prefix(f"src|p|c{g}|", window_s=W, now=W + 0.5) == {
            f"src|p|c{g}|early": frozenset({"2"}), f"src|p|c{g}|late": frozenset({"3"})}, g


def test_the_store_keeps_at_most_1024_listings():
    """Past 1024 kept listings (one per principal and collection read lately) all are dropped;
    without that ``clear()`` a process reading for many principals kept one listing per
    principal and collection it ever read (and with ``>`` it kept 1025)."""
    store = MemoryBudgetStore(monotonic=lambda: 0.0)
    for i in range(1100):
        store.admit(f"src|p{i}|c|s", ["1"], cap=5, window_s=W, now=0.0)
    most = 0
    for i in range(1100):  # no group is made in between, which would drop every kept listing
        assert store.entries_by_prefix(f"src|p{i}|c|", window_s=W, now=0.0) == {f"src|p{i}|c|s": frozenset({"1"})}
        most = max(most, len(store._listings))
    assert most == 1024


def test_a_kept_listing_is_not_answered_after_a_longer_window_refreshed_a_key_past_it():
    """One store serves every collection's window. A refresh by a caller with a longer window
    moves a key's newest id later without changing its ids, so a kept listing is not dropped;
    it holds only while ``max(now, _latest) - window`` stays within it, and ``_latest`` must
    follow every admission. With ``_admit_many``'s update negated ``_latest`` stayed -inf, and a
    caller whose clock is behind got the kept listing back, an id the refresh had put out of its
    window included."""
    store = MemoryBudgetStore(monotonic=lambda: 0.0)
    store.admit("src|p|c|s", ["a"], cap=5, window_s=W, now=0.0)
    store.admit("src|p|c|s", ["b"], cap=5, window_s=W, now=5.0)
    assert store.entries_by_prefix("src|p|c|", window_s=W, now=5.0) == {"src|p|c|s": frozenset({"a", "b"})}
    store.admit("src|p|c|s", ["b"], cap=5, window_s=10 * W, now=50.0)  # a refresh: no id added
    assert store.entries_by_prefix("src|p|c|", window_s=W, now=5.0) == {"src|p|c|s": frozenset({"b"})}
    assert store.admit("src|p|c|s", ["c", "d"], cap=2, window_s=W, now=5.0) == (["c"], ["d"])


def test_admissions_of_many_keys_at_once_sweep_idle_keys():
    """``admit_many_counted`` sweeps with a budget of ``_SWEEP_STEP + 2 * len(requests)``; with
    ``-`` there was none for four requests or more, and the store held every key."""
    clock = Clock()
    store = MemoryBudgetStore(monotonic=clock)
    most = 0
    for tick in range(200):
        clock.t = float(tick)
        store.admit_many_counted([(f"src|p{tick}|c|s{j}", ["1"], 5) for j in range(5)], window_s=W, now=clock())
        most = max(most, store.key_count())
    assert most <= 5 * (int(W) + 2)


# ------------------------------------------------------------------ cli: the signing key's .pub

def _guard_key_pair(tmp_path):
    sk, pk = keys.generate_keypair()
    path = tmp_path / "guard.key"
    path.write_bytes(keys.private_key_to_pem(sk))
    path.chmod(0o600)
    (tmp_path / "guard.key.pub").write_text(keys.public_key_to_str(pk) + "\n")
    return path, keys.key_id(pk)


def test_a_signing_keys_pub_decides_when_the_private_key_is_not_there(tmp_path):
    """An auditor without the private key (absent or unreadable to them) verifies under its
    ``.pub``: the OSError branch of ``_signing_public_key`` returns that key. Negated, or
    returning None, or not raising on other errors, no test saw it."""
    path, kid = _guard_key_pair(tmp_path)
    path.unlink()
    assert keys.key_id(cli_policy_keys._signing_public_key(str(path))) == kid


def test_a_signing_key_that_does_not_load_is_an_error_even_with_its_pub(tmp_path):
    """A private key file that is there but is no key is reported, not passed over for the
    ``.pub`` (which then could be any key): only an unreadable file lets the ``.pub`` decide."""
    path, _ = _guard_key_pair(tmp_path)
    path.write_text("not a key\n")
    with pytest.raises(QdrantGuardError, match="not an unencrypted PEM"):
        cli_policy_keys._signing_public_key(str(path))


def test_audit_verify_policy_with_a_signing_key_that_is_not_there_says_which_knob(tmp_path, capsys):
    """No private key and no ``.pub``: ``--policy: signing_key: cannot read key file``, exit 2.
    Without the ``raise`` in ``_policy_signing_keys`` the command died on an unbound local."""
    (tmp_path / "audit.jsonl").write_text("")
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{tmp_path / "gone.key"}"\naudit_log = "{tmp_path / "audit.jsonl"}"\n')
    assert main(["audit", "verify", str(tmp_path / "audit.jsonl"), "--policy", str(policy)]) == 2
    assert "--policy: signing_key: cannot read key file" in capsys.readouterr().err


def test_receipt_verify_names_a_revoked_signer_revoked(rot, tmp_path, capsys):  # noqa: F811
    """``receipt verify --policy -v`` gives each receipt's key a status; a key the policy revokes
    (here given by ``--trusted-key`` too) is "revoked", whatever else trusts it. ``_key_status``
    returning None for it survived: no test had a receipt by a revoked key."""
    _write_under_a(rot)
    path = _policy_file(rot, tmp_path, retired=False)
    path.write_text(path.read_text().replace("[boundaries.", f'[receipts]\nrevoked_keys = ["{rot["a_kid"]}"]\n[boundaries.', 1))
    rc, out, lines = _verify_lines(capsys, ["receipt", "verify", "--path", str(rot["store"]), "--collection", "scoped",
                                            "--verbose", "--trusted-key", str(rot["a_pub"]), "--policy", str(path)])
    assert rc == 1, out
    assert {x["id"]: (x["ok"], x["reason"], x["key"], x["key_status"]) for x in lines} == {
        str(i): (False, "revoked_key", rot["a_kid"], "revoked") for i in (1, 2, 3)}, out


def test_audit_verify_policy_refusing_a_revoked_key_says_how_to_fix_the_option_that_gave_it(rot, tmp_path,  # noqa: F811
                                                                                             capsys):
    """A revoked key given by ``--key`` is refused with the fix for ``--key`` (drop it, or run
    without the policy), a revoked ``signing_key`` with the fix for the policy (a new key):
    ``by_key`` negated swapped the two and no test read the fix."""
    log = _old_checkpoint(rot)  # a checkpoint signed by key A
    path = _policy_file(rot, tmp_path, retired=False)  # signing_key B
    revoked = path.read_text().replace("[boundaries.", '[receipts]\nrevoked_keys = ["{}"]\n[boundaries.', 1)
    argv = ["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(path)]
    path.write_text(revoked.format(rot["a_kid"]))
    assert main(argv + ["--key", str(rot["a_pub"])]) == 2
    err = capsys.readouterr().err
    assert "--key gives key" in err and "drop that --key" in err and "keys new" not in err, err
    path.write_text(revoked.format(rot["b_kid"]))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "its signing_key is key" in err and "set signing_key to a new key" in err and "drop that" not in err, err


def test_audit_verify_policy_naming_no_key_says_so(tmp_path, capsys):
    """A policy with no signing_key, retired_keys or audit_trusted_keys can vouch for no
    checkpoint: refused, exit 2. Without that ``raise`` the log was checked under no key at all,
    so a log with a checkpoint read TAMPERED (its key "not trusted") and one without read OK."""
    log = tmp_path / "audit.jsonl"
    log.write_text("")
    policy = tmp_path / "policy.toml"
    policy.write_text(f'audit_log = "{log}"\n')
    assert main(["audit", "verify", str(log), "--policy", str(policy)]) == 2
    captured = capsys.readouterr()
    assert "names no signing_key, receipts.retired_keys or audit_trusted_keys" in captured.err, captured.err
    assert "OK" not in captured.out


# ------------------------------------------------------------------ audit: a forged key id's display

@pytest.mark.parametrize(("spaces", "cut"), [(198, False), (199, True), (400, True)])
def test_a_forged_key_id_is_shown_escaped_and_cut_at_200_characters(tmp_path, spaces, cut):
    """A checkpoint's key id is file text outside the hash: one that is not plain printable ASCII
    is shown as its ``ascii()`` escape (here 2 quotes and the spaces), whole up to 200
    characters, else its first 200 and "...(cut)". No test had an escape of 200 or more."""
    signer = ReceiptSigner(keys.generate_keypair()[0])
    path = tmp_path / "audit.jsonl"
    kid = " " * spaces
    _forge_kid(path, signer, 3, 2, kid)
    rep = verify_audit_file(path, trusted_keys={signer.key_id: signer.public_key}, checkpoint_every=2)
    assert not rep.ok and rep.problem == "bad_checkpoint" and rep.index == 2
    shown = ascii(kid)[:200] + "...(cut)" if cut else ascii(kid)
    assert f"checkpoint key {shown} is not trusted" in rep.detail, rep.detail
    assert ("...(cut)" in rep.detail) is cut


# ------------------------------------------------------------------ receipts: a UUID without a value

def test_a_uuid_subclass_instance_holding_no_value_is_a_type_error():
    """A ``uuid.UUID`` subclass made without ``__init__`` holds no 128-bit value: refused as a
    ``GuardArgumentTypeError`` naming it. Without that ``raise`` it was an ``UnboundLocalError``."""
    class Bare(uuid.UUID):
        pass

    with pytest.raises(GuardArgumentTypeError, match="holds no UUID value"):
        normalize_point_id(object.__new__(Bare))
