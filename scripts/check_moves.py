"""Check a module split moved code and changed none: every def of the old file appears
byte-identical in exactly one of the new files.

    python scripts/check_moves.py REV SPLIT_CLASS OLD_FILE NEW_FILE...

OLD_FILE is read as it was at git revision REV; its methods (of every class), module-level
functions, assignments and classes (whole, but for SPLIT_CLASS, whose methods went to several files) are
compared, each by its source text from the first decorator to its last line. Exit status 1, naming them, when a def is missing or found more than once.
Used for the splits of reads.py, writes.py and pipeline.py (docs/security-testing.md,
2026-12-07); scripts/class_signature.py checks the assembled class.
"""
import ast
import subprocess
import sys

rev, split, old, news = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def segments(text):
    lines = text.splitlines(keepends=True)
    out = []
    tree = ast.parse(text)
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            for m in n.body:
                if isinstance(m, ast.FunctionDef):
                    s = (m.decorator_list[0].lineno if m.decorator_list else m.lineno) - 1
                    out.append((f"{n.name}.{m.name}", "".join(lines[s:m.end_lineno])))
            s = (n.decorator_list[0].lineno if n.decorator_list else n.lineno) - 1
            out.append((f"class {n.name}", "".join(lines[s:n.end_lineno])))
        elif isinstance(n, ast.FunctionDef):
            s = (n.decorator_list[0].lineno if n.decorator_list else n.lineno) - 1
            out.append((n.name, "".join(lines[s:n.end_lineno])))
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            out.append((ast.unparse(n).split("=")[0].strip(), "".join(lines[n.lineno - 1:n.end_lineno])))
    return out


old_segs = segments(subprocess.run(["git", "show", f"{rev}:{old}"], capture_output=True, text=True, check=True).stdout)
new_segs = [(p, name, seg) for p in news for name, seg in segments(open(p).read())]
bad = 0
checked = 0
for name, seg in old_segs:
    if name == f"class {split}":
        continue
    hits = [(p, n) for p, n, s in new_segs if s == seg]
    checked += 1
    if len(hits) != 1:
        bad += 1
        print("NOT exactly once:", name, hits)
print(f"{old}: {checked} defs checked, {bad} not found byte-identical exactly once")
sys.exit(1 if bad else 0)
