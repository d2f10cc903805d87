"""scripts/mutate_hot.py runs each mutant by patching the loaded module: what the patch changes, and
that a patch which itself breaks the tests fails the baseline (mutation pass 36: on intent_features.py
the patch put instances of fresh copies of ``_ScannedCue`` into ``_REGEX_CUES``, a test's
``isinstance`` check failed for every mutant, and all of them were reported killed), and that the
mutants no patch can apply run cold (mutation pass 37: a deleted ``super().__init__`` and
``frozen=True`` as False were reported killed by the failed patch, a pydantic default and a list
constant never ran)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _run(code: str, cwd: Path = ROOT, env_path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=env_path or str(ROOT))
    return subprocess.run([PY, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_unchanged_source_patched_in_keeps_the_loaded_classes_and_the_mutants_reach_caches_and_regexes():
    out = _run("""
        import sys
        sys.path.insert(0, "scripts")
        from pathlib import Path
        import mutate_hot
        import qdrant_guard.intent_features as f
        path = Path(f.__file__)
        src = path.read_bytes()
        mutate_hot.hot_patch(f.__name__, src, path)
        scanned = [p for _, _, p in f._REGEX_CUES if not hasattr(p, "pattern")]
        assert scanned and all(isinstance(p, f._ScannedCue) for p in scanned), "scanned cue lost its class"
        assert f._starts_nfkc_piece("\\u1161") is False
        mutant = src.replace(b"    return not unicodedata.combining(first) and first not in _COMPOSING_STARTERS",
                             b"    return True")
        mutant = mutant.replace(b'r"passphrases?", ', b"")
        assert mutant.count(b"return True") > src.count(b"return True") and b"passphrases?" not in mutant
        mutate_hot.hot_patch(f.__name__, mutant, path)
        assert f._starts_nfkc_piece("\\u1161") is True, "lru_cache function not patched"
        assert f._BULK_SECRET_HEAD_RE.search("all passphrases") is None, "compiled regex constant not set"
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_patch_that_breaks_the_tests_fails_the_baseline(tmp_path):
    # A dict inside a tuple is not given the loaded classes back: the patch alone breaks the test.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kinds.py").write_text(textwrap.dedent("""
        class Kind:
            def size(self) -> int:
                return 1 + 1


        KINDS = ({"one": Kind()},)
    """))
    (tmp_path / "test_kinds.py").write_text(textwrap.dedent("""
        from pkg.kinds import KINDS, Kind


        def test_kind():
            assert isinstance(KINDS[0]["one"], Kind) and KINDS[0]["one"].size() == 2
    """))
    out = subprocess.run([PY, str(ROOT / "scripts" / "mutate_hot.py"), "pkg/kinds.py", "-t", "test_kinds.py"],
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "killed" not in out.stdout


def test_mutants_no_patch_reaches_run_cold_and_a_failed_swap_is_no_kill(tmp_path):
    # Patched in, `frozen=True` as False and the deleted `super().__init__` failed swapping
    # `__init__` (other free variables) and were reported killed; the pydantic default and the
    # list were never applied and survived, and LIMIT as 4 reached shapes.py, not use.py's copy.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import use\n")  # as qdrant_guard's imports its modules
    (tmp_path / "pkg" / "shapes.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass

        from pydantic import BaseModel


        @dataclass(frozen=True)
        class Point:
            x: int


        class Flags(BaseModel):
            on: bool = True


        SIZES = [5]
        LIMIT = 3


        def twice(v):
            return v + v


        class Refused(ValueError):
            def __init__(self, why):
                super().__init__(f"refused: {why}")
    """))
    (tmp_path / "pkg" / "use.py").write_text("from pkg.shapes import LIMIT\n\ndef over(n):\n    return n > LIMIT\n")
    (tmp_path / "test_shapes.py").write_text(textwrap.dedent("""
        from pkg.shapes import SIZES, Flags, Point, Refused, twice
        from pkg.use import over


        def test_shapes():
            assert Point(1).x == 1 and Flags().on is True and SIZES == [5] and twice(3) == 6
            assert isinstance(Refused("x"), ValueError) and over(4) and not over(3)
    """))
    out = subprocess.run([PY, str(ROOT / "scripts" / "mutate_hot.py"), "pkg/shapes.py", "-t", "test_shapes.py",
                          "--python", PY, "--only", "0-2,4,7,8"],
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    runs: dict[int, list[str]] = {}
    for line in out.stdout.splitlines():
        if line.startswith("[") and "  " in line:
            runs.setdefault(int(line.split("pkg/shapes.py:")[1].split(":")[0]), []).append(line.rsplit("  ", 1)[1])
    assert [v.split(" (")[0] for v in runs[7]] == ["SURVIVED"], runs     # frozen=True as False: no test needs it
    assert [v.split(" (")[0] for v in runs[13]] == ["killed"], runs      # the pydantic default
    assert [v.split(" (")[0] for v in runs[16]] == ["killed"], runs      # [5] as [6]
    assert [v.split(" (")[0] for v in runs[17]] == ["killed"], runs      # LIMIT as 4, in use.py too
    assert all(v.endswith(" cold)") for line in (7, 13, 16, 17) for v in runs[line]), runs
    assert runs[21][0].startswith("killed") and not runs[21][0].endswith(" cold)"), runs  # v - v: hot
    assert runs[26] == [runs[26][0]] and runs[26][0].startswith("SURVIVED") and runs[26][0].endswith(" cold)"), runs
    assert "of them cold" in out.stdout


def test_a_factory_called_at_import_runs_cold(tmp_path):
    # Mutation pass 42: client.py makes the client's methods with _facade's _sync_method at import;
    # the patch swapped the factory's code, not that of the closures it had made, so every mutant
    # of it was reported surviving (`lock is None` as `is not None` too). Such a factory now runs cold.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import use\n")  # as qdrant_guard's imports client
    (tmp_path / "pkg" / "made.py").write_text(textwrap.dedent("""
        def _adder(k):
            def add(v):
                return v + k

            return add


        def twice(v):
            return v + v
    """))
    (tmp_path / "pkg" / "use.py").write_text(textwrap.dedent("""
        from pkg.made import _adder


        class Calc:
            pass


        for _k in (2,):  # as client.py sets the client's methods
            Calc.plus = staticmethod(_adder(_k))
    """))
    (tmp_path / "test_made.py").write_text(textwrap.dedent("""
        from pkg.made import twice
        from pkg.use import Calc


        def test_made():
            assert Calc.plus(1) == 3 and twice(3) == 6
    """))
    out = subprocess.run([PY, str(ROOT / "scripts" / "mutate_hot.py"), "pkg/made.py", "-t", "test_made.py",
                          "--python", PY, "-f", "_adder", "-f", "twice"],
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    runs = [line for line in out.stdout.splitlines() if line.startswith("[") and "  " in line]
    adder = [r for r in runs if "pkg/made.py:4:" in r]  # v + k as v - k, return None
    assert adder and all(r.rsplit("  ", 1)[1].startswith("killed") and r.endswith(" cold)") for r in adder), runs
    doubled = [r for r in runs if "pkg/made.py:10:" in r]  # v + v as v - v: hot as before
    assert doubled and all(r.rsplit("  ", 1)[1].startswith("killed") and not r.endswith(" cold)")
                           for r in doubled), runs
