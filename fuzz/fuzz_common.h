/* Shared helpers for the libFuzzer harnesses in fuzz/ (not part of the library build). */
#ifndef QG_FUZZ_COMMON_H
#define QG_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invariant broke: print why and abort, which libFuzzer records as a crash with its input. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "INVARIANT FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Consume fuzz bytes as parameters; past the end every read returns zeros. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_reader;

static inline uint64_t take_u64(fuzz_reader *r, size_t bytes)
{
    uint64_t v = 0;
    for (size_t k = 0; k < bytes; k++) {
        uint64_t b = 0;
        if (r->n) {
            b = *r->p++;
            r->n--;
        }
        v |= b << (8 * k);
    }
    return v;
}

static inline double take_double(fuzz_reader *r)
{
    uint64_t bits = take_u64(r, 8);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Copy data to a fresh heap block starting `shift` bytes past a 16-byte boundary, with no slack
 * after it, so ASan sees reads one past the end and the kernel sees every misalignment. */
static inline uint8_t *misaligned_copy(const uint8_t *data, size_t n, unsigned shift, uint8_t **block)
{
    *block = (uint8_t *)malloc(n + shift + 1);
    if (!*block)
        abort();
    memcpy(*block + shift, data, n);
    return *block + shift;
}

/* Strict UTF-8 (RFC 3629); with surrogates=1 also ED A0..BF (Python's 'surrogatepass'). */
static inline int utf8_valid(const uint8_t *s, size_t n, int surrogates)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xC2 && b < 0xE0) {
            len = 2;
        } else if (b >= 0xE0 && b < 0xF0) {
            len = 3;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED && !surrogates) hi = 0x9F;
        } else if (b >= 0xF0 && b < 0xF5) {
            len = 4;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* Code points as the kernels count them: one per byte that is not a UTF-8 continuation byte. */
static inline size_t lead_bytes(const uint8_t *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (s[i] & 0xC0) != 0x80;
    return c;
}

#endif
