"""The thirty-first adversarial review (h-rev31): h-readperf's caches and shortcuts in the
extraction budget's read path, and h-rev30's behaviour changes. Each test failed on the code
before its fix (see docs/security-testing.md, "Thirty-first review")."""
from __future__ import annotations

import pytest

from qdrant_guard.budget import ExtractionBudget, MemoryBudgetStore
from tests.test_retired_keys import _old_checkpoint, _policy_file, rot  # noqa: F401 (rot: a fixture)

# ------------------------------------------------------------------ 1. a store's released flags, read twice
# admit_many's shortcut for "every point released" ran all() over the flags a store's admit_points
# returned, then, when one was False, zipped the same flags with the points. The BudgetStore
# contract says a sequence; a third-party store answering with an iterator (or a list shorter than
# the points) had its flags consumed by all() and the rest paired with the wrong points, or all()
# of a short list said "every point released": points the store refused were released. The code
# before the shortcut (1d4821b) read the flags once, by zip.


class _IteratorFlags(MemoryBudgetStore):
    """A store whose admit_points answers its flags as an iterator (a generator over a stream)."""

    def admit_points(self, keys, points, *, window_s, now):  # type: ignore[override]
        flags, counts = super().admit_points(keys, points, window_s=window_s, now=now)
        return iter(flags), counts


class _ShortFlags(MemoryBudgetStore):
    """A store whose admit_points answers flags only up to the first point it refused."""

    def admit_points(self, keys, points, *, window_s, now):  # type: ignore[override]
        flags, counts = super().admit_points(keys, points, window_s=window_s, now=now)
        return flags[:flags.index(False)] if False in flags else flags, counts


@pytest.mark.parametrize("store", [_IteratorFlags, _ShortFlags])
def test_a_point_the_store_refused_is_never_released(store):
    budget = ExtractionBudget(store(), window_s=100.0, clock=lambda: 1000.0)

    def read(requests):
        return budget.admit_many(principal="p", collection="c", requests=requests, max_source_coverage=0.25)

    assert read({"a": ([1], 4)})["a"].admitted == [1]  # source a's cap (1 of 4) is used up
    got = read({"a": ([2], 4), "b": ([3], 4)})
    assert got["a"].admitted == [] and got["a"].withheld == [2]
    # b's point was admitted (and charged) by the store; a short answer withholds it (fail closed).
    assert got["b"].admitted in ([3], []) and 2 not in got["b"].admitted
    assert budget.admitted_by_source(principal="p", collection="c")["a"] == frozenset({"i:1"})


# ------------------------------------------------------------------ 2. budget_key set on the budget itself
# admit_many builds each source's key inline unless the budget's class overrides budget_key; a
# budget_key set on the instance (a wrapper, as admit_points set on a store instance is honoured in
# _decide_points) was skipped, so a deployment counting every principal under one key (one
# budget per collection and source, whoever reads) counted each principal on its own again.


def test_a_budget_key_set_on_the_budget_instance_is_the_one_charged():
    budget = ExtractionBudget(MemoryBudgetStore(), window_s=100.0, clock=lambda: 1000.0)
    budget.budget_key = lambda principal, collection, source: ExtractionBudget.budget_key(  # type: ignore[method-assign]
        "everyone", collection, source)
    first = budget.admit_many(principal="p", collection="c", requests={"a": ([1], 4)}, max_source_coverage=0.25)
    assert first["a"].key == "src|everyone|c|a" and first["a"].admitted == [1]
    second = budget.admit_many(principal="q", collection="c", requests={"a": ([2], 4)}, max_source_coverage=0.25)
    assert second["a"].key == "src|everyone|c|a"
    assert second["a"].withheld == [2]  # the shared key's cap (1 of 4) is used up


# ------------------------------------------------------------------ 3. audit repair --trust-policy and --key
# h-rev30 made `audit repair --trust-policy` refuse a --signing-key the policy does not trust for
# checkpoints (the guard would not open the repaired log). The keys it compared with included
# those given by --key, which only widen what the verifier accepts: naming the stray key's .pub
# with --key let repair sign the log's last checkpoint with it, and the guard then refused the log.


def test_repair_refuses_a_signing_key_trusted_only_by_a_key_option(rot, tmp_path, capsys):  # noqa: F811
    from qdrant_guard.cli import main

    log = _old_checkpoint(rot)  # a checkpoint by key A, which the policy retires
    with open(log, "ab") as fh:
        fh.write(b'{"hash": "torn')
    before = log.read_bytes()
    policy = _policy_file(rot, tmp_path)
    stray = tmp_path / "stray.key"
    assert main(["keys", "new", "--out", str(stray)]) == 0
    capsys.readouterr()
    rc = main(["audit", "repair", str(log), "--trust-policy", str(policy), "--checkpoint-every", "1",
               "--key", f"{stray}.pub", "--signing-key", str(stray)])
    err = capsys.readouterr().err
    assert rc == 2 and "--signing-key" in err and "Nothing was changed" in err, err
    assert log.read_bytes() == before
    # The policy's own key still repairs, --key or not.
    assert main(["audit", "repair", str(log), "--trust-policy", str(policy), "--checkpoint-every", "1",
                 "--key", f"{stray}.pub", "--signing-key", str(rot["b"])]) == 0, capsys.readouterr()
    assert main(["audit", "verify", str(log), "--checkpoint-every", "1", "--policy", str(policy)]) == 0
