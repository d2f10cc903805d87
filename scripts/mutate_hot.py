#!/usr/bin/env python3
"""scripts/mutate.py's mutants, run about five times faster: the package, numpy, pydantic,
qdrant-client and pytest's plugins are imported once, and each mutant's pytest run is a fork of
that process with the mutant patched in.

Why: on this project a pytest run spends most of its time before the first test (importing
qdrant_guard and the plugins pytest loads from entry points, and rewriting their asserts), which
mutate.py pays again for every mutant. Here the child swaps the code objects (and argument
defaults) of the module's functions and methods for the mutant's, so every reference to them
(``from .sentpoints import sent_point`` elsewhere included) runs the mutant; a changed module-level
constant (a number, string, tuple, frozenset, dict or compiled regex) is set on the module. Instances of the module's own classes in a
constant (``_REGEX_CUES = (("x", _ScannedCue(...)), ...)``) are given the loaded classes back, so
``isinstance`` checks against them still hold; an ``lru_cache`` function's wrapped code is swapped
and its cache cleared. The baseline runs through the same patch with the unchanged source: a
module the patch itself breaks fails the baseline instead of reporting every mutant killed. The
mutated file is also written to disk, for tests that start a subprocess. Tests run with
``--assert=plain`` (a failing assert still fails; it is not explained).

Some mutants no patch of the loaded module can apply; those run cold, as scripts/mutate.py runs
them (a fresh ``python -m pytest`` with the mutated file on disk; its verdict line says ``cold``),
because patched they would be reported as the unchanged code's verdict or as killed by the patch
itself: a decorator's argument (``@dataclass(frozen=True)`` as False), a class-body value that is
not a dataclass field's plain default (a pydantic field's default lives in its compiled validator),
a module-level statement other than a constant of the types above (a list, a function chosen by an
``if``, ``os.register_at_fork(...)``), a constant another module of the package or a file of the
test selection imports by name, or one computed at import from a mutated constant or function
(``from .x import LIMIT`` binds a copy the patch cannot reach: the importer would go on reading
the old value), a function another decorator wraps, a function or method that made a closure
still alive after the imports (a factory called at import, as _facade's ``_sync_method`` makes
the client's methods: the closures keep the code they were made with), and a method whose
mutant changes its closure (a deleted ``super().__init__(...)`` drops the ``__class__`` cell, and a
code object with other free variables cannot be swapped in).

Usage (from the worktree root, with the mutants and options of scripts/mutate.py)::

    QDRANT_GUARD_REQUIRE_NATIVE=1 PYTHONPATH=$PWD /work/main/.venv/bin/python scripts/mutate_hot.py \\
        qdrant_guard/sentpoints.py -t tests/test_write_snapshot.py --only 12,40

Run one mutator per copy of the worktree: the file under test is rewritten while it runs.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import os
import re
import signal
import sys
import time
import types
from importlib.metadata import entry_points
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate  # noqa: E402
from _mutdriver import drive  # noqa: E402


def _patch(old: object, new: object) -> None:
    if isinstance(old, (staticmethod, classmethod)) and isinstance(new, (staticmethod, classmethod)):
        old, new = old.__func__, new.__func__
    if isinstance(old, property) and isinstance(new, property):
        for part in ("fget", "fset", "fdel"):
            o, n = getattr(old, part), getattr(new, part)
            if o is not None and n is not None:
                _patch(o, n)
        return
    if isinstance(old, types.FunctionType) and isinstance(new, types.FunctionType):
        old.__code__ = new.__code__
        old.__defaults__ = new.__defaults__
        old.__kwdefaults__ = new.__kwdefaults__


def _rehome(value: object, classes: dict[type, type]) -> object:
    """``value`` with each instance of a class in ``classes`` (new -> loaded) given the loaded class."""
    if isinstance(value, tuple):
        return tuple(_rehome(v, classes) for v in value)
    old = classes.get(type(value))
    if old is not None:
        value.__class__ = old
    return value


_CONSTANTS = (int, float, str, bytes, frozenset, tuple, dict, re.Pattern)


class Unpatchable(Exception):
    """The mutant's module loads, but its code cannot be swapped into the loaded one."""


def _plain_function(obj: object) -> bool:
    """A function whose code the patch swaps, wrapped by nothing but ``lru_cache``."""
    if hasattr(obj, "cache_clear"):
        obj = getattr(obj, "__wrapped__", None)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return isinstance(obj, (types.FunctionType, property)) and not hasattr(obj, "__wrapped__")


def _spans(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators]), node.end_lineno or node.lineno


def _at(body: list[ast.stmt], line: int) -> ast.stmt | None:
    return next((n for n in body if _spans(n)[0] <= line <= _spans(n)[1]), None)


def _in_decorator(node: ast.stmt, line: int) -> bool:
    return any(d.lineno <= line <= (d.end_lineno or d.lineno) for d in getattr(node, "decorator_list", []))


def imported_by_name(modname: str, files: list[Path]) -> set[str]:
    """The names ``from <modname> import NAME`` binds in ``files`` (relative imports resolved from
    each file's path under the current directory)."""
    names: set[str] = set()
    for f in files:
        try:
            tree = ast.parse(f.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        package = list(Path(os.path.relpath(f)).with_suffix("").parts[:-1])
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[:len(package) - node.level + 1] if node.level else []
            if ".".join(base + ([node.module] if node.module else [])) == modname:
                names.update(a.name for a in node.names)
    return names


def _selection_files(tests: list[str]) -> list[Path]:
    """The .py files beside each file or in each directory the pytest arguments ``tests`` name."""
    dirs = set()
    for arg in tests:
        where = Path(arg.split("::")[0])
        if where.is_dir():
            dirs.update(d for d in [where, *where.rglob("*")] if d.is_dir())
        elif where.suffix == ".py":
            dirs.add(where.parent)
    return sorted(f for d in dirs for f in d.glob("*.py"))


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _derived(tree: ast.Module, top: ast.stmt, line: int) -> set[str]:
    """The module-level names whose value, computed at import, a mutant on ``line`` (in ``top``)
    changes: read from a changed constant, or returned by a call of a changed function or of a
    changed class's constructor (a function only referenced keeps its object, patched in place)."""
    called: set[str] = set()
    if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        called = {top.name}
    elif isinstance(top, ast.ClassDef):
        inner = _at(top.body, line)
        if not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) or inner.name in (
                "__init__", "__new__", "__post_init__"):
            called = {top.name}
    read, derived = _bound(top) - called - ({top.name} if isinstance(top, ast.ClassDef) else set()), set()
    for node in tree.body[tree.body.index(top) + 1:]:
        value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if value is None:
            continue
        names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        calls = {n.func.id for n in ast.walk(value) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if read & names or called & calls:
            read |= _bound(node)
            derived |= _bound(node)
    return derived


def factories(mod: types.ModuleType) -> set[str]:
    """The qualified names of ``mod``'s functions and methods that made a closure still alive when
    only imports have run: a factory called at import (_facade's ``_sync_method``, whose ``method``
    closures are the client's methods). Its code swapped, the closures made keep the old code."""
    import gc

    path = os.path.realpath(getattr(mod, "__file__", None) or "")
    return {obj.__code__.co_qualname.split(".<locals>.")[0] for obj in gc.get_objects()
            if isinstance(obj, types.FunctionType) and ".<locals>." in obj.__code__.co_qualname
            and os.path.realpath(obj.__code__.co_filename) == path}


def reaches(mod: types.ModuleType, tree: ast.Module, line: int, imported: set[str] = frozenset(),
            made: set[str] = frozenset()) -> bool:
    """Whether :func:`hot_patch` applies a mutant on ``line`` of ``mod``'s source (``tree``);
    ``imported``: the module's names other code imports by name (a constant among them, or one
    computed from the mutated statement, keeps its old value there); ``made``: :func:`factories`."""
    top = _at(tree.body, line)
    if top is None or _in_decorator(top, line) or _derived(tree, top, line) & imported:
        return False
    if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return top.name not in made and _plain_function(getattr(mod, top.name, None))
    if isinstance(top, (ast.Assign, ast.AnnAssign)):
        target = top.targets[0] if isinstance(top, ast.Assign) else top.target
        if not isinstance(target, ast.Name) or target.id in imported:
            return False
        return isinstance(getattr(mod, target.id, None), _CONSTANTS) or isinstance(top.value, ast.Lambda)
    if not isinstance(top, ast.ClassDef) or not isinstance(cls := getattr(mod, top.name, None), type):
        return False
    inner = _at(top.body, line)
    if inner is None or _in_decorator(inner, line):
        return False
    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{top.name}.{inner.name}" not in made and _plain_function(cls.__dict__.get(inner.name))
    # A dataclass field's plain default reaches its instances through ``__init__``'s defaults.
    fields = getattr(cls, "__dataclass_fields__", {})
    return (isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name)
            and inner.target.id in fields and fields[inner.target.id].default is not dataclasses.MISSING)


def hot_patch(modname: str, src: bytes, path: Path) -> None:
    """Make the loaded module ``modname`` run ``src``'s functions (see the module docstring).

    An error loading ``src`` propagates as it is (the mutant's module does not load: killed, as a
    cold run would find); one swapping its code in is raised as :class:`Unpatchable`."""
    mod = sys.modules[modname]
    ns: dict[str, object] = {"__name__": modname, "__package__": mod.__package__, "__file__": str(path)}
    exec(compile(src, str(path), "exec"), ns)  # noqa: S102 - the mutant of our own module
    try:
        _swap_in(mod, ns)
    except Exception as exc:  # noqa: BLE001 - any failure here is the patch's, not the mutant's
        raise Unpatchable(f"{type(exc).__name__}: {exc}") from exc


def _swap_in(mod: types.ModuleType, ns: dict[str, object]) -> None:
    classes = {new: old for name, new in ns.items()
               if isinstance(new, type) and isinstance(old := getattr(mod, name, None), type)}
    for name, new in ns.items():
        if name.startswith("__"):
            continue
        old = getattr(mod, name, None)
        if isinstance(old, type) and isinstance(new, type):
            for attr, value in new.__dict__.items():
                if attr in old.__dict__:
                    _patch(old.__dict__[attr], value)
        elif isinstance(old, (types.FunctionType, staticmethod, classmethod, property)):
            _patch(old, new)
        elif hasattr(old, "cache_clear") and hasattr(old, "__wrapped__") and hasattr(new, "__wrapped__"):
            _patch(old.__wrapped__, new.__wrapped__)
            old.cache_clear()
        elif isinstance(new, _CONSTANTS) and old != new:
            setattr(mod, name, _rehome(new, classes))


_UNPATCHABLE = 98  # the child's exit code when the patch, not the mutant, failed (pytest's are 0-5)


def run_forked(args: list[str], timeout: float, patch: tuple[str, bytes, Path] | None) -> tuple[str, float]:
    """``(status, seconds)``; status ``unpatchable`` when the mutant's code could not be swapped in."""
    import pytest

    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            if patch is not None:
                hot_patch(*patch)
            rc = int(pytest.main(args))
        except Unpatchable:
            rc = _UNPATCHABLE
        except BaseException:  # noqa: BLE001 - the child reports through its exit code only
            rc = 99
        os._exit(rc)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - t0 > timeout:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "timeout", time.monotonic() - t0
            time.sleep(0.02)
    except BaseException:  # Ctrl-C or SIGTERM: the mutant's run must not outlive the mutator
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    status = {0: "survived", 5: "no-tests", _UNPATCHABLE: "unpatchable"}.get(rc, "killed")
    return status, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", type=Path, help="the .py file to mutate (in this worktree)")
    ap.add_argument("-f", "--function", action="append", default=[], help="as scripts/mutate.py")
    ap.add_argument("--only", default=None, help="only these mutant numbers (as --list prints them): 3,7-9")
    mutate.add_run_arguments(ap)
    args = ap.parse_args(argv)
    path = args.module.resolve()
    modname = os.path.relpath(path.with_suffix(""), Path.cwd()).replace(os.sep, ".")
    numbered = list(enumerate(mutate.on_lines(mutate.generate(path, args.function), args.lines)))
    if args.only:
        spans = mutate.number_ranges(args.only)
        numbered = [(i, m) for i, m in numbered if any(lo <= i <= hi for lo, hi in spans)]
    rel = os.path.relpath(path)
    if args.list:
        for i, m in numbered:
            print(f"{i:4d} {rel}:{m.line}: [{m.kind}] {m.describe()}")
        return 0
    if not args.tests:
        ap.error("give the test selection with -t")
    os.environ.setdefault("QDRANT_GUARD_REQUIRE_NATIVE", "1")
    sys.dont_write_bytecode = True
    if Path(importlib.import_module(modname).__file__ or "").resolve() != path:
        print(f"mutate_hot.py: `import {modname}` does not load {path}; run from the worktree root "
              "with PYTHONPATH=$PWD", file=sys.stderr)
        return 2
    importlib.import_module(modname.split(".")[0])
    for ep in entry_points(group="pytest11"):
        ep.load()
    for dep in ("numpy", "pydantic", "qdrant_client"):
        importlib.import_module(dep)
    cmd = ["-x", "-q", "-p", "no:cacheprovider", "--assert=plain", *args.tests]
    if args.keyword:
        cmd += ["-k", args.keyword]
    cold_cmd = [args.python, "-m", "pytest", *cmd]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    original, st = path.read_bytes(), path.stat()
    tree, loaded = ast.parse(original), sys.modules[modname]
    package = sorted(Path(modname.split(".")[0]).rglob("*.py"))
    imported = imported_by_name(modname, [f for f in package + _selection_files(args.tests) if f.resolve() != path])
    made = factories(loaded)
    cold_lines = {m.line for _, m in numbered if not reaches(loaded, tree, m.line, imported, made)}

    def restore() -> None:
        if path.read_bytes() != original:
            path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    def cold(timeout: float) -> tuple[str, float]:
        mutate._drop_pyc(path)
        return mutate.run_tests(cold_cmd, timeout, env)

    def trial(m: mutate.Mutant) -> tuple[str, str] | None:
        text = mutate.compiled(original, m, path)
        if text is None:
            return None
        path.write_bytes(text)
        status = "unpatchable"
        if m.line not in cold_lines:
            status, dt = run_forked(cmd, args.timeout, (modname, text, path))
        if status == "unpatchable":
            status, dt = cold(args.timeout)
            restore()
            return status, f"{dt:.1f}s cold"
        restore()
        return status, f"{dt:.1f}s"

    def baseline() -> tuple[str, float, str]:
        status, dt = run_forked(cmd, args.timeout * 3, (modname, original, path))
        if status != "survived" or not cold_lines:
            return status, dt, ""
        status, cold_dt = cold(args.timeout * 3)
        return status, dt + cold_dt, "" if status == "survived" else "the cold run " + " ".join(cold_cmd)

    return drive("mutate_hot.py", rel, numbered, baseline=baseline, trial=trial, restore=restore,
                 label="[{i}]", tag="[{i}] ",
                 note=f" ({sum(m.line in cold_lines for _, m in numbered)} of them cold)" if cold_lines else "")


if __name__ == "__main__":
    sys.exit(main())
