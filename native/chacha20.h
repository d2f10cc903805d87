/* ChaCha20 (RFC 8439) keystream and the per-thread CSPRNG behind qdrant_guard's noise. The
   production stream's keystream is AES-256-CTR (aes256ctr.h) where the CPU has AES-NI. */
#ifndef QG_CHACHA20_H
#define QG_CHACHA20_H

#include <stddef.h>
#include <stdint.h>

/* Keystream buffered per stream: 64 blocks = 4 KiB, 1024 words. */
#define QG_STREAM_BLOCKS 64
#define QG_STREAM_WORDS (QG_STREAM_BLOCKS * 16)

/* Cipher of a stream's keystream. Deterministic streams (seeded, per-row keyed) are always ChaCha20;
   only the production stream (qg_thread_stream) may be AES-256-CTR. */
enum { QG_CIPHER_CHACHA20 = 0, QG_CIPHER_AES256CTR = 1 };

typedef struct {
    uint32_t key[8];     /* ChaCha20: key words; AES-256-CTR: the 32 key bytes as stored */
    uint32_t nonce[3];
    uint32_t counter;
    int key_erasure;     /* 1: re-key from the stream after each refill (production) */
    size_t refill_blocks; /* blocks generated per refill, <= QG_STREAM_BLOCKS; never changes the words */
    int cipher;          /* QG_CIPHER_*; AES-256-CTR fills the same 64-byte blocks, 4 AES blocks each */
    uint8_t ctr[16];     /* AES-256-CTR counter block (big-endian 128-bit counter) */
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
   Returns NULL with *err set to an errno value when the OS cannot provide randomness.
   Keystream: qg_production_cipher(). ChaCha20: 32-byte key and 12-byte nonce from getrandom(2),
   block counter from 0. AES-256-CTR: 32-byte key from getrandom(2), counter block = 12 bytes from
   getrandom(2) followed by a 32-bit big-endian counter from 0. Either way, after each refill the
   first 32 bytes of the keystream become the next key (never handed out), the old key is
   overwritten and the counter restarts from 0 (fast key erasure); the words handed out are the
   rest of the buffer, read as little-endian 32-bit words. */
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

/* Cipher of the production stream, chosen once (first call; the Python module calls it at import):
   AES-256-CTR where the CPU has AES-NI (qg_aes_level()), else ChaCha20. The environment variable
   QG_NOISE_CIPHER=chacha20 forces ChaCha20; "aes" (or unset/empty) asks for AES-256-CTR. */
int qg_production_cipher(void);
/* "aes256ctr" or "chacha20": qg_production_cipher() by name. */
const char *qg_production_cipher_name(void);
/* How QG_NOISE_CIPHER was read: QG_CIPHER_KNOB_OK, _INVALID (unknown value: the default was used)
   or _NO_AES ("aes" asked for on a CPU without AES-NI: ChaCha20 was used). */
enum { QG_CIPHER_KNOB_OK = 0, QG_CIPHER_KNOB_INVALID = 1, QG_CIPHER_KNOB_NO_AES = 2 };
int qg_cipher_knob_status(void);

/* Name of the implementation in use ("avx512", "avx2", "sse2" or "scalar"). */
const char *qg_chacha20_impl(void);

#endif
