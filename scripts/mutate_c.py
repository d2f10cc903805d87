#!/usr/bin/env python3
"""Mutation testing for one C file of the native kernels (stdlib only).

The C twin of scripts/mutate.py: it generates mutants of one ``native/*.c`` or ``native/*.h`` file
one at a time, writes each in place, rebuilds only the extension that compiles that file (for a
header: every extension that includes it, fully), runs a pytest selection and/or ``--check``
commands, and reports the mutants nothing killed. The original file is always put back byte for byte (try/
finally, and on Ctrl-C or SIGTERM) and the extension is rebuilt from it at the end, so no mutated
kernel is left in ``qdrant_guard/*.so`` either.

Mutations (on the tokens of the chosen functions' bodies; comments, string and character literals
and preprocessor lines are skipped by a small C tokenizer, not by regular expressions):

- relational operators: ``<``<->``<=``, ``>``<->``>=``, ``==``<->``!=``;
- ``&&``<->``||``;
- integer and character constants +1 and -1 inside a condition (the parentheses of ``if``,
  ``while``, ``for``, the test of ``?:``, or a ``return`` whose expression compares or joins);
- ``return 0;``<->``return 1;`` (what a validator answers);
- ``if (X)`` -> ``if (!(X))`` (not when X is a single ``==``/``!=``: that is the flip already).

Usage::

    scripts/mutate_c.py native/detect.c -f ssa_valid -f luhn \\
        -t tests/test_detect.py -t tests/test_detect_oracle.py
    scripts/mutate_c.py native/scan.c -f entity_len --list
    scripts/mutate_c.py native/scan.c --lines 2080-2110 -t tests/test_scan.py
    scripts/mutate_c.py native/chacha20.c -f qg_chacha20_block --check "bash scripts/asan_noise.sh"
    scripts/mutate_c.py native/chacha20.h -f qg_stream_u32 -t tests/test_noise.py

A mutant that does not compile is counted as ``no-compile``, never as killed. Otherwise it is
*killed* when the selection fails (any exit code but 0 and 5, a crash included) or runs past
``--timeout`` seconds, or, after it passes, when a ``--check`` command (a shell command run from
the worktree root on the mutated tree, such as ``bash scripts/asan_noise.sh``, which builds the
sources itself under AddressSanitizer) exits nonzero or runs past ``--timeout``; it *survives*
when all pass. A baseline build and run on the
original must pass first. Hypothesis runs with a fixed seed (``--seed``) so a rerun gives the same
verdicts.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mutdriver import drive  # noqa: E402
from mutate import Mutant, add_run_arguments, apply, number_ranges, on_lines, run_tests  # noqa: E402

_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "&&": "||", "||": "&&"}
_REL = {"<", "<=", ">", ">=", "==", "!="}
_PUNCT = sorted(
    ["<<=", ">>=", "...", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=",
     "*=", "/=", "%=", "&=", "|=", "^=", "##"], key=len, reverse=True)
# C99 numbers: hex floats (0x1p52, 0x1.8p-3) and decimal floats (1e-12, 1., .5f) before integers,
# which alone are mutated (see generate).
_NUM = (r"0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][-+]?\d+[fFlL]?"
        r"|(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?|\d+[eE][-+]?\d+[fFlL]?"
        r"|(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<comment>/\*.*?\*/|//[^\n]*)|(?P<str>\"(?:\\.|[^\"\\\n])*\")"
    r"|(?P<chr>'(?:\\.|[^'\\\n])+')|(?P<num>" + _NUM + ")"
    r"|(?P<id>[A-Za-z_]\w*)|(?P<punct>" + "|".join(re.escape(p) for p in _PUNCT) + r"|[^\s\w])",
    re.S)
_PP = re.compile(r"[ \t]*#(?:\\\n|[^\n])*")


class Tok:
    __slots__ = ("kind", "text", "start", "end", "line")

    def __init__(self, kind: str, text: str, start: int, end: int, line: int) -> None:
        self.kind, self.text, self.start, self.end, self.line = kind, text, start, end, line


def tokenize(src: str) -> list[Tok]:
    out: list[Tok] = []
    line, pos, bol = 1, 0, True
    while pos < len(src):
        if bol:
            # A preprocessor line (with its continuations) is one opaque token.
            m = _PP.match(src, pos)
            if m:
                out.append(Tok("pp", m.group(), pos, m.end(), line))
                line += m.group().count("\n")
                pos = m.end()
                continue
        m = _TOKEN.match(src, pos)
        if not m:
            raise SystemExit(f"mutate_c.py: cannot tokenize line {line}: {src[pos:pos + 40]!r}")
        kind, text = m.lastgroup or "punct", m.group()
        if kind not in ("ws", "comment"):
            out.append(Tok(kind, text, pos, m.end(), line))
        line += text.count("\n")
        bol = kind == "ws" and "\n" in text
        pos = m.end()
    return out


def _match(toks: list[Tok], i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit(f"mutate_c.py: unbalanced {open_}{close} from line {toks[i].line}")


def function_bodies(toks: list[Tok]) -> dict[str, tuple[int, int]]:
    """name -> (index of its body's '{', index of the matching '}') for every function definition."""
    bodies: dict[str, tuple[int, int]] = {}
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
        elif depth == 0 and t.kind == "id" and i + 1 < len(toks) and toks[i + 1].text == "(":
            close = _match(toks, i + 1, "(", ")")
            j = close + 1
            if j < len(toks) and toks[j].text == "{":
                end = _match(toks, j, "{", "}")
                bodies[t.text] = (j, end)
                i = end + 1
                continue
            i = close
        i += 1
    return bodies


def _compares(toks: list[Tok]) -> bool:
    return any(t.text in _FLIP for t in toks)


def generate(path: Path, functions: list[str], eq_consts: bool = True) -> list[Mutant]:
    raw = path.read_bytes()
    src = raw.decode("utf-8")
    if len(src) != len(raw):
        raise SystemExit("mutate_c.py: only ASCII C sources are supported (offsets are byte offsets)")
    toks = tokenize(src)
    bodies = function_bodies(toks)
    if functions:
        missing = [f for f in functions if f not in bodies]
        if missing:
            raise SystemExit(f"mutate_c.py: no function named {', '.join(missing)} in {path}")
        spans = [bodies[f] for f in functions]
    else:
        spans = list(bodies.values())
    mutants: list[Mutant] = []

    def add(a: Tok, b: Tok, text: str, kind: str) -> None:
        mutants.append(Mutant(a.line, a.start, b.end, src[a.start:b.end], text, kind))

    for lo, hi in spans:
        # Token ranges that are conditions: constants in them get +1/-1.
        cond: list[tuple[int, int]] = []
        for i in range(lo, hi):
            t = toks[i]
            if t.kind == "id" and t.text in ("if", "while", "for") and toks[i + 1].text == "(":
                close = _match(toks, i + 1, "(", ")")
                cond.append((i + 2, close))
                if t.text == "if":
                    inner = toks[i + 2:close]
                    single_eq = sum(x.text in _FLIP for x in inner) == 1 and any(
                        x.text in ("==", "!=") for x in inner)
                    if not single_eq:
                        a, b = toks[i + 2], toks[close - 1]
                        add(a, b, f"!({src[a.start:b.end]})", "negate")
            elif t.kind == "id" and t.text == "return":
                j = i
                while toks[j].text != ";":
                    j += 1
                expr = toks[i + 1:j]
                if _compares(expr):
                    cond.append((i + 1, j))
                if len(expr) == 1 and expr[0].text in ("0", "1"):
                    add(expr[0], expr[0], "1" if expr[0].text == "0" else "0", "return")
            elif t.text == "?":
                # the test of ?: runs back to the nearest unmatched '(' , '=', ',' or 'return'
                j, depth = i - 1, 0
                while j > lo:
                    x = toks[j].text
                    if x == ")":
                        depth += 1
                    elif x == "(":
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and (x in ("=", ",", ";", "{", "}", "return") or x.endswith("=")
                                         and x not in ("==", "!=", "<=", ">=")):
                        break
                    j -= 1
                cond.append((j + 1, i))
            if t.text in _FLIP:
                add(t, t, _FLIP[t.text], "boolop" if t.text in ("&&", "||") else "compare")
        seen: set[int] = set()
        for a, b in cond:
            for k in range(a, b):
                t = toks[k]
                if k in seen or t.kind not in ("num", "chr"):
                    continue
                if t.kind == "num" and not re.fullmatch(r"(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*", t.text):
                    continue
                seen.add(k)
                # Only a constant compared against: its boundary is the validation rule (a subscript
                # or a call's argument +-1 mostly tests the tokenizer's reach, at a rebuild each).
                op = toks[k - 1].text if toks[k - 1].text in _REL else toks[k + 1].text
                if op not in _REL or (not eq_consts and op in ("==", "!=")):
                    continue
                add(t, t, f"({t.text} + 1)", "const+1")
                if op not in ("==", "!="):
                    add(t, t, f"({t.text} - 1)", "const-1")
    mutants.sort(key=lambda m: (m.start, m.kind))
    uniq: list[Mutant] = []
    for m in mutants:
        if not uniq or (uniq[-1].start, uniq[-1].end, uniq[-1].replacement) != (m.start, m.end, m.replacement):
            uniq.append(m)
    return uniq


def _extension_table(setup_py: Path) -> dict[str, list[str]]:
    tree = ast.parse(setup_py.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EXTENSIONS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"mutate_c.py: no EXTENSIONS table in {setup_py}")


_INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"|extern from\s*"([^"]+)"|cimport\s+(\w+)')


def _includes(path: Path) -> set[str]:
    """The quoted headers path reaches, transitively (a .pyx/.pxd's cimports count as their .pxd)."""
    seen: set[str] = set()
    todo = [path]
    while todo:
        text = todo.pop().read_text(errors="replace")
        for m in _INCLUDE.finditer(text):
            name = m.group(1) or m.group(2) or (m.group(3) + ".pxd")
            dep = path.parent / name
            if name not in seen and dep.exists():
                seen.add(name)
                todo.append(dep)
    return seen


def extensions_of(source: Path, setup_py: Path) -> list[str]:
    """The extensions in setup.py's EXTENSIONS that compile source (a .c) or include it (a .h)."""
    table = _extension_table(setup_py)
    rel = os.path.relpath(source, setup_py.parent)
    if source.suffix == ".h":
        names = [name for name, srcs in table.items()
                 if any(source.name in _includes(setup_py.parent / s) for s in srcs)]
    else:
        names = [name for name, srcs in table.items() if rel in srcs]
    if not names:
        raise SystemExit(f"mutate_c.py: no extension in {setup_py} compiles or includes {source}")
    return names


def extension_of(c_file: Path, setup_py: Path) -> str:
    """The extension in setup.py's EXTENSIONS whose sources include c_file."""
    return extensions_of(c_file, setup_py)[0]


def build(python: str, root: Path, ext: str, env: dict[str, str]) -> tuple[bool, str]:
    """A full build of one extension (--force: the restored file may be older than the .so)."""
    proc = subprocess.run([python, "setup.py", "build_ext", "--inplace", "--force"], cwd=root,
                          env={**env, "QG_EXTENSIONS": ext}, capture_output=True, text=True)
    return proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


class FastBuild:
    """Rebuilds one extension after a change to one of its C files: that file's compile command,
    the link and the in-place copy, replayed from the log of a full build. The other objects (the
    Cython module's above all, the slow one) are unchanged, so a mutant costs one small compile."""

    def __init__(self, log: str, c_file: str, root: Path) -> None:
        self.root = root
        cmds = [shlex.split(line) for line in log.splitlines() if re.match(r"\S*(?:gcc|cc|clang)\S* ", line)]
        self.compile = next((c for c in cmds if "-c" in c and c[c.index("-c") + 1] == c_file), None)
        self.link = next((c for c in cmds if "-shared" in c), None)
        copy = re.search(r"^copying (\S+) -> (\S+)$", log, re.M)
        if not (self.compile and self.link and copy):
            raise SystemExit(f"mutate_c.py: cannot find the compile/link/copy of {c_file} in the build log")
        self.built, self.dest = root / copy.group(1), root / copy.group(2)

    def __call__(self) -> tuple[bool, str]:
        for cmd in (self.compile, self.link):
            proc = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True)
            if proc.returncode:
                return False, proc.stderr[-2000:]
        target = self.dest / self.built.name if self.dest.is_dir() else self.dest
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(self.built, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # a new inode: a process that has the old one mapped keeps it
        return True, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="the native/*.c or native/*.h file to mutate (in this worktree)")
    ap.add_argument("-f", "--function", action="append", default=[],
                    help="function to mutate (repeatable; default: every function of the file)")
    add_run_arguments(ap)
    ap.add_argument("--seed", default="0", help="hypothesis seed, so verdicts repeat")
    ap.add_argument("--only", default=None, help="only these mutant numbers of --list: 3,7-9")
    ap.add_argument("--check", action="append", default=[],
                    help="shell command that must exit 0 on the mutated tree, run after the tests "
                         "(repeatable; e.g. \"bash scripts/asan_noise.sh\"); alone, no -t is needed")
    ap.add_argument("--check-first", action="store_true",
                    help="run the --check commands before the tests (the same verdicts; faster when "
                         "the checks kill most mutants)")
    ap.add_argument("--no-eq-consts", action="store_true",
                    help="no +1 of constants compared with == or != (cheaper: keeps the boundary mutants)")
    args = ap.parse_args(argv)

    path = args.source.resolve()
    root = Path.cwd().resolve()
    if not (root / "setup.py").exists():
        ap.error("run from the worktree root (setup.py not found)")
    mutants = on_lines(generate(path, args.function, eq_consts=not args.no_eq_consts), args.lines)
    numbered = list(enumerate(mutants))
    if args.only:
        keep = {i for lo, hi in number_ranges(args.only) for i in range(lo, hi + 1)}
        numbered = [(i, m) for i, m in numbered if i in keep]
    rel = os.path.relpath(path)
    if args.list:
        for i, m in numbered:
            print(f"{i:4d} {rel}:{m.line}: [{m.kind}] {m.describe()}")
        print(f"{len(numbered)} mutants")
        return 0
    if not args.tests and not args.check:
        ap.error("give the test selection with -t, or a --check command")

    ext = ",".join(extensions_of(path, root / "setup.py"))
    env = dict(os.environ)
    env.setdefault("QDRANT_GUARD_REQUIRE_NATIVE", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [args.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           f"--hypothesis-seed={args.seed}", *args.tests]
    if args.keyword:
        cmd += ["-k", args.keyword]

    def judge(timeout: float) -> tuple[str, float]:
        """The tests and each --check command (checks first with --check-first), until one fails."""
        runs = [("check", ["bash", "-c", c]) for c in args.check]
        if args.tests:
            runs = runs + [("tests", cmd)] if args.check_first else [("tests", cmd)] + runs
        status, total = "survived", 0.0
        for what, argv in runs:
            status, dt = run_tests(argv, timeout, env)
            total += dt
            if what == "check" and status == "no-tests":  # a check's exit 5 is a failure like any other
                status = "killed"
            if status != "survived":
                break
        return status, total

    original = path.read_bytes()
    dirty = False

    def restore() -> None:
        nonlocal dirty
        if path.read_bytes() != original:
            path.write_bytes(original)
        if dirty:
            ok, err = build(args.python, root, ext, env)
            if not ok:
                print(f"mutate_c.py: REBUILD OF THE ORIGINAL FAILED:\n{err}", file=sys.stderr)
            else:
                dirty = False

    fast = None

    def baseline() -> tuple[str, float, str] | None:
        nonlocal fast
        ok, log = build(args.python, root, ext, env)
        if not ok:
            print(f"mutate_c.py: the original does not build:\n{log}", file=sys.stderr)
            return None
        if path.suffix == ".h":
            # Every file that includes the header recompiles: a full build of its extensions.
            def fast() -> tuple[bool, str]:
                return build(args.python, root, ext, env)
        else:
            fast = FastBuild(log, os.path.relpath(path, root), root)
        return (*judge(args.timeout * 3), f"{' '.join(cmd) if args.tests else ''} {' ; '.join(args.check)}")

    def trial(m: Mutant) -> tuple[str, str]:
        nonlocal dirty
        path.write_bytes(apply(original, m))
        dirty = True
        t0 = time.monotonic()
        ok, _ = fast()
        bt = time.monotonic() - t0
        status, dt = judge(args.timeout) if ok else ("no-compile", 0.0)
        path.write_bytes(original)
        return status, f"build {bt:.1f}s, tests {dt:.1f}s"

    return drive("mutate_c.py", rel, numbered, baseline=baseline, trial=trial, restore=restore,
                 counts=("no-compile", "killed", "timeout", "survived", "no-tests"), label="[{n}/{total}] #{i}",
                 tag="#{i} ", note=f" ({ext})", interrupted="restoring and rebuilding the original")


if __name__ == "__main__":
    sys.exit(main())
