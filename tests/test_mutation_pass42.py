"""Mutation pass 42: the survivors, among the mutants of this session's changes (62a094c..68757ce:
averify's sans-IO core, the untagged-source warning, missing_key_files, the version-file and path
rules of the Python detect twin), that no test reached. Real qdrant-client local mode where a
collection is written.
"""
from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest
from qdrant_client import models
from test_onboard import POLICY, _agent, _client, _points, _untagged_warnings, workdir  # noqa: F401 (a fixture)

from qdrant_guard import AsyncQdrantClient
from qdrant_guard.overhead import Replay

# ------------------------------------------------------------------ sources: the warning's top-10 figure


@pytest.mark.parametrize("fraction, top10", [(0.05, 1), (0.19, 1), (0.95, 9)])
def test_the_warnings_top10_figure_is_what_a_top10_query_returns(workdir: Path, fraction: float,
                                                                  top10: int) -> None:
    """The warning's "at most N" is the cap a query applies: max(1, floor(10 * fraction)). Mutants
    floored at 2 or 0, or counted 11 (0.19 read 2, 0.95 read 10 and said nothing), passed every
    test at the default 0.4."""
    (workdir / "policy.toml").write_text(
        POLICY + f"[collections.tickets.diversity]\nmax_source_fraction = {fraction}\n")
    client = _client()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.upsert("tickets", _points(range(1, 21)))
    found = _untagged_warnings(caught)
    assert len(found) == 1, [str(w.message) for w in caught]
    assert f"a top-10 query returns at most {top10} of them" in str(found[0].message)
    assert len(client.query_points("tickets", query=[0.1, 0.2, 0.3, 0.4], limit=10).points) == top10
    client.close()


# ------------------------------------------------------------------ writes: upsert's answer


def test_a_guarded_upsert_returns_qdrants_answer(workdir: Path) -> None:
    """op_upsert now warns after the write and then returns its answer: a mutant returning None
    (the call's answer lost) passed every test, which looked only at the warning or the points."""
    client = _client()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        answer = client.upsert("tickets", _points(range(1, 3)))
    assert isinstance(answer, models.UpdateResult) and answer.status == models.UpdateStatus.COMPLETED
    client.close()



# ------------------------------------------------------------------ _facade: each call's warnings


def test_a_sync_write_interrupted_as_it_returns_has_shown_its_warning_already(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync twin of test_review60's cancelled async write: a KeyboardInterrupt (a Ctrl-C)
    landing after the write, as the guard notes the write for the source-size cache. The warning
    is shown before the write is sent (2026-12-08, h-warn2; it used to be queued for the end of
    the call, and an interrupted call left it to the collection's next write), so the interrupted
    call has shown it, at its caller's line, and the next write does not repeat it."""
    client = _client()
    shared = client._guard.shared
    epoch = shared["size_epoch"]

    class Interrupted:  # the guard's own epoch, but a Ctrl-C lands as it notes the write
        def __getattr__(self, name: str) -> object:
            return getattr(epoch, name)

        def wrote(self, **kwargs: object) -> None:
            epoch.wrote(**kwargs)
            raise KeyboardInterrupt

    monkeypatch.setitem(shared, "size_epoch", Interrupted())
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            client.upsert("tickets", _points(range(1, 6)))
    shared["size_epoch"] = epoch
    with warnings.catch_warnings(record=True) as after:
        warnings.simplefilter("always")
        client.count("kb")
        client.upsert("tickets", _points(range(6, 8)))
    assert client.count("tickets").count == 7  # the interrupted write was made
    (found,) = _untagged_warnings(first)
    assert "5 of the 5 point(s)" in str(found.message) and found.filename == __file__
    assert not _untagged_warnings(after)
    client.close()


def _replayed_warnings() -> list[warnings.WarningMessage]:
    """The untagged-source warnings of an upsert the guard drives outside a facade, as
    overhead.py's guard-only replay (bench's) does, on a client of its own."""
    other = _client()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Replay(other, "upsert", ("tickets", _points(range(1, 4))), {}).record()
    other.close()
    return _untagged_warnings(caught)


def test_an_operation_driven_outside_a_facade_warns_where_it_runs(workdir: Path) -> None:
    """No call's queue to leave it on: the warning is shown at once. A mutant that dropped that
    warnsite.warn passed every test, all of which wrote through a facade."""
    assert len(_replayed_warnings()) == 1


def test_a_guarded_call_leaves_no_warning_queue_behind(workdir: Path) -> None:
    """An operation the guard drives outside a facade after guarded calls (sync and async) of
    the same thread shows its own warning. (Until 2026-12-08 the facade queued each call's
    warnings in a context variable, and one left set put a later operation's warning on a
    finished call's list, where nothing showed it.)"""
    client = _client()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client.upsert("tickets", _points(range(1, 3)))
    client.close()
    assert len(_replayed_warnings()) == 1

    async def run() -> list[warnings.WarningMessage]:
        aclient = AsyncQdrantClient(":memory:", guard="policy.toml", principal=_agent())
        await aclient.create_collection("tickets", vectors_config=models.VectorParams(
            size=4, distance=models.Distance.COSINE))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await aclient.upsert("tickets", _points(range(1, 3)))
        await aclient.close()
        return _replayed_warnings()

    assert len(asyncio.run(run())) == 1
