/* Ziggurat normals, Marsaglia-Tsang gamma, and the clip + noise + lattice kernel.
 *
 * The SIMD paths (AVX2, AVX-512, chosen at run time) compute exactly what the scalar path
 * computes: the same IEEE operations in the same order on each value, no fused multiply-add, and
 * the same consumption of keystream words. Rare Ziggurat rejections are handed to the scalar code
 * at the word where they occur, so the sample stream is the reference's word for word. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "noise.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "ziggurat_tables.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define QG_HAVE_SIMD 1
#endif

#define TWO_M23 0x1p-23
#define TWO_M53 0x1p-53
#define ROUND_MAGIC 6755399441055744.0 /* 1.5 * 2^52: add then subtract rounds half-to-even */
#define CHUNK 1024                     /* gaussian normals generated per pass, on the stack */

static double zig_xs[QG_ZIG_LAYERS];
/* zig_k[i]: the smallest 23-bit u with u * zig_xs[i] >= X[i+1]. Multiplying by a positive double
   is monotone, so "u < zig_k[i]" is exactly the reference's "z < X[i+1]", as an integer test. */
static int32_t zig_k[QG_ZIG_LAYERS];
/* zig_pair[i] = {zig_xs[i], X[i+1]}: what the AVX2 sampler needs for layer i, in one 16-byte load. */
static double zig_pair[QG_ZIG_LAYERS][2] __attribute__((aligned(64)));
static int8_t zig_shape[QG_ZIG_LAYERS]; /* wedge_test: 1 convex, 2 concave, 0 neither */
static double zig_slope[QG_ZIG_LAYERS]; /* wedge_test: chord slope (F[i] - F[i+1]) / (X[i] - X[i+1]) */
static int simd_level = 0;
static int zig_ready = 0;

void qg_noise_init(void)
{
    int i;
    for (i = 0; i < QG_ZIG_LAYERS; i++) {
        int32_t lo = 0, hi = 1 << 23;
        zig_xs[i] = QG_ZIG_X[i] * TWO_M23;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if ((double)mid * zig_xs[i] >= QG_ZIG_X[i + 1]) hi = mid; else lo = mid + 1;
        }
        zig_k[i] = lo;
        zig_pair[i][0] = zig_xs[i];
        zig_pair[i][1] = QG_ZIG_X[i + 1];
        zig_slope[i] = (QG_ZIG_F[i] - QG_ZIG_F[i + 1]) / (QG_ZIG_X[i] - QG_ZIG_X[i + 1]);
        zig_shape[i] = i == 0 ? 0 : QG_ZIG_X[i + 1] >= 1.0 ? 1 : QG_ZIG_X[i] <= 1.0 ? 2 : 0;
    }
    simd_level = qg_simd_level();
    /* Read QG_NOISE_THREADS now, at import under the GIL, not in the first batch, which runs
       without it (getenv there could race a thread that changes os.environ). */
    (void)qg_noise_get_threads();
    /* The same for the production cipher (QG_NOISE_CIPHER and the CPUID check), which each worker
       of a threaded batch asks for when it keys its stream. */
    (void)qg_production_cipher();
    /* Release: pairs with ensure_init's acquire. */
    __atomic_store_n(&zig_ready, 1, __ATOMIC_RELEASE);
}

/* qg_noise_init on first use. Acquire: a thread that sees zig_ready also sees the tables. */
static inline void ensure_init(void)
{
    if (!__atomic_load_n(&zig_ready, __ATOMIC_ACQUIRE)) qg_noise_init();
}

/* Flip the sign without a branch: the sign bit is random, so a branch would mispredict half the
   time. Same result as the reference's "-z if sign else z". */
static inline double with_sign(double z, uint32_t w)
{
    uint64_t bits;
    memcpy(&bits, &z, sizeof bits);
    bits ^= (uint64_t)((w >> 8) & 1u) << 63;
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

/* The wedge test "y < exp(-z*z/2)" for X[i+1] <= z <= X[i], decided without exp() when y is
   clearly on one side. The density is convex for z >= 1 and concave for z <= 1, so on a layer
   wholly on one side its chord and its end tangents bound it (convex: tangents <= f <= chord;
   concave: chord <= f <= tangents). Those bounds, the table values F and exp() itself are all
   within ~1e-15 of the true density, so outside a band of WEDGE_TOL they give the answer exp()
   would; inside it (and on the layer holding z = 1) the caller evaluates exp() as before.
   Returns 1 (accept), 0 (reject) or -1 (undecided). */
#define WEDGE_TOL 1e-12

static inline int wedge_test(unsigned i, double z, double y)
{
    double x0 = QG_ZIG_X[i + 1], f0 = QG_ZIG_F[i + 1], x1 = QG_ZIG_X[i], f1 = QG_ZIG_F[i];
    double chord = f0 + (z - x0) * zig_slope[i];
    double t0 = f0 * (1.0 - x0 * (z - x0)), t1 = f1 * (1.0 - x1 * (z - x1));
    if (zig_shape[i] == 1) {
        if (y > chord + WEDGE_TOL) return 0;
        if (y < (t0 > t1 ? t0 : t1) - WEDGE_TOL) return 1;
    } else if (zig_shape[i] == 2) {
        if (y < chord - WEDGE_TOL) return 1;
        if (y > (t0 < t1 ? t0 : t1) + WEDGE_TOL) return 0;
    }
    return -1;
}

static double normal_slow(qg_stream *s, uint32_t w, double z)
{
    unsigned i = w & 255u;
    if (i == 0) {
        for (;;) {
            double a = -log(uniform53_open0(s)) / QG_ZIG_R;
            double b = -log(uniform53_open0(s));
            if (b + b > a * a) {
                z = QG_ZIG_R + a;
                return ((w >> 8) & 1u) ? -z : z;
            }
        }
    }
    {
        double y = QG_ZIG_F[i] + uniform53(s) * (QG_ZIG_F[i + 1] - QG_ZIG_F[i]);
        int accept = wedge_test(i, z, y);
        if (accept < 0) accept = y < exp(-0.5 * z * z);
        if (accept) return ((w >> 8) & 1u) ? -z : z;
    }
    return NAN; /* rejected: caller restarts with a fresh word */
}

static inline double normal_fast(qg_stream *s)
{
    for (;;) {
        uint32_t w = qg_stream_u32(s);
        unsigned i = w & 255u;
        double z = (double)(w >> 9) * zig_xs[i];
        if ((int32_t)(w >> 9) < zig_k[i]) return with_sign(z, w);
        z = normal_slow(s, w, z);
        if (z == z) return z;
    }
}

/* The word at s->pos was rejected by the fast test: consume it and finish the sample serially. */
static double finish_rejected(qg_stream *s)
{
    uint32_t w = s->buf[s->pos++];
    double z = normal_slow(s, w, (double)(w >> 9) * zig_xs[w & 255u]);
    return z == z ? z : normal_fast(s);
}

#ifdef QG_HAVE_SIMD
/* The 8 samples of the words at wp, signed, and a mask of the lanes that pass the fast test
   (bit k: lane k). Gathers are slow on the CPUs we measured (AMD Zen: ~75% of the sampler's time),
   so each lane loads its layer's (xs[i], X[i+1]) pair with one 16-byte load and two unpacks
   transpose the pairs. The test "z < X[i+1]" is the reference's own, the same as "u < zig_k[i]". */
static inline __attribute__((always_inline, target("avx2")))
unsigned sample8_avx2(const uint32_t *wp, __m256d *zl, __m256d *zh)
{
    const __m256i sign = _mm256_set1_epi64x((long long)0x8000000000000000ULL);
    __m256i w = _mm256_loadu_si256((const __m256i *)wp);
    __m256i u = _mm256_srli_epi32(w, 9);
    const double *p0 = zig_pair[wp[0] & 255u], *p1 = zig_pair[wp[1] & 255u];
    const double *p2 = zig_pair[wp[2] & 255u], *p3 = zig_pair[wp[3] & 255u];
    const double *p4 = zig_pair[wp[4] & 255u], *p5 = zig_pair[wp[5] & 255u];
    const double *p6 = zig_pair[wp[6] & 255u], *p7 = zig_pair[wp[7] & 255u];
    __m256d a_lo = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(p0)), _mm_load_pd(p2), 1);
    __m256d b_lo = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(p1)), _mm_load_pd(p3), 1);
    __m256d a_hi = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(p4)), _mm_load_pd(p6), 1);
    __m256d b_hi = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_load_pd(p5)), _mm_load_pd(p7), 1);
    __m128i w_lo = _mm256_castsi256_si128(w), w_hi = _mm256_extracti128_si256(w, 1);
    __m256d z_lo = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(u)), _mm256_unpacklo_pd(a_lo, b_lo));
    __m256d z_hi = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(u, 1)), _mm256_unpacklo_pd(a_hi, b_hi));
    unsigned acc = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(z_lo, _mm256_unpackhi_pd(a_lo, b_lo), _CMP_LT_OQ)) |
                   ((unsigned)_mm256_movemask_pd(_mm256_cmp_pd(z_hi, _mm256_unpackhi_pd(a_hi, b_hi), _CMP_LT_OQ)) << 4);
    __m256i s_lo = _mm256_and_si256(_mm256_slli_epi64(_mm256_cvtepu32_epi64(w_lo), 55), sign);
    __m256i s_hi = _mm256_and_si256(_mm256_slli_epi64(_mm256_cvtepu32_epi64(w_hi), 55), sign);
    *zl = _mm256_xor_pd(z_lo, _mm256_castsi256_pd(s_lo));
    *zh = _mm256_xor_pd(z_hi, _mm256_castsi256_pd(s_hi));
    return acc;
}

/* 8 words per step (sample8_avx2); a rejected word is finished serially where it occurs. */
__attribute__((target("avx2")))
static size_t fill_avx2(qg_stream *s, double *z, size_t n)
{
    const uint32_t *buf = s->buf;
    size_t k = 0, pos = s->pos, end = s->end;
    while (n - k >= 8 && end - pos >= 8) {
        __m256d z_lo, z_hi;
        unsigned acc = sample8_avx2(buf + pos, &z_lo, &z_hi);
        _mm256_storeu_pd(z + k, z_lo);
        _mm256_storeu_pd(z + k + 4, z_hi);
        if (acc == 0xFFu) {
            pos += 8;
            k += 8;
        } else {
            unsigned f = (unsigned)__builtin_ctz(~acc);
            s->pos = pos + f;
            z[k + f] = finish_rejected(s); /* may refill */
            pos = s->pos;
            end = s->end;
            k += f + 1;
        }
    }
    s->pos = pos;
    return k;
}
#endif

/* The AVX-512 level samples with fill_avx2 too. A 16-lane sampler that gathered its table entries
   (removed) made Laplace rows 5-12 % slower than this one on the AMD Zen 4 it was measured on
   (384-d and 1536-d, paired against numpy, 2026-12-03), as gathers were on the Zen CPUs before. */
void qg_normals(qg_stream *s, double *z, size_t n)
{
    size_t k = 0;
    ensure_init();
    while (k < n) {
#ifdef QG_HAVE_SIMD
        if (simd_level >= QG_SIMD_AVX2) k += fill_avx2(s, z + k, n - k);
#endif
        /* Buffer end or tail: one serial sample (it may refill), then back to the wide path. */
        if (k < n) z[k++] = normal_fast(s);
    }
}

double qg_normal(qg_stream *s)
{
    ensure_init();
    return normal_fast(s);
}

double qg_gamma(qg_stream *s, double shape)
{
    double dd = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * dd);
    ensure_init();
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

/* ------------------------------------------------------------------ row passes */

/* A float64 coordinate below 2^-511 in magnitude is read as +0.0 (the reference does the same).
   Arithmetic on subnormals, and squares that underflow, take microcode assists on some CPUs
   (AMD Zen 4: a row of subnormals took 1.3-2.3x as long at the AVX2 and SSE2 levels), which would
   make the time of a release depend on the input's values. Read as zero, such a coordinate costs
   what any other does; the square of any coordinate kept is a normal double. Float32 inputs
   need nothing: every float32, subnormals included, is at least 2^-149 or zero. The bits are
   tested as integers, which take no assist. */
#define TINY_BITS 0x2000000000000000ULL /* the bits of 2^-511 */
#define ABS_BITS 0x7FFFFFFFFFFFFFFFULL

static inline double read_f64(const double *p)
{
    double v;
    uint64_t b;
    memcpy(&b, p, sizeof b);
    b &= (uint64_t)0 - (uint64_t)((b & ABS_BITS) >= TINY_BITS);
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Check a row for NaN/Inf and sum its squares in 8 interleaved lanes (coordinate j goes to lane
   j % 8; lanes combine as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))), the order the reference
   specifies. Returns the first non-finite index, or dim. */
static size_t row_scan_scalar(const void *x, int is_f32, size_t dim, double *ss)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t[4];
    size_t j;
    for (j = 0; j < dim; j++) {
        double v = is_f32 ? (double)xf[j] : read_f64(xd + j);
        if (!isfinite(v)) return j;
        acc[j & 7] += v * v;
    }
    for (j = 0; j < 4; j++) t[j] = acc[j] + acc[j + 4];
    *ss = (t[0] + t[2]) + (t[1] + t[3]);
    return dim;
}

/* From |v| >= 2^52 * step on, v's float spacing is step or coarser, so v is already a multiple
   of step and is returned as it is: rint(v * inv_step) * step gives v back there, but v * inv_step
   can overflow (a huge v with a tiny step), which made a release of a finite, on-lattice value fail
   as an overflow. The test is on v, not on q: with a step below 2^-1024, inv_step is infinite and
   every q is, so a test on q would return values that are not on the lattice (those rows stay
   refused, as before). A NaN v gives NaN, as before. */
static inline double snap(double v, double inv_step, double step)
{
    double q;
    if (fabs(v) >= 0x1p52 * step)
        return v;
    q = v * inv_step;
    if (fabs(q) < 0x1p51)
        q = (q + ROUND_MAGIC) - ROUND_MAGIC;
    else
        q = rint(q);
    return q * step;
}

/* out[j] = snap(x[j] * factor + z[j] * scale); factor is 1.0 (exact) for an unclipped row.
   Returns the first index whose output is not finite, or n. */
static size_t combine_scalar(const void *x, void *out, int is_f32, const double *z, size_t n,
                             double factor, double scale, double inv_step, double step)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    float *of = (float *)out;
    double *od = (double *)out;
    size_t j, bad = n;
    for (j = 0; j < n; j++) {
        double v = snap((is_f32 ? (double)xf[j] : read_f64(xd + j)) * factor + z[j] * scale, inv_step, step);
        if (is_f32) {
            of[j] = (float)v;
            if (!isfinite(of[j]) && bad == n) bad = j;
        } else {
            od[j] = v;
            if (!isfinite(v) && bad == n) bad = j;
        }
    }
    return bad;
}

#ifdef QG_HAVE_SIMD
/* read_f64 on 4 and on 8 coordinates. */
static inline __attribute__((always_inline, target("avx2")))
__m256d load4_f64(const double *p)
{
    __m256i b = _mm256_loadu_si256((const __m256i *)p);
    __m256i tiny = _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)TINY_BITS),
                                      _mm256_and_si256(b, _mm256_set1_epi64x((long long)ABS_BITS)));
    return _mm256_castsi256_pd(_mm256_andnot_si256(tiny, b));
}

static inline __attribute__((always_inline, target("avx512f")))
__m512d load8_f64(const double *p)
{
    __m512i b = _mm512_loadu_si512((const void *)p);
    __mmask8 keep = _mm512_cmpge_epi64_mask(_mm512_and_si512(b, _mm512_set1_epi64((long long)ABS_BITS)),
                                            _mm512_set1_epi64((long long)TINY_BITS));
    return _mm512_castsi512_pd(_mm512_maskz_mov_epi64(keep, b));
}

/* Lanes where |v| >= 2^52 * step: there snap() returns its input unchanged. */
static inline __attribute__((always_inline, target("avx2")))
__m256d big_avx2(__m256d v, double step)
{
    return _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v), _mm256_set1_pd(0x1p52 * step), _CMP_GE_OQ);
}

/* Lane layout matches row_scan_scalar: lo holds lanes 0-3, hi lanes 4-7. */
__attribute__((target("avx2")))
static size_t row_scan_avx2(const void *x, int is_f32, size_t dim, double *ss)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd(), fin = _mm256_setzero_pd(), t;
    __m128d u;
    double acc[8];
    size_t j;
    for (j = 0; j + 8 <= dim; j += 8) {
        __m256d a, b;
        if (is_f32) {
            __m256 f = _mm256_loadu_ps(xf + j);
            a = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
            b = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
        } else {
            a = load4_f64(xd + j);
            b = load4_f64(xd + j + 4);
        }
        /* v - v is +-0 for finite v and NaN for NaN/Inf; OR-ing such bit patterns keeps any NaN
           a NaN, and an OR does not chain the loop on add latency. */
        fin = _mm256_or_pd(fin, _mm256_or_pd(_mm256_sub_pd(a, a), _mm256_sub_pd(b, b)));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    if (_mm256_movemask_pd(_mm256_cmp_pd(fin, fin, _CMP_UNORD_Q)))
        return row_scan_scalar(x, is_f32, dim, ss); /* locates the bad index */
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
    for (; j < dim; j++) {
        double v = is_f32 ? (double)xf[j] : read_f64(xd + j);
        if (!isfinite(v)) return j;
        acc[j & 7] += v * v;
    }
    t = _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_loadu_pd(acc + 4));
    u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1)); /* (t0+t2, t1+t3) */
    *ss = _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
    return dim;
}

__attribute__((target("avx2")))
static size_t combine_avx2(const void *x, void *out, int is_f32, const double *z, size_t n,
                           double factor, double scale, double inv_step, double step)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    const __m256d fac = _mm256_set1_pd(factor), sc = _mm256_set1_pd(scale);
    const __m256d inv = _mm256_set1_pd(inv_step), st = _mm256_set1_pd(step), zero = _mm256_setzero_pd();
    __m256d fin = _mm256_setzero_pd();
    __m128 fin32 = _mm_setzero_ps();
    size_t j, bad;
    for (j = 0; j + 4 <= n; j += 4) {
        __m256d v = is_f32 ? _mm256_cvtps_pd(_mm_loadu_ps(xf + j)) : load4_f64(xd + j);
        __m256d sum = _mm256_add_pd(_mm256_mul_pd(v, fac), _mm256_mul_pd(_mm256_loadu_pd(z + j), sc));
        __m256d q = _mm256_mul_pd(sum, inv);
        __m256d big = big_avx2(sum, step);
        /* rint, then +0.0 turns a -0.0 into the +0.0 the magic-constant rounding gives. */
        q = _mm256_add_pd(_mm256_round_pd(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zero);
        q = _mm256_blendv_pd(_mm256_mul_pd(q, st), sum, big); /* see snap() */
        if (is_f32) {
            __m128 f = _mm256_cvtpd_ps(q);
            _mm_storeu_ps((float *)out + j, f);
            fin32 = _mm_or_ps(fin32, _mm_sub_ps(f, f)); /* see row_scan_avx2 */
        } else {
            _mm256_storeu_pd((double *)out + j, q);
            fin = _mm256_or_pd(fin, _mm256_sub_pd(q, q));
        }
    }
    bad = combine_scalar(is_f32 ? (const void *)(xf + j) : (const void *)(xd + j),
                         is_f32 ? (void *)((float *)out + j) : (void *)((double *)out + j), is_f32,
                         z + j, n - j, factor, scale, inv_step, step);
    if (_mm256_movemask_pd(_mm256_cmp_pd(fin, fin, _CMP_UNORD_Q)) || _mm_movemask_ps(_mm_cmpunord_ps(fin32, fin32))) {
        size_t i;
        for (i = 0; i < j; i++)
            if (!isfinite(is_f32 ? (double)((float *)out)[i] : ((double *)out)[i])) return i;
    }
    return bad == n - j ? n : j + bad;
}
/* One Gaussian row at the AVX2 level: fill_avx2's sampling and combine_avx2's arithmetic fused,
   so a group of 8 samples goes from keystream words to output values in registers, without the
   round trip through a buffer of doubles. The words and the operations on each value are those
   of qg_normals + combine.

   gauss_run_avx2 does groups of 8 samples (no calls inside, so its accumulators stay in
   registers) and stops at a rejected word (after storing the group's accepted lanes before it),
   a buffer with fewer than 8 words left, or fewer than 8 values left. It leaves s->pos at the
   next unread word, sets *rej when that word is a rejected one, and returns the values done;
   sets *nonfinite if an output is not finite. */
__attribute__((target("avx2")))
static size_t gauss_run_avx2(qg_stream *s, const void *x, void *out, int is_f32, size_t n,
                             double factor, double scale, double inv_step, double step, int *rej,
                             int *nonfinite)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    const __m256d fac = _mm256_set1_pd(factor), sc = _mm256_set1_pd(scale);
    const __m256d inv = _mm256_set1_pd(inv_step), st = _mm256_set1_pd(step), zero = _mm256_setzero_pd();
    const uint32_t *buf = s->buf;
    __m256d fin = _mm256_setzero_pd();
    __m128 fin32 = _mm_setzero_ps();
    size_t j = 0, pos = s->pos, end = s->end;
    *rej = 0;
    while (n - j >= 8 && end - pos >= 8) {
        __m256d z_lo, z_hi, v_lo, v_hi, q_lo, q_hi;
        unsigned acc = sample8_avx2(buf + pos, &z_lo, &z_hi);
        /* combine_avx2's operations, on two groups of 4, without its |q| >= 2^52 blend: only rows
           that cannot reach it come here (row_snap_safe), and for them it changes no bit. */
        v_lo = is_f32 ? _mm256_cvtps_pd(_mm_loadu_ps(xf + j)) : load4_f64(xd + j);
        v_hi = is_f32 ? _mm256_cvtps_pd(_mm_loadu_ps(xf + j + 4)) : load4_f64(xd + j + 4);
        q_lo = _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(v_lo, fac), _mm256_mul_pd(z_lo, sc)), inv);
        q_hi = _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(v_hi, fac), _mm256_mul_pd(z_hi, sc)), inv);
        q_lo = _mm256_add_pd(_mm256_round_pd(q_lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zero);
        q_hi = _mm256_add_pd(_mm256_round_pd(q_hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zero);
        q_lo = _mm256_mul_pd(q_lo, st);
        q_hi = _mm256_mul_pd(q_hi, st);
        if (acc == 0xFFu) {
            if (is_f32) {
                __m128 f_lo = _mm256_cvtpd_ps(q_lo), f_hi = _mm256_cvtpd_ps(q_hi);
                _mm_storeu_ps((float *)out + j, f_lo);
                _mm_storeu_ps((float *)out + j + 4, f_hi);
                fin32 = _mm_or_ps(fin32, _mm_or_ps(_mm_sub_ps(f_lo, f_lo), _mm_sub_ps(f_hi, f_hi)));
            } else {
                _mm256_storeu_pd((double *)out + j, q_lo);
                _mm256_storeu_pd((double *)out + j + 4, q_hi);
                fin = _mm256_or_pd(fin, _mm256_or_pd(_mm256_sub_pd(q_lo, q_lo), _mm256_sub_pd(q_hi, q_hi)));
            }
            pos += 8;
            j += 8;
        } else {
            /* Lanes before the first rejected word are done; the rest of the group is not. */
            unsigned f = (unsigned)__builtin_ctz(~acc);
            __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)f), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
            __m256i m_lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(m));
            __m256i m_hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1));
            if (is_f32) {
                __m256 f8 = _mm256_set_m128(_mm256_cvtpd_ps(q_hi), _mm256_cvtpd_ps(q_lo));
                __m256 d8 = _mm256_and_ps(_mm256_sub_ps(f8, f8), _mm256_castsi256_ps(m));
                _mm256_maskstore_ps((float *)out + j, m, f8);
                fin32 = _mm_or_ps(fin32, _mm_or_ps(_mm256_castps256_ps128(d8), _mm256_extractf128_ps(d8, 1)));
            } else {
                _mm256_maskstore_pd((double *)out + j, m_lo, q_lo);
                _mm256_maskstore_pd((double *)out + j + 4, m_hi, q_hi);
                fin = _mm256_or_pd(fin, _mm256_and_pd(_mm256_sub_pd(q_lo, q_lo), _mm256_castsi256_pd(m_lo)));
                fin = _mm256_or_pd(fin, _mm256_and_pd(_mm256_sub_pd(q_hi, q_hi), _mm256_castsi256_pd(m_hi)));
            }
            pos += f;
            j += f;
            *rej = 1;
            break;
        }
    }
    s->pos = pos;
    if (_mm256_movemask_pd(_mm256_cmp_pd(fin, fin, _CMP_UNORD_Q)) || _mm_movemask_ps(_mm_cmpunord_ps(fin32, fin32)))
        *nonfinite = 1;
    return j;
}

/* The whole row: fused runs, and one serial sample at a rejected word, a buffer end or the row's
   tail, combined with the same operations (on one lane). Returns the first index whose output is
   not finite, or dim. */
__attribute__((target("avx2")))
static size_t gauss_row_avx2(qg_stream *s, const void *x, void *out, int is_f32, size_t dim,
                             double factor, double scale, double inv_step, double step)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    const size_t width = is_f32 ? sizeof(float) : sizeof(double);
    size_t j = 0;
    int rej, nonfinite = 0;
    while (j < dim) {
        __m128d z, q, sum;
        j += gauss_run_avx2(s, (const char *)x + j * width, (char *)out + j * width, is_f32, dim - j,
                            factor, scale, inv_step, step, &rej, &nonfinite);
        if (rej) z = _mm_set_sd(finish_rejected(s)); /* may refill */
        else if (j < dim) z = _mm_set_sd(normal_fast(s)); /* may refill */
        else break;
        q = _mm_set_sd(is_f32 ? (double)xf[j] : read_f64(xd + j));
        sum = _mm_add_sd(_mm_mul_sd(q, _mm_set_sd(factor)), _mm_mul_sd(z, _mm_set_sd(scale)));
        q = _mm_mul_sd(sum, _mm_set_sd(inv_step));
        q = _mm_add_sd(_mm_round_sd(q, q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), _mm_setzero_pd());
        q = _mm_mul_sd(q, _mm_set_sd(step));
        if (fabs(_mm_cvtsd_f64(sum)) >= 0x1p52 * step) q = sum; /* see snap() */
        if (is_f32) {
            float f = _mm_cvtss_f32(_mm_cvtsd_ss(_mm_setzero_ps(), q));
            ((float *)out)[j] = f;
            if (!isfinite(f)) nonfinite = 1;
        } else {
            double d = _mm_cvtsd_f64(q);
            ((double *)out)[j] = d;
            if (!isfinite(d)) nonfinite = 1;
        }
        j += 1;
    }
    if (nonfinite) {
        for (j = 0; j < dim; j++)
            if (!isfinite(is_f32 ? (double)((float *)out)[j] : ((double *)out)[j])) return j;
    }
    return dim;
}

/* row_scan_avx2 with the eight lanes in one register. */
__attribute__((target("avx512f,avx512vl,avx512dq")))
static size_t row_scan_avx512(const void *x, int is_f32, size_t dim, double *ss)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    __m512d acc8 = _mm512_setzero_pd(), fin = _mm512_setzero_pd();
    __m256d t;
    __m128d u;
    double acc[8];
    size_t j;
    for (j = 0; j + 8 <= dim; j += 8) {
        __m512d a = is_f32 ? _mm512_cvtps_pd(_mm256_loadu_ps(xf + j)) : load8_f64(xd + j);
        fin = _mm512_or_pd(fin, _mm512_sub_pd(a, a));
        acc8 = _mm512_add_pd(acc8, _mm512_mul_pd(a, a));
    }
    if (_mm512_cmp_pd_mask(fin, fin, _CMP_UNORD_Q))
        return row_scan_scalar(x, is_f32, dim, ss); /* locates the bad index */
    _mm512_storeu_pd(acc, acc8);
    for (; j < dim; j++) {
        double v = is_f32 ? (double)xf[j] : read_f64(xd + j);
        if (!isfinite(v)) return j;
        acc[j & 7] += v * v;
    }
    t = _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_loadu_pd(acc + 4));
    u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1)); /* (t0+t2, t1+t3) */
    *ss = _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
    return dim;
}

/* combine_avx2 at twice the width. */
__attribute__((target("avx512f,avx512vl,avx512dq")))
static size_t combine_avx512(const void *x, void *out, int is_f32, const double *z, size_t n,
                             double factor, double scale, double inv_step, double step)
{
    const float *xf = (const float *)x;
    const double *xd = (const double *)x;
    const __m512d fac = _mm512_set1_pd(factor), sc = _mm512_set1_pd(scale);
    const __m512d inv = _mm512_set1_pd(inv_step), st = _mm512_set1_pd(step), zero = _mm512_setzero_pd();
    __m512d fin = _mm512_setzero_pd();
    __m256 fin32 = _mm256_setzero_ps();
    size_t j, bad;
    for (j = 0; j + 8 <= n; j += 8) {
        __m512d v = is_f32 ? _mm512_cvtps_pd(_mm256_loadu_ps(xf + j)) : load8_f64(xd + j);
        __m512d sum = _mm512_add_pd(_mm512_mul_pd(v, fac), _mm512_mul_pd(_mm512_loadu_pd(z + j), sc));
        __m512d q = _mm512_mul_pd(sum, inv);
        __mmask8 big = _mm512_cmp_pd_mask(_mm512_abs_pd(sum), _mm512_set1_pd(0x1p52 * step), _CMP_GE_OQ);
        q = _mm512_add_pd(_mm512_roundscale_pd(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zero);
        q = _mm512_mask_mov_pd(_mm512_mul_pd(q, st), big, sum); /* see snap() */
        if (is_f32) {
            __m256 f = _mm512_cvtpd_ps(q);
            _mm256_storeu_ps((float *)out + j, f);
            fin32 = _mm256_or_ps(fin32, _mm256_sub_ps(f, f));
        } else {
            _mm512_storeu_pd((double *)out + j, q);
            fin = _mm512_or_pd(fin, _mm512_sub_pd(q, q));
        }
    }
    bad = combine_avx2(is_f32 ? (const void *)(xf + j) : (const void *)(xd + j),
                       is_f32 ? (void *)((float *)out + j) : (void *)((double *)out + j), is_f32,
                       z + j, n - j, factor, scale, inv_step, step);
    if (_mm512_cmp_pd_mask(fin, fin, _CMP_UNORD_Q) || _mm256_movemask_ps(_mm256_cmp_ps(fin32, fin32, _CMP_UNORD_Q))) {
        size_t i;
        for (i = 0; i < j; i++)
            if (!isfinite(is_f32 ? (double)((float *)out)[i] : ((double *)out)[i])) return i;
    }
    return bad == n - j ? n : j + bad;
}
#endif

static size_t row_scan(const void *x, int is_f32, size_t dim, double *ss)
{
#ifdef QG_HAVE_SIMD
    if (simd_level >= QG_SIMD_AVX512) return row_scan_avx512(x, is_f32, dim, ss);
    if (simd_level >= QG_SIMD_AVX2) return row_scan_avx2(x, is_f32, dim, ss);
#endif
    return row_scan_scalar(x, is_f32, dim, ss);
}

static size_t combine(const void *x, void *out, int is_f32, const double *z, size_t n, double factor,
                      double scale, double inv_step, double step)
{
#ifdef QG_HAVE_SIMD
    if (simd_level >= QG_SIMD_AVX512) return combine_avx512(x, out, is_f32, z, n, factor, scale, inv_step, step);
    if (simd_level >= QG_SIMD_AVX2) return combine_avx2(x, out, is_f32, z, n, factor, scale, inv_step, step);
#endif
    return combine_scalar(x, out, is_f32, z, n, factor, scale, inv_step, step);
}

/* Whether no coordinate of the row can reach |q| = |(v * factor + z * scale) / step| >= 2^52, where
   snap() returns its input instead of rounding. |v * factor| <= sqrt(ss) * factor, and the
   samplers' normals stay far below 2^10 in magnitude. Rows that could reach it take the chunked
   path, whose combine() handles it; for every other row the two paths give the same bits. */
static inline int row_snap_safe(double ss, double factor, double scale, double inv_step)
{
    double bound = (sqrt(ss) * factor + 0x1p10 * scale) * inv_step;
    return bound < 0x1p51; /* false for NaN and infinity too */
}

static int noise_rows_serial(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                             double scale, double step, double clip_norm, qg_stream *stream,
                             const uint8_t *row_keys, const uint8_t nonce[12], size_t *bad_row,
                             size_t *bad_col)
{
    const size_t width = is_f32 ? sizeof(float) : sizeof(double);
    double inv_step = 1.0 / step;
    double *scratch = NULL; /* laplace_l2 direction, one row, allocated once per call */
    double chunk[CHUNK];
    int chunk_used = 0;
    qg_stream row_stream;
    int rc = QG_OK;
    size_t i, j;

    ensure_init();
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
        const char *xr = (const char *)x + i * dim * width;
        char *orow = (char *)out + i * dim * width;
        qg_stream *s = stream;
        double factor = 1.0, ss = 0.0;
        size_t bad = row_scan(xr, is_f32, dim, &ss);
        if (bad < dim) {
            *bad_row = i;
            *bad_col = bad;
            rc = QG_ERR_NONFINITE;
            goto done;
        }
        if (clip_norm > 0.0) {
            double norm;
            if (ss == INFINITY) {
                *bad_row = i;
                rc = QG_ERR_CLIP_OVERFLOW;
                goto done;
            }
            norm = sqrt(ss);
            if (norm > clip_norm) factor = clip_norm / norm;
        }
        if (row_keys) {
            qg_stream_init(&row_stream, row_keys + 32 * i, nonce);
            qg_stream_size_hint(&row_stream, dim + dim / 32 + 16);
            s = &row_stream;
        }
        if (mechanism == QG_GAUSSIAN) {
#ifdef QG_HAVE_SIMD
            /* Also at the AVX-512 level: the unfused path there (the gathering sampler into a
               buffer, then combine_avx512) was 10-13 % slower per row on Zen 4 (384-d and 1536-d,
               paired against numpy, 2026-12-03). */
            if (simd_level >= QG_SIMD_AVX2 && row_snap_safe(ss, factor, scale, inv_step)) {
                bad = gauss_row_avx2(s, xr, orow, is_f32, dim, factor, scale, inv_step, step);
                if (bad < dim) {
                    *bad_row = i;
                    *bad_col = bad;
                    rc = QG_ERR_OUTPUT_OVERFLOW;
                    goto done;
                }
                continue;
            }
#endif
            chunk_used = 1;
            for (j = 0; j < dim; j += CHUNK) {
                size_t n = dim - j < CHUNK ? dim - j : CHUNK;
                qg_normals(s, chunk, n);
                bad = combine(xr + j * width, orow + j * width, is_f32, chunk, n, factor, scale,
                              inv_step, step);
                if (bad < n) {
                    *bad_row = i;
                    *bad_col = j + bad;
                    rc = QG_ERR_OUTPUT_OVERFLOW;
                    goto done;
                }
            }
        } else {
            double gs, coef;
            do {
                qg_normals(s, scratch, dim);
                gs = 0.0;
                for (j = 0; j < dim; j++) gs += scratch[j] * scratch[j];
            } while (!(gs > 0.0));
            coef = (qg_gamma(s, (double)dim) * scale) / sqrt(gs);
            bad = combine(xr, orow, is_f32, scratch, dim, factor, coef, inv_step, step);
            if (bad < dim) {
                *bad_row = i;
                *bad_col = bad;
                rc = QG_ERR_OUTPUT_OVERFLOW;
                goto done;
            }
        }
    }
done:
    if (row_keys) qg_stream_wipe(&row_stream);
    /* The noise is as secret as the key it came from: do not leave it behind. */
    if (chunk_used) explicit_bzero(chunk, (dim < CHUNK ? dim : CHUNK) * sizeof(double));
    if (scratch) explicit_bzero(scratch, dim * sizeof(double));
    free(scratch);
    return rc;
}

/* ------------------------------------------------------------------ batch threads */

static int threads_max = 0; /* 0: not read yet; then >= 1 */

static int threads_default(void)
{
    const char *env = getenv("QG_NOISE_THREADS");
    if (env && *env) {
        long v = strtol(env, NULL, 10);
        return v < 1 ? 1 : v > QG_NOISE_THREADS_CAP ? QG_NOISE_THREADS_CAP : (int)v;
    } else {
        cpu_set_t set;
        int n = 1;
        if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
        return n < 1 ? 1 : n > QG_NOISE_THREADS_CAP ? QG_NOISE_THREADS_CAP : n;
    }
}

int qg_noise_set_threads(int n)
{
    int before = qg_noise_get_threads();
    threads_max = n < 1 ? threads_default() : n > QG_NOISE_THREADS_CAP ? QG_NOISE_THREADS_CAP : n;
    return before;
}

int qg_noise_get_threads(void)
{
    if (threads_max == 0) threads_max = threads_default();
    return threads_max;
}

/* One batch shared by its threads: rows are claimed in chunks from a shared counter, so a thread
   that gets less CPU (a busy machine) does fewer chunks instead of holding the others up. */
typedef struct {
    const void *x;
    void *out;
    int is_f32, mechanism;
    size_t rows, dim, chunk;
    double scale, step, clip_norm;
    const uint8_t *row_keys;
    const uint8_t *nonce;
    size_t next;            /* first unclaimed row; atomic */
    size_t err_row;         /* row of the first error found so far (rows: none); atomic reads */
    pthread_mutex_t lock;   /* guards err_row, err_col and rc on update */
    size_t err_col;
    int rc;
} rows_job;

static void run_job(rows_job *j)
{
    const size_t width = j->is_f32 ? sizeof(float) : sizeof(double);
    for (;;) {
        size_t start = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        size_t n, br = 0, bc = 0;
        int rc;
        /* Past the end, or past a row that already failed: nothing left worth doing. */
        if (start >= j->rows || start > __atomic_load_n(&j->err_row, __ATOMIC_RELAXED)) break;
        n = j->rows - start < j->chunk ? j->rows - start : j->chunk;
        rc = noise_rows_serial((const char *)j->x + start * j->dim * width,
                               (char *)j->out + start * j->dim * width, j->is_f32, n, j->dim, j->mechanism,
                               j->scale, j->step, j->clip_norm, NULL, j->row_keys ? j->row_keys + 32 * start : NULL,
                               j->nonce, &br, &bc);
        if (rc != QG_OK) {
            /* No randomness or memory: nothing was done, so the chunk's first row is where it failed. */
            size_t row = start + (rc == QG_ERR_RANDOM || rc == QG_ERR_MEMORY ? 0 : br);
            pthread_mutex_lock(&j->lock);
            if (row < j->err_row) {
                __atomic_store_n(&j->err_row, row, __ATOMIC_RELAXED);
                j->err_col = bc;
                j->rc = rc;
            }
            pthread_mutex_unlock(&j->lock);
            break; /* every later chunk starts past this row */
        }
    }
}

static void *job_thread(void *arg)
{
    run_job((rows_job *)arg);
    /* A worker's production stream lives in its thread-local storage, which the C library frees
       without clearing when the thread ends: wipe it first. */
    qg_thread_stream_discard();
    return NULL;
}

int qg_noise_rows(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                  double scale, double step, double clip_norm, qg_stream *stream,
                  const uint8_t *row_keys, const uint8_t nonce[12], size_t *bad_row, size_t *bad_col)
{
    rows_job job;
    pthread_t tids[QG_NOISE_THREADS_CAP];
    int started[QG_NOISE_THREADS_CAP];
    size_t nthreads, total = rows * dim, t;

    ensure_init();
    /* A shared seeded stream is read row after row (each row's share depends on the rejections
       before it), so only independent rows are split: per-row keys, or fresh production noise
       with a stream per thread. Each row is computed exactly as the serial loop would, so keyed
       output is the same array, and the error reported is the first in row order. */
    nthreads = (size_t)qg_noise_get_threads();
    if (total / QG_NOISE_MT_GRAIN < nthreads) nthreads = total / QG_NOISE_MT_GRAIN;
    if (rows < nthreads) nthreads = rows;
    if (stream || total < QG_NOISE_MT_MIN || nthreads < 2)
        return noise_rows_serial(x, out, is_f32, rows, dim, mechanism, scale, step, clip_norm, stream,
                                 row_keys, nonce, bad_row, bad_col);
    job.x = x;
    job.out = out;
    job.is_f32 = is_f32;
    job.mechanism = mechanism;
    job.rows = rows;
    job.dim = dim;
    job.chunk = QG_NOISE_MT_CHUNK / dim ? QG_NOISE_MT_CHUNK / dim : 1;
    job.scale = scale;
    job.step = step;
    job.clip_norm = clip_norm;
    job.row_keys = row_keys;
    job.nonce = nonce;
    job.next = 0;
    job.err_row = rows;
    job.err_col = 0;
    job.rc = QG_OK;
    if (pthread_mutex_init(&job.lock, NULL) != 0) /* run_job would lock it on an error */
        return noise_rows_serial(x, out, is_f32, rows, dim, mechanism, scale, step, clip_norm, stream,
                                 row_keys, nonce, bad_row, bad_col);
    for (t = 1; t < nthreads; t++) started[t] = pthread_create(&tids[t], NULL, job_thread, &job) == 0;
    run_job(&job); /* a thread that could not start just leaves its share to the others */
    for (t = 1; t < nthreads; t++)
        if (started[t]) pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&job.lock);
    if (job.rc != QG_OK) {
        *bad_row = job.err_row;
        *bad_col = job.err_col;
    }
    return job.rc;
}


int qg_unit_grid_nudge(double *k, double *residual, const int32_t *order32, const int64_t *order64,
                       size_t rows, size_t dim, int shift, double tol, int max_passes)
{
    int64_t mask;
    size_t i, p;
    int pass;
    if (shift < 1 || shift > 62)
        return -1;
    mask = ((int64_t)1 << shift) - 1;
    /* Every key must name a coordinate of its row before anything changes: the row is indexed by
       the key's low bits, and a caller's order is not trusted. */
    for (i = 0; i < rows * dim; i++) {
        int64_t key = order32 ? (int64_t)order32[i] : order64[i];
        if ((size_t)(key & mask) >= dim)
            return -1;
    }
    for (i = 0; i < rows; i++) {
        double *row = k + i * dim;
        double r = residual[i];
        for (pass = 0; pass < max_passes && fabs(r) > tol; pass++) {
            for (p = 0; p < dim; p++) {
                int64_t key = order32 ? (int64_t)order32[i * dim + p] : order64[i * dim + p];
                size_t j = (size_t)(key & mask);
                double c = row[j];
                /* The first pass reads |k_j| back from the key, as the reference does. */
                double a = pass ? fabs(c) : (double)(((int64_t)1 << 20) - (key >> shift));
                /* Every value here is an integer far below 2^53, so each operation is exact and
                   gives the bits of the reference's arithmetic. */
                if (a != 0.0 && fabs(r) > (a > tol ? a : tol)) {
                    double s = r > 0.0 ? 1.0 : -1.0;
                    r = r - copysign(2.0 * a, r) - 1.0;
                    row[j] = c + s * (c > 0.0 ? 1.0 : c < 0.0 ? -1.0 : 0.0);
                } else if (fabs(r) <= tol) {
                    break;
                }
            }
        }
        residual[i] = r;
    }
    return 0;
}
