/* ChaCha20 (RFC 8439) keystream and the per-thread CSPRNG behind qdrant_guard's noise. */
#ifndef QG_CHACHA20_H
#define QG_CHACHA20_H

#include <stddef.h>
#include <stdint.h>

/* Keystream buffered per stream: 64 blocks = 4 KiB, 1024 words. */
#define QG_STREAM_BLOCKS 64
#define QG_STREAM_WORDS (QG_STREAM_BLOCKS * 16)

typedef struct {
    uint32_t key[8];
    uint32_t nonce[3];
    uint32_t counter;
    int key_erasure;     /* 1: re-key from the stream after each refill (production) */
    size_t refill_blocks; /* blocks generated per refill, <= QG_STREAM_BLOCKS; never changes the words */
    size_t pos;          /* next unread word in buf */
    size_t end;          /* number of valid words in buf */
    uint32_t buf[QG_STREAM_WORDS];
} qg_stream;

/* One 64-byte block as 16 little-endian words (RFC 8439 section 2.3). */
void qg_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t out[16]);

/* nblocks consecutive blocks; the 32-bit counter carries into nonce[0] on wrap-around. */
void qg_chacha20_blocks(const uint32_t key[8], uint32_t *counter, uint32_t nonce[3], uint32_t *out, size_t nblocks);

/* Deterministic stream: key 32 bytes, nonce 12 bytes, block counter starts at 0, no key erasure. */
void qg_stream_init(qg_stream *s, const uint8_t key[32], const uint8_t nonce[12]);
void qg_stream_refill(qg_stream *s);
/* Generate about `words` words per refill instead of a full buffer: a short-lived per-row stream
   then computes no keystream it will not read. The word sequence is the same either way. */
void qg_stream_size_hint(qg_stream *s, size_t words);
void qg_stream_wipe(qg_stream *s);

static inline uint32_t qg_stream_u32(qg_stream *s)
{
    if (s->pos == s->end)
        qg_stream_refill(s);
    return s->buf[s->pos++];
}

/* The calling thread's production stream, keyed from getrandom(2) and re-keyed in a forked child.
   Returns NULL with *err set to an errno value when the OS cannot provide randomness. */
qg_stream *qg_thread_stream(int *err);

/* Wipe the calling thread's production stream; its next use re-keys from getrandom(2). For a
   thread about to end, whose thread-local storage is freed without being cleared. */
void qg_thread_stream_discard(void);

/* Fill buf from getrandom(2), looping on EINTR and short reads. Returns 0 or an errno value. */
int qg_os_random(void *buf, size_t n);

enum { QG_SIMD_SCALAR = 0, QG_SIMD_SSE2 = 1, QG_SIMD_AVX2 = 2, QG_SIMD_AVX512 = 3 };

/* Instruction set used by the keystream and the samplers (CPU support, capped by the environment
   variable QG_NOISE_SIMD=scalar|sse2|avx2). */
int qg_simd_level(void);

/* Name of the implementation in use ("avx512", "avx2", "sse2" or "scalar"). */
const char *qg_chacha20_impl(void);

#endif
