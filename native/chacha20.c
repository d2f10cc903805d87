/* ChaCha20 (RFC 8439) block function, 4-/8-way SIMD variants, and the per-thread CSPRNG.
 *
 * Every variant produces the same bytes as the scalar block function; the known-answer tests and
 * the twin comparison in tests/test_noise*.py hold for whichever variant runs. */
#include "chacha20.h"

#include "aes256ctr.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define QG_HAVE_AVX2_DISPATCH 1
#endif

#define ROTL(v, c) (((v) << (c)) | ((v) >> (32 - (c))))
#define QR(a, b, c, d)                  \
    a += b; d ^= a; d = ROTL(d, 16);    \
    c += d; b ^= c; b = ROTL(b, 12);    \
    a += b; d ^= a; d = ROTL(d, 8);     \
    c += d; b ^= c; b = ROTL(b, 7);

static const uint32_t SIGMA[4] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u};

void qg_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t out[16])
{
    uint32_t in[16], x[16];
    int i;
    for (i = 0; i < 4; i++) in[i] = SIGMA[i];
    for (i = 0; i < 8; i++) in[4 + i] = key[i];
    in[12] = counter;
    for (i = 0; i < 3; i++) in[13 + i] = nonce[i];
    memcpy(x, in, sizeof x);
    for (i = 0; i < 10; i++) {
        QR(x[0], x[4], x[8], x[12]) QR(x[1], x[5], x[9], x[13])
        QR(x[2], x[6], x[10], x[14]) QR(x[3], x[7], x[11], x[15])
        QR(x[0], x[5], x[10], x[15]) QR(x[1], x[6], x[11], x[12])
        QR(x[2], x[7], x[8], x[13]) QR(x[3], x[4], x[9], x[14])
    }
    for (i = 0; i < 16; i++) out[i] = x[i] + in[i];
    explicit_bzero(in, sizeof in); /* the key, and state derived from it: fast key erasure */
    explicit_bzero(x, sizeof x);
}

#ifdef __SSE2__
/* Four blocks (counters c..c+3, no wrap inside) with one block per 32-bit lane. */
#define ROTV4(v, c) _mm_or_si128(_mm_slli_epi32(v, c), _mm_srli_epi32(v, 32 - (c)))
#define QRV4(a, b, c, d)                                                   \
    a = _mm_add_epi32(a, b); d = _mm_xor_si128(d, a); d = ROTV4(d, 16);    \
    c = _mm_add_epi32(c, d); b = _mm_xor_si128(b, c); b = ROTV4(b, 12);    \
    a = _mm_add_epi32(a, b); d = _mm_xor_si128(d, a); d = ROTV4(d, 8);     \
    c = _mm_add_epi32(c, d); b = _mm_xor_si128(b, c); b = ROTV4(b, 7);

static void blocks4_sse2(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t *out)
{
    __m128i in[16], x[16];
    int i;
    for (i = 0; i < 4; i++) in[i] = _mm_set1_epi32((int)SIGMA[i]);
    for (i = 0; i < 8; i++) in[4 + i] = _mm_set1_epi32((int)key[i]);
    in[12] = _mm_add_epi32(_mm_set1_epi32((int)counter), _mm_set_epi32(3, 2, 1, 0));
    for (i = 0; i < 3; i++) in[13 + i] = _mm_set1_epi32((int)nonce[i]);
    for (i = 0; i < 16; i++) x[i] = in[i];
    for (i = 0; i < 10; i++) {
        QRV4(x[0], x[4], x[8], x[12]) QRV4(x[1], x[5], x[9], x[13])
        QRV4(x[2], x[6], x[10], x[14]) QRV4(x[3], x[7], x[11], x[15])
        QRV4(x[0], x[5], x[10], x[15]) QRV4(x[1], x[6], x[11], x[12])
        QRV4(x[2], x[7], x[8], x[13]) QRV4(x[3], x[4], x[9], x[14])
    }
    /* Transpose lanes (one block each) back to the serial layout, four words at a time. */
    for (i = 0; i < 16; i += 4) {
        __m128i a = _mm_add_epi32(x[i], in[i]), b = _mm_add_epi32(x[i + 1], in[i + 1]);
        __m128i c = _mm_add_epi32(x[i + 2], in[i + 2]), d = _mm_add_epi32(x[i + 3], in[i + 3]);
        __m128i ab0 = _mm_unpacklo_epi32(a, b), ab1 = _mm_unpackhi_epi32(a, b);
        __m128i cd0 = _mm_unpacklo_epi32(c, d), cd1 = _mm_unpackhi_epi32(c, d);
        _mm_storeu_si128((__m128i *)(out + 0 * 16 + i), _mm_unpacklo_epi64(ab0, cd0));
        _mm_storeu_si128((__m128i *)(out + 1 * 16 + i), _mm_unpackhi_epi64(ab0, cd0));
        _mm_storeu_si128((__m128i *)(out + 2 * 16 + i), _mm_unpacklo_epi64(ab1, cd1));
        _mm_storeu_si128((__m128i *)(out + 3 * 16 + i), _mm_unpackhi_epi64(ab1, cd1));
    }
    explicit_bzero(in, sizeof in);
    explicit_bzero(x, sizeof x);
}
#endif

#ifdef QG_HAVE_AVX2_DISPATCH
/* The build uses no -mavx2 (plain, portable flags), so AVX2 is compiled per function and chosen at
   run time from CPUID. */
/* The 16 state rows and the rotation temporaries need 18 of AVX2's 16 registers, and the
   compiler's spills cost about as much as the rounds themselves. So the rounds are written out:
   rows a (ymm0-3), b (ymm4-7) and d (ymm12-15) stay in registers, and only two of the four c rows
   are (ymm8, ymm9), swapped through memory between quarter-round pairs (a column pair uses c0,c1
   then c2,c3; a diagonal pair c2,c3 then c0,c1), as in the usual 8-way implementations; ymm10 and
   ymm11 are the rotation temporaries, and the shuffle masks are memory operands. */
#define A8_OP(op, s, d) op " %%" #s ", %%" #d ", %%" #d "\n\t"
#define A8_SHUF(m, d) "vpshufb %[" #m "], %%" #d ", %%" #d "\n\t"
#define A8_ROT(r, l, b, t) "vpsrld $" #r ", %%" #b ", %%" #t "\n\t" \
                           "vpslld $" #l ", %%" #b ", %%" #b "\n\t" \
                           "vpor %%" #t ", %%" #b ", %%" #b "\n\t"
/* Two independent quarter rounds, interleaved. */
#define A8_QR2(a, b, c, d, t, e, f, g, h, u)                                                 \
    A8_OP("vpaddd", b, a) A8_OP("vpaddd", f, e) A8_OP("vpxor", a, d) A8_OP("vpxor", e, h)  \
    A8_SHUF(r16, d) A8_SHUF(r16, h) A8_OP("vpaddd", d, c) A8_OP("vpaddd", h, g)              \
    A8_OP("vpxor", c, b) A8_OP("vpxor", g, f) A8_ROT(20, 12, b, t) A8_ROT(20, 12, f, u)      \
    A8_OP("vpaddd", b, a) A8_OP("vpaddd", f, e) A8_OP("vpxor", a, d) A8_OP("vpxor", e, h)  \
    A8_SHUF(r8, d) A8_SHUF(r8, h) A8_OP("vpaddd", d, c) A8_OP("vpaddd", h, g)                \
    A8_OP("vpxor", c, b) A8_OP("vpxor", g, f) A8_ROT(25, 7, b, t) A8_ROT(25, 7, f, u)
#define A8_LD(i, r) "vmovdqa " #i "*32(%[st]), %%" #r "\n\t"
#define A8_ST(r, i) "vmovdqa %%" #r ", " #i "*32(%[st])\n\t"

__attribute__((target("avx2")))
static void blocks8_avx2(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t *out)
{
    static const uint8_t rot16[32] __attribute__((aligned(32))) = {
        2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
        2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
    static const uint8_t rot8[32] __attribute__((aligned(32))) = {
        3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14,
        3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14};
    __m256i in[16], x[16] __attribute__((aligned(32)));
    unsigned long rounds;
    int i;
    for (i = 0; i < 4; i++) in[i] = _mm256_set1_epi32((int)SIGMA[i]);
    for (i = 0; i < 8; i++) in[4 + i] = _mm256_set1_epi32((int)key[i]);
    in[12] = _mm256_add_epi32(_mm256_set1_epi32((int)counter), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    for (i = 0; i < 3; i++) in[13 + i] = _mm256_set1_epi32((int)nonce[i]);
    for (i = 0; i < 16; i++) x[i] = in[i];
    __asm__ volatile(
        A8_LD(0, ymm0) A8_LD(1, ymm1) A8_LD(2, ymm2) A8_LD(3, ymm3)
        A8_LD(4, ymm4) A8_LD(5, ymm5) A8_LD(6, ymm6) A8_LD(7, ymm7)
        A8_LD(8, ymm8) A8_LD(9, ymm9)
        A8_LD(12, ymm12) A8_LD(13, ymm13) A8_LD(14, ymm14) A8_LD(15, ymm15)
        "mov $10, %[n]\n\t"
        "1:\n\t"
        /* column round: (0,4,8,12) (1,5,9,13) | (2,6,10,14) (3,7,11,15) */
        A8_QR2(ymm0, ymm4, ymm8, ymm12, ymm10, ymm1, ymm5, ymm9, ymm13, ymm11)
        A8_ST(ymm8, 8) A8_ST(ymm9, 9) A8_LD(10, ymm8) A8_LD(11, ymm9)
        A8_QR2(ymm2, ymm6, ymm8, ymm14, ymm10, ymm3, ymm7, ymm9, ymm15, ymm11)
        /* diagonal round: (0,5,10,15) (1,6,11,12) | (2,7,8,13) (3,4,9,14) */
        A8_QR2(ymm0, ymm5, ymm8, ymm15, ymm10, ymm1, ymm6, ymm9, ymm12, ymm11)
        A8_ST(ymm8, 10) A8_ST(ymm9, 11) A8_LD(8, ymm8) A8_LD(9, ymm9)
        A8_QR2(ymm2, ymm7, ymm8, ymm13, ymm10, ymm3, ymm4, ymm9, ymm14, ymm11)
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        A8_ST(ymm0, 0) A8_ST(ymm1, 1) A8_ST(ymm2, 2) A8_ST(ymm3, 3)
        A8_ST(ymm4, 4) A8_ST(ymm5, 5) A8_ST(ymm6, 6) A8_ST(ymm7, 7)
        A8_ST(ymm8, 8) A8_ST(ymm9, 9)
        A8_ST(ymm12, 12) A8_ST(ymm13, 13) A8_ST(ymm14, 14) A8_ST(ymm15, 15)
        : [n] "=&r"(rounds)
        : [st] "r"(x), [r16] "m"(*(const __m256i *)rot16), [r8] "m"(*(const __m256i *)rot8)
        : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    (void)rounds;
    for (i = 0; i < 16; i += 4) {
        __m256i a = _mm256_add_epi32(x[i], in[i]), b = _mm256_add_epi32(x[i + 1], in[i + 1]);
        __m256i c = _mm256_add_epi32(x[i + 2], in[i + 2]), d = _mm256_add_epi32(x[i + 3], in[i + 3]);
        __m256i ab0 = _mm256_unpacklo_epi32(a, b), ab1 = _mm256_unpackhi_epi32(a, b);
        __m256i cd0 = _mm256_unpacklo_epi32(c, d), cd1 = _mm256_unpackhi_epi32(c, d);
        /* Within each 128-bit half: rows for blocks (0,1,2,3) in the low half, (4,5,6,7) high. */
        __m256i r0 = _mm256_unpacklo_epi64(ab0, cd0), r1 = _mm256_unpackhi_epi64(ab0, cd0);
        __m256i r2 = _mm256_unpacklo_epi64(ab1, cd1), r3 = _mm256_unpackhi_epi64(ab1, cd1);
        _mm_storeu_si128((__m128i *)(out + 0 * 16 + i), _mm256_castsi256_si128(r0));
        _mm_storeu_si128((__m128i *)(out + 1 * 16 + i), _mm256_castsi256_si128(r1));
        _mm_storeu_si128((__m128i *)(out + 2 * 16 + i), _mm256_castsi256_si128(r2));
        _mm_storeu_si128((__m128i *)(out + 3 * 16 + i), _mm256_castsi256_si128(r3));
        _mm_storeu_si128((__m128i *)(out + 4 * 16 + i), _mm256_extracti128_si256(r0, 1));
        _mm_storeu_si128((__m128i *)(out + 5 * 16 + i), _mm256_extracti128_si256(r1, 1));
        _mm_storeu_si128((__m128i *)(out + 6 * 16 + i), _mm256_extracti128_si256(r2, 1));
        _mm_storeu_si128((__m128i *)(out + 7 * 16 + i), _mm256_extracti128_si256(r3, 1));
    }
    explicit_bzero(in, sizeof in); /* the key, and state derived from it, on the stack */
    explicit_bzero(x, sizeof x);
}

#define ROTV16(v, c) _mm512_rol_epi32(v, c)
#define QRV16(a, b, c, d)                                                      \
    a = _mm512_add_epi32(a, b); d = _mm512_xor_si512(d, a); d = ROTV16(d, 16); \
    c = _mm512_add_epi32(c, d); b = _mm512_xor_si512(b, c); b = ROTV16(b, 12); \
    a = _mm512_add_epi32(a, b); d = _mm512_xor_si512(d, a); d = ROTV16(d, 8);  \
    c = _mm512_add_epi32(c, d); b = _mm512_xor_si512(b, c); b = ROTV16(b, 7);

/* Sixteen blocks, one per 32-bit lane; AVX-512 has a native rotate. */
__attribute__((target("avx512f")))
static void blocks16_avx512(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t *out)
{
    __m512i in[16], x[16], t[16], r[16];
    int i, g, c;
    for (i = 0; i < 4; i++) in[i] = _mm512_set1_epi32((int)SIGMA[i]);
    for (i = 0; i < 8; i++) in[4 + i] = _mm512_set1_epi32((int)key[i]);
    in[12] = _mm512_add_epi32(_mm512_set1_epi32((int)counter),
                              _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    for (i = 0; i < 3; i++) in[13 + i] = _mm512_set1_epi32((int)nonce[i]);
    for (i = 0; i < 16; i++) x[i] = in[i];
    for (i = 0; i < 10; i++) {
        QRV16(x[0], x[4], x[8], x[12]) QRV16(x[1], x[5], x[9], x[13])
        QRV16(x[2], x[6], x[10], x[14]) QRV16(x[3], x[7], x[11], x[15])
        QRV16(x[0], x[5], x[10], x[15]) QRV16(x[1], x[6], x[11], x[12])
        QRV16(x[2], x[7], x[8], x[13]) QRV16(x[3], x[4], x[9], x[14])
    }
    for (i = 0; i < 16; i++) x[i] = _mm512_add_epi32(x[i], in[i]);
    /* 16x16 transpose. After the two unpack rounds, r[4g + c] holds, in its 128-bit lane L,
       words 4g..4g+3 of block 4L + c; a 4x4 transpose of 128-bit lanes finishes the job. */
    for (i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    for (g = 0; g < 4; g++) {
        __m512i *q = t + 4 * g;
        r[4 * g + 0] = _mm512_unpacklo_epi64(q[0], q[2]);
        r[4 * g + 1] = _mm512_unpackhi_epi64(q[0], q[2]);
        r[4 * g + 2] = _mm512_unpacklo_epi64(q[1], q[3]);
        r[4 * g + 3] = _mm512_unpackhi_epi64(q[1], q[3]);
    }
    for (c = 0; c < 4; c++) {
        __m512i a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), b = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        __m512i e = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE), f = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
        _mm512_storeu_si512((void *)(out + (0 + c) * 16), _mm512_shuffle_i32x4(a, b, 0x88));
        _mm512_storeu_si512((void *)(out + (4 + c) * 16), _mm512_shuffle_i32x4(a, b, 0xDD));
        _mm512_storeu_si512((void *)(out + (8 + c) * 16), _mm512_shuffle_i32x4(e, f, 0x88));
        _mm512_storeu_si512((void *)(out + (12 + c) * 16), _mm512_shuffle_i32x4(e, f, 0xDD));
    }
    explicit_bzero(in, sizeof in);
    explicit_bzero(x, sizeof x);
    explicit_bzero(t, sizeof t); /* output words: the first 8 may become the next key */
    explicit_bzero(r, sizeof r);
}
#endif

/* The widest instruction set the CPU has, capped by QG_NOISE_SIMD (scalar|sse2|avx2|avx512) so
   the tests can run every variant on one machine. All variants give identical results. */
int qg_simd_level(void)
{
    /* Atomic: the first call may come from several threads at once (they compute the same value). */
    static int cached = -1;
    int known = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (known < 0) {
        int level = QG_SIMD_SCALAR, cap = QG_SIMD_AVX512;
        const char *env = getenv("QG_NOISE_SIMD");
#ifdef __SSE2__
        level = QG_SIMD_SSE2;
#endif
#ifdef QG_HAVE_AVX2_DISPATCH
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2")) level = QG_SIMD_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq"))
            level = QG_SIMD_AVX512;
#endif
        if (env && *env) {
            if (!strcmp(env, "scalar")) cap = QG_SIMD_SCALAR;
            else if (!strcmp(env, "sse2")) cap = QG_SIMD_SSE2;
            else if (!strcmp(env, "avx2")) cap = QG_SIMD_AVX2;
        }
        known = level < cap ? level : cap;
        __atomic_store_n(&cached, known, __ATOMIC_RELAXED);
    }
    return known;
}

const char *qg_chacha20_impl(void)
{
    static const char *const names[] = {"scalar", "sse2", "avx2", "avx512"};
    return names[qg_simd_level()];
}

static int cipher_knob_status = QG_CIPHER_KNOB_OK;

int qg_production_cipher(void)
{
    /* Release/acquire: a thread that reads the choice also reads cipher_knob_status. Threads that
       race on the first call compute the same values. */
    static int cached = -1;
    int known = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (known < 0) {
        const char *env = getenv("QG_NOISE_CIPHER");
        int want = QG_CIPHER_AES256CTR, status = QG_CIPHER_KNOB_OK;
        if (env && *env) {
            if (!strcmp(env, "chacha20")) want = QG_CIPHER_CHACHA20;
            else if (strcmp(env, "aes")) status = QG_CIPHER_KNOB_INVALID;
        }
        if (want == QG_CIPHER_AES256CTR && qg_aes_level() == QG_AES_NONE) {
            want = QG_CIPHER_CHACHA20;
            if (env && !strcmp(env, "aes")) status = QG_CIPHER_KNOB_NO_AES;
        }
        __atomic_store_n(&cipher_knob_status, status, __ATOMIC_RELAXED);
        __atomic_store_n(&cached, want, __ATOMIC_RELEASE);
        known = want;
    }
    return known;
}

const char *qg_production_cipher_name(void)
{
    return qg_production_cipher() == QG_CIPHER_AES256CTR ? "aes256ctr" : "chacha20";
}

int qg_cipher_knob_status(void)
{
    (void)qg_production_cipher();
    return __atomic_load_n(&cipher_knob_status, __ATOMIC_RELAXED);
}

static void advance(uint32_t *counter, uint32_t nonce[3], uint32_t n)
{
    uint32_t before = *counter;
    *counter = before + n;
    if (*counter < before) nonce[0] += 1;
}

void qg_chacha20_blocks(const uint32_t key[8], uint32_t *counter, uint32_t nonce[3], uint32_t *out, size_t nblocks)
{
    int level = qg_simd_level();
    while (nblocks > 0) {
#ifdef QG_HAVE_AVX2_DISPATCH
        if (nblocks >= 16 && *counter <= UINT32_MAX - 15 && level >= QG_SIMD_AVX512) {
            blocks16_avx512(key, *counter, nonce, out);
            advance(counter, nonce, 16);
            out += 256;
            nblocks -= 16;
            continue;
        }
        if (nblocks >= 8 && *counter <= UINT32_MAX - 7 && level >= QG_SIMD_AVX2) {
            blocks8_avx2(key, *counter, nonce, out);
            advance(counter, nonce, 8);
            out += 128;
            nblocks -= 8;
            continue;
        }
#endif
#ifdef __SSE2__
        if (nblocks >= 4 && *counter <= UINT32_MAX - 3 && level >= QG_SIMD_SSE2) {
            blocks4_sse2(key, *counter, nonce, out);
            advance(counter, nonce, 4);
            out += 64;
            nblocks -= 4;
            continue;
        }
#endif
        qg_chacha20_block(key, *counter, nonce, out);
        advance(counter, nonce, 1);
        out += 16;
        nblocks -= 1;
    }
}

static uint32_t load32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void qg_stream_init(qg_stream *s, const uint8_t key[32], const uint8_t nonce[12])
{
    int i;
    for (i = 0; i < 8; i++) s->key[i] = load32_le(key + 4 * i);
    for (i = 0; i < 3; i++) s->nonce[i] = load32_le(nonce + 4 * i);
    s->counter = 0;
    s->key_erasure = 0;
    s->refill_blocks = QG_STREAM_BLOCKS;
    s->cipher = QG_CIPHER_CHACHA20;
    memset(s->ctr, 0, sizeof s->ctr);
    s->pos = s->end = 0;
}

void qg_stream_size_hint(qg_stream *s, size_t words)
{
    /* Whole 4-block groups keep the keystream on its SIMD paths. */
    size_t blocks = ((words + 15) / 16 + 3) & ~(size_t)3;
    /* A hint of 0 words would make every refill empty, and qg_stream_u32 then reads past the
       buffer; no caller passes 0 today, but the stream must stay sound whatever the hint. */
    if (blocks < 4)
        blocks = 4;
    s->refill_blocks = blocks < QG_STREAM_BLOCKS ? blocks : QG_STREAM_BLOCKS;
}

void qg_stream_refill(qg_stream *s)
{
    if (s->cipher == QG_CIPHER_AES256CTR)
        /* Only a production stream is AES, and only where qg_aes_level() != QG_AES_NONE. The words
           are the keystream bytes read little-endian (x86 is little-endian, so a plain copy). */
        qg_aes256ctr((const uint8_t *)s->key, s->ctr, (uint8_t *)s->buf, s->refill_blocks * 4);
    else
        qg_chacha20_blocks(s->key, &s->counter, s->nonce, s->buf, s->refill_blocks);
    s->end = s->refill_blocks * 16;
    s->pos = 0;
    if (s->key_erasure) {
        /* Fast key erasure: the first 8 words become the next key and are never handed out, so a
           later compromise of the state cannot reconstruct noise already released. */
        memcpy(s->key, s->buf, sizeof s->key);
        memset(s->buf, 0, sizeof s->key);
        s->counter = 0;
        memset(s->ctr + 12, 0, 4); /* AES: nonce || 32-bit block counter 0 */
        s->pos = 8;
    }
}

void qg_stream_wipe(qg_stream *s)
{
    explicit_bzero(s, sizeof *s);
}

int qg_os_random(void *buf, size_t n)
{
    uint8_t *p = (uint8_t *)buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Bumped in every forked child; a thread's stream re-keys when its copy is stale, so parent and
   child never share keystream. */
static volatile unsigned long fork_generation = 1;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_error = 0;

static void on_fork_child(void) { fork_generation++; }

static void register_atfork(void) { atfork_error = pthread_atfork(NULL, NULL, on_fork_child); }

static __thread qg_stream thread_stream;
static __thread unsigned long thread_generation = 0;

qg_stream *qg_thread_stream(int *err)
{
    qg_stream *s = &thread_stream;
    if (thread_generation != fork_generation) {
        uint8_t seed[44];
        int rc;
        pthread_once(&atfork_once, register_atfork);
        if (atfork_error) {
            *err = atfork_error;
            return NULL;
        }
        rc = qg_os_random(seed, sizeof seed);
        if (rc) {
            *err = rc;
            return NULL;
        }
        qg_stream_init(s, seed, seed + 32);
        if (qg_production_cipher() == QG_CIPHER_AES256CTR) {
            /* Key: the same 32 bytes (s->key holds them as stored); counter block: nonce || 0. */
            s->cipher = QG_CIPHER_AES256CTR;
            memcpy(s->ctr, seed + 32, 12);
            memset(s->ctr + 12, 0, 4);
        }
        explicit_bzero(seed, sizeof seed);
        s->key_erasure = 1;
        thread_generation = fork_generation;
    }
    *err = 0;
    return s;
}

void qg_thread_stream_discard(void)
{
    qg_stream_wipe(&thread_stream);
    thread_generation = 0;
}
