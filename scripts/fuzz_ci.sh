#!/usr/bin/env bash
# Build the libFuzzer harnesses in fuzz/ with ASan + UBSan and run each for a bounded time, replay
# every scan/detect/noise input (grown and seed) through the native binding and its Python twin
# (scripts/fuzz_diff.py), replay the noise, chacha20 and aes inputs at every narrower
# QG_NOISE_SIMD level and with AES off, run every noise-kernel path at every level with exact-size
# buffers (scripts/asan_noise.sh), then the noise kernel's threaded path under ThreadSanitizer
# (fuzz/tsan_noise_threads.c).
#
#   scripts/fuzz_ci.sh [SECONDS]   # seconds per target, default 25 (about 75 s in all on 2 cores)
#
# Exits nonzero on any crash, leak, sanitizer report, harness invariant failure, timeout or
# native/twin disagreement, and leaves the reproducer in $FUZZ_OUT (default build/fuzz/out).
# Prints the executions per target and the inputs compared with the twins.
# Environment: CC (a clang with libFuzzer; default: the newest clang found), FUZZ_JOBS (targets
# run at once, default: number of CPUs, at most 4), FUZZ_OUT, FUZZ_PYTHON (a Python that can
# import this checkout's in-place native build; default: `make build`, then .venv/bin/python).
set -euo pipefail

SECONDS_PER_TARGET="${1:-25}"
case "$SECONDS_PER_TARGET" in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FUZZ_BUILD:-$ROOT/build/fuzz}"
OUT="${FUZZ_OUT:-$BUILD/out}"
TARGETS=(scan detect noise chacha20 aes)
JOBS="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
(( JOBS > 4 )) && JOBS=4
(( JOBS < 1 )) && JOBS=1

if [[ -z "${CC:-}" ]]; then
    for cand in clang clang-18 clang-17 clang-16 clang-15 clang-14; do
        if command -v "$cand" >/dev/null 2>&1; then CC="$cand"; break; fi
    done
fi
if [[ -z "${CC:-}" ]] || ! command -v "$CC" >/dev/null 2>&1; then
    echo "fuzz: no clang found. Debian/Ubuntu: apt-get install -y clang-14 libclang-rt-14-dev" >&2
    exit 2
fi

# Same C dialect and FP flags as setup.py; -O1 -g for usable sanitizer reports.
CFLAGS=(-g -O1 -std=gnu99 -ffp-contract=off -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I"$ROOT/native")
sources() {
    case "$1" in
        scan) echo "$ROOT/native/scan.c";;
        detect) echo "$ROOT/native/detect.c";;
        noise) echo "$ROOT/native/noise.c $ROOT/native/chacha20.c $ROOT/native/aes256ctr.c";;
        chacha20) echo "$ROOT/native/chacha20.c $ROOT/native/aes256ctr.c";;
        aes) echo "$ROOT/native/aes256ctr.c $ROOT/native/chacha20.c";;
    esac
}
max_len() { case "$1" in scan|detect) echo 8192;; noise) echo 4096;; chacha20|aes) echo 1024;; esac; }

mkdir -p "$BUILD" "$OUT"
echo "fuzz: $("$CC" --version | head -n1); ${SECONDS_PER_TARGET}s per target, $JOBS at a time"
build_start=$(date +%s)
pids=()
for t in "${TARGETS[@]}"; do
    # shellcheck disable=SC2046
    "$CC" "${CFLAGS[@]}" "$ROOT/fuzz/fuzz_$t.c" $(sources "$t") -lm -o "$BUILD/fuzz_$t" &
    pids+=($!)
done
for p in "${pids[@]}"; do
    wait "$p" || { echo "fuzz: build failed (does $CC ship libFuzzer? apt-get install libclang-rt-*-dev)" >&2; exit 2; }
done
echo "fuzz: built ${#TARGETS[@]} harnesses in $(( $(date +%s) - build_start ))s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_target() {
    local t="$1" work="$BUILD/work_$t"
    rm -rf "$work" && mkdir -p "$work"
    # New inputs go to the scratch dir (first); the committed seeds (second) are only read.
    "$BUILD/fuzz_$t" "$work" "$ROOT/fuzz/corpus/$t" \
        -max_total_time="$SECONDS_PER_TARGET" -max_len="$(max_len "$t")" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/$t-" \
        >"$BUILD/$t.log" 2>&1
}

declare -A status
running=()
for t in "${TARGETS[@]}"; do
    run_target "$t" & running+=("$t:$!")
    if (( ${#running[@]} >= JOBS )); then
        entry="${running[0]}"; running=("${running[@]:1}")
        if wait "${entry#*:}"; then status[${entry%%:*}]=0; else status[${entry%%:*}]=$?; fi
    fi
done
for entry in "${running[@]}"; do
    if wait "${entry#*:}"; then status[${entry%%:*}]=0; else status[${entry%%:*}]=$?; fi
done

failed=0
printf '%-10s %14s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${TARGETS[@]}"; do
    log="$BUILD/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
    units=$(find "$BUILD/work_$t" -type f | wc -l)
    if [[ "${status[$t]}" == 0 ]]; then result=ok; else result="FAILED (exit ${status[$t]})"; failed=1; fi
    printf '%-10s %14s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$units" "$result"
done
if (( failed )); then
    for t in "${TARGETS[@]}"; do
        if [[ "${status[$t]}" != 0 ]]; then
            echo "---- $t: last lines of $BUILD/$t.log" >&2
            grep -v 'Uses:' "$BUILD/$t.log" | tail -n 40 >&2
        fi
    done
    echo "fuzz: FAILED; reproducers in $OUT (run: $BUILD/fuzz_<target> <file>)" >&2
    exit 1
fi
echo "fuzz: all targets clean"

# The harnesses check C-side invariants only: replay what they found, and the seeds, through the
# Python API, native against the reference twin. Any disagreement fails the run (the input is
# copied to $OUT as diff-<target>-<name>); so does a replay that compares nothing or that would
# not load the native extension.
if [[ -z "${FUZZ_PYTHON:-}" ]]; then
    make -C "$ROOT" -s build >"$BUILD/native_build.log" 2>&1 \
        || { tail -n 30 "$BUILD/native_build.log" >&2; echo "fuzz-diff: make build failed" >&2; exit 2; }
    FUZZ_PYTHON="$ROOT/.venv/bin/python"
fi
diff_args=()
for t in scan detect noise; do diff_args+=("$t:$BUILD/work_$t" "$t:$ROOT/fuzz/corpus/$t"); done
diff_rc=0
"$FUZZ_PYTHON" "$ROOT/scripts/fuzz_diff.py" --out "$OUT" "${diff_args[@]}" || diff_rc=$?
if (( diff_rc )); then
    echo "fuzz-diff: FAILED (exit $diff_rc); reproducers in $OUT (run: $FUZZ_PYTHON scripts/fuzz_diff.py <target>:<file>)" >&2
    exit "$diff_rc"
fi

# The fuzzers ran at the CPU's widest level (QG_NOISE_SIMD and QG_NOISE_AES are read once per
# process): replay what they found, and the seeds, through the same ASan/UBSan binaries at each
# narrower level and with AES off, so the scalar, SSE2, AVX2 and AES-NI paths see every input too.
replay_start=$(date +%s)
for cfg in "QG_NOISE_SIMD=scalar QG_NOISE_AES=off" "QG_NOISE_SIMD=sse2" "QG_NOISE_SIMD=avx2"; do
    for t in noise chacha20 aes; do
        # shellcheck disable=SC2086
        if ! env $cfg "$BUILD/fuzz_$t" -runs=0 -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
                -artifact_prefix="$OUT/$t-replay-" "$BUILD/work_$t" "$ROOT/fuzz/corpus/$t" >"$BUILD/$t.replay.log" 2>&1; then
            grep -v 'Uses:' "$BUILD/$t.replay.log" | tail -n 40 >&2
            echo "fuzz-replay: FAILED: $t with $cfg (reproducers in $OUT)" >&2
            exit 1
        fi
    done
done
echo "fuzz-replay: noise, chacha20 and aes inputs clean at scalar (AES off), sse2 and avx2 ($(( $(date +%s) - replay_start ))s)"

# Every noise-kernel path at every level, key, nonce, counter and output in exact-size blocks
# (the fuzzers pass them inside larger ones), plus the production stream's fork re-key.
bash "$ROOT/scripts/asan_noise.sh"

# The detector in exact-size buffers over glued-card texts: a read one past the text, which the
# fuzzers' buffers and the Python binding's NUL-ended bytes both hide (scripts/asan_detect.sh).
PYTHON="$FUZZ_PYTHON" bash "$ROOT/scripts/asan_detect.sh"

# The noise kernel's worker threads start only for batches of 2^20 elements and more, far beyond
# the fuzz inputs: a ThreadSanitizer build runs such batches on 4 threads and on one, compares
# them, and fails on any data race (fuzz/tsan_noise_threads.c).
tsan_start=$(date +%s)
# shellcheck disable=SC2046
"$CC" -g -O1 -std=gnu99 -ffp-contract=off -fno-omit-frame-pointer -fsanitize=thread -I"$ROOT/native" \
    "$ROOT/fuzz/tsan_noise_threads.c" $(sources noise) -lm -lpthread -o "$BUILD/tsan_noise_threads" \
    || { echo "tsan: build failed (does $CC ship the ThreadSanitizer runtime? libclang-rt-*-dev)" >&2; exit 2; }
if TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}" "$BUILD/tsan_noise_threads" 12 >"$BUILD/tsan.log" 2>&1; then
    echo "tsan: threaded noise batches clean ($(grep -c '^round' "$BUILD/tsan.log") batches, $(( $(date +%s) - tsan_start ))s)"
else
    grep -v '^round' "$BUILD/tsan.log" | tail -n 60 >&2
    echo "tsan: FAILED (full log: $BUILD/tsan.log)" >&2
    exit 1
fi
