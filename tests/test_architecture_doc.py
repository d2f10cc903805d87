"""docs/architecture.md lists every module of qdrant_guard/ and no module that is gone.

The map is read by a new contributor to find where something lives; a row for a module that was
renamed, or no row for a new one, sends them to the wrong file. The modules are every .py and .pyi
under qdrant_guard/ (subpackages included) and the compiled extensions by their source,
native/_*.pyx.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

# A table row whose first cell is a module path in backticks: | `qdrant_guard/x.py` | ... |
_ROW = re.compile(r"^\|\s*`([^`]+\.(?:py|pyi|pyx))`\s*\|", re.M)


def modules_on_disk(root: Path = ROOT) -> set[str]:
    pkg = root / "qdrant_guard"
    found = {p.relative_to(root).as_posix() for p in pkg.rglob("*")
             if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts and p.is_file()}
    found |= {p.relative_to(root).as_posix() for p in (root / "native").glob("_*.pyx")}
    return found


def modules_in_table(text: str) -> list[str]:
    return _ROW.findall(text)


def problems(text: str, on_disk: set[str]) -> list[str]:
    rows = modules_in_table(text)
    listed = set(rows)
    out = [f"{m}: not in the table of docs/architecture.md (add a row saying what it holds)"
           for m in sorted(on_disk - listed)]
    out += [f"{m}: in the table of docs/architecture.md but not on disk (remove or rename its row)"
            for m in sorted(listed - on_disk)]
    twice = {r for r in rows if rows.count(r) > 1}
    out += [f"{m}: listed more than once in docs/architecture.md" for m in sorted(twice)]
    return out


def test_every_module_has_exactly_one_row_and_every_row_a_module():
    bad = problems(DOC.read_text(encoding="utf-8"), modules_on_disk())
    assert not bad, "\n".join(bad)


def test_the_check_catches_a_missing_row_and_a_module_that_does_not_exist():
    text = DOC.read_text(encoding="utf-8")
    on_disk = modules_on_disk()
    row = next(line for line in text.splitlines() if line.startswith("| `qdrant_guard/budget_sqlite.py`"))
    assert problems(text.replace(row + "\n", ""), on_disk) == [
        "qdrant_guard/budget_sqlite.py: not in the table of docs/architecture.md (add a row saying what it holds)"]
    fake = "| `qdrant_guard/no_such_module.py` | Nothing |\n"
    assert problems(text.replace(row + "\n", row + "\n" + fake), on_disk) == [
        "qdrant_guard/no_such_module.py: in the table of docs/architecture.md but not on disk "
        "(remove or rename its row)"]
    assert problems(text, on_disk | {"native/_new_kernel.pyx"}) == [
        "native/_new_kernel.pyx: not in the table of docs/architecture.md (add a row saying what it holds)"]


def test_every_row_says_what_its_module_holds():
    empty = [m for m, what in re.findall(r"^\|\s*`([^`]+)`\s*\|\s*([^|]*)\|", DOC.read_text(encoding="utf-8"), re.M)
             if m.endswith((".py", ".pyi", ".pyx")) and len(what.strip()) < 10]
    assert not empty, f"rows without a description: {empty}"
