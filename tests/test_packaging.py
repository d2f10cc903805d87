"""What a non-editable install ships: every module, stub and data file of the package.

The suite runs against an editable install, which imports straight from the source tree, so a
subpackage missing from the build configuration goes unnoticed there (``qdrant_guard.evaluation``
was left out of wheels built from a fresh clone, and ``qdrant-guard eval`` failed after
``pip install``). ``build_py`` copies what a wheel would hold, without compiling the extensions.
It runs on a copy of the sources without the editable install's ``*.egg-info``: setuptools also
ships files that an old ``SOURCES.txt`` lists, which hid the gap in a working tree.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qdrant_guard"
SHIPPED = ("*.py", "*.pyi", "py.typed", "*.json", "*.jsonl")


def _files(base: Path) -> set[str]:
    found: set[str] = set()
    for pattern in SHIPPED:
        found |= {str(p.relative_to(base)) for p in (base / "qdrant_guard").rglob(pattern)
                  if "__pycache__" not in p.parts}
    return found


def test_the_wheel_holds_every_module_stub_and_data_file(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    shutil.copytree(PACKAGE, src / "qdrant_guard", ignore=skip)
    shutil.copytree(ROOT / "native", src / "native", ignore=skip)
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
                   cwd=src, check=True, capture_output=True)
    expected = _files(ROOT)
    assert "qdrant_guard/evaluation/sweep.py" in expected
    assert "qdrant_guard/data/intent_model.json" in expected
    missing = sorted(expected - _files(out))
    assert not missing, f"left out of the wheel: {missing}"
