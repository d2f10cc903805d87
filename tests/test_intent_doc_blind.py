"""scripts/intent_doc_blind.py: the blind documentation-fragment judging set and its statistics.

The blind set must stay apart from everything a model or a feature was chosen on: the design sets
of scripts/intent_doc_openings.py (pydoc paragraphs, docstrings of 40 stdlib modules), and the
other half of itself. The script never prints a blind line.
"""
from __future__ import annotations

import io
import sys
import zlib
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import intent_doc_blind  # noqa: E402
import intent_doc_openings  # noqa: E402


def test_wilson_interval_matches_the_textbook_values():
    lo, hi = intent_doc_blind.wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    lo, hi = intent_doc_blind.wilson(0, 20)
    assert lo == 0.0 and round(hi, 4) == 0.1611
    assert intent_doc_blind.wilson(0, 0) == (0.0, 1.0)


def test_mcnemar_is_the_exact_two_sided_binomial_tail():
    assert intent_doc_blind.mcnemar_p(0, 14) == pytest.approx(2 * 0.5 ** 14)
    assert intent_doc_blind.mcnemar_p(1, 3) == pytest.approx(2 * (1 + 4) / 16)
    assert intent_doc_blind.mcnemar_p(3, 3) == 1.0 and intent_doc_blind.mcnemar_p(0, 0) == 1.0


def test_blind_halves_share_no_line_and_no_module_with_the_design_sets():
    files = intent_doc_blind._stdlib_files()
    groups = {g for g, _ in files}
    design_tops = {m.split(".")[0] for m in intent_doc_openings.MODULES}
    assert not groups & design_tops and "pydoc_data" not in groups and "_pydecimal" not in groups
    assert not [p for _, p in files if "/test/" in p or "/tests/" in p or "site-packages" in p]
    halves = {h: {g for g in groups if ("val", "final")[zlib.crc32(g.encode()) & 1] == h} for h in ("val", "final")}
    assert halves["val"] and halves["final"] and not halves["val"] & halves["final"]
    val, final = intent_doc_blind.blind_openings("val"), intent_doc_blind.blind_openings("final")
    design = set(intent_doc_openings.pydoc_openings()) | set(intent_doc_openings.docstring_openings())
    # Counts only, so that a failure does not print blind lines.
    assert len(val) >= 1000 and len(final) >= 2000
    assert len(set(val) & set(final)) == 0 and len((set(val) | set(final)) & design) == 0
    assert sum(len(s.split()) != 6 for s in val + final) == 0 and len(set(val) | set(final)) == len(val) + len(final)


def test_the_script_prints_counts_but_never_a_blind_line(tmp_path):
    out = io.StringIO()
    with redirect_stdout(out):
        assert intent_doc_blind.main(["--sets", "blind-val", "--show-design", "--save", str(tmp_path / "v.json")]) == 0
    with redirect_stdout(out):
        assert intent_doc_blind.main(["--sets", "blind-val", "--show-design", "--baseline", str(tmp_path / "v.json")]) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(s.startswith("blind-val docstrings: blocked (false positives) ") for s in lines)
    assert "blocked now only 0, by the baseline only 0 (McNemar p=1)" in lines[1]
