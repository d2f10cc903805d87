/* AES-256 in CTR mode with the AES-NI instructions (VAES 256-bit where the CPU has it): the
   keystream of qdrant_guard's production CSPRNG when the CPU supports it (see chacha20.h). */
#ifndef QG_AES256CTR_H
#define QG_AES256CTR_H

#include <stddef.h>
#include <stdint.h>

enum { QG_AES_NONE = 0, QG_AES_NI = 1, QG_AES_VAES = 2 };

/* QG_AES_VAES (VAES + AVX2, when QG_NOISE_SIMD allows avx2), QG_AES_NI (AES-NI + SSSE3), or
   QG_AES_NONE: the CPU has no AES instructions. There is deliberately no software (table-based)
   AES, whose memory access pattern would leak the key through the cache. */
int qg_aes_level(void);

/* "vaes", "aesni" or "none". */
const char *qg_aes_impl(void);

/* nblocks 16-byte blocks of AES-256-CTR keystream (NIST SP 800-38A: block i is
   AES-256_key(ctr + i), the 128-bit counter block big-endian with carry through all 16 bytes).
   ctr is advanced by nblocks. Requires qg_aes_level() != QG_AES_NONE (otherwise out is zeroed and
   -1 returned); returns 0. Round keys and counters on the stack are wiped before returning. */
int qg_aes256ctr(const uint8_t key[32], uint8_t ctr[16], uint8_t *out, size_t nblocks);

#endif
