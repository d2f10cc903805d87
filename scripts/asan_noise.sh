#!/usr/bin/env bash
# Build fuzz/asan_noise_paths.c with AddressSanitizer + UBSan and run it once per noise-kernel
# configuration: every QG_NOISE_SIMD level (scalar, sse2, avx2, avx512), AES-256-CTR on (AES-NI at
# sse2 and below, VAES from avx2) and off (QG_NOISE_AES=off), and the ChaCha20 production stream
# (QG_NOISE_CIPHER=chacha20). Each is its own process: the levels are read once per process.
#
#   scripts/asan_noise.sh          # about 10 s: build, then 7 runs of a fraction of a second
#
# Fails (exit 1) on any sanitizer report, failed check, run past 120 s, or a digest of the deterministic outputs
# (seeded and keyed keystream, samples and noised rows) that differs between configurations.
# A level the CPU lacks runs at the widest it has; each run must report the level, AES path and
# production cipher the CPU's flags and the configuration call for. scripts/fuzz_ci.sh runs it; so can
# scripts/mutate_c.py (--check) to judge mutants of native/chacha20.c, aes256ctr.c, noise.c.
# Environment: CC (default: the newest clang found, else cc), ASAN_NOISE_BUILD (default
# build/asan), ASAN_NOISE_OPT (default -O0, so no optimisation can drop an out-of-bounds access
# before the sanitizers see it; UBSan's bounds check on fixed-size local arrays is inserted before
# any optimisation, and catches the one-past mutants at -O1 too).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ASAN_NOISE_BUILD:-$ROOT/build/asan}"
OPT="${ASAN_NOISE_OPT:--O0}"
if [[ -z "${CC:-}" ]]; then
    for cand in clang clang-18 clang-17 clang-16 clang-15 clang-14 cc; do
        if command -v "$cand" >/dev/null 2>&1; then CC="$cand"; break; fi
    done
fi
mkdir -p "$BUILD"
bin="$BUILD/asan_noise_paths"
start=$(date +%s)
"$CC" -g "$OPT" -std=gnu99 -ffp-contract=off -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -I"$ROOT/native" "$ROOT/fuzz/asan_noise_paths.c" "$ROOT/native/noise.c" \
    "$ROOT/native/chacha20.c" "$ROOT/native/aes256ctr.c" -lm -lpthread -o "$bin" \
    || { echo "asan-noise: build failed" >&2; exit 2; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
configs=(
    "QG_NOISE_SIMD=scalar QG_NOISE_AES=off"
    "QG_NOISE_SIMD=scalar"
    "QG_NOISE_SIMD=sse2"
    "QG_NOISE_SIMD=avx2"
    "QG_NOISE_SIMD=avx512"
    "QG_NOISE_SIMD=avx512 QG_NOISE_AES=off"
    "QG_NOISE_SIMD=avx512 QG_NOISE_CIPHER=chacha20"
)
# The level each configuration must run at, from the CPU's flags (Linux x86-64; elsewhere this
# check is skipped): the requested level capped by the CPU, AES-NI where the CPU has AES and SSSE3,
# VAES from avx2 where it also has VAES, and AES-256-CTR production unless AES is off or ChaCha20
# is asked for. A dispatch that ran another level than asked would otherwise pass unseen.
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
rank() { case "$1" in scalar) echo 0;; sse2) echo 1;; avx2) echo 2;; avx512) echo 3;; esac; }
cpu_simd=""
if [[ "$(uname -m)" == x86_64 && "$flags" != "  " ]]; then
    cpu_simd=sse2
    has avx2 && cpu_simd=avx2
    has avx512f && has avx512vl && has avx512dq && cpu_simd=avx512
fi
expected() {  # expected "simd S, aes A, production P" for a configuration
    local cfg=" $1 " want simd aes prod
    want="${cfg##*QG_NOISE_SIMD=}"; want="${want%% *}"
    simd=$want; (( $(rank "$want") > $(rank "$cpu_simd") )) && simd=$cpu_simd
    aes=none
    if [[ "$cfg" != *" QG_NOISE_AES=off "* ]] && has aes && has ssse3; then
        aes=aesni
        has vaes && (( $(rank "$simd") >= 2 )) && aes=vaes
    fi
    prod=aes256ctr
    [[ "$aes" == none || "$cfg" == *" QG_NOISE_CIPHER=chacha20 "* ]] && prod=chacha20
    echo "simd $simd, aes $aes, production $prod"
}

# A run takes well under a second; a hang (a mutant's endless loop) fails after 120 s.
limit=()
command -v timeout >/dev/null 2>&1 && limit=(timeout 120)
digests=()
for cfg in "${configs[@]}"; do
    # shellcheck disable=SC2086
    if ! out=$(env -u QG_NOISE_SIMD -u QG_NOISE_AES -u QG_NOISE_CIPHER $cfg "${limit[@]}" "$bin" 2>"$BUILD/asan_noise.err"); then
        grep -m1 -E 'ERROR: AddressSanitizer|runtime error|^asan_noise_paths \[' "$BUILD/asan_noise.err" >&2 || true
        tail -n 40 "$BUILD/asan_noise.err" >&2
        echo "asan-noise: FAILED with $cfg (full log: $BUILD/asan_noise.err)" >&2
        exit 1
    fi
    echo "asan-noise: $cfg: ${out#asan_noise_paths: }"
    if [[ -n "$cpu_simd" && "${out#asan_noise_paths: }" != "$(expected "$cfg"), digest "* ]]; then
        echo "asan-noise: FAILED: $cfg ran as '${out#asan_noise_paths: }', expected '$(expected "$cfg")'" >&2
        exit 1
    fi
    digests+=("${out##* }")
done
for d in "${digests[@]}"; do
    if [[ "$d" != "${digests[0]}" ]]; then
        echo "asan-noise: FAILED: the deterministic outputs differ between configurations" >&2
        exit 1
    fi
done
echo "asan-noise: all ${#configs[@]} configurations clean ($(( $(date +%s) - start ))s)"
