/* AES-256-CTR keystream with AES-NI (128-bit, 8 blocks interleaved) or VAES (256-bit, 16 blocks
 * interleaved), chosen at run time from CPUID: the build targets baseline x86-64, so the AES code
 * is compiled per function with __attribute__((target(...))).
 *
 * The AES instructions run in constant time with no key- or data-dependent memory access. There is
 * deliberately no software AES here: a table-based one leaks its key through cache timing, so a
 * CPU without AES-NI keeps ChaCha20 for its production stream (chacha20.c). */
#include "aes256ctr.h"

#include "chacha20.h"

#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define QG_HAVE_AES_DISPATCH 1
#endif

int qg_aes_level(void)
{
    /* Atomic: the first call may come from several threads at once (they compute the same value). */
    static int cached = -1;
    int known = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (known < 0) {
        int level = QG_AES_NONE;
#ifdef QG_HAVE_AES_DISPATCH
        /* CPUID directly: not every compiler's __builtin_cpu_supports knows "vaes" (clang 14).
           Leaf 1 ECX: bit 9 SSSE3, bit 25 AES-NI; leaf 7 ECX: bit 9 VAES. VAES on 256-bit
           registers also needs the OS to save them, which qg_simd_level()'s AVX2 check covers. */
        unsigned a, b, c, d;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 25)) && (c & (1u << 9))) {
            level = QG_AES_NI;
            /* QG_NOISE_SIMD=sse2 (or lower) keeps the 128-bit path, so both can be tested. */
            if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 9)) &&
                qg_simd_level() >= QG_SIMD_AVX2)
                level = QG_AES_VAES;
        }
#endif
        /* QG_NOISE_AES=off: behave as a CPU without AES-NI, so the tests can run the fallback to
           ChaCha20 (and the warning for QG_NOISE_CIPHER=aes) on a CPU that has it. */
        {
            const char *env = getenv("QG_NOISE_AES");
            if (env && !strcmp(env, "off")) level = QG_AES_NONE;
        }
        __atomic_store_n(&cached, level, __ATOMIC_RELAXED);
        known = level;
    }
    return known;
}

const char *qg_aes_impl(void)
{
    static const char *const names[] = {"none", "aesni", "vaes"};
    return names[qg_aes_level()];
}

static uint64_t load64_be(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static void store64_be(uint8_t *p, uint64_t v)
{
    int i;
    for (i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* The 128-bit counter (hi, lo) plus n, carrying from lo into hi (and wrapping modulo 2^128). */
static void advance(uint64_t *hi, uint64_t *lo, uint64_t n)
{
    uint64_t before = *lo;
    *lo = before + n;
    if (*lo < before) *hi += 1;
}

#ifdef QG_HAVE_AES_DISPATCH

/* FIPS 197 key expansion for a 256-bit key, as in Intel's AES-NI white paper: word `lane` of the
   aeskeygenassist result (3: RotWord+SubWord+Rcon, even round keys; 2: SubWord, odd ones). */
#define QG_EXP(prev, t, lane)                                \
    (t = _mm_shuffle_epi32(t, (lane) * 0x55),                \
     prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4)),    \
     prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4)),    \
     prev = _mm_xor_si128(prev, _mm_slli_si128(prev, 4)),    \
     _mm_xor_si128(prev, t))
#define QG_EXP_A(prev, t) QG_EXP(prev, t, 3)
#define QG_EXP_B(prev, t) QG_EXP(prev, t, 2)

__attribute__((target("aes,ssse3")))
static void expand_key(const uint8_t key[32], __m128i rk[15])
{
    __m128i a = _mm_loadu_si128((const __m128i *)key), b = _mm_loadu_si128((const __m128i *)(key + 16)), t;
    rk[0] = a;
    rk[1] = b;
#define QG_PAIR(i, rcon)                                             \
    t = _mm_aeskeygenassist_si128(b, rcon); a = QG_EXP_A(a, t); rk[i] = a; \
    if (i + 1 < 15) { t = _mm_aeskeygenassist_si128(a, 0); b = QG_EXP_B(b, t); rk[i + 1] = b; }
    QG_PAIR(2, 0x01)
    QG_PAIR(4, 0x02)
    QG_PAIR(6, 0x04)
    QG_PAIR(8, 0x08)
    QG_PAIR(10, 0x10)
    QG_PAIR(12, 0x20)
    t = _mm_aeskeygenassist_si128(b, 0x40);
    rk[14] = QG_EXP_A(a, t);
#undef QG_PAIR
    a = b = t = _mm_setzero_si128();
}

/* Counter blocks are built in registers: (lo, hi) as two 64-bit lanes, plus i in the low lane,
   then byte-reversed into the big-endian block. Callers ensure lo + i does not wrap. */
#define QG_BSWAP128 _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

__attribute__((target("aes,ssse3")))
static void ctr_aesni(const __m128i rk[15], uint64_t *hi, uint64_t *lo, uint8_t *out, size_t nblocks)
{
    const __m128i bswap = QG_BSWAP128;
    int r, i;
    while (nblocks > 0) {
        __m128i base = _mm_set_epi64x((long long)*hi, (long long)*lo), b[8];
        int n = nblocks >= 8 && *lo <= UINT64_MAX - 7 ? 8 : 1;
        for (i = 0; i < n; i++)
            b[i] = _mm_xor_si128(_mm_shuffle_epi8(_mm_add_epi64(base, _mm_set_epi64x(0, i)), bswap), rk[0]);
        if (n == 8) {
            for (r = 1; r < 14; r++)
                for (i = 0; i < 8; i++) b[i] = _mm_aesenc_si128(b[i], rk[r]);
            for (i = 0; i < 8; i++)
                _mm_storeu_si128((__m128i *)(out + 16 * i), _mm_aesenclast_si128(b[i], rk[14]));
        } else {
            for (r = 1; r < 14; r++) b[0] = _mm_aesenc_si128(b[0], rk[r]);
            _mm_storeu_si128((__m128i *)out, _mm_aesenclast_si128(b[0], rk[14]));
        }
        advance(hi, lo, (uint64_t)n);
        out += 16 * n;
        nblocks -= (size_t)n;
    }
    /* The last blocks and the round keys stay in the vector registers (b[] is never spilled: its
       address is not taken, which keeps it in registers): clear them. */
    __asm__ volatile("pxor %%xmm0, %%xmm0\n\tpxor %%xmm1, %%xmm1\n\tpxor %%xmm2, %%xmm2\n\t"
                     "pxor %%xmm3, %%xmm3\n\tpxor %%xmm4, %%xmm4\n\tpxor %%xmm5, %%xmm5\n\t"
                     "pxor %%xmm6, %%xmm6\n\tpxor %%xmm7, %%xmm7\n\tpxor %%xmm8, %%xmm8\n\t"
                     "pxor %%xmm9, %%xmm9\n\tpxor %%xmm10, %%xmm10\n\tpxor %%xmm11, %%xmm11\n\t"
                     "pxor %%xmm12, %%xmm12\n\tpxor %%xmm13, %%xmm13\n\tpxor %%xmm14, %%xmm14\n\t"
                     "pxor %%xmm15, %%xmm15"
                     ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                     "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

#define QG_BSWAP256 _mm256_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, \
                                    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

/* Sixteen blocks per round trip, two per 256-bit register; returns the blocks done (a multiple
   of 16), the rest is left to ctr_aesni. */
__attribute__((target("vaes,aes,avx2")))
static size_t ctr_vaes(const __m128i rk[15], uint64_t *hi, uint64_t *lo, uint8_t *out, size_t nblocks)
{
    const __m256i bswap = QG_BSWAP256;
    __m256i k[15];
    size_t done = 0;
    int r, i;
    for (r = 0; r < 15; r++) k[r] = _mm256_broadcastsi128_si256(rk[r]);
    while (nblocks - done >= 16 && *lo <= UINT64_MAX - 15) {
        __m256i base = _mm256_set_epi64x((long long)*hi, (long long)(*lo + 1), (long long)*hi, (long long)*lo);
        __m256i b[8];
        for (i = 0; i < 8; i++)
            b[i] = _mm256_xor_si256(
                _mm256_shuffle_epi8(_mm256_add_epi64(base, _mm256_set_epi64x(0, 2 * i, 0, 2 * i)), bswap), k[0]);
        for (r = 1; r < 14; r++)
            for (i = 0; i < 8; i++) b[i] = _mm256_aesenc_epi128(b[i], k[r]);
        for (i = 0; i < 8; i++)
            _mm256_storeu_si256((__m256i *)(out + 32 * i), _mm256_aesenclast_epi128(b[i], k[14]));
        advance(hi, lo, 16);
        out += 256;
        done += 16;
    }
    explicit_bzero(k, sizeof k); /* the round keys */
    _mm256_zeroall();            /* and their copies in the vector registers */
    return done;
}

#endif

int qg_aes256ctr(const uint8_t key[32], uint8_t ctr[16], uint8_t *out, size_t nblocks)
{
#ifdef QG_HAVE_AES_DISPATCH
    int level = qg_aes_level();
    if (level != QG_AES_NONE) {
        __m128i rk[15];
        uint64_t hi = load64_be(ctr), lo = load64_be(ctr + 8);
        size_t done = 0;
        expand_key(key, rk);
        if (level == QG_AES_VAES) done = ctr_vaes(rk, &hi, &lo, out, nblocks);
        ctr_aesni(rk, &hi, &lo, out + 16 * done, nblocks - done);
        explicit_bzero(rk, sizeof rk); /* the round keys: fast key erasure */
        store64_be(ctr, hi);
        store64_be(ctr + 8, lo);
        return 0;
    }
#endif
    (void)key;
    (void)ctr;
    memset(out, 0, 16 * nblocks);
    return -1;
}
