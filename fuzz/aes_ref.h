/* A plain FIPS 197 AES-256 and CTR mode for the test harnesses in fuzz/ (fuzz_aes.c,
 * asan_noise_paths.c): table-based and not constant time, never linked into the library. Call
 * make_sbox() once first. */
#ifndef QG_FUZZ_AES_REF_H
#define QG_FUZZ_AES_REF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint8_t SBOX[256];

static uint8_t xtime(uint8_t a) { return (uint8_t)((a << 1) ^ ((a & 0x80) ? 0x1B : 0)); }

static uint8_t gmul(uint8_t a, uint8_t b)
{
    uint8_t r = 0;
    while (b) {
        if (b & 1) r ^= a;
        a = xtime(a);
        b >>= 1;
    }
    return r;
}

static void make_sbox(void)
{
    for (int x = 0; x < 256; x++) {
        uint8_t inv = 0;
        for (int y = 1; y < 256 && x; y++)
            if (gmul((uint8_t)x, (uint8_t)y) == 1) { inv = (uint8_t)y; break; }
        uint8_t b = inv;
        for (int s = 1; s < 5; s++) b ^= (uint8_t)((inv << s) | (inv >> (8 - s)));
        SBOX[x] = b ^ 0x63;
    }
}

static void ref_expand(const uint8_t key[32], uint8_t rk[240])
{
    uint8_t rcon = 1;
    memcpy(rk, key, 32);
    for (int i = 8; i < 60; i++) {
        uint8_t t[4];
        memcpy(t, rk + 4 * (i - 1), 4);
        if (i % 8 == 0) {
            uint8_t t0 = t[0];
            t[0] = SBOX[t[1]] ^ rcon; t[1] = SBOX[t[2]]; t[2] = SBOX[t[3]]; t[3] = SBOX[t0];
            rcon = xtime(rcon);
        } else if (i % 8 == 4) {
            for (int j = 0; j < 4; j++) t[j] = SBOX[t[j]];
        }
        for (int j = 0; j < 4; j++) rk[4 * i + j] = rk[4 * (i - 8) + j] ^ t[j];
    }
}

static void ref_encrypt(const uint8_t rk[240], const uint8_t in[16], uint8_t out[16])
{
    uint8_t s[16], t[16];
    for (int i = 0; i < 16; i++) s[i] = in[i] ^ rk[i];
    for (int r = 1; r < 15; r++) {
        for (int c = 0; c < 4; c++)          /* SubBytes + ShiftRows (column-major state) */
            for (int row = 0; row < 4; row++) t[4 * c + row] = SBOX[s[4 * ((c + row) % 4) + row]];
        if (r < 14) {
            for (int c = 0; c < 4; c++) {    /* MixColumns */
                uint8_t *a = t + 4 * c, a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
                s[4 * c + 0] = gmul(a0, 2) ^ gmul(a1, 3) ^ a2 ^ a3;
                s[4 * c + 1] = a0 ^ gmul(a1, 2) ^ gmul(a2, 3) ^ a3;
                s[4 * c + 2] = a0 ^ a1 ^ gmul(a2, 2) ^ gmul(a3, 3);
                s[4 * c + 3] = gmul(a0, 3) ^ a1 ^ a2 ^ gmul(a3, 2);
            }
        } else {
            memcpy(s, t, 16);
        }
        for (int i = 0; i < 16; i++) s[i] ^= rk[16 * r + i];
    }
    memcpy(out, s, 16);
}

static void ctr_inc(uint8_t c[16])
{
    for (int i = 15; i >= 0; i--)
        if (++c[i]) break;
}

static void ref_ctr(const uint8_t key[32], uint8_t ctr[16], uint8_t *out, size_t nblocks)
{
    uint8_t rk[240];
    ref_expand(key, rk);
    for (size_t b = 0; b < nblocks; b++) {
        ref_encrypt(rk, ctr, out + 16 * b);
        ctr_inc(ctr);
    }
}

#endif
