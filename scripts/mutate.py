#!/usr/bin/env python3
"""Mutation testing for one module of this project (stdlib only).

Generates mutants of one Python file one at a time, writes each in place, runs a pytest
selection against it and reports the mutants no test killed. The original file is always put
back (try/finally, and on Ctrl-C or SIGTERM), byte for byte and with its old mtime.

Mutations (on the code of the chosen functions, not on docstrings, annotations, f-strings or
the arguments of a ``raise``, which only format messages):

- comparison operators: ``<``<->``<=``, ``>``<->``>=``, ``==``<->``!=``, ``in``<->``not in``,
  ``is``<->``is not`` (one operator of a chain at a time);
- ``and``<->``or``;
- ``if``/``elif``/``while``/conditional-expression tests negated (``not (...)``);
- ``True``<->``False``; integer constants +1 and -1 (so 0<->1);
- ``return X`` -> ``return None`` (not when X is already None);
- a ``raise`` statement or a call statement deleted (replaced by ``pass``);
- ``+``<->``-`` (binary and augmented assignment).

With ``--lua NAME`` (repeatable), the Lua source inside the module-level string constant ``NAME``
(``NAME = "..."``, or each string literal of ``NAME = OTHER + "..."``, triple-quoted or not) is
mutated too:
``<``<->``<=``, ``>``<->``>=``, ``==``<->``~=``, ``and``<->``or``, and every decimal integer
constant +1 and -1 (which makes ``return 0``<->``return 1``). A small Lua tokenizer skips Lua
comments and Lua string literals (so ``'%.0f'`` is never touched); the literal's text is
tokenized as written in the Python file. With ``--lua`` and no ``-f``, only the Lua is mutated.
Lines (for ``--lines`` and the report) are lines of the Python file.

Usage::

    QDRANT_GUARD_REQUIRE_NATIVE=1 /work/main/.venv/bin/python scripts/mutate.py \\
        qdrant_guard/boundary.py -f verify_credential -f _unb64url \\
        -t tests/test_boundary.py -t tests/test_client_writes.py

    scripts/mutate.py qdrant_guard/merkle.py --list          # only list the mutants
    scripts/mutate.py qdrant_guard/merkle.py -t tests/test_receipts.py --lines 40-60
    scripts/mutate.py qdrant_guard/budget_redis.py --lua _REDIS_ADMIT -t tests/test_budget.py -k redis

A mutant is *killed* when the selection fails (any exit code but 0 and 5) or runs past
``--timeout`` seconds; it *survives* when the selection passes. Survivors are printed as
``file:line: original -> mutant``. A baseline run on the original must pass first. Keep the
selection small: each mutant costs one pytest run (``-x -q -p no:cacheprovider``).

``-f NAME`` selects a function or method by name (``Class.method`` or ``method``); nested
functions inside a selected one are mutated with it. Without ``-f`` the whole module is.
"""
from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mutdriver import drive  # noqa: E402

DEFAULT_PYTHON = "/work/main/.venv/bin/python"

_CMP_FLIP = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclass
class Mutant:
    line: int
    start: int  # byte offsets into the source
    end: int
    original: str
    replacement: str
    kind: str

    def describe(self) -> str:
        def one(s: str) -> str:
            s = " ".join(s.split())
            return s if len(s) <= 90 else s[:87] + "..."
        return f"{one(self.original)} -> {one(self.replacement)}"


class _Offsets:
    def __init__(self, src: bytes) -> None:
        self.src = src
        self.starts = [0]
        for i, b in enumerate(src):
            if b == 0x0A:
                self.starts.append(i + 1)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.starts[node.lineno - 1] + node.col_offset,
                self.starts[node.end_lineno - 1] + node.end_col_offset)


def _selected_functions(tree: ast.Module, names: list[str]) -> list[ast.AST]:
    if not names:
        return [tree]
    out, found = [], set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + node.name
                for want in names:
                    if want in (qual, node.name):
                        out.append(node)
                        found.add(want)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"mutate.py: no function named {', '.join(missing)} in the module")
    return out


def _skipped_subtrees(root: ast.AST) -> set[int]:
    """ids of nodes not to mutate: docstrings, annotations, f-strings, raise arguments."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            for sub in ast.walk(node):
                skip.add(id(sub))

    for node in ast.walk(root):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                mark(body[0])
            if not isinstance(node, (ast.ClassDef, ast.Module)):
                mark(node.returns)
                for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                    mark(a.annotation)
        elif isinstance(node, (ast.AnnAssign, ast.arg)):
            mark(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            mark(node)
        elif isinstance(node, ast.Raise):
            mark(node.exc)
            mark(node.cause)
    return skip


def _negation_is_a_flip(test: ast.expr) -> bool:
    # not (a == b) is the compare flip a != b: one mutant, not two.
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
        test.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot))


def generate(path: Path, functions: list[str]) -> list[Mutant]:
    src = path.read_bytes()
    tree = ast.parse(src, filename=str(path))
    off = _Offsets(src)
    mutants: list[Mutant] = []
    seen: set[int] = set()

    def orig(node: ast.AST) -> str:
        a, b = off.span(node)
        return src[a:b].decode("utf-8")

    def add(node: ast.AST, new: ast.AST | str, kind: str, expr: bool = True) -> None:
        text = new if isinstance(new, str) else ast.unparse(new)
        if expr and not isinstance(new, str):
            text = f"({text})"
        a, b = off.span(node)
        mutants.append(Mutant(node.lineno, a, b, orig(node), text, kind))

    for root in _selected_functions(tree, functions):
        skip = _skipped_subtrees(root)
        for node in ast.walk(root):
            if id(node) in skip or id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    flip = _CMP_FLIP.get(type(op))
                    if flip:
                        m = copy.deepcopy(node)
                        m.ops[i] = flip()
                        add(node, m, "compare")
            elif isinstance(node, ast.BoolOp):
                m = copy.deepcopy(node)
                m.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
                add(node, m, "boolop")
            elif isinstance(node, (ast.If, ast.While, ast.IfExp)) and id(node.test) not in skip \
                    and not _negation_is_a_flip(node.test):
                add(node.test, f"(not ({orig(node.test)}))", "negate")
            elif isinstance(node, ast.Constant):
                v = node.value
                if v is True or v is False:
                    add(node, "False" if v else "True", "bool")
                elif isinstance(v, int):
                    add(node, str(v + 1), "int+1")
                    add(node, str(v - 1), "int-1")
            elif isinstance(node, ast.Return) and node.value is not None and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None):
                add(node, "return None", "return", expr=False)
            elif isinstance(node, ast.Raise):
                add(node, "pass", "del-raise", expr=False)
            elif isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await)):
                add(node, "pass", "del-call", expr=False)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
                m = copy.deepcopy(node)
                m.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
                add(node, m, "arith")
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
                m = copy.deepcopy(node)
                m.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
                add(node, m, "arith", expr=False)
    mutants.sort(key=lambda m: (m.start, m.kind))
    return mutants


_LUA_TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<comment>--\[\[.*?\]\]|--[^\n]*)"
    r"|(?P<str>'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|\[\[.*?\]\])"
    r"|(?P<num>0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<id>[A-Za-z_]\w*)|(?P<punct>\.\.\.|\.\.|==|~=|<=|>=|.)",
    re.S)
_LUA_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "~=", "~=": "==", "and": "or", "or": "and"}


def generate_lua(path: Path, names: list[str]) -> list[Mutant]:
    """Mutants of the Lua source in the module-level string constants ``names``."""
    src = path.read_bytes()
    tree = ast.parse(src, filename=str(path))
    off = _Offsets(src)
    mutants: list[Mutant] = []
    found: set[str] = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names):
            continue
        found.add(node.targets[0].id)
        for lit in ast.walk(node.value):
            if not (isinstance(lit, ast.Constant) and isinstance(lit.value, str)):
                continue
            a, b = off.span(lit)
            raw = src[a:b].decode("utf-8")
            q = min(i for i in (raw.find("'"), raw.find('"')) if i >= 0)
            width = 3 if raw[q:q + 3] in ('"""', "'''") else 1
            body_start, body = a + len(raw[:q + width].encode()), raw[q + width:len(raw) - width]
            for tok in _LUA_TOKEN.finditer(body):
                kind, text = tok.lastgroup, tok.group()
                if kind in ("punct", "id") and text in _LUA_FLIP:
                    new = [(_LUA_FLIP[text], "lua-boolop" if kind == "id" else "lua-compare")]
                elif kind == "num" and text.isdigit():
                    new = [(str(int(text) + 1), "lua-int+1"), (str(int(text) - 1), "lua-int-1")]
                else:
                    continue
                start = body_start + len(body[:tok.start()].encode())
                line = lit.lineno + raw[:q + width].count("\n") + body[:tok.start()].count("\n")
                for repl, what in new:
                    mutants.append(Mutant(line, start, start + len(text.encode()), text, repl, what))
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"mutate.py: no module-level string constant named {', '.join(missing)}")
    mutants.sort(key=lambda m: (m.start, m.kind))
    return mutants


def apply(src: bytes, m: Mutant) -> bytes:
    return src[:m.start] + m.replacement.encode("utf-8") + src[m.end:]


def compiled(src: bytes, m: Mutant, path: Path) -> bytes | None:
    """The mutated source, or None when it does not compile."""
    text = apply(src, m)
    try:
        compile(text, str(path), "exec")
    except SyntaxError:
        return None
    return text


def _drop_pyc(path: Path) -> None:
    cache = path.parent / "__pycache__"
    for pyc in cache.glob(path.stem + ".*.pyc"):
        try:
            pyc.unlink()
        except FileNotFoundError:
            pass


def run_tests(cmd: list[str], timeout: float, env: dict[str, str]) -> tuple[str, float]:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "timeout", time.monotonic() - t0
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    dt = time.monotonic() - t0
    if rc == 0:
        return "survived", dt
    if rc == 5:
        return "no-tests", dt
    return "killed", dt


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The options both mutators share: the test selection, its limits and the line filter."""
    ap.add_argument("-t", "--tests", action="append", default=[],
                    help="pytest argument (file or node id; repeatable)")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run (timeout = killed)")
    ap.add_argument("--python", default=DEFAULT_PYTHON)
    ap.add_argument("--lines", default=None, help="only mutants on these lines: A-B,C,...")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")


def number_ranges(spec: str) -> list[tuple[int, int]]:
    """``"3,7-9"`` -> ``[(3, 3), (7, 9)]``."""
    spans = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        spans.append((int(lo), int(hi or lo)))
    return spans


def on_lines(mutants: list, spec: str | None) -> list:
    """The mutants on the lines ``spec`` names (all of them without one)."""
    if not spec:
        return mutants
    spans = number_ranges(spec)
    return [m for m in mutants if any(lo <= m.line <= hi for lo, hi in spans)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", type=Path, help="the .py file to mutate (in this worktree)")
    ap.add_argument("-f", "--function", action="append", default=[],
                    help="function or Class.method to mutate (repeatable; default: whole module)")
    ap.add_argument("--lua", action="append", default=[], metavar="NAME",
                    help="also mutate the Lua in the module-level string constant NAME (repeatable; "
                         "without -f, only the Lua)")
    add_run_arguments(ap)
    args = ap.parse_args(argv)

    path = args.module.resolve()
    mutants = generate(path, args.function) if args.function or not args.lua else []
    if args.lua:
        mutants = sorted(mutants + generate_lua(path, args.lua), key=lambda m: (m.start, m.kind))
    mutants = on_lines(mutants, args.lines)
    rel = os.path.relpath(path)
    if args.list:
        for i, m in enumerate(mutants):
            print(f"{i:4d} {rel}:{m.line}: [{m.kind}] {m.describe()}")
        print(f"{len(mutants)} mutants")
        return 0
    if not args.tests:
        ap.error("give the test selection with -t")

    env = dict(os.environ)
    env.setdefault("QDRANT_GUARD_REQUIRE_NATIVE", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [args.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args.tests]
    if args.keyword:
        cmd += ["-k", args.keyword]

    # The run must import the file being mutated, not an installed copy.
    mod = os.path.relpath(path.with_suffix(""), Path.cwd()).replace(os.sep, ".")
    where = subprocess.run([args.python, "-c", f"import {mod} as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout.strip()
    if Path(where).resolve() != path:
        print(f"mutate.py: `import {mod}` loads {where}, not {path}; run from the worktree root",
              file=sys.stderr)
        return 2

    original = path.read_bytes()
    st = path.stat()

    def restore() -> None:
        if path.read_bytes() != original:
            path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        _drop_pyc(path)

    def baseline() -> tuple[str, float, str]:
        _drop_pyc(path)
        return (*run_tests(cmd, args.timeout * 3, env), " ".join(cmd))

    def trial(m: Mutant) -> tuple[str, str] | None:
        text = compiled(original, m, path)
        if text is None:
            return None
        path.write_bytes(text)
        _drop_pyc(path)
        status, dt = run_tests(cmd, args.timeout, env)
        restore()
        return status, f"{dt:.1f}s"

    return drive("mutate.py", rel, list(enumerate(mutants)), baseline=baseline, trial=trial, restore=restore)

if __name__ == "__main__":
    sys.exit(main())
