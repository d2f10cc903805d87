/* libFuzzer harness for qg_noise_rows (clip + noise + lattice snap) and the samplers qg_normal /
 * qg_gamma (native/noise.c).
 *
 * Input: a 40-byte header (dtype, mechanism, rng mode, rows, dim, scale, step exponent, clip_norm,
 * key), then the vector values as raw float/double bits: NaN, Inf, denormals and huge values all
 * come straight from the fuzzer. Parameters stay in the domain qdrant_guard._noise.noise_vectors
 * lets through (scale finite > 0, step a power of two, clip_norm > 0 or off, rows and dim >= 1).
 * Checks, besides the sanitizers: the return code matches the input (the first non-finite input
 * is reported at its position; an overflow is reported where it happened; a success is finite
 * and on the lattice); seeded and keyed runs are reproducible; a keyed row does not depend on
 * the other rows; the samplers return finite values (gammas > 0).
 *
 * The same bytes also drive qg_unit_grid_nudge (the Cosine stored form's norm correction):
 * integer rows, residuals and a visiting order from the fuzzer, keys built as
 * receipts._unit_grid_rows builds them, sometimes one key naming a coordinate past its row.
 * Checks: such an order is refused with nothing changed; otherwise each row's residual + sum(k^2)
 * is unchanged (every step moves both by the same integer), and no coordinate changes sign,
 * leaves zero or moves by more than one unit per pass. */
#include <math.h>

#include "fuzz_common.h"

#include "noise.h"

enum { HEADER = 40, MAX_ROWS = 8, MAX_DIM = 64 };

static int first_nonfinite(const void *x, int is_f32, size_t rows, size_t dim, size_t *r, size_t *c)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < dim; j++) {
            double v = is_f32 ? (double)((const float *)x)[i * dim + j] : ((const double *)x)[i * dim + j];
            if (!isfinite(v)) {
                *r = i;
                *c = j;
                return 1;
            }
        }
    return 0;
}

static double get(const void *p, int is_f32, size_t k)
{
    return is_f32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

static double row_energy(const double *k, double r, size_t dim)
{
    double sum = r;
    for (size_t j = 0; j < dim; j++)
        sum += k[j] * k[j];
    return sum;
}

static void fuzz_nudge(const uint8_t *data, size_t size)
{
    enum { NUDGE_ROWS = 4, NUDGE_DIM = 64 };
    fuzz_reader rd = {data, size};
    uint8_t flags = (uint8_t)take_u64(&rd, 1);
    size_t rows = 1 + (size_t)take_u64(&rd, 1) % NUDGE_ROWS;
    size_t dim = 1 + (size_t)take_u64(&rd, 1) % NUDGE_DIM;
    int need = 1;
    while (((size_t)1 << need) < dim)
        need++;
    int shift = need + (int)(take_u64(&rd, 1) % 8);
    int wide = (flags & 1) || shift > 10; /* int32 keys fit up to shift 10, as in receipts.py */
    double tol = (double)take_u64(&rd, 2);
    int passes = (int)(take_u64(&rd, 1) % 17);
    int plant_bad = (flags & 6) == 6 && ((size_t)1 << shift) > dim;
    size_t count = rows * dim;
    double *k = malloc(count * sizeof *k), *k0 = malloc(count * sizeof *k);
    double *res = malloc(rows * sizeof *res), *res0 = malloc(rows * sizeof *res);
    int64_t *o64 = malloc(count * sizeof *o64);
    int32_t *o32 = malloc(count * sizeof *o32);
    if (!k || !k0 || !res || !res0 || !o64 || !o32)
        abort();
    for (size_t i = 0; i < rows; i++) {
        res[i] = (double)(int32_t)take_u64(&rd, 4);
        for (size_t j = 0; j < dim; j++) {
            double v = (double)(int16_t)take_u64(&rd, 2);
            k[i * dim + j] = v;
            o64[i * dim + j] = ((((int64_t)1 << 20) - (int64_t)fabs(v)) << shift) | (int64_t)j;
        }
        for (size_t j = dim; j > 1; j--) { /* a fuzzer-chosen visiting order */
            size_t m = (size_t)take_u64(&rd, 1) % j;
            int64_t t = o64[i * dim + j - 1];
            o64[i * dim + j - 1] = o64[i * dim + m];
            o64[i * dim + m] = t;
        }
    }
    if (plant_bad) {
        size_t at = (size_t)take_u64(&rd, 2) % count;
        int64_t low = (int64_t)dim + (int64_t)(take_u64(&rd, 2) % (((size_t)1 << shift) - dim));
        o64[at] = (o64[at] >> shift << shift) | low;
    }
    for (size_t c = 0; c < count; c++)
        o32[c] = (int32_t)o64[c];
    memcpy(k0, k, count * sizeof *k);
    memcpy(res0, res, rows * sizeof *res);
    int rc = qg_unit_grid_nudge(k, res, wide ? NULL : o32, wide ? o64 : NULL, rows, dim, shift, tol, passes);
    if (plant_bad) {
        CHECK(rc == -1, "an order naming a coordinate past the row was taken (rc %d)", rc);
        CHECK(memcmp(k, k0, count * sizeof *k) == 0 && memcmp(res, res0, rows * sizeof *res) == 0,
              "a refused call changed its inputs");
    } else {
        CHECK(rc == 0, "a valid order was refused (rc %d, dim %zu, shift %d)", rc, dim, shift);
        for (size_t i = 0; i < rows; i++) {
            CHECK(row_energy(k + i * dim, res[i], dim) == row_energy(k0 + i * dim, res0[i], dim),
                  "row %zu: residual + sum(k^2) moved from %.17g to %.17g", i,
                  row_energy(k0 + i * dim, res0[i], dim), row_energy(k + i * dim, res[i], dim));
            for (size_t j = 0; j < dim; j++) {
                double a = k0[i * dim + j], b = k[i * dim + j];
                CHECK(a * b >= 0 && (a != 0 || b == 0), "k[%zu][%zu] changed sign or left zero: %g -> %g",
                      i, j, a, b);
                CHECK(fabs(b - a) <= passes, "k[%zu][%zu] moved %g in %d passes", i, j, b - a, passes);
            }
        }
    }
    free(k);
    free(k0);
    free(res);
    free(res0);
    free(o64);
    free(o32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_nudge(data, size);
    if (size < HEADER)
        return 0;
    fuzz_reader rd = {data, size};
    uint8_t flags = (uint8_t)take_u64(&rd, 1);
    int is_f32 = flags & 1;
    int mechanism = (flags >> 1) & 1 ? QG_LAPLACE_L2 : QG_GAUSSIAN;
    int mode = (flags >> 2) & 3; /* 0, 3: shared seeded stream; 1: row keys; 2: thread stream */
    size_t rows = 1 + (size_t)take_u64(&rd, 1) % MAX_ROWS;
    size_t dim = 1 + (size_t)take_u64(&rd, 1) % MAX_DIM;
    double scale = take_double(&rd);
    int step_exp = (int)(int8_t)take_u64(&rd, 1) * 4; /* 2^-512 .. 2^508 */
    double clip = take_double(&rd);
    uint8_t key[32], nonce[12] = {0};
    for (int k = 0; k < 20; k++)
        key[k] = (uint8_t)take_u64(&rd, 1);
    memset(key + 20, 0x5A, 12);
    if (!(isfinite(scale) && scale > 0.0))
        scale = fabs(scale) > 0.0 && isfinite(scale) ? fabs(scale) : 1.0;
    if (flags & 0x10) {
        /* Denormal and extreme lattice steps, still powers of two (frexp(step) == 0.5). */
        step_exp = (flags & 0x20) ? -1074 + (step_exp & 31) : 1023 - (step_exp & 15);
    }
    double step = ldexp(1.0, step_exp);
    if (!isfinite(clip) || (flags & 0x40))
        clip = 0.0; /* clipping off */
    else
        clip = fabs(clip);

    size_t esize = is_f32 ? 4 : 8, count = rows * dim;
    size_t have = rd.n / esize;
    if (have < count) {
        rows = have / dim;
        if (rows == 0)
            return 0;
        count = rows * dim;
    }
    /* Own aligned copies sized exactly, so ASan catches any read or write past a row. */
    void *x = malloc(count * esize), *out1 = malloc(count * esize), *out2 = malloc(count * esize);
    uint8_t *row_keys = (uint8_t *)malloc(32 * rows);
    if (!x || !out1 || !out2 || !row_keys)
        abort();
    memcpy(x, rd.p, count * esize);
    for (size_t i = 0; i < rows; i++) {
        memcpy(row_keys + 32 * i, key, 32);
        row_keys[32 * i + 31] = (uint8_t)i;
    }

    qg_stream st;
    size_t br1 = SIZE_MAX, bc1 = SIZE_MAX, br2 = SIZE_MAX, bc2 = SIZE_MAX;
    qg_stream_init(&st, key, nonce);
    int rc1 = qg_noise_rows(x, out1, is_f32, rows, dim, mechanism, scale, step, clip,
                            mode == 2 ? NULL : mode == 1 ? NULL : &st, mode == 1 ? row_keys : NULL,
                            nonce, &br1, &bc1);
    CHECK(rc1 >= QG_OK && rc1 <= QG_ERR_MEMORY && rc1 != QG_ERR_RANDOM, "rc %d", rc1);

    size_t fr, fc;
    int bad = first_nonfinite(x, is_f32, rows, dim, &fr, &fc);
    if (rc1 == QG_ERR_NONFINITE)
        CHECK(bad && br1 == fr && bc1 == fc, "NONFINITE at (%zu, %zu), first is (%zu, %zu)", br1, bc1, fr, fc);
    else if (bad) /* only an error in an earlier row may stop the kernel before it gets there */
        CHECK(rc1 != QG_OK && rc1 != QG_ERR_MEMORY && br1 < fr,
              "non-finite input at (%zu, %zu) not reported (rc %d, row %zu)", fr, fc, rc1, br1);
    if (rc1 == QG_ERR_CLIP_OVERFLOW)
        CHECK(clip > 0.0 && br1 < rows, "CLIP_OVERFLOW at row %zu with clip %g", br1, clip);
    if (rc1 == QG_ERR_OUTPUT_OVERFLOW)
        CHECK(br1 < rows && bc1 < dim && !isfinite(get(out1, is_f32, br1 * dim + bc1)),
              "OUTPUT_OVERFLOW at (%zu, %zu) but that output is finite", br1, bc1);
    if (rc1 == QG_OK) {
        for (size_t k = 0; k < count; k++) {
            double v = get(out1, is_f32, k);
            CHECK(isfinite(v), "output %zu not finite: %g", k, v);
            /* On the lattice: v / step is an integer. float32 rounding may leave it when the
             * lattice is finer than float32 resolution at v, so check doubles only. */
            if (!is_f32 && isfinite(v / step))
                CHECK(rint(v / step) == v / step, "output %zu = %a not a multiple of %a", k, v, step);
        }
    }

    if (mode != 2) {
        /* Seeded and keyed modes are reproducible. */
        qg_stream_init(&st, key, nonce);
        int rc2 = qg_noise_rows(x, out2, is_f32, rows, dim, mechanism, scale, step, clip,
                                mode == 1 ? NULL : &st, mode == 1 ? row_keys : NULL, nonce, &br2, &bc2);
        CHECK(rc1 == rc2, "rc %d then %d", rc1, rc2);
        if (rc1 == QG_OK)
            CHECK(memcmp(out1, out2, count * esize) == 0, "seeded outputs differ");
        if (mode == 1 && rc1 == QG_OK && rows > 1) {
            /* A keyed row depends only on its own key and values: noise the last row alone. */
            size_t last = rows - 1;
            int rc3 = qg_noise_rows((const uint8_t *)x + last * dim * esize, out2, is_f32, 1, dim,
                                    mechanism, scale, step, clip, NULL, row_keys + 32 * last, nonce,
                                    &br2, &bc2);
            CHECK(rc3 == QG_OK && memcmp((const uint8_t *)out1 + last * dim * esize, out2,
                                         dim * esize) == 0,
                  "keyed row %zu differs when noised alone", last);
        }
    }

    /* The samplers on their own: finite, normals of any sign, gammas > 0 for shapes >= 1. */
    qg_stream_init(&st, key, nonce);
    for (int k = 0; k < 16; k++) {
        double z = qg_normal(&st);
        CHECK(isfinite(z) && fabs(z) < 40.0, "normal %g", z);
    }
    double shape = 1.0 + fabs(clip);
    if (!isfinite(shape) || shape > 1e12)
        shape = 1e12;
    for (int k = 0; k < 4; k++) {
        double g = qg_gamma(&st, shape);
        CHECK(isfinite(g) && g > 0.0, "gamma(%g) = %g", shape, g);
    }
    qg_stream_wipe(&st);
    free(x);
    free(out1);
    free(out2);
    free(row_keys);
    return 0;
}
