/* ThreadSanitizer run of the batch noise kernel's threaded path (qg_noise_rows, native/noise.c).
 *
 * The libFuzzer targets feed batches far below QG_NOISE_MT_MIN elements, so they never start the
 * worker threads. This program does: batches of 2^20 to 2^21 elements, split over up to 4
 * threads, each compared with the same batch run on one thread.
 *   - keyed rows (per-row keys): the threaded output is bit-identical to the one-thread output;
 *   - a non-finite input, or a row whose norm overflows, planted at a random row: the error
 *     and its (row, column) are the first in row order, as in one thread;
 *   - fresh noise (no stream, no keys): each worker keys its own stream; outputs are finite and
 *     on the lattice.
 * Built and run by scripts/fuzz_ci.sh with -fsanitize=thread: any data race, or any mismatch
 * (exit 1), fails CI. Standalone: clang -fsanitize=thread -O1 -g -Inative fuzz/tsan_noise_threads.c
 * native/noise.c native/chacha20.c native/aes256ctr.c -lm -lpthread && ./a.out [ROUNDS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "noise.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void)
{
    /* splitmix64: reproducible inputs for a reproducible failure */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(void) { return (double)(next_u64() >> 11) * 0x1.0p-53 * 2.0 - 1.0; }

static int failures = 0;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "tsan_noise_threads: " __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                                    \
            failures++;                                                                             \
        }                                                                                           \
    } while (0)

static void fill(void *x, int is_f32, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        double v = unit() * 0.1;
        if (is_f32)
            ((float *)x)[k] = (float)v;
        else
            ((double *)x)[k] = v;
    }
}

static void put(void *x, int is_f32, size_t k, double v)
{
    if (is_f32)
        ((float *)x)[k] = (float)v;
    else
        ((double *)x)[k] = v;
}

static void one_round(int round)
{
    static const size_t dims[] = {1, 7, 384, 768, 1536};
    const size_t dim = dims[next_u64() % 5];
    const size_t total = ((size_t)1 << 20) + (next_u64() % 2) * ((size_t)1 << 20);
    const size_t rows = total / dim + 1;
    const int is_f32 = (int)(next_u64() & 1), mechanism = (int)(next_u64() % 2);
    const size_t width = is_f32 ? sizeof(float) : sizeof(double), bytes = rows * dim * width;
    const double scale = 0.05, step = 0x1.0p-20, clip_norm = (next_u64() & 1) ? 1.0 : -1.0;
    const int plant = (int)(next_u64() % 3); /* 0 none, 1 NaN, 2 a row whose squared norm overflows */
    void *x = malloc(bytes), *out_mt = malloc(bytes), *out_one = malloc(bytes);
    uint8_t *keys = malloc(rows * 32), nonce[12];
    size_t r_mt = 0, c_mt = 0, r_one = 0, c_one = 0;
    if (!x || !out_mt || !out_one || !keys) {
        fprintf(stderr, "tsan_noise_threads: out of memory\n");
        exit(2);
    }
    fill(x, is_f32, rows * dim);
    for (size_t k = 0; k < rows * 32; k++)
        keys[k] = (uint8_t)next_u64();
    for (int k = 0; k < 12; k++)
        nonce[k] = (uint8_t)next_u64();
    if (plant) {
        size_t row = next_u64() % rows, col = next_u64() % dim;
        if (plant == 1)
            put(x, is_f32, row * dim + col, NAN);
        else if (clip_norm > 0)
            put(x, is_f32, row * dim + col, is_f32 ? 3e38 : 1e300);
        else
            put(x, is_f32, row * dim + col, INFINITY);
    }

    qg_noise_set_threads(4);
    int rc_mt = qg_noise_rows(x, out_mt, is_f32, rows, dim, mechanism, scale, step, clip_norm, NULL, keys,
                              nonce, &r_mt, &c_mt);
    qg_noise_set_threads(1);
    int rc_one = qg_noise_rows(x, out_one, is_f32, rows, dim, mechanism, scale, step, clip_norm, NULL, keys,
                               nonce, &r_one, &c_one);
    CHECK(rc_mt == rc_one, "round %d: rc %d with threads, %d without", round, rc_mt, rc_one);
    if (rc_one == QG_OK)
        CHECK(memcmp(out_mt, out_one, bytes) == 0, "round %d: keyed output differs with threads", round);
    else
        CHECK(r_mt == r_one && c_mt == c_one, "round %d: error at (%zu, %zu) with threads, (%zu, %zu) without",
              round, r_mt, c_mt, r_one, c_one);
    CHECK(plant || rc_one == QG_OK, "round %d: rc %d on clean input", round, rc_one);

    /* Fresh noise: one production stream per worker. */
    qg_noise_set_threads(4);
    if (!plant) {
        int rc = qg_noise_rows(x, out_mt, is_f32, rows, dim, mechanism, scale, step, clip_norm, NULL, NULL,
                               NULL, &r_mt, &c_mt);
        CHECK(rc == QG_OK, "round %d: fresh noise rc %d", round, rc);
        for (size_t k = 0; rc == QG_OK && k < rows * dim; k++) {
            double v = is_f32 ? (double)((float *)out_mt)[k] : ((double *)out_mt)[k];
            if (!isfinite(v) || v / step != nearbyint(v / step)) {
                CHECK(0, "round %d: fresh output %zu = %g is not finite on the lattice", round, k, v);
                break;
            }
        }
    }
    printf("round %d: %zu x %zu %s %s clip %s plant %d -> rc %d\n", round, rows, dim, is_f32 ? "f32" : "f64",
           mechanism ? "laplace_l2" : "gaussian", clip_norm > 0 ? "on" : "off", plant, rc_one);
    free(x);
    free(out_mt);
    free(out_one);
    free(keys);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 8;
    qg_noise_init();
    for (int r = 0; r < rounds; r++)
        one_round(r);
    if (failures) {
        fprintf(stderr, "tsan_noise_threads: %d check(s) failed\n", failures);
        return 1;
    }
    printf("tsan_noise_threads: %d rounds clean\n", rounds);
    return 0;
}
