/* The floor under scan_query's 500-token benchmark: split on whitespace and count distinct tokens
 * exactly, nothing else (no positions, n-grams, encodings, model-token estimate or UTF-8).
 * Compared in the same run with the real kernel, qg_scan. Built and run by bench/scan_floor.py:
 *
 *     python bench/scan_floor.py
 *
 * The counts compare a token by its first 16 bytes and its length (the scanner also compares the
 * rest); the benchmark query has no longer token, and the counts are checked against qg_scan.
 * Two hashes, as in the scanner: folded multiplies (its generic variant) and three AES rounds (its
 * AVX2 variant, the one qg_scan runs on a CPU with AES-NI).
 *
 * The point is a lower bound, not a faster scanner: if this alone costs more than the 20x target
 * leaves for the kernel, no scanner built the same way (SIMD token boundaries, one scalar
 * hash-table lookup per token) reaches it.
 *
 * On a CPU with AVX-512 VBMI2 it also times a split with no loop per 64-byte block (VPCOMPRESSB of
 * the start and end bits' lane indexes), alternating with the bit-loop split: it lowers this floor
 * (docs/performance-notes.md, 2026-12-06), but the same split in the real kernel, whose token loop
 * hashes as it extracts, made the kernel slower, so qg_scan does not use it.
 *
 * Then two tables without the "is this token new" branch in the lookup (deferred insertion, keys
 * in the slots) against the AES floor with the scanner's kept index, each checked against the ids
 * of a byte-comparing oracle first; both were slower (docs/performance-notes.md, 2026-12-06).
 *
 * Last (given a second file, the varied queries separated by NUL bytes), four distinct counts that
 * never compare token bytes, only keyed hashes, against that kept-index floor, on the query and on
 * the varied queries in turn. They save 12-27 % of the count, too little for the 20x target, and a
 * port of the fastest into the kernel's lookup saved 2-10 %, so qg_scan still compares bytes
 * (docs/performance-notes.md, 2026-12-06, h-scan4). The same section times three exact counts
 * that keep short tokens' bytes in the slot (2026-12-07, h-scan): keyed by 8 bytes with a branch
 * on the length, or by 16 bytes in 4096 or 1024 slots; the 16-byte form is what qg_scan's small
 * table now does. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scan.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    uint64_t head, next;
    uint32_t len, pad;
} entry;

#define MAX_TOKENS 8192

/* Token boundaries with 64-byte AVX2 blocks (a byte <= ' ' is whitespace here). */
__attribute__((target("avx2,bmi"))) static size_t split(const uint8_t *s, size_t n, uint32_t *starts,
                                                       uint32_t *ends)
{
    size_t nt = 0, ne = 0, i = 0;
    uint64_t prev_ws = 1;
    const __m256i sp = _mm256_set1_epi8(' ');
    for (; i + 64 <= n; i += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        uint64_t ws = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(a, sp), sp)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(b, sp), sp))
                          << 32;
        uint64_t tok = ~ws;
        uint64_t st = tok & ((ws << 1) | prev_ws);
        uint64_t en = ws & ((tok << 1) | (prev_ws ^ 1));
        prev_ws = ws >> 63;
        for (; st; st = _blsr_u64(st))
            starts[nt++] = (uint32_t)(i + __builtin_ctzll(st));
        for (; en; en = _blsr_u64(en))
            ends[ne++] = (uint32_t)(i + __builtin_ctzll(en));
    }
    for (; i < n; i++) {
        uint64_t w = s[i] <= ' ';
        if (!w && prev_ws)
            starts[nt++] = (uint32_t)i;
        if (w && !prev_ws)
            ends[ne++] = (uint32_t)i;
        prev_ws = w;
    }
    if (!prev_ws)
        ends[ne++] = (uint32_t)n;
    return nt;
}

/* The same split with AVX-512: the whitespace mask in one compare per 64 bytes, offsets still
 * extracted one bit at a time (a data-dependent loop per block), to tell the compare's share apart
 * from the extraction's. */
__attribute__((target("avx512f,avx512bw,bmi"))) static size_t split512(const uint8_t *s, size_t n,
                                                                      uint32_t *starts, uint32_t *ends)
{
    size_t nt = 0, ne = 0, i = 0;
    uint64_t prev_ws = 1;
    const __m512i sp = _mm512_set1_epi8(' ');
    for (; i + 64 <= n; i += 64) {
        uint64_t ws = _mm512_cmple_epu8_mask(_mm512_loadu_si512((const void *)(s + i)), sp);
        uint64_t tok = ~ws;
        uint64_t st = tok & ((ws << 1) | prev_ws);
        uint64_t en = ws & ((tok << 1) | (prev_ws ^ 1));
        prev_ws = ws >> 63;
        for (; st; st = _blsr_u64(st))
            starts[nt++] = (uint32_t)(i + __builtin_ctzll(st));
        for (; en; en = _blsr_u64(en))
            ends[ne++] = (uint32_t)(i + __builtin_ctzll(en));
    }
    for (; i < n; i++) {
        uint64_t w = s[i] <= ' ';
        if (!w && prev_ws)
            starts[nt++] = (uint32_t)i;
        if (w && !prev_ws)
            ends[ne++] = (uint32_t)i;
        prev_ws = w;
    }
    if (!prev_ws)
        ends[ne++] = (uint32_t)n;
    return nt;
}

/* The same split with no data-dependent loop per block (AVX-512 VBMI2): VPCOMPRESSB packs the lane
 * indexes of the start (end) bits, VPMOVZXBD widens the first 16 to offsets, one 64-byte store
 * writes them, and the counts advance by popcount. Only a block with more than 16 starts (ends)
 * takes a further step. starts and ends need 16 writable slots past the last token. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt"))) static inline uint32_t *
put_offsets(uint32_t *out, uint64_t bits, __m512i lanes, __m512i base)
{
    __m512i c = _mm512_maskz_compress_epi8(bits, lanes);
    unsigned cnt = (unsigned)_mm_popcnt_u64(bits);
    _mm512_storeu_si512((void *)out, _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(c)), base));
    if (__builtin_expect(cnt > 16, 0)) {
        _mm512_storeu_si512((void *)(out + 16),
                            _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(c, 1)), base));
        _mm512_storeu_si512((void *)(out + 32),
                            _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(c, 2)), base));
        _mm512_storeu_si512((void *)(out + 48),
                            _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(c, 3)), base));
    }
    return out + cnt;
}

__attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt"))) static size_t
split_compress(const uint8_t *s, size_t n, uint32_t *starts, uint32_t *ends)
{
    uint32_t *st_out = starts, *en_out = ends;
    size_t i = 0;
    uint64_t prev_ws = 1;
    const __m512i sp = _mm512_set1_epi8(' ');
    const __m512i lanes = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46,
                                          45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
                                          27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10,
                                          9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (; i + 64 <= n; i += 64) {
        uint64_t ws = _mm512_cmple_epu8_mask(_mm512_loadu_si512((const void *)(s + i)), sp);
        uint64_t tok = ~ws;
        uint64_t st = tok & ((ws << 1) | prev_ws);
        uint64_t en = ws & ((tok << 1) | (prev_ws ^ 1));
        prev_ws = ws >> 63;
        const __m512i base = _mm512_set1_epi32((int)i);
        st_out = put_offsets(st_out, st, lanes, base);
        en_out = put_offsets(en_out, en, lanes, base);
    }
    size_t nt = (size_t)(st_out - starts), ne = (size_t)(en_out - ends);
    for (; i < n; i++) {
        uint64_t w = s[i] <= ' ';
        if (!w && prev_ws)
            starts[nt++] = (uint32_t)i;
        if (w && !prev_ws)
            ends[ne++] = (uint32_t)i;
        prev_ws = w;
    }
    if (!prev_ws)
        ends[ne++] = (uint32_t)n;
    return nt;
}

/* Distinct tokens: the same 16-byte key, keyed folded-multiply hash and open-addressing table as
 * the scanner's stack table, without the scanner's other per-token work. s must have 16 readable
 * bytes past n. */
static const uint64_t KEY0 = 0x243F6A8885A308D3ull, KEY1 = 0x13198A2E03707344ull;

static inline uint64_t fold_mul(uint64_t a, uint64_t b)
{
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static size_t distinct(const uint8_t *s, const uint32_t *starts, const uint32_t *ends, size_t nt)
{
    uint16_t index[4096];
    entry entries[512];
    size_t unique = 0;
    memset(index, 0, sizeof index);
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        uint64_t head, next;
        memcpy(&head, s + a, 8);
        memcpy(&next, s + a + 8, 8);
        size_t first = len < 8 ? len : 8, more = len > 8 ? len - 8 : 0;
        head &= ~0ull >> (64 - 8 * first);
        next &= more >= 8 ? ~0ull : (1ull << (8 * more)) - 1;
        uint64_t h = fold_mul(fold_mul(head ^ KEY0, next ^ KEY1 ^ len), 0x9E3779B97F4A7C15ull);
        for (size_t slot = h & 4095;; slot = (slot + 1) & 4095) {
            unsigned id = index[slot];
            if (!id) {
                if (unique == 512)
                    return SIZE_MAX; /* not a case the benchmark query reaches */
                entries[unique] = (entry){head, next, (uint32_t)len, 0};
                index[slot] = (uint16_t)++unique;
                break;
            }
            const entry *e = &entries[id - 1];
            if (((e->head ^ head) | (e->next ^ next) | (e->len ^ len)) == 0)
                break;
        }
    }
    return unique;
}

/* The same count with the AVX2 variant's hash and compare: the first 16 bytes in one vector,
 * three AES rounds, one vector compare. */
static uint8_t masks16[17][16] __attribute__((aligned(16)));

__attribute__((target("avx2,aes"))) static size_t distinct_aes(const uint8_t *s, const uint32_t *starts,
                                                              const uint32_t *ends, size_t nt)
{
    uint16_t index[4096];
    __m128i heads[512];
    uint32_t lens[512];
    size_t unique = 0;
    memset(index, 0, sizeof index);
    const __m128i k0 = _mm_set_epi64x((long long)KEY1, (long long)KEY0);
    const __m128i k1 = _mm_set_epi64x((long long)0xD6E8FEB86659FD93ull, (long long)0x9E3779B97F4A7C15ull);
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                  _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
        __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)len)));
        x = _mm_aesenc_si128(_mm_aesenc_si128(x, k0), k1);
        for (size_t slot = (uint64_t)_mm_cvtsi128_si64(x) & 4095;; slot = (slot + 1) & 4095) {
            unsigned id = index[slot];
            if (!id) {
                if (unique == 512)
                    return SIZE_MAX;
                heads[unique] = v;
                lens[unique] = (uint32_t)len;
                index[slot] = (uint16_t)++unique;
                break;
            }
            if ((_mm_movemask_epi8(_mm_cmpeq_epi8(heads[id - 1], v)) == 0xFFFF) & (lens[id - 1] == len))
                break;
        }
    }
    return unique;
}

/* The same count with eight tokens per step: their bytes and their table slots fetched with
 * AVX-512 gathers, the key compared in vector lanes; misses (new tokens, collisions, tokens over
 * 16 bytes) go through the scalar probe in token order. Table in three slot arrays (no entry
 * indirection), 1024 slots. AVX-512 has no 64 x 64 -> 128-bit multiply, so this variant hashes
 * with the low halves of two 64-bit products and a shift, as the scanner did before its table was
 * keyed: fine for timing this query, not for hostile text. */
typedef struct {
    uint64_t head[1024], next[1024], len[1024];
} slot_table;

static inline uint64_t key_hash(uint64_t head, uint64_t next, uint64_t len)
{
    uint64_t h = (head ^ len) * 0x9E3779B97F4A7C15ull + next * 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 29);
}

static void probe(slot_table *t, const uint8_t *s, uint32_t a, uint64_t len, size_t *unique)
{
    uint64_t head, next;
    memcpy(&head, s + a, 8);
    memcpy(&next, s + a + 8, 8);
    size_t first = len < 8 ? len : 8, more = len > 8 ? len - 8 : 0;
    head &= ~0ull >> (64 - 8 * first);
    next &= more >= 8 ? ~0ull : (1ull << (8 * more)) - 1;
    for (size_t slot = key_hash(head, next, len) & 1023;; slot = (slot + 1) & 1023) {
        if (!t->len[slot]) {
            t->head[slot] = head;
            t->next[slot] = next;
            t->len[slot] = len;
            ++*unique;
            return;
        }
        if (t->head[slot] == head && t->next[slot] == next && t->len[slot] == len)
            return;
    }
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static size_t
distinct_gather(slot_table *t, const uint8_t *s, const uint32_t *starts, const uint32_t *ends, size_t nt)
{
    memset(t->len, 0, sizeof t->len);
    size_t unique = 0, k = 0;
    const __m512i ones = _mm512_set1_epi64(-1), eight = _mm512_set1_epi64(8), bits = _mm512_set1_epi64(64);
    const __m512i k1 = _mm512_set1_epi64((long long)0x9E3779B97F4A7C15ull);
    const __m512i k2 = _mm512_set1_epi64((long long)0xD6E8FEB86659FD93ull);
    for (; k + 8 <= nt; k += 8) {
        __m512i a = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(starts + k)));
        __m512i len = _mm512_sub_epi64(_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(ends + k))), a);
        __m512i head = _mm512_i64gather_epi64(a, (const void *)s, 1);
        __m512i next = _mm512_i64gather_epi64(a, (const void *)(s + 8), 1);
        __m512i first = _mm512_min_epu64(len, eight);
        __m512i more = _mm512_min_epu64(_mm512_sub_epi64(_mm512_max_epu64(len, eight), eight), eight);
        head = _mm512_and_si512(head, _mm512_srlv_epi64(ones, _mm512_sub_epi64(bits, _mm512_slli_epi64(first, 3))));
        next = _mm512_and_si512(next, _mm512_srlv_epi64(ones, _mm512_sub_epi64(bits, _mm512_slli_epi64(more, 3))));
        __m512i h = _mm512_add_epi64(_mm512_mullo_epi64(_mm512_xor_si512(head, len), k1), _mm512_mullo_epi64(next, k2));
        __m512i slot = _mm512_and_si512(_mm512_xor_si512(h, _mm512_srli_epi64(h, 29)), _mm512_set1_epi64(1023));
        __mmask8 hit = _mm512_cmpeq_epi64_mask(_mm512_i64gather_epi64(slot, (const void *)t->head, 8), head) &
                       _mm512_cmpeq_epi64_mask(_mm512_i64gather_epi64(slot, (const void *)t->next, 8), next) &
                       _mm512_cmpeq_epi64_mask(_mm512_i64gather_epi64(slot, (const void *)t->len, 8), len) &
                       _mm512_cmple_epu64_mask(len, _mm512_set1_epi64(16));
        for (unsigned miss = (unsigned)(uint8_t)~hit; miss; miss &= miss - 1) {
            unsigned j = (unsigned)__builtin_ctz(miss);
            probe(t, s, starts[k + j], ends[k + j] - starts[k + j], &unique);
        }
    }
    for (; k < nt; k++)
        probe(t, s, starts[k], ends[k] - starts[k], &unique);
    return unique;
}

/* Two ways to take the "is this token new" branch out of the per-token lookup (2026-12-06, h-scan3;
 * docs/performance-notes.md), each timed against the same AES floor with the same kept index.
 * Each fills ids[k] (first-seen order, from 1) for the n-gram pass the scanner also feeds.
 *
 * distinct_kept: distinct_aes with the scanner's index: static, left zeroed by clearing the slots
 * it used (no 8 KB memset per call), ids stored per token. The baseline of the two below. */
static uint16_t kept_index[4096];

__attribute__((target("avx2,aes"))) static size_t distinct_kept(const uint8_t *s, const uint32_t *starts,
                                                               const uint32_t *ends, size_t nt, uint32_t *ids)
{
    __m128i heads[512];
    uint32_t lens[512];
    uint16_t used[512];
    size_t unique = 0;
    const __m128i k0 = _mm_set_epi64x((long long)KEY1, (long long)KEY0);
    const __m128i k1 = _mm_set_epi64x((long long)0xD6E8FEB86659FD93ull, (long long)0x9E3779B97F4A7C15ull);
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                  _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
        __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)len)));
        x = _mm_aesenc_si128(_mm_aesenc_si128(x, k0), k1);
        for (size_t slot = (uint64_t)_mm_cvtsi128_si64(x) & 4095;; slot = (slot + 1) & 4095) {
            unsigned id = kept_index[slot];
            if (!id) {
                heads[unique] = v;
                lens[unique] = (uint32_t)len;
                used[unique] = (uint16_t)slot;
                kept_index[slot] = (uint16_t)++unique;
                ids[k] = (uint32_t)unique;
                break;
            }
            if ((_mm_movemask_epi8(_mm_cmpeq_epi8(heads[id - 1], v)) == 0xFFFF) & (lens[id - 1] == len)) {
                ids[k] = id;
                break;
            }
        }
    }
    for (size_t u = 0; u < unique; u++)
        kept_index[used[u]] = 0;
    return unique;
}

/* Deferred insertion: 64 tokens are looked up without inserting (a miss sets a bit in a mask, no
 * branch; entry 0 is a dummy equal to nothing, so an empty slot needs no test before the compare),
 * then the missed ones are inserted in token order (a repeat among them finds the first). The
 * lookups of a batch do not depend on each other's outcome, and "new" is a branch only in the
 * insert loop, where it is nearly always taken. */
__attribute__((target("avx2,aes,bmi"))) static size_t distinct_deferred(const uint8_t *s, const uint32_t *starts,
                                                                       const uint32_t *ends, size_t nt,
                                                                       uint32_t *ids)
{
    __m128i heads[513];
    uint32_t lens[513];
    uint16_t used[512], slots[64];
    size_t unique = 0;
    heads[0] = _mm_setzero_si128();
    lens[0] = UINT32_MAX;
    const __m128i k0 = _mm_set_epi64x((long long)KEY1, (long long)KEY0);
    const __m128i k1 = _mm_set_epi64x((long long)0xD6E8FEB86659FD93ull, (long long)0x9E3779B97F4A7C15ull);
    for (size_t base = 0; base < nt; base += 64) {
        size_t count = nt - base < 64 ? nt - base : 64;
        uint64_t missed = 0;
        for (size_t j = 0; j < count; j++) {
            size_t a = starts[base + j], len = ends[base + j] - a;
            __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                      _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
            __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)len)));
            x = _mm_aesenc_si128(_mm_aesenc_si128(x, k0), k1);
            size_t slot = (uint64_t)_mm_cvtsi128_si64(x) & 4095;
            unsigned id = kept_index[slot];
            __m128i d = _mm_xor_si128(heads[id], v);
            if (__builtin_expect(!(_mm_testz_si128(d, d) & (lens[id] == len)) & (id != 0), 0)) {
                do { /* a collision: walk on to the token or an empty slot */
                    slot = (slot + 1) & 4095;
                    id = kept_index[slot];
                } while (id && !((_mm_movemask_epi8(_mm_cmpeq_epi8(heads[id], v)) == 0xFFFF) & (lens[id] == len)));
            }
            ids[base + j] = id;
            slots[j] = (uint16_t)slot;
            missed |= (uint64_t)(id == 0) << j;
        }
        for (; missed; missed &= missed - 1) {
            size_t j = (size_t)__builtin_ctzll(missed), a = starts[base + j], len = ends[base + j] - a;
            __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                      _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
            for (size_t slot = slots[j];; slot = (slot + 1) & 4095) {
                unsigned id = kept_index[slot];
                if (!id) {
                    heads[++unique] = v;
                    lens[unique] = (uint32_t)len;
                    used[unique - 1] = (uint16_t)slot;
                    kept_index[slot] = (uint16_t)unique;
                    ids[base + j] = (uint32_t)unique;
                    break;
                }
                if ((_mm_movemask_epi8(_mm_cmpeq_epi8(heads[id], v)) == 0xFFFF) & (lens[id] == len)) {
                    ids[base + j] = id;
                    break;
                }
            }
        }
    }
    for (size_t u = 0; u < unique; u++)
        kept_index[used[u]] = 0;
    return unique;
}

/* Keys in the slots: a slot holds the token's 16 bytes, its length and its id (32 bytes, 1024
 * slots, cleared through the slots used), so a lookup is one load after the hash instead of the
 * index then the entry. */
typedef struct {
    __m128i key;
    uint32_t len, id;
    uint64_t pad;
} key_slot;
static key_slot key_slots[1024] __attribute__((aligned(64)));

__attribute__((target("avx2,aes"))) static size_t distinct_slotkey(const uint8_t *s, const uint32_t *starts,
                                                                  const uint32_t *ends, size_t nt, uint32_t *ids)
{
    uint16_t used[512];
    size_t unique = 0;
    const __m128i k0 = _mm_set_epi64x((long long)KEY1, (long long)KEY0);
    const __m128i k1 = _mm_set_epi64x((long long)0xD6E8FEB86659FD93ull, (long long)0x9E3779B97F4A7C15ull);
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                  _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
        __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)len)));
        x = _mm_aesenc_si128(_mm_aesenc_si128(x, k0), k1);
        for (size_t slot = (uint64_t)_mm_cvtsi128_si64(x) & 1023;; slot = (slot + 1) & 1023) {
            key_slot *t = &key_slots[slot];
            __m128i d = _mm_xor_si128(t->key, v);
            if (__builtin_expect(_mm_testz_si128(d, d) & (t->len == len), 1)) {
                ids[k] = t->id;
                break;
            }
            if (t->len == 0) {
                t->key = v;
                t->len = (uint32_t)len;
                t->id = (uint32_t)++unique;
                used[unique - 1] = (uint16_t)slot;
                ids[k] = (uint32_t)unique;
                break;
            }
        }
    }
    for (size_t u = 0; u < unique; u++) {
        key_slots[used[u]].len = 0;
        key_slots[used[u]].key = _mm_setzero_si128();
    }
    return unique;
}

/* The ids the three must give: first-seen order by comparing the tokens' bytes (all the query's
 * tokens are at most 16 bytes, which the 16-byte keys above assume). */
static int ids_oracle(const uint8_t *s, const uint32_t *starts, const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint32_t first[MAX_TOKENS];
    size_t unique = 0;
    for (size_t k = 0; k < nt; k++) {
        size_t len = ends[k] - starts[k], u = 0;
        if (len > 16)
            return -1;
        while (u < unique && !(ends[first[u]] - starts[first[u]] == len && !memcmp(s + starts[first[u]], s + starts[k], len)))
            u++;
        if (u == unique)
            first[unique++] = (uint32_t)k;
        ids[k] = (uint32_t)u + 1;
    }
    return (int)unique;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Distinct counts that never compare token bytes (2026-12-06, h-scan4; docs/performance-notes.md):
 * a token's key is its keyed AES hash alone, and two tokens are "the same" iff their hashes are.
 * Equal tokens always hash alike, so a collision can only merge two different tokens: fewer
 * distinct tokens, a higher repetition ratio, never a lower one. The table holds only the hashes,
 * sized to a power of two >= 4 x the tokens, kept zeroed by clearing the slots used (as the
 * scanner's index); a hit is one 64-bit compare, with no load of an entry behind the slot.
 *   hash64:    bit 63 forced on (0 marks an empty slot), so 63 bits decide: a merge among n tokens
 *              has probability below n^2 / 2^64; the id in a parallel 16-bit array.
 *   hash48:    one 64-bit word a slot, the hash's top 48 bits and the id in the low 16 (the slot
 *              index comes from the low bits, so 48 bits decide: below n^2 / 2^49).
 *   hash64_2p, hash48_2p: the same with two passes, all tokens hashed first (their AES rounds
 *              independent, so they overlap), then the 64-bit hashes inserted.
 * Tokens over 16 bytes take one more AES round per further 16 bytes, as aes_token_hash does. */
#define HO_MAX_SLOTS (4 * MAX_TOKENS)
static uint64_t ho_slots[HO_MAX_SLOTS];
static uint16_t ho_ids[HO_MAX_SLOTS];

static size_t ho_size(size_t nt)
{
    size_t size = 64;
    while (size < 4 * nt)
        size *= 2;
    return size;
}

__attribute__((target("avx2,aes"))) static inline uint64_t ho_hash(const uint8_t *s, size_t a, size_t len,
                                                                  __m128i k0, __m128i k1)
{
    __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                              _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
    __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)len)));
    if (__builtin_expect(len > 16, 0))
        for (size_t p = 16; p < len; p += 16)
            x = _mm_aesenc_si128(_mm_xor_si128(x, _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a + p)),
                                                                _mm_load_si128((const __m128i *)masks16[len - p < 16 ? len - p : 16]))),
                                 k0);
    x = _mm_aesenc_si128(_mm_aesenc_si128(x, k0), k1);
    return (uint64_t)_mm_cvtsi128_si64(x);
}

#define HO_KEYS                                                                                    \
    const __m128i k0 = _mm_set_epi64x((long long)KEY1, (long long)KEY0);                           \
    const __m128i k1 = _mm_set_epi64x((long long)0xD6E8FEB86659FD93ull, (long long)0x9E3779B97F4A7C15ull)

/* Insert or find one 64-bit hash (bit 63 set) in ho_slots / ho_ids. */
static inline __attribute__((always_inline)) uint32_t ho_put64(uint64_t h, size_t mask, uint16_t *used,
                                                               size_t *unique)
{
    for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
        uint64_t t = ho_slots[slot];
        if (__builtin_expect(t == h, 1))
            return ho_ids[slot];
        if (t == 0) {
            ho_slots[slot] = h;
            used[*unique] = (uint16_t)slot;
            ho_ids[slot] = (uint16_t)++*unique;
            return (uint32_t)*unique;
        }
    }
}

static inline __attribute__((always_inline)) uint32_t ho_put48(uint64_t h, size_t mask, uint16_t *used,
                                                               size_t *unique)
{
    for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
        uint64_t t = ho_slots[slot];
        if (__builtin_expect(((t ^ h) >> 16) == 0, 1))
            return (uint32_t)(t & 0xFFFF);
        if (t == 0) {
            used[*unique] = (uint16_t)slot;
            ++*unique;
            ho_slots[slot] = (h & ~0xFFFFull) | *unique;
            return (uint32_t)*unique;
        }
    }
}

static void ho_clear(const uint16_t *used, size_t unique)
{
    for (size_t u = 0; u < unique; u++)
        ho_slots[used[u]] = 0;
}

__attribute__((target("avx2,aes"))) static size_t distinct_hash64(const uint8_t *s, const uint32_t *starts,
                                                                  const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint16_t used[MAX_TOKENS];
    size_t unique = 0, mask = ho_size(nt) - 1;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++)
        ids[k] = ho_put64(ho_hash(s, starts[k], ends[k] - starts[k], k0, k1) | 1ull << 63, mask, used, &unique);
    ho_clear(used, unique);
    return unique;
}

__attribute__((target("avx2,aes"))) static size_t distinct_hash48(const uint8_t *s, const uint32_t *starts,
                                                                  const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint16_t used[MAX_TOKENS];
    size_t unique = 0, mask = ho_size(nt) - 1;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++)
        ids[k] = ho_put48(ho_hash(s, starts[k], ends[k] - starts[k], k0, k1), mask, used, &unique);
    ho_clear(used, unique);
    return unique;
}

__attribute__((target("avx2,aes"))) static size_t distinct_hash64_2p(const uint8_t *s, const uint32_t *starts,
                                                                     const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint16_t used[MAX_TOKENS];
    static uint64_t hs[MAX_TOKENS];
    size_t unique = 0, mask = ho_size(nt) - 1;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++)
        hs[k] = ho_hash(s, starts[k], ends[k] - starts[k], k0, k1) | 1ull << 63;
    for (size_t k = 0; k < nt; k++)
        ids[k] = ho_put64(hs[k], mask, used, &unique);
    ho_clear(used, unique);
    return unique;
}

__attribute__((target("avx2,aes"))) static size_t distinct_hash48_2p(const uint8_t *s, const uint32_t *starts,
                                                                     const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint16_t used[MAX_TOKENS];
    static uint64_t hs[MAX_TOKENS];
    size_t unique = 0, mask = ho_size(nt) - 1;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++)
        hs[k] = ho_hash(s, starts[k], ends[k] - starts[k], k0, k1);
    for (size_t k = 0; k < nt; k++)
        ids[k] = ho_put48(hs[k], mask, used, &unique);
    ho_clear(used, unique);
    return unique;
}

/* Short tokens inline (2026-12-07, h-scan; docs/performance-notes.md): exact ids, but a short
 * token's bytes are the key kept in its slot, so a lookup is hash, slot, one compare, without the
 * load of an entry behind an index. Tokens here never hold a NUL byte (split takes bytes <= ' '
 * as whitespace; the scanner's block loop sees printable ASCII only), so the zero-padded bytes are
 * the token and an all-zero key marks an empty slot. Longer tokens keep the kept index and an
 * entry (the first 16 bytes, the length, the offset; bytes past 16 compared with memcmp). Ids are
 * first-seen across both tables. The same keyed AES hash as the baseline.
 *   inline8:  tokens up to 8 bytes keyed by one 64-bit word (4096 slots, ids in a 16-bit array);
 *             a branch on the length picks the table (24 % of the query's tokens are 9-14 bytes).
 *   inline16: tokens up to 16 bytes keyed by one 16-byte vector (SLOTS16 slots of 16 bytes, ids
 *             in a 16-bit array); only tokens over 16 bytes take the index. */
typedef struct {
    __m128i head;
    uint32_t len, off, id, pad;
} il_entry;
static uint16_t il_index[4096];
static il_entry il_entries[MAX_TOKENS];
static uint64_t in8_keys[4096];
static uint16_t in8_ids[4096];
static __m128i in16_keys[4096];
static uint16_t in16_ids[4096];

/* The index-and-entry lookup of a token too long for the inline table. */
__attribute__((target("avx2,aes"))) static inline uint32_t il_long(const uint8_t *s, size_t a, size_t len, __m128i v,
                                                                  uint64_t h, uint16_t *used, size_t *n_long,
                                                                  size_t *unique)
{
    for (size_t slot = h & 4095;; slot = (slot + 1) & 4095) {
        unsigned e = il_index[slot];
        if (!e) {
            il_entry *en = &il_entries[*n_long];
            en->head = v;
            en->len = (uint32_t)len;
            en->off = (uint32_t)a;
            en->id = (uint32_t)++*unique;
            used[(*n_long)++] = (uint16_t)slot;
            il_index[slot] = (uint16_t)*n_long;
            return en->id;
        }
        const il_entry *en = &il_entries[e - 1];
        __m128i d = _mm_xor_si128(en->head, v);
        if (_mm_testz_si128(d, d) && en->len == len && (len <= 16 || !memcmp(s + en->off + 16, s + a + 16, len - 16)))
            return en->id;
    }
}

__attribute__((target("avx2,aes"))) static size_t distinct_inline8(const uint8_t *s, const uint32_t *starts,
                                                                  const uint32_t *ends, size_t nt, uint32_t *ids)
{
    static uint16_t used_in[MAX_TOKENS], used_long[MAX_TOKENS];
    size_t unique = 0, n_in = 0, n_long = 0;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                  _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
        uint64_t h = ho_hash(s, a, len, k0, k1);
        if (len <= 8) {
            uint64_t key = (uint64_t)_mm_cvtsi128_si64(v);
            for (size_t slot = h & 4095;; slot = (slot + 1) & 4095) {
                uint64_t kk = in8_keys[slot];
                if (__builtin_expect(kk == key, 1)) {
                    ids[k] = in8_ids[slot];
                    break;
                }
                if (!kk) {
                    in8_keys[slot] = key;
                    in8_ids[slot] = (uint16_t)++unique;
                    used_in[n_in++] = (uint16_t)slot;
                    ids[k] = (uint32_t)unique;
                    break;
                }
            }
        } else
            ids[k] = il_long(s, a, len, v, h, used_long, &n_long, &unique);
    }
    for (size_t u = 0; u < n_in; u++)
        in8_keys[used_in[u]] = 0;
    for (size_t u = 0; u < n_long; u++)
        il_index[used_long[u]] = 0;
    return unique;
}

static inline __attribute__((always_inline, target("avx2,aes"))) size_t
inline16(const uint8_t *s, const uint32_t *starts, const uint32_t *ends, size_t nt, uint32_t *ids, size_t mask)
{
    static uint16_t used_in[MAX_TOKENS], used_long[MAX_TOKENS];
    size_t unique = 0, n_in = 0, n_long = 0;
    HO_KEYS;
    for (size_t k = 0; k < nt; k++) {
        size_t a = starts[k], len = ends[k] - a;
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + a)),
                                  _mm_load_si128((const __m128i *)masks16[len < 16 ? len : 16]));
        uint64_t h = ho_hash(s, a, len, k0, k1);
        if (__builtin_expect(len <= 16, 1)) {
            for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
                __m128i kk = in16_keys[slot], d = _mm_xor_si128(kk, v);
                if (__builtin_expect(_mm_testz_si128(d, d), 1)) {
                    ids[k] = in16_ids[slot];
                    break;
                }
                if (!_mm_cvtsi128_si32(kk)) {
                    in16_keys[slot] = v;
                    in16_ids[slot] = (uint16_t)++unique;
                    used_in[n_in++] = (uint16_t)slot;
                    ids[k] = (uint32_t)unique;
                    break;
                }
            }
        } else
            ids[k] = il_long(s, a, len, v, h, used_long, &n_long, &unique);
    }
    for (size_t u = 0; u < n_in; u++)
        in16_keys[used_in[u]] = _mm_setzero_si128();
    for (size_t u = 0; u < n_long; u++)
        il_index[used_long[u]] = 0;
    return unique;
}

__attribute__((target("avx2,aes"))) static size_t distinct_inline16(const uint8_t *s, const uint32_t *starts,
                                                                   const uint32_t *ends, size_t nt, uint32_t *ids)
{
    return inline16(s, starts, ends, nt, ids, 4095);
}

__attribute__((target("avx2,aes"))) static size_t distinct_inline16_1k(const uint8_t *s, const uint32_t *starts,
                                                                      const uint32_t *ends, size_t nt, uint32_t *ids)
{
    return inline16(s, starts, ends, nt, ids, 1023);
}

/* First-seen ids by comparing whole tokens' bytes, any length: what the hash-only counts must give
 * (with a fixed key and these texts, a merge would be a bug, not a collision: 2^-40 at worst). */
static size_t ids_oracle_any(const uint8_t *s, const uint32_t *starts, const uint32_t *ends, size_t nt,
                             uint32_t *ids)
{
    static uint32_t first[MAX_TOKENS];
    size_t unique = 0;
    for (size_t k = 0; k < nt; k++) {
        size_t len = ends[k] - starts[k], u = 0;
        while (u < unique && !(ends[first[u]] - starts[first[u]] == len && !memcmp(s + starts[first[u]], s + starts[k], len)))
            u++;
        if (u == unique)
            first[unique++] = (uint32_t)k;
        ids[k] = (uint32_t)u + 1;
    }
    return unique;
}

/* The VPCOMPRESSB split must give the bit-loop split's offsets, and the AES floor the same distinct
 * count, on the query and on texts that stress it: a block with more than 16 starts, tokens across
 * block edges, a text ending inside a token, and pseudo-random bytes. */
static int compare_splits(const uint8_t *query, size_t qn, uint32_t *starts, uint32_t *ends)
{
    static uint8_t text[MAX_TOKENS + 64];
    static uint32_t s2[MAX_TOKENS + 64], e2[MAX_TOKENS + 64];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int c = 0; c < 64; c++) {
        size_t n;
        if (c == 0) {
            n = qn;
            memcpy(text, query, n);
        } else {
            n = (size_t)(c * 97) % (MAX_TOKENS - 1) + 1;
            for (size_t j = 0; j < n; j++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                /* c % 4: dense one-letter tokens, sparse spaces, all whitespace, random bytes */
                text[j] = c % 4 == 0 ? (j & 1 ? ' ' : (uint8_t)('a' + x % 3))
                        : c % 4 == 1 ? (x % 13 ? (uint8_t)('a' + x % 5) : '\n')
                        : c % 4 == 2 ? (uint8_t)(x % 33)
                                     : (uint8_t)x;
            }
        }
        memset(text + n, 0, 64);
        size_t nt = split(text, n, starts, ends), nt2 = split512(text, n, s2, e2);
        if (nt2 != nt || memcmp(starts, s2, nt * 4) != 0 || memcmp(ends, e2, nt * 4) != 0) {
            fprintf(stderr, "AVX-512 bit-loop split disagrees on case %d (%zu vs %zu tokens)\n", c, nt2, nt);
            return 1;
        }
        memset(s2, 0xFF, sizeof s2);
        memset(e2, 0xFF, sizeof e2);
        nt2 = split_compress(text, n, s2, e2);
        if (nt2 != nt || memcmp(starts, s2, nt * 4) != 0 || memcmp(ends, e2, nt * 4) != 0) {
            fprintf(stderr, "VPCOMPRESSB split disagrees on case %d (%zu vs %zu tokens)\n", c, nt2, nt);
            return 1;
        }
        /* distinct_aes reads 16 bytes past a token and handles at most 512 distinct ones. */
        if (nt && distinct_aes(text, starts, ends, nt) != distinct_aes(text, s2, e2, nt2)) {
            fprintf(stderr, "VPCOMPRESSB floor's distinct count disagrees on case %d\n", c);
            return 1;
        }
        if (c == 0 && distinct(text, s2, e2, nt2) != distinct(text, starts, ends, nt)) {
            fprintf(stderr, "VPCOMPRESSB floor's distinct count disagrees on the query\n");
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: scan_floor QUERY_FILE [VARIED_FILE]\n");
        return 2;
    }
    static uint8_t buf[MAX_TOKENS * 2 + 64];
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    size_t n = fread(buf, 1, sizeof buf - 64, f);
    fclose(f);
    static uint32_t starts[MAX_TOKENS + 64], ends[MAX_TOKENS + 64]; /* slack for split_compress */
    for (int l = 0; l <= 16; l++)
        for (int j = 0; j < 16; j++)
            masks16[l][j] = j < l ? 0xFF : 0;
    __builtin_cpu_init();
    int aes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("aes");
    qg_scan_rules rules = {500, -1, 32, 2, 1, 1};
    size_t nt = split(buf, n, starts, ends), unique = distinct(buf, starts, ends, nt);
    qg_scan_out check;
    memset(&check, 0, sizeof check);
    qg_scan(buf, n, &rules, &check);
    if ((size_t)check.token_count != nt || (size_t)check.unique_tokens != unique) {
        fprintf(stderr, "floor disagrees with qg_scan: %zu/%zu vs %lld/%lld tokens/distinct\n", nt, unique,
                (long long)check.token_count, (long long)check.unique_tokens);
        return 1;
    }
    qg_scan_out_free(&check);
    if (aes && distinct_aes(buf, starts, ends, nt) != unique) {
        fprintf(stderr, "AES variant disagrees\n");
        return 1;
    }
    /* The kernel as the binding calls it with the GIL held: with an index it keeps zeroed. */
    static qg_scan_table index;
    const int reps = 200000;
    double best_split = 1e9, best_all = 1e9, best_aes = 1e9, best_scan = 1e9;
    size_t sink = 0;
    for (int round = 0; round < 5; round++) {
        double t = now();
        for (int r = 0; r < reps; r++)
            sink += split(buf, n, starts, ends);
        double d = (now() - t) / reps;
        best_split = d < best_split ? d : best_split;
        t = now();
        for (int r = 0; r < reps; r++)
            sink += distinct(buf, starts, ends, split(buf, n, starts, ends));
        d = (now() - t) / reps;
        best_all = d < best_all ? d : best_all;
        if (aes) {
            t = now();
            for (int r = 0; r < reps; r++)
                sink += distinct_aes(buf, starts, ends, split(buf, n, starts, ends));
            d = (now() - t) / reps;
            best_aes = d < best_aes ? d : best_aes;
        }
        t = now();
        for (int r = 0; r < reps; r++) {
            qg_scan_out o;
            memset(&o, 0, sizeof o);
            qg_scan_index(buf, n, &rules, &o, &index);
            sink += (size_t)o.unique_tokens;
            qg_scan_out_free(&o);
        }
        d = (now() - t) / reps;
        best_scan = d < best_scan ? d : best_scan;
    }
    printf("%zu bytes, %zu tokens, %zu distinct (best of 5 x %d)\n", n, nt, unique, reps);
    printf("floor, multiply hash (the generic variant): split %.3f us + distinct %.3f us = %.3f us\n",
           best_split * 1e6, (best_all - best_split) * 1e6, best_all * 1e6);
    if (aes)
        printf("floor, AES hash (the AVX2 variant, the one qg_scan runs here): split %.3f us + distinct "
               "%.3f us = %.3f us\n", best_split * 1e6, (best_aes - best_split) * 1e6, best_aes * 1e6);
    printf("qg_scan_index (the real kernel, as the binding calls it): %.3f us\n", best_scan * 1e6);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl")) {
        static slot_table table;
        if (distinct_gather(&table, buf, starts, ends, nt) != unique) {
            fprintf(stderr, "gather variant disagrees\n");
            return 1;
        }
        double best_gather = 1e9;
        for (int round = 0; round < 5; round++) {
            double t = now();
            for (int r = 0; r < reps; r++)
                sink += distinct_gather(&table, buf, starts, ends, nt);
            double d = (now() - t) / reps;
            best_gather = d < best_gather ? d : best_gather;
        }
        printf("distinct with AVX-512 gathers, 8 tokens a step (table clear included): %.3f us\n",
               best_gather * 1e6);
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt") && aes) {
        if (compare_splits(buf, n, starts, ends) != 0)
            return 1;
        if (distinct_aes(buf, starts, ends, split_compress(buf, n, starts, ends)) != unique) {
            fprintf(stderr, "VPCOMPRESSB floor's distinct count disagrees with the minimal kernel's\n");
            return 1;
        }
        /* Same as the AES floor above but with the whole input's offsets extracted by VPCOMPRESSB:
         * the two splits and the two floors alternate (order swapped every round) so that a slow
         * phase of the shared host hits both alike. */
        enum { ROUNDS = 41, REPS = 20000 };
        static double t_sp[3][ROUNDS], t_all[2][ROUNDS], ratio[ROUNDS];
        for (int round = 0; round < ROUNDS; round++) {
            for (int o = 0; o < 3; o++) {
                int v = (o + round) % 3;
                double t = now();
                for (int r = 0; r < REPS; r++)
                    sink += v == 0 ? split(buf, n, starts, ends)
                                   : v == 1 ? split512(buf, n, starts, ends) : split_compress(buf, n, starts, ends);
                t_sp[v][round] = (now() - t) / REPS;
            }
            for (int o = 0; o < 2; o++) {
                int v = (o + round) & 1;
                double t = now();
                for (int r = 0; r < REPS; r++)
                    sink += distinct_aes(buf, starts, ends,
                                         v ? split_compress(buf, n, starts, ends) : split(buf, n, starts, ends));
                t_all[v][round] = (now() - t) / REPS;
            }
            ratio[round] = t_all[1][round] / t_all[0][round];
        }
        static const char *sp_names[3] = {"split, AVX2 compares + bit loops (as above)",
                                          "split, AVX-512 compare + bit loops",
                                          "split, AVX-512 compare + VPCOMPRESSB offsets"};
        for (int v = 0; v < 3; v++) {
            qsort(t_sp[v], ROUNDS, sizeof(double), cmp_double);
            printf("%s: min %.3f us, median %.3f us\n", sp_names[v], t_sp[v][0] * 1e6, t_sp[v][ROUNDS / 2] * 1e6);
        }
        static const char *all_names[2] = {"floor, AES hash, bit-loop split", "floor, AES hash, VPCOMPRESSB split"};
        for (int v = 0; v < 2; v++) {
            qsort(t_all[v], ROUNDS, sizeof(double), cmp_double);
            printf("%s: min %.3f us, median %.3f us (%d alternating rounds x %d)\n", all_names[v],
                   t_all[v][0] * 1e6, t_all[v][ROUNDS / 2] * 1e6, ROUNDS, REPS);
        }
        qsort(ratio, ROUNDS, sizeof(double), cmp_double);
        printf("VPCOMPRESSB floor / bit-loop floor, per round: median %.3f (quartiles %.3f-%.3f)\n",
               ratio[ROUNDS / 2], ratio[ROUNDS / 4], ratio[3 * ROUNDS / 4]);
    }
    if (aes && __builtin_cpu_supports("bmi")) {
        /* The kept-index floor against deferred insertion and keys in the slots, on the same split,
         * in alternating rounds (order rotated every round); each must give the oracle's ids. */
        static uint32_t want[MAX_TOKENS], got[MAX_TOKENS];
        nt = split(buf, n, starts, ends);
        int expect = ids_oracle(buf, starts, ends, nt, want);
        size_t (*const fns[3])(const uint8_t *, const uint32_t *, const uint32_t *, size_t, uint32_t *) = {
            distinct_kept, distinct_deferred, distinct_slotkey};
        static const char *names[3] = {"floor, AES hash, kept index (the baseline of the next two)",
                                       "  deferred insertion, 64 tokens a batch",
                                       "  keys in the slots (one load per lookup)"};
        for (int v = 0; v < 3; v++) {
            memset(got, 0, nt * sizeof got[0]);
            if (expect < 0 || fns[v](buf, starts, ends, nt, got) != (size_t)expect || memcmp(got, want, nt * 4)) {
                fprintf(stderr, "%s: ids disagree with the oracle\n", names[v]);
                return 1;
            }
        }
        enum { ROUNDS = 41, REPS = 20000 };
        static double t[3][ROUNDS], ratio[2][ROUNDS];
        for (int round = 0; round < ROUNDS; round++) {
            for (int o = 0; o < 3; o++) {
                int v = (o + round) % 3;
                double t0 = now();
                for (int r = 0; r < REPS; r++)
                    sink += fns[v](buf, starts, ends, nt, got);
                t[v][round] = (now() - t0) / REPS;
            }
            ratio[0][round] = t[1][round] / t[0][round];
            ratio[1][round] = t[2][round] / t[0][round];
        }
        for (int v = 0; v < 3; v++) {
            qsort(t[v], ROUNDS, sizeof(double), cmp_double);
            printf("%s: distinct alone, min %.3f us, median %.3f us", names[v], t[v][0] * 1e6, t[v][ROUNDS / 2] * 1e6);
            if (v) {
                qsort(ratio[v - 1], ROUNDS, sizeof(double), cmp_double);
                printf("; / baseline per round: median %.3f (quartiles %.3f-%.3f)", ratio[v - 1][ROUNDS / 2],
                       ratio[v - 1][ROUNDS / 4], ratio[v - 1][3 * ROUNDS / 4]);
            }
            printf("\n");
        }
    }
    if (aes && argc >= 3) {
        /* Hash-only distinct counts (no byte compare) against the kept-index AES floor, on the
         * query and on the varied queries (argv[2]: texts separated by NUL bytes), in alternating
         * rounds (order rotated every round). Each must first give the byte-comparing oracle's
         * count and ids on the query, every varied query and 48 made-up texts (few letters, so
         * many repeats; tokens of 1 to 40 bytes, so the fold past 16 bytes is checked too). */
        enum { NV = 8, VQ = 64, ROUNDS = 41, REPS = 20000, REPS_V = 300 };
        static uint8_t vbuf[VQ][MAX_TOKENS + 64];
        static uint32_t vs[VQ][1024], ve[VQ][1024];
        static size_t vn[VQ];
        static uint32_t want[MAX_TOKENS], got[MAX_TOKENS];
        size_t nq = 0;
        FILE *vf = fopen(argv[2], "rb");
        if (!vf)
            return 2;
        static uint8_t all[VQ * (MAX_TOKENS + 64)];
        size_t an = fread(all, 1, sizeof all, vf), at = 0;
        fclose(vf);
        while (at < an && nq < VQ) {
            size_t len = strnlen((const char *)all + at, an - at);
            if (len > MAX_TOKENS || split(all + at, len, vs[nq], ve[nq]) > 1000) {
                fprintf(stderr, "varied query %zu too long\n", nq);
                return 2;
            }
            memcpy(vbuf[nq], all + at, len);
            memset(vbuf[nq] + len, 0, 64);
            vn[nq] = split(vbuf[nq], len, vs[nq], ve[nq]);
            nq++;
            at += len + 1;
        }
        size_t (*const fns[NV])(const uint8_t *, const uint32_t *, const uint32_t *, size_t, uint32_t *) = {
            distinct_kept, distinct_hash64, distinct_hash48, distinct_hash64_2p, distinct_hash48_2p,
            distinct_inline8, distinct_inline16, distinct_inline16_1k};
        static const char *names[NV] = {"floor, AES hash, kept index, byte compare (baseline)",
                                        "  hash only, 64-bit (63 bits + id array), one pass",
                                        "  hash only, 48-bit tag + id in one word, one pass",
                                        "  hash only, 64-bit, all hashed first, then inserted",
                                        "  hash only, 48-bit tag, all hashed first, then inserted",
                                        "  exact, tokens <= 8 bytes inline (64-bit key in the slot)",
                                        "  exact, tokens <= 16 bytes inline (16-byte key, 4096 slots)",
                                        "  exact, tokens <= 16 bytes inline (16-byte key, 1024 slots)"};
        static uint8_t text[MAX_TOKENS + 64];
        uint64_t x = 0x2545F4914F6CDD1Dull;
        for (size_t c = 0; c < 1 + nq + 48; c++) {
            const uint8_t *t;
            const uint32_t *ss, *ee;
            size_t ntc;
            if (c == 0) {
                t = buf, ss = starts, ee = ends, ntc = split(buf, n, starts, ends);
            } else if (c <= nq) {
                t = vbuf[c - 1], ss = vs[c - 1], ee = ve[c - 1], ntc = vn[c - 1];
            } else {
                /* c % 3: tokens of 1-4 letters, of 1-40, or 16 fixed letters and 1-8 more (tokens
                 * that differ only past their first 16 bytes) */
                size_t len = 0, target = 64 + (c * 331) % 6000, mode = c % 3, letters = (c / 3) % 3 + 2;
                while (len < target) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    size_t w = mode == 0 ? 1 + x % 4 : mode == 1 ? 1 + (x >> 8) % 40 : 17 + (x >> 8) % 8;
                    for (size_t j = 0; j < w && len < target; j++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        text[len++] = mode == 2 && j < 16 ? (uint8_t)('a' + j % 2) : (uint8_t)('a' + x % letters);
                    }
                    if (len < target)
                        text[len++] = c % 5 ? ' ' : '\n';
                }
                memset(text + len, 0, 64);
                t = text, ss = starts, ee = ends, ntc = split(text, len, starts, ends);
            }
            size_t expect = ids_oracle_any(t, ss, ee, ntc, want);
            for (int v = c <= nq ? 0 : 1; v < NV; v++) {
                if (v == 0 && ids_oracle(t, ss, ee, ntc, got) < 0)
                    continue; /* the kept-index floor keys 16 bytes only */
                memset(got, 0, ntc * sizeof got[0]);
                if (fns[v](t, ss, ee, ntc, got) != expect || memcmp(got, want, ntc * 4)) {
                    fprintf(stderr, "%s: ids disagree with the oracle on text %zu\n", names[v], c);
                    return 1;
                }
            }
        }
        nt = split(buf, n, starts, ends);
        static double t[2][NV][ROUNDS], ratio[2][NV][ROUNDS], delta[2][NV][ROUNDS];
        for (int set = 0; set < 2; set++) {
            for (int round = 0; round < ROUNDS; round++) {
                for (int o = 0; o < NV; o++) {
                    int v = (o + round) % NV;
                    double t0 = now();
                    if (set == 0) {
                        for (int r = 0; r < REPS; r++)
                            sink += fns[v](buf, starts, ends, nt, got);
                        t[set][v][round] = (now() - t0) / REPS;
                    } else {
                        for (int r = 0; r < REPS_V; r++)
                            for (size_t q = 0; q < nq; q++)
                                sink += fns[v](vbuf[q], vs[q], ve[q], vn[q], got);
                        t[set][v][round] = (now() - t0) / (REPS_V * (double)nq);
                    }
                }
                for (int v = 1; v < NV; v++) {
                    ratio[set][v][round] = t[set][v][round] / t[set][0][round];
                    delta[set][v][round] = t[set][v][round] - t[set][0][round];
                }
            }
            printf("%s (%d alternating rounds):\n", set ? "distinct alone, the 64 varied queries in turn"
                                                        : "distinct alone, the benchmark query", ROUNDS);
            for (int v = 0; v < NV; v++) {
                qsort(t[set][v], ROUNDS, sizeof(double), cmp_double);
                printf("%s: min %.3f us, median %.3f us", names[v], t[set][v][0] * 1e6, t[set][v][ROUNDS / 2] * 1e6);
                if (v) {
                    qsort(ratio[set][v], ROUNDS, sizeof(double), cmp_double);
                    qsort(delta[set][v], ROUNDS, sizeof(double), cmp_double);
                    printf("; / baseline per round: median %.3f (quartiles %.3f-%.3f), minus baseline %.3f us",
                           ratio[set][v][ROUNDS / 2], ratio[set][v][ROUNDS / 4], ratio[set][v][3 * ROUNDS / 4],
                           delta[set][v][ROUNDS / 2] * 1e6);
                }
                printf("\n");
            }
        }
    }
    return sink == 0;
}
