"""qdrant-client's warnings, issued through the guard, land on the caller's line as they do without
it (qdrant_guard.warnsite), in real local mode.

Before: on a line of qdrant_guard/_facade.py, so a script's DeprecationWarning was never shown
(Python shows one by default only when it lands in ``__main__``) and module filters never matched.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import qdrant_client
from qdrant_client.common import client_warnings
from qdrant_client.http import models
from qdrant_client.local.local_collection import LocalCollection

from guardkit import make_kit
from qdrant_guard import AsyncQdrantClient, QdrantClient

VECTORS = models.VectorParams(size=4, distance=models.Distance.COSINE)
IGNORED_BY_LOCAL_MODE = models.SearchParams(hnsw_ef=5)


def _issued(fn: Callable[[], Any]) -> list[tuple[type[Warning], str, int]]:
    """Each warning ``fn()`` issued: its category and the file and line it was attributed to."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [(w.category, w.filename, w.lineno) for w in seen]


async def _issued_async(fn: Callable[[], Any]) -> list[tuple[type[Warning], str, int]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        await fn()  # the call site
    return [(w.category, w.filename, w.lineno) for w in seen]


def _site(helper: Callable[..., Any]) -> tuple[str, int]:
    lines, first = inspect.getsourcelines(helper)
    return __file__, first + next(i for i, line in enumerate(lines) if line.rstrip().endswith("# the call site"))


@pytest.fixture(autouse=True)
def _each_warning_unseen(monkeypatch: pytest.MonkeyPatch) -> None:
    # qdrant-client shows some of its warnings once per process (show_warning_once).
    monkeypatch.setattr(client_warnings, "SEEN_MESSAGES", set())


def _clients(tmp_path: Path, *, is_async: bool = False) -> dict[str, Callable[[], Any]]:
    kit = make_kit(tmp_path)
    cfg = kit.config({"docs": {"class": "PUBLIC"}})
    raw, guarded = (qdrant_client.AsyncQdrantClient, AsyncQdrantClient) if is_async else (qdrant_client.QdrantClient,
                                                                                         QdrantClient)
    return {
        "qdrant-client": lambda: raw(":memory:"),
        "guard, no policy": lambda: guarded(":memory:"),
        "guard, policy": lambda: guarded(":memory:", guard=cfg, principal=kit.principal("alice", "hr")),
    }


CLIENTS = ["qdrant-client", "guard, no policy", "guard, policy"]


@pytest.mark.parametrize("which", CLIENTS)
def test_sync_client_warnings_land_on_the_callers_line(tmp_path: Path, which: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    c = _clients(tmp_path)[which]()
    c.create_collection("docs", vectors_config=VECTORS)
    monkeypatch.setattr(LocalCollection, "LARGE_DATA_THRESHOLD", 1)  # local mode's "too many points" warning
    calls = {
        "create_payload_index": lambda: c.create_payload_index("docs", "f", models.PayloadSchemaType.KEYWORD),
        "query_points": lambda: c.query_points("docs", query=[1.0, 0, 0, 0], search_params=IGNORED_BY_LOCAL_MODE),
        "upsert": lambda: c.upsert("docs", [models.PointStruct(id=i, vector=[1.0, i, 0, 0]) for i in (1, 2)]),
        "recreate_collection": lambda: c.recreate_collection("docs", vectors_config=VECTORS),
    }
    for method, call in calls.items():
        issued = _issued(call)
        assert issued, method
        # The caller is the lambda (its coroutine, in the async test, is awaited by _issued_async).
        assert [(f, n) for _, f, n in issued] == [(__file__, call.__code__.co_firstlineno)] * len(issued), method
    assert _issued(calls["recreate_collection"])[0][0] is DeprecationWarning
    c.close()


@pytest.mark.parametrize("which", CLIENTS)
def test_async_client_warnings_land_on_the_callers_line(tmp_path: Path, which: str) -> None:
    async def run() -> None:
        c = _clients(tmp_path, is_async=True)[which]()
        await c.create_collection("docs", vectors_config=VECTORS)
        here = _site(_issued_async)
        for method, call in {
            "create_payload_index": lambda: c.create_payload_index("docs", "f", models.PayloadSchemaType.KEYWORD),
            "query_points": lambda: c.query_points("docs", query=[1.0, 0, 0, 0], search_params=IGNORED_BY_LOCAL_MODE),
            "recreate_collection": lambda: c.recreate_collection("docs", vectors_config=VECTORS),
        }.items():
            issued = await _issued_async(call)
            assert [(f, n) for _, f, n in issued] == [here], method
        await c.close()

    asyncio.run(run())


def test_a_module_filter_names_the_callers_module_and_error_raises_the_warning(tmp_path: Path) -> None:
    # `-W error::DeprecationWarning:mymodule`: the warning is matched under the caller's module and
    # raised there as the exception qdrant-client raises; before, it was matched as qdrant_guard._facade.
    c = _clients(tmp_path)["guard, policy"]()
    c.create_collection("docs", vectors_config=VECTORS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", category=DeprecationWarning, module=__name__)
        with pytest.raises(DeprecationWarning, match="recreate_collection"):
            c.recreate_collection("docs", vectors_config=models.VectorParams(size=8, distance=models.Distance.DOT))
    assert c.get_collection("docs").config.params.vectors.size == 4  # raised before anything was sent
    c.close()


def test_a_script_is_shown_the_deprecation_warning_at_its_own_line(tmp_path: Path) -> None:
    # Python's default filters show a DeprecationWarning only where it lands in __main__.
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""\
        from qdrant_client.http import models
        from qdrant_guard import QdrantClient
        c = QdrantClient(":memory:")
        c.recreate_collection("docs", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
        """))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert f"{script}:4: DeprecationWarning: `recreate_collection` method is deprecated" in run.stderr, run.stderr


def test_threads_calling_one_client_each_get_their_own_line(tmp_path: Path) -> None:
    # Nothing is caught or re-emitted per call (warnings.catch_warnings is process-wide), so
    # concurrent callers cannot take each other's warnings or filters.
    import threading

    kit = make_kit(tmp_path)
    c = QdrantClient(":memory:", guard=kit.config({"a": {"class": "PUBLIC"}, "b": {"class": "PUBLIC"}}),
                     principal=kit.principal("alice", "hr"))
    for name in ("a", "b"):
        c.create_collection(name, vectors_config=VECTORS)

    def recreate_a() -> None:
        for _ in range(5):
            c.recreate_collection("a", vectors_config=VECTORS)

    def recreate_b() -> None:
        for _ in range(5):
            c.recreate_collection("b", vectors_config=VECTORS)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=fn) for fn in (recreate_a, recreate_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = sorted(w.lineno for w in seen if w.category is DeprecationWarning and w.filename == __file__)
    first = {fn: fn.__code__.co_firstlineno + 2 for fn in (recreate_a, recreate_b)}
    assert lines == sorted([first[recreate_a]] * 5 + [first[recreate_b]] * 5)
    c.close()


def test_every_qdrant_client_module_that_warns_is_given_the_view() -> None:
    # An upgrade of qdrant-client that warns from a module not loaded with it, or through
    # `from warnings import warn`, would put its warnings back on a guard line: this fails first.
    import re

    from qdrant_guard.warnsite import CLIENT_WARNINGS

    root = Path(qdrant_client.__file__).parent
    given = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        assert not re.search(r"^[ \t]*from warnings import", source, re.M), path
        assert not re.search(r"^[ \t]+import warnings\b", source, re.M), path  # a function's own import
        if re.search(r"^import warnings\b", source, re.M):
            name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
            assert name in sys.modules, f"{name} warns but is not loaded with qdrant_client"
            assert sys.modules[name].warnings is CLIENT_WARNINGS, name
            given.append(name)
    assert "qdrant_client.common.client_warnings" in given and "qdrant_client.qdrant_client" in given


def test_the_guards_own_warning_names_the_constructors_caller(tmp_path: Path) -> None:
    # The missing-signing_key warning (guard.warn_if_key_dies_with_the_process), sync and async.
    kit = make_kit(tmp_path)
    cfg = kit.config({"kb": {"class": "PII", "owner": "hr"}}, signing_key=None)
    make = lambda: QdrantClient(path=str(tmp_path / "store"), guard=cfg)  # noqa: E731
    amake = lambda: AsyncQdrantClient(path=str(tmp_path / "astore"), guard=cfg)  # noqa: E731
    for fn in (make, amake):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            client = fn()
        assert [(w.filename, w.lineno) for w in seen if "sets no signing_key" in str(w.message)] == [
            (__file__, fn.__code__.co_firstlineno)]
        if fn is make:
            client.close()


def test_the_bench_clean_up_warning_names_the_caller_of_measure_overhead() -> None:
    # measure_overhead calls drop_scratch after a --url run (no server here): its frame is played by
    # code run under a qdrant_guard module name. Before, the warning named that frame (stacklevel=2).
    from qdrant_guard.overhead import drop_scratch

    c = qdrant_client.QdrantClient(":memory:")
    c.close()  # deleting from a closed client fails
    in_the_guard = compile("left = drop_scratch(c, ['b'], 'http://host:6333')", "<measure_overhead>", "exec")
    namespace = {"__name__": "qdrant_guard.overhead", "drop_scratch": drop_scratch, "c": c}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        exec(in_the_guard, namespace)  # the call site
    assert namespace["left"] == ["b"]
    assert [(w.category, w.filename, w.lineno) for w in seen] == [(RuntimeWarning, *_site(
        test_the_bench_clean_up_warning_names_the_caller_of_measure_overhead))]


@pytest.mark.parametrize("stacklevel", [-1, 0, 1, 2, 3, 4, 50])
def test_without_a_guard_frame_the_view_warns_where_warnings_does(stacklevel: int) -> None:
    from qdrant_guard.warnsite import CLIENT_WARNINGS

    def nested(module: Any, depth: int) -> None:
        if depth:
            return nested(module, depth - 1)
        module.warn("x", UserWarning, stacklevel=stacklevel)  # the same line for both

    where = []
    for module in (warnings, CLIENT_WARNINGS):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            nested(module, 2)
        where.append([(w.filename, w.lineno) for w in seen])
    assert where[0] == where[1] and len(where[0]) == 1
