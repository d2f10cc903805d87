/* libFuzzer harness for the AES-256-CTR keystream (native/aes256ctr.c) and the AES production
 * stream (native/chacha20.c, qg_thread_stream).
 *
 * Input: key (32), counter block (16), block count (1), flags (1), then free bytes. flags & 3
 * pushes the counter next to a carry of its low 64 bits (1) or of all 128 (2), so the 16-block
 * VAES and 8-block AES-NI groups meet the carry; (flags >> 2) & 15 misaligns the output.
 * Checks: qg_aes256ctr equals a plain FIPS 197 AES-256 (aes_ref.h, test-only: table-based and not
 * constant time, never linked into the library) in CTR mode with big-endian 128-bit increment,
 * leaves the counter advanced by the block count, and gives the same bytes when split in two calls;
 * the production stream, when it is AES, hands out exactly the keystream of its current key and
 * counter block from word 8 on, and re-keys (fast key erasure) with words 0..7, which it zeroes,
 * its counter back at nonce || 0. */
#include "fuzz_common.h"

#include "aes_ref.h"

#include "aes256ctr.h"
#include "chacha20.h"

enum { MAX_BLOCKS = 520 };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    make_sbox();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 50)
        return 0;
    if (qg_aes_level() == QG_AES_NONE) {
        /* No AES-NI: the primitive refuses (zeroed output) and production stays ChaCha20. */
        uint8_t k[32] = {0}, c[16] = {0}, o[16];
        CHECK(qg_aes256ctr(k, c, o, 1) == -1, "AES without AES-NI");
        CHECK(qg_production_cipher() == QG_CIPHER_CHACHA20, "production AES without AES-NI");
        return 0;
    }
    uint8_t key[32], ctr[16];
    memcpy(key, data, 32);
    memcpy(ctr, data + 32, 16);
    uint8_t nb = data[48], flags = data[49];
    size_t nblocks = (size_t)nb * 37 % MAX_BLOCKS;
    if ((flags & 3) == 1) {
        memset(ctr + 8, 0xFF, 8);
        ctr[15] = (uint8_t)(0xFF - (data[47] & 31)); /* low 64 bits wrap within the call */
    } else if ((flags & 3) == 2) {
        memset(ctr, 0xFF, 16);
        ctr[15] = (uint8_t)(0xFF - (data[47] & 31)); /* all 128 bits wrap to zero */
    }
    unsigned shift = (flags >> 2) & 15;

    uint8_t *fast_block = (uint8_t *)malloc(16 * nblocks + shift + 1);
    uint8_t *slow = (uint8_t *)malloc(16 * nblocks + 1);
    uint8_t *split = (uint8_t *)malloc(16 * nblocks + 1);
    if (!fast_block || !slow || !split)
        abort();
    uint8_t *fast = fast_block + shift;
    uint8_t c1[16], c2[16], c3[16];
    memcpy(c1, ctr, 16);
    memcpy(c2, ctr, 16);
    memcpy(c3, ctr, 16);
    CHECK(qg_aes256ctr(key, c1, fast, nblocks) == 0, "qg_aes256ctr failed");
    ref_ctr(key, c2, slow, nblocks);
    CHECK(memcmp(c1, c2, 16) == 0, "counter after %zu blocks", nblocks);
    for (size_t i = 0; i < 16 * nblocks; i++)
        CHECK(fast[i] == slow[i], "%s keystream byte %zu of %zu blocks differs from FIPS 197 (flags %u)",
              qg_aes_impl(), i, nblocks, flags);
    size_t first = size > 50 ? data[50] * nblocks / 256 : 0;
    qg_aes256ctr(key, c3, split, first);
    qg_aes256ctr(key, c3, split + 16 * first, nblocks - first);
    CHECK(memcmp(c3, c2, 16) == 0 && memcmp(split, slow, 16 * nblocks) == 0, "split at %zu", first);

    /* Production stream: its next refill(s) against the reference, with fast key erasure. */
    if (qg_production_cipher() == QG_CIPHER_AES256CTR && (flags & 0x40)) {
        int err = -1;
        qg_stream *ps = qg_thread_stream(&err);
        CHECK(ps != NULL && err == 0, "qg_thread_stream err %d", err);
        CHECK(ps->cipher == QG_CIPHER_AES256CTR && ps->key_erasure, "production stream is not AES");
        int refills = 1 + (flags >> 7);
        for (int r = 0; r < refills; r++) {
            while (ps->pos < ps->end)
                (void)qg_stream_u32(ps);
            uint8_t old_key[32], old_ctr[16], c[16];
            memcpy(old_key, ps->key, 32);
            memcpy(old_ctr, ps->ctr, 16);
            CHECK(old_ctr[12] == 0 && old_ctr[13] == 0 && old_ctr[14] == 0 && old_ctr[15] == 0,
                  "counter block does not restart at nonce || 0");
            size_t nwords = ps->refill_blocks * 16;
            uint8_t *want = (uint8_t *)malloc(4 * nwords);
            if (!want)
                abort();
            memcpy(c, old_ctr, 16);
            ref_ctr(old_key, c, want, nwords / 4);
            uint32_t w8 = qg_stream_u32(ps), expect;
            memcpy(&expect, want + 32, 4);
            CHECK(w8 == expect, "first word handed out is not keystream word 8");
            CHECK(memcmp(ps->key, want, 32) == 0, "next key is not the first 32 keystream bytes");
            CHECK(memcmp(ps->key, old_key, 32) != 0, "key not replaced");
            for (int i = 0; i < 8; i++)
                CHECK(ps->buf[i] == 0, "key word %d left in the buffer", i);
            CHECK(memcmp(ps->buf + 8, want + 32, 4 * (nwords - 8)) == 0 && ps->end == nwords,
                  "buffered words differ from the keystream");
            CHECK(memcmp(ps->ctr, old_ctr, 16) == 0, "counter block not reset after the refill");
            free(want);
        }
    }
    free(fast_block);
    free(slow);
    free(split);
    return 0;
}
