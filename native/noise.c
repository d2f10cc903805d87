/* Ziggurat normals, Marsaglia-Tsang gamma, and the clip + noise + lattice kernel. */
#include "noise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ziggurat_tables.h"

#define TWO_M24 0x1p-24
#define TWO_M53 0x1p-53
#define ROUND_MAGIC 6755399441055744.0 /* 1.5 * 2^52: add then subtract rounds half-to-even */

static double zig_xs[QG_ZIG_LAYERS];
static int zig_xs_ready = 0;

void qg_noise_init(void)
{
    int i;
    for (i = 0; i < QG_ZIG_LAYERS; i++) zig_xs[i] = QG_ZIG_X[i] * TWO_M24;
    zig_xs_ready = 1;
}

/* Flip the sign without a branch: the sign bit is random, so a branch would mispredict half the
   time. Same result as the reference's "-z if sign else z". */
static inline double with_sign(double z, uint32_t w)
{
    uint64_t bits;
    memcpy(&bits, &z, sizeof bits);
    bits ^= (uint64_t)((w >> 7) & 1u) << 63;
    memcpy(&z, &bits, sizeof bits);
    return z;
}

static inline double uniform53(qg_stream *s)
{
    uint64_t lo = qg_stream_u32(s);
    uint64_t hi = qg_stream_u32(s);
    return (double)((lo | (hi << 32)) >> 11) * TWO_M53;
}

static inline double uniform53_open0(qg_stream *s)
{
    uint64_t lo = qg_stream_u32(s);
    uint64_t hi = qg_stream_u32(s);
    return (double)(((lo | (hi << 32)) >> 11) + 1) * TWO_M53;
}

static double normal_slow(qg_stream *s, uint32_t w, double z)
{
    unsigned i = w & 127u;
    if (i == 0) {
        for (;;) {
            double a = -log(uniform53_open0(s)) / QG_ZIG_R;
            double b = -log(uniform53_open0(s));
            if (b + b > a * a) {
                z = QG_ZIG_R + a;
                return ((w >> 7) & 1u) ? -z : z;
            }
        }
    }
    {
        double y = QG_ZIG_F[i] + uniform53(s) * (QG_ZIG_F[i + 1] - QG_ZIG_F[i]);
        if (y < exp(-0.5 * z * z)) return ((w >> 7) & 1u) ? -z : z;
    }
    return NAN; /* rejected: caller restarts with a fresh word */
}

static inline double normal_fast(qg_stream *s)
{
    for (;;) {
        uint32_t w = qg_stream_u32(s);
        unsigned i = w & 127u;
        double z = (double)(w >> 8) * zig_xs[i];
        if (z < QG_ZIG_X[i + 1]) return with_sign(z, w);
        z = normal_slow(s, w, z);
        if (z == z) return z;
    }
}

double qg_normal(qg_stream *s)
{
    if (!zig_xs_ready) qg_noise_init();
    return normal_fast(s);
}

double qg_gamma(qg_stream *s, double shape)
{
    double dd = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * dd);
    if (!zig_xs_ready) qg_noise_init();
    for (;;) {
        double x = normal_fast(s), v = 1.0 + c * x, u, x2;
        if (v <= 0.0) continue;
        v = v * v * v;
        u = uniform53_open0(s);
        x2 = x * x;
        if (u < 1.0 - 0.0331 * (x2 * x2)) return dd * v;
        if (log(u) < 0.5 * x2 + dd * (1.0 - v + log(v))) return dd * v;
    }
}

static inline double snap(double v, double inv_step, double step)
{
    double q = v * inv_step;
    if (fabs(q) < 0x1p51)
        q = (q + ROUND_MAGIC) - ROUND_MAGIC;
    else
        q = rint(q);
    return q * step;
}

int qg_noise_rows(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                  double scale, double step, double clip_norm, qg_stream *stream,
                  const uint8_t *row_keys, const uint8_t nonce[12], size_t *bad_row, size_t *bad_col)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    float *of = (float *)out;
    double *od = (double *)out;
    double inv_step = 1.0 / step;
    double *scratch = NULL; /* laplace_l2 direction, one row, allocated once per call */
    qg_stream row_stream;
    int rc = QG_OK;
    size_t i, j;

    if (!zig_xs_ready) qg_noise_init();
    if (mechanism == QG_LAPLACE_L2) {
        scratch = (double *)malloc(dim * sizeof(double));
        if (!scratch) return QG_ERR_MEMORY;
    }
    if (!stream && !row_keys) {
        int err = 0;
        stream = qg_thread_stream(&err);
        if (!stream) {
            free(scratch);
            *bad_col = (size_t)err;
            return QG_ERR_RANDOM;
        }
    }
    for (i = 0; i < rows; i++) {
        qg_stream *s = stream;
        double factor = 1.0;
        int clipped = 0;
        for (j = 0; j < dim; j++) {
            double v = is_f32 ? (double)xf[i * dim + j] : xd[i * dim + j];
            if (!isfinite(v)) {
                *bad_row = i;
                *bad_col = j;
                rc = QG_ERR_NONFINITE;
                goto done;
            }
        }
        if (clip_norm > 0.0) {
            double ss = 0.0, norm;
            for (j = 0; j < dim; j++) {
                double v = is_f32 ? (double)xf[i * dim + j] : xd[i * dim + j];
                ss += v * v;
            }
            if (ss == INFINITY) {
                *bad_row = i;
                rc = QG_ERR_CLIP_OVERFLOW;
                goto done;
            }
            norm = sqrt(ss);
            if (norm > clip_norm) {
                factor = clip_norm / norm;
                clipped = 1;
            }
        }
        if (row_keys) {
            qg_stream_init(&row_stream, row_keys + 32 * i, nonce);
            s = &row_stream;
        }
        if (mechanism == QG_GAUSSIAN) {
            for (j = 0; j < dim; j++) {
                double v = is_f32 ? (double)xf[i * dim + j] : xd[i * dim + j];
                if (clipped) v = v * factor;
                v = snap(v + normal_fast(s) * scale, inv_step, step);
                if (is_f32) of[i * dim + j] = (float)v; else od[i * dim + j] = v;
            }
        } else {
            double gs, coef;
            do {
                gs = 0.0;
                for (j = 0; j < dim; j++) {
                    scratch[j] = normal_fast(s);
                    gs += scratch[j] * scratch[j];
                }
            } while (!(gs > 0.0));
            coef = (qg_gamma(s, (double)dim) * scale) / sqrt(gs);
            for (j = 0; j < dim; j++) {
                double v = is_f32 ? (double)xf[i * dim + j] : xd[i * dim + j];
                if (clipped) v = v * factor;
                v = snap(v + scratch[j] * coef, inv_step, step);
                if (is_f32) of[i * dim + j] = (float)v; else od[i * dim + j] = v;
            }
        }
        for (j = 0; j < dim; j++) {
            if (!isfinite(is_f32 ? (double)of[i * dim + j] : od[i * dim + j])) {
                *bad_row = i;
                *bad_col = j;
                rc = QG_ERR_OUTPUT_OVERFLOW;
                goto done;
            }
        }
    }
done:
    if (row_keys) qg_stream_wipe(&row_stream);
    free(scratch);
    return rc;
}
