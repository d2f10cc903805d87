#!/usr/bin/env bash
# Build fuzz/asan_detect_texts.c with native/detect.c under AddressSanitizer + UBSan (at -O0) and run
# qg_detect over texts that reach the card rules: the glued-card generators of tests/detect_cases.py and
# tests/test_glued_card*.py (seeded), a third again after an "é", test_detect's examples with a card
# and digit groups glued on, and long runs; each text in a heap buffer of exactly its length.
#
#   PYTHON=.venv/bin/python scripts/asan_detect.sh      # about 5 s
#
# Fails (exit 1) on any sanitizer report or a finding out of order or bounds. It catches what the
# Python binding cannot see: a read one byte past the text (a bytes object ends in a NUL), or a write
# past a fixed-size local array that changes no finding; scripts/mutate_c.py can run it as a check.
# Environment: CC (default: clang if found, else cc), PYTHON (default python3), ASAN_DETECT_SRC (the
# detect.c to build, default native/detect.c), ASAN_DETECT_BUILD (default build/asan), ASAN_DETECT_N
# (generated texts, default 20000).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ASAN_DETECT_BUILD:-$ROOT/build/asan}"
SRC="${ASAN_DETECT_SRC:-$ROOT/native/detect.c}"
PYTHON="${PYTHON:-python3}"
if [[ -z "${CC:-}" ]]; then
    CC=cc
    command -v clang >/dev/null 2>&1 && CC=clang
fi
mkdir -p "$BUILD"
bin="$BUILD/asan_detect_texts.$$"
texts="$BUILD/asan_detect_texts.$$.bin"
trap 'rm -f "$bin" "$texts"' EXIT
"$CC" -g -O0 -std=gnu99 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
    -I"$ROOT/native" "$ROOT/fuzz/asan_detect_texts.c" "$SRC" -lm -o "$bin" \
    || { echo "asan-detect: build failed" >&2; exit 2; }
(cd "$ROOT" && PYTHONPATH="$ROOT" "$PYTHON" - "${ASAN_DETECT_N:-20000}" > "$texts") <<'PY'
import random
import sys

from tests.test_detect import NEGATIVES, POSITIVES
from tests.detect_cases import random_text
from tests.test_glued_card2 import glued_text
from tests.test_glued_card3 import glued3_text
from tests.test_glued_card5 import tail_text

rng = random.Random(20261206)
shapes = (random_text, glued_text, random_text, glued3_text, tail_text)
out = []
for t in range(int(sys.argv[1])):
    text = shapes[(t // 2) % 5](rng) if t % 2 else "".join(
        rng.choice("0123456789      ----..()+x") for _ in range(rng.randint(1, 60)))
    out += [text, "\u00e9" + text] if t % 3 == 0 else [text]
card = "4111 1111 1111 1111"
for sample in [p[0] for p in POSITIVES] + list(NEGATIVES):
    for glue in ("", " ", "-", ".", " - ", "(555) "):
        out += [f"123{glue}{sample}{glue}{card}", f"{card}{glue}{sample}{glue}555",
                f"555-123{glue}{sample.strip()}{glue}{card}.10", f"1.555.{sample}", f"{sample}.5.5"]
out += ["1 2 3 4 5 6 7", "4111 1111 1111 1111", "4111111111111111", "4111 1111 1111 1111-555-123-4567",
        "4111111111111111." * 200, "1." * 3000, "x(555)" * 500, "4" * 25,
        "1:4111111111111111", "4111111111111111:1", "1/4111111111111111", "4111111111111111/1",
        "4111111111111111:" * 200, "1/" + "4111111111111111/" * 200]
sys.stdout.buffer.write("\0".join(x.replace("\0", "") for x in out).encode("utf-8", "surrogatepass"))
PY
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
timeout 300 "$bin" "$texts" || { echo "asan-detect: FAILED ($SRC)" >&2; exit 1; }
