"""scripts/asan_detect.sh: qg_detect under ASan + UBSan over glued-card texts in exact-size buffers.

The mutants of native/detect.c that passes 14-16 found to change no finding but to read or write
past a buffer (docs/security-testing.md) pass every pytest test, as the binding hands the kernel a
bytes object that ends in a NUL; the script must pass on the code and fail on each of them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "asan_detect.sh"
DETECT = ROOT / "native" / "detect.c"

pytestmark = pytest.mark.skipif(not (shutil.which("clang") or shutil.which("cc")) or not shutil.which("bash"),
                                reason="needs a C compiler with -fsanitize=address")


def _run(tmp_path: Path, src: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable, ASAN_DETECT_SRC=str(src), ASAN_DETECT_N="2000",
               ASAN_DETECT_BUILD=str(tmp_path / "build"))
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_detector_passes(tmp_path):
    run = _run(tmp_path, DETECT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "no report" in run.stdout


@pytest.mark.parametrize(("old", "new"), [
    # card_floor reads the byte after the text (pass 16, #9)
    ("while (k < s->n && is_digit(s->b[k]) && k - j < 20) k++;",
     "while (k <= s->n && is_digit(s->b[k]) && k - j < 20) k++;"),
    # card_floor writes g[5], past its five groups (pass 14)
    ("if (ng == 5) break;", "if (ng == 6) break;"),
    # glued_after reads the finding after the last (pass 14)
    ("for (size_t x = 0; x < len; x++) {\n        if (it[x].type != QG_CREDIT_CARD) continue;",
     "for (size_t x = 0; x <= len; x++) {\n        if (it[x].type != QG_CREDIT_CARD) continue;"),
    # cover_cards walks a gap past the text at a card's end (pass 14)
    ("            if (next > pos) {", "            if (next >= pos) {"),
    # db_scheme walks back past the text's start when a URL's scheme begins it (pass 43)
    ("while (sc > 0 && p - sc <= 32 && is_scheme(b[sc - 1])) sc--;",
     "while (sc >= 0 && p - sc <= 32 && is_scheme(b[sc - 1])) sc--;"),
    # email_span's walk back to a "://" reads the byte before an address that starts the text (pass 43)
    ("while (k > 0 && ls - k < 256 && is_url_segment(b[k - 1])) k--;",
     "while (k >= 0 && ls - k < 256 && is_url_segment(b[k - 1])) k--;"),
])
def test_mutants_that_change_no_finding_but_overrun_a_buffer_fail(tmp_path, old, new):
    src = DETECT.read_text()
    assert src.count(old) == 1, old
    mutant = tmp_path / "detect.c"
    mutant.write_text(src.replace(old, new))
    run = _run(tmp_path, mutant)
    assert run.returncode == 1, (run.returncode, run.stdout[-500:], run.stderr[-3000:])
    assert "AddressSanitizer" in run.stderr or "runtime error" in run.stderr, run.stderr[-3000:]
