/* libFuzzer harness for the ChaCha20 keystream (native/chacha20.c).
 *
 * Input: key (32), nonce (12), counter (4), block count (1), stream read pattern (rest). The
 * counter is often pushed next to 2^32 so the SIMD paths meet the wrap-around that carries into
 * nonce[0]. Checks: qg_chacha20_blocks (SSE2/AVX2 where available) equals the scalar block
 * function applied block by block with the documented carry; qg_stream_u32 hands out exactly
 * that keystream across refills and qg_stream_wipe zeroes the state; key and nonce are read
 * byte-wise from any alignment; the production stream and the getrandom(2) wrapper work. */
#include "fuzz_common.h"

#include "chacha20.h"

enum { MAX_BLOCKS = 300 };

static uint32_t load_le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 49)
        return 0;
    /* key and nonce at an odd address, as a caller's byte buffer may be. */
    uint8_t *block;
    const uint8_t *kn = misaligned_copy(data, 44, 1 + (data[48] & 7), &block);
    uint32_t key[8], nonce[3], counter = load_le(data + 44);
    for (int i = 0; i < 8; i++) key[i] = load_le(kn + 4 * i);
    for (int i = 0; i < 3; i++) nonce[i] = load_le(kn + 32 + 4 * i);
    uint8_t nb = data[48];
    size_t nblocks = (size_t)(nb >> 3) * 9 % MAX_BLOCKS + (nb & 1);
    if (nb & 2)
        counter = UINT32_MAX - (counter & 15); /* wrap-around within this call */

    uint32_t *fast = (uint32_t *)malloc(16 * nblocks * sizeof(uint32_t) + 1);
    uint32_t *slow = (uint32_t *)malloc(16 * nblocks * sizeof(uint32_t) + 1);
    if (!fast || !slow)
        abort();
    uint32_t c1 = counter, n1[3] = {nonce[0], nonce[1], nonce[2]};
    qg_chacha20_blocks(key, &c1, n1, fast, nblocks);
    uint32_t c2 = counter, n2[3] = {nonce[0], nonce[1], nonce[2]};
    for (size_t b = 0; b < nblocks; b++) {
        qg_chacha20_block(key, c2, n2, slow + 16 * b);
        if (++c2 == 0)
            n2[0]++;
    }
    CHECK(c1 == c2 && n1[0] == n2[0] && n1[1] == n2[1] && n1[2] == n2[2],
          "counter/nonce after %zu blocks: %u/%u vs %u/%u", nblocks, c1, n1[0], c2, n2[0]);
    for (size_t w = 0; w < 16 * nblocks; w++)
        CHECK(fast[w] == slow[w], "%s keystream word %zu differs from the scalar block (counter %u, "
              "%zu blocks)", qg_chacha20_impl(), w, counter, nblocks);

    /* The deterministic stream: words in order, across refills of QG_STREAM_WORDS. */
    qg_stream st;
    qg_stream_init(&st, kn, kn + 32);
    size_t want = 0;
    for (size_t i = 49; i < size && want < 4 * QG_STREAM_WORDS; i++)
        want += 1 + (size_t)data[i] * 8;
    uint32_t expect[16], c3 = 0, n3[3];
    for (int i = 0; i < 3; i++) n3[i] = load_le(kn + 32 + 4 * i);
    for (size_t w = 0; w < want; w++) {
        if (w % 16 == 0) {
            qg_chacha20_block(key, c3, n3, expect);
            if (++c3 == 0)
                n3[0]++;
        }
        uint32_t got = qg_stream_u32(&st);
        CHECK(got == expect[w % 16], "stream word %zu", w);
    }
    qg_stream_wipe(&st);
    const uint8_t *z = (const uint8_t *)&st;
    for (size_t i = 0; i < sizeof st; i++)
        CHECK(z[i] == 0, "qg_stream_wipe left byte %zu", i);

    /* Production stream (keyed by getrandom(2), fast key erasure): runs across refills. */
    if (nb & 4) {
        int err = -1;
        qg_stream *ps = qg_thread_stream(&err);
        CHECK(ps != NULL && err == 0, "qg_thread_stream err %d", err);
        for (size_t w = 0; w < (size_t)(nb & 0xF8) * 8; w++)
            (void)qg_stream_u32(ps);
        uint8_t buf[67];
        CHECK(qg_os_random(buf + (nb & 3), (size_t)(nb % 64)) == 0, "qg_os_random failed");
    }
    free(fast);
    free(slow);
    free(block);
    return 0;
}
