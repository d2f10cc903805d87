/* AddressSanitizer + UBSan run of every noise-kernel path at one instruction-set level (not a
 * fuzzer: a fixed, deterministic workload).
 *
 * The libFuzzer targets run at the CPU's widest level only (QG_NOISE_SIMD and QG_NOISE_AES are
 * read once per process), pass key and nonce inside larger blocks, and do not fork. This program
 * is run by scripts/asan_noise.sh once per QG_NOISE_SIMD level (scalar, sse2, avx2, avx512) and
 * with QG_NOISE_AES=off and QG_NOISE_CIPHER=chacha20, each in its own process. Every buffer the
 * kernel reads or writes is its own heap block of exactly the size the API names (key 32 bytes,
 * nonce 12, counter block 16, output 64 bytes a block, rows * dim values, 32 bytes a row key, the
 * stream struct), so a read or write one element past any of them is an ASan report.
 * It runs, with checks:
 *   - the ChaCha20 block function on RFC 8439 2.3.2, and qg_chacha20_blocks for 0..67 blocks at
 *     counters next to the 2^32 wrap (every 16/8/4/1 block function and their remainders), equal
 *     to the scalar block chained with its carry into nonce[0];
 *   - qg_stream_init / size hints / refills: the words equal that keystream;
 *   - qg_aes256ctr (VAES, AES-NI) for 0..40 blocks at counters next to a carry of the low 64 bits
 *     and of all 128, equal to FIPS 197 (aes_ref.h); without AES (QG_NOISE_AES=off) it refuses;
 *   - the production stream (qg_thread_stream): three refills checked word for word against its
 *     cipher (ChaCha20 or AES-256-CTR) with fast key erasure; a thread gets its own stream; a
 *     forked child re-keys (its words differ from the parent's next words); discard re-keys;
 *   - qg_os_random into exact buffers of 0..300 bytes and 1 MiB, and under getrandom(2) faults
 *     (this file's getrandom takes libc's place): an EINTR is retried, short reads are continued
 *     to the last byte, a failure is returned as its errno after one call, and then
 *     qg_thread_stream returns NULL with that errno and qg_noise_rows QG_ERR_RANDOM;
 *   - qg_noise_rows on dims 1..70, 1-3 rows, float32/float64, Gaussian and laplace_l2, clip on
 *     and off, seeded, keyed and fresh; qg_normals (the AVX2 sampler) for 0..300 values against
 *     qg_normal; qg_gamma.
 * Last, the environment knobs are changed and must not be read again (they are read once).
 * It prints the levels in use and a digest (FNV-1a) of every deterministic output: the digest must
 * be the same at every level, which scripts/asan_noise.sh checks. Exit 1 on a failed check; a
 * sanitizer report aborts. Standalone:
 *   clang -g -O1 -fsanitize=address,undefined -Inative fuzz/asan_noise_paths.c native/noise.c \
 *     native/chacha20.c native/aes256ctr.c -lm -lpthread && QG_NOISE_SIMD=sse2 ./a.out */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz_common.h"

#include "aes_ref.h"

#include "aes256ctr.h"
#include "chacha20.h"
#include "noise.h"

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "asan_noise_paths [%s/%s]: %s:%d: ", qg_chacha20_impl(), qg_aes_impl(), \
                    __FILE__, __LINE__);                                                           \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t digest = 0xcbf29ce484222325ull;

static void mix(const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++)
        digest = (digest ^ b[i]) * 0x100000001b3ull;
}

/* A heap block of exactly n bytes (ASan: its redzone starts at byte n). */
static void *exact(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

static void *exact_copy(const void *src, size_t n)
{
    void *p = exact(n);
    memcpy(p, src, n);
    return p;
}

static uint32_t load_le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The scalar block into an exact 64-byte block (a write of out[16] is a report), copied to out. */
static void scalar_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3], uint32_t *out)
{
    uint32_t *k = exact_copy(key, 32), *n = exact_copy(nonce, 12), *o = exact(64);
    qg_chacha20_block(k, counter, n, o);
    memcpy(out, o, 64);
    free(k);
    free(n);
    free(o);
}

/* nwords of the ChaCha20 keystream from (counter, nonce), carrying into nonce[0]. */
static void chacha_ref(const uint32_t key[8], uint32_t counter, const uint32_t nonce_in[3], uint32_t *out,
                       size_t nwords)
{
    uint32_t nonce[3] = {nonce_in[0], nonce_in[1], nonce_in[2]}, blk[16];
    for (size_t w = 0; w < nwords; w += 16) {
        scalar_block(key, counter, nonce, blk);
        memcpy(out + w, blk, 4 * (nwords - w < 16 ? nwords - w : 16));
        if (++counter == 0)
            nonce[0]++;
    }
}

static void check_chacha_blocks(void)
{
    /* RFC 8439 2.3.2 */
    static const uint32_t want[16] = {
        0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033, 0x9aaa2204, 0x4e6cd4c3,
        0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9, 0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2};
    uint32_t key[8], nonce[3] = {0x09000000, 0x4a000000, 0}, got[16];
    for (int i = 0; i < 8; i++)
        key[i] = 0x03020100u + 0x04040404u * (uint32_t)i;
    scalar_block(key, 1, nonce, got);
    EXPECT(memcmp(got, want, 64) == 0, "the scalar block differs from RFC 8439 2.3.2");

    /* Every nonce and key word non-zero and distinct, so a word left out shows. */
    for (int i = 0; i < 8; i++)
        key[i] = 0x9E3779B9u * (uint32_t)(i + 1);
    nonce[0] = 0x01234567;
    nonce[1] = 0x89ABCDEF;
    nonce[2] = 0xDEADBEEF;
    static const uint32_t counters[] = {0, 3, 0xFFFFFFFFu - 70, 0xFFFFFFFFu - 17, 0xFFFFFFFFu - 9,
                                        0xFFFFFFFFu - 3, 0xFFFFFFFFu};
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++)
        for (size_t nb = 0; nb <= 67; nb++) {
            uint32_t *k = exact_copy(key, 32), *n = exact_copy(nonce, 12), *out = exact(64 * nb);
            uint32_t *ref = exact(64 * nb + 4);
            uint32_t ctr = counters[c];
            qg_chacha20_blocks(k, &ctr, n, out, nb);
            chacha_ref(key, counters[c], nonce, ref, 16 * nb);
            EXPECT(memcmp(out, ref, 64 * nb) == 0, "%s: %zu blocks from counter %u differ from the scalar block",
                   qg_chacha20_impl(), nb, counters[c]);
            uint32_t want_ctr = counters[c] + (uint32_t)nb;
            EXPECT(ctr == want_ctr && n[0] == nonce[0] + (want_ctr < counters[c]) && n[1] == nonce[1] &&
                       n[2] == nonce[2],
                   "counter/nonce after %zu blocks from %u", nb, counters[c]);
            mix(out, 64 * nb);
            free(k);
            free(n);
            free(out);
            free(ref);
        }
}

static void check_stream(void)
{
    static const size_t hints[] = {0, 1, 15, 16, 17, 63, 64, 100, 1024, 5000};
    uint8_t key[32], nonce[12];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(0xA0 + 7 * i);
    for (int i = 0; i < 12; i++)
        nonce[i] = (uint8_t)(0x11 * (i + 1));
    uint32_t kw[8], nw[3];
    for (int i = 0; i < 8; i++)
        kw[i] = load_le(key + 4 * i);
    for (int i = 0; i < 3; i++)
        nw[i] = load_le(nonce + 4 * i);
    enum { WORDS = 2 * QG_STREAM_WORDS + 100 };
    uint32_t *ref = exact(4 * WORDS);
    chacha_ref(kw, 0, nw, ref, WORDS);
    for (size_t h = 0; h <= sizeof hints / sizeof hints[0]; h++) {
        uint8_t *k = exact_copy(key, 32), *n = exact_copy(nonce, 12);
        qg_stream *s = exact(sizeof *s);
        qg_stream_init(s, k, n);
        if (h < sizeof hints / sizeof hints[0])
            qg_stream_size_hint(s, hints[h]);
        for (size_t w = 0; w < WORDS; w++) {
            uint32_t got = qg_stream_u32(s);
            EXPECT(got == ref[w], "stream word %zu (size hint %zu)", w, h);
        }
        qg_stream_wipe(s);
        for (size_t i = 0; i < sizeof *s; i++)
            EXPECT(((const uint8_t *)s)[i] == 0, "qg_stream_wipe left byte %zu", i);
        free(k);
        free(n);
        free(s);
    }
    mix(ref, 4 * WORDS);
    free(ref);
}

static void ctr_set(uint8_t ctr[16], int kind)
{
    for (int i = 0; i < 16; i++)
        ctr[i] = (uint8_t)(0x31 * (i + 3));
    if (kind == 1) /* the low 64 bits carry within the call */
        memset(ctr + 8, 0xFF, 8), ctr[15] = 0xF3;
    else if (kind == 2) /* all 128 bits wrap to zero */
        memset(ctr, 0xFF, 16), ctr[15] = 0xE9;
}

static void check_aes(void)
{
    uint8_t key[32], ctr[16];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(0x5C ^ (13 * i));
    if (qg_aes_level() == QG_AES_NONE) {
        uint8_t *k = exact_copy(key, 32), *c = exact(16), *o = exact(64);
        ctr_set(c, 0);
        memset(o, 0xAA, 64);
        EXPECT(qg_aes256ctr(k, c, o, 4) == -1, "qg_aes256ctr without AES did not refuse");
        for (int i = 0; i < 64; i++)
            EXPECT(o[i] == 0, "qg_aes256ctr without AES left byte %d", i);
        EXPECT(qg_production_cipher() == QG_CIPHER_CHACHA20, "production AES without AES");
        free(k);
        free(c);
        free(o);
        return;
    }
    for (int kind = 0; kind < 3; kind++)
        for (size_t nb = 0; nb <= 40; nb++) {
            uint8_t *k = exact_copy(key, 32), *c = exact(16), *out = exact(16 * nb), *ref = exact(16 * nb + 1);
            ctr_set(c, kind);
            ctr_set(ctr, kind);
            EXPECT(qg_aes256ctr(k, c, out, nb) == 0, "qg_aes256ctr failed");
            ref_ctr(key, ctr, ref, nb);
            EXPECT(memcmp(out, ref, 16 * nb) == 0, "%s: %zu blocks (counter kind %d) differ from FIPS 197",
                   qg_aes_impl(), nb, kind);
            EXPECT(memcmp(c, ctr, 16) == 0, "counter after %zu blocks (kind %d)", nb, kind);
            free(k);
            free(c);
            free(out);
            free(ref);
        }
}

/* The production stream's next refill, checked against its cipher: words 8.. handed out, words
   0..7 the next key (zeroed in the buffer), the counter back at its start. */
static void check_production_refills(qg_stream *ps, int refills)
{
    for (int r = 0; r < refills; r++) {
        while (ps->pos < ps->end)
            (void)qg_stream_u32(ps);
        size_t nwords = ps->refill_blocks * 16;
        uint32_t *want = exact(4 * nwords);
        uint8_t old_key[32];
        memcpy(old_key, ps->key, 32);
        if (ps->cipher == QG_CIPHER_AES256CTR) {
            uint8_t c[16], old_ctr[16];
            memcpy(old_ctr, ps->ctr, 16);
            EXPECT(load_le(old_ctr + 12) == 0, "AES counter block does not restart at nonce || 0");
            memcpy(c, old_ctr, 16);
            ref_ctr(old_key, c, (uint8_t *)want, nwords / 4);
            EXPECT(qg_stream_u32(ps) == want[8], "AES: first word handed out is not keystream word 8");
            EXPECT(memcmp(ps->ctr, old_ctr, 16) == 0, "AES counter block not reset after the refill");
        } else {
            uint32_t nonce[3];
            memcpy(nonce, ps->nonce, 12);
            EXPECT(ps->counter == 0, "ChaCha20 counter not at 0 before a refill");
            chacha_ref(ps->key, ps->counter, nonce, want, nwords);
            EXPECT(qg_stream_u32(ps) == want[8], "ChaCha20: first word handed out is not keystream word 8");
            EXPECT(ps->counter == 0 && memcmp(ps->nonce, nonce, 12) == 0, "ChaCha20 counter not reset");
        }
        EXPECT(ps->key_erasure, "production stream without key erasure");
        EXPECT(memcmp(ps->key, want, 32) == 0, "next key is not the first 32 keystream bytes");
        EXPECT(memcmp(ps->key, old_key, 32) != 0, "key not replaced");
        for (int i = 0; i < 8; i++)
            EXPECT(ps->buf[i] == 0, "key word %d left in the buffer", i);
        EXPECT(ps->end == nwords && memcmp(ps->buf + 8, want + 8, 4 * (nwords - 8)) == 0,
               "buffered words differ from the keystream");
        free(want);
    }
}

static void *thread_words(void *arg)
{
    int err = -1;
    qg_stream *s = qg_thread_stream(&err);
    uint32_t *w = (uint32_t *)arg;
    if (!s || err)
        return NULL;
    for (int i = 0; i < 16; i++)
        w[i] = qg_stream_u32(s);
    qg_thread_stream_discard();
    return s;
}

static void check_production(void)
{
    int err = -1;
    qg_stream *ps = qg_thread_stream(&err);
    EXPECT(ps != NULL && err == 0, "qg_thread_stream err %d", err);
    EXPECT(ps->cipher == qg_production_cipher(), "production stream cipher %d, qg_production_cipher %d",
           ps->cipher, qg_production_cipher());
    uint8_t key0[32];
    size_t pos0 = ps->pos;
    memcpy(key0, ps->key, 32);
    EXPECT(qg_thread_stream(&err) == ps && err == 0 && memcmp(ps->key, key0, 32) == 0 && ps->pos == pos0,
           "a second call gave another stream, or re-keyed it");
    check_production_refills(ps, 3);

    /* Another thread: its own stream, its own key. */
    uint32_t theirs[16], ours[16];
    pthread_t th;
    void *their_stream = NULL;
    EXPECT(pthread_create(&th, NULL, thread_words, theirs) == 0, "pthread_create");
    pthread_join(th, &their_stream);
    EXPECT(their_stream != NULL && their_stream != (void *)ps, "a thread shared the main thread's stream");
    for (int i = 0; i < 16; i++)
        ours[i] = qg_stream_u32(ps);
    EXPECT(memcmp(theirs, ours, sizeof ours) != 0, "a thread's words equal the main thread's");

    /* A forked child re-keys: its words are not the parent's next words. */
    int fd[2];
    EXPECT(pipe(fd) == 0, "pipe");
    uint8_t before[32];
    memcpy(before, ps->key, 32);
    pid_t pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        uint32_t w[17];
        int e = -1;
        qg_stream *cs = qg_thread_stream(&e);
        w[16] = cs == ps && e == 0 && memcmp(cs->key, before, 32) != 0;
        for (int i = 0; i < 16; i++)
            w[i] = cs ? qg_stream_u32(cs) : 0;
        ssize_t put = write(fd[1], w, sizeof w);
        _exit(put == (ssize_t)sizeof w ? 0 : 3);
    }
    close(fd[1]);
    uint32_t child[17];
    ssize_t got = read(fd[0], child, sizeof child);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(got == (ssize_t)sizeof child && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child");
    EXPECT(child[16] == 1, "the forked child's stream was not re-keyed");
    for (int i = 0; i < 16; i++)
        ours[i] = qg_stream_u32(ps);
    EXPECT(memcmp(child, ours, sizeof ours) != 0, "a forked child repeated the parent's words");

    /* Discard wipes and re-keys on next use. */
    memcpy(before, ps->key, 32);
    qg_thread_stream_discard();
    for (size_t i = 0; i < sizeof *ps; i++)
        EXPECT(((const uint8_t *)ps)[i] == 0, "qg_thread_stream_discard left byte %zu", i);
    EXPECT(qg_thread_stream(&err) == ps && err == 0 && memcmp(ps->key, before, 32) != 0,
           "the stream did not re-key after qg_thread_stream_discard");
    check_production_refills(ps, 1);

    for (size_t n = 0; n <= 300; n++) {
        uint8_t *b = exact(n);
        memset(b, 0, n);
        EXPECT(qg_os_random(b, n) == 0, "qg_os_random(%zu)", n);
        if (n >= 32) {
            size_t zeros = 0;
            for (size_t i = 0; i < n; i++)
                zeros += b[i] == 0;
            EXPECT(zeros < n / 4 + 8, "qg_os_random(%zu): %zu zero bytes", n, zeros);
        }
        free(b);
    }
    uint8_t *big = exact(1 << 20);
    memset(big + (1 << 20) - 64, 0, 64);
    EXPECT(qg_os_random(big, 1 << 20) == 0, "qg_os_random(1 MiB)");
    size_t zeros = 0;
    for (int i = 0; i < 64; i++)
        zeros += big[(1 << 20) - 64 + i] == 0;
    EXPECT(zeros < 16, "qg_os_random(1 MiB) left its tail zero");
    free(big);
}

/* getrandom(2) for the noise kernel, with faults on demand (a definition in the executable takes
   the place of libc's). Single-threaded use only: the counters are plain. */
enum { RANDOM_REAL, RANDOM_EINTR_ONCE, RANDOM_SHORT, RANDOM_FAIL };
static int random_mode = RANDOM_REAL;
static size_t random_calls, random_bytes;

ssize_t getrandom(void *buf, size_t n, unsigned int flags)
{
    random_calls++;
    if (random_mode == RANDOM_FAIL || (random_mode == RANDOM_EINTR_ONCE && random_calls == 1)) {
        EXPECT(random_calls < 100, "getrandom called %zu times after failing", random_calls);
        errno = random_mode == RANDOM_FAIL ? EIO : EINTR;
        return -1;
    }
    if (random_mode == RANDOM_SHORT && n > 3)
        n = 3;
    long got = syscall(SYS_getrandom, buf, n, flags);
    if (got > 0)
        random_bytes += (size_t)got;
    return got;
}

static void set_random(int mode)
{
    random_mode = mode;
    random_calls = random_bytes = 0;
}

static void check_random_faults(void)
{
    uint8_t *b = exact(301), *nonce = exact(12);
    memset(nonce, 7, 12);
    set_random(RANDOM_EINTR_ONCE);
    EXPECT(qg_os_random(b, 301) == 0 && random_calls == 2 && random_bytes == 301,
           "qg_os_random after an EINTR: %zu calls, %zu bytes", random_calls, random_bytes);
    for (size_t n = 1; n <= 301; n += n < 8 ? 1 : 73) {
        set_random(RANDOM_SHORT);
        EXPECT(qg_os_random(b, n) == 0 && random_bytes == n && random_calls == (n + 2) / 3,
               "qg_os_random(%zu) in 3-byte reads: %zu calls, %zu bytes", n, random_calls, random_bytes);
    }
    set_random(RANDOM_FAIL);
    EXPECT(qg_os_random(b, 16) == EIO && random_calls == 1, "qg_os_random when getrandom fails: %zu calls",
           random_calls);

    int err = 0;
    qg_thread_stream_discard();
    set_random(RANDOM_FAIL);
    EXPECT(qg_thread_stream(&err) == NULL && err == EIO, "qg_thread_stream without randomness: err %d", err);
    double *x = exact(4 * sizeof(double)), *out = exact(4 * sizeof(double));
    for (int i = 0; i < 4; i++)
        x[i] = 0.25 * i;
    size_t br = 9, bc = 9;
    int rc = qg_noise_rows(x, out, 0, 1, 4, QG_GAUSSIAN, 1.0, 0x1p-10, 0.0, NULL, NULL, nonce, &br, &bc);
    EXPECT(rc == QG_ERR_RANDOM && bc == EIO, "fresh noise without randomness: rc %d, errno %zu", rc, bc);
    set_random(RANDOM_REAL);
    EXPECT(qg_thread_stream(&err) != NULL && err == 0, "qg_thread_stream once getrandom works again: err %d", err);
    EXPECT(qg_noise_rows(x, out, 0, 1, 4, QG_GAUSSIAN, 1.0, 0x1p-10, 0.0, NULL, NULL, nonce, &br, &bc) == QG_OK,
           "fresh noise once getrandom works again");
    free(b);
    free(nonce);
    free(x);
    free(out);
}

static double lattice_value(size_t k) { return (double)((int)(k * 7919 % 2001) - 1000) * 0.013; }

static void check_noise(void)
{
    uint8_t key[32], nonce[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(3 * i + 1);
    for (int is_f32 = 0; is_f32 < 2; is_f32++)
        for (int mech = 0; mech < 2; mech++)
            for (size_t dim = 1; dim <= 70; dim += dim < 20 ? 1 : 7)
                for (size_t rows = 1; rows <= 3; rows++)
                    for (int mode = 0; mode < 3; mode++) {
                        size_t es = is_f32 ? 4 : 8, count = rows * dim;
                        void *x = exact(count * es), *out = exact(count * es), *out2 = exact(count * es);
                        for (size_t k = 0; k < count; k++) {
                            if (is_f32)
                                ((float *)x)[k] = (float)lattice_value(k);
                            else
                                ((double *)x)[k] = lattice_value(k);
                        }
                        uint8_t *rk = exact(32 * rows), *n = exact_copy(nonce, 12), *k = exact_copy(key, 32);
                        for (size_t r = 0; r < rows; r++) {
                            memcpy(rk + 32 * r, key, 32);
                            rk[32 * r + 31] = (uint8_t)r;
                        }
                        double clip = (dim + rows + (size_t)mode) % 2 ? 0.0 : 2.5;
                        qg_stream *s = exact(sizeof *s);
                        size_t br = 0, bc = 0;
                        for (int rep = 0; rep < (mode == 2 ? 1 : 2); rep++) {
                            qg_stream_init(s, k, n);
                            int rc = qg_noise_rows(x, rep ? out2 : out, is_f32, rows, dim, mech, 0.75, 0x1p-10,
                                                   clip, mode == 0 ? s : NULL, mode == 1 ? rk : NULL, n, &br, &bc);
                            EXPECT(rc == QG_OK, "qg_noise_rows rc %d (dim %zu, rows %zu, mode %d)", rc, dim, rows,
                                   mode);
                        }
                        for (size_t j = 0; j < count; j++) {
                            double v = is_f32 ? (double)((float *)out)[j] : ((double *)out)[j];
                            EXPECT(isfinite(v) && (is_f32 || rint(v * 1024.0) == v * 1024.0),
                                   "output %zu = %g (dim %zu, mode %d)", j, v, dim, mode);
                        }
                        if (mode != 2) {
                            EXPECT(memcmp(out, out2, count * es) == 0, "seeded/keyed output not reproducible");
                            mix(out, count * es);
                        }
                        free(x);
                        free(out);
                        free(out2);
                        free(rk);
                        free(n);
                        free(k);
                        free(s);
                    }

    /* qg_normals (the AVX2 sampler where the level allows) gives qg_normal's values, any length. */
    for (size_t len = 0; len <= 300; len += len < 40 ? 1 : 37) {
        uint8_t *k = exact_copy(key, 32), *n = exact_copy(nonce, 12);
        qg_stream *s = exact(sizeof *s);
        double *z = exact(8 * len), *w = exact(8 * len + 8);
        qg_stream_init(s, k, n);
        qg_normals(s, z, len);
        uint32_t after = qg_stream_u32(s);
        qg_stream_init(s, k, n);
        for (size_t i = 0; i < len; i++)
            w[i] = qg_normal(s);
        EXPECT(memcmp(z, w, 8 * len) == 0 && after == qg_stream_u32(s), "qg_normals(%zu) differs from qg_normal",
               len);
        mix(z, 8 * len);
        for (int i = 0; i < 8; i++) {
            double g = qg_gamma(s, 1.0 + (double)i * (double)len);
            EXPECT(isfinite(g) && g > 0.0, "gamma %g", g);
            mix(&g, sizeof g);
        }
        free(k);
        free(n);
        free(s);
        free(z);
        free(w);
    }
}

/* QG_NOISE_SIMD, QG_NOISE_AES and QG_NOISE_CIPHER are read once, on first use: the Python module
   settles them at import, so a later change of os.environ (or a thread's) cannot move a running
   process to another path or production cipher. */
static void check_knobs_read_once(void)
{
    int simd = qg_simd_level(), aes = qg_aes_level(), cipher = qg_production_cipher();
    setenv("QG_NOISE_SIMD", simd == QG_SIMD_SCALAR ? "avx512" : "scalar", 1);
    setenv("QG_NOISE_AES", aes == QG_AES_NONE ? "on" : "off", 1);
    setenv("QG_NOISE_CIPHER", cipher == QG_CIPHER_CHACHA20 ? "aes" : "chacha20", 1);
    EXPECT(qg_simd_level() == simd && qg_aes_level() == aes && qg_production_cipher() == cipher,
           "a knob was read again: simd %d -> %d, aes %d -> %d, cipher %d -> %d", simd, qg_simd_level(), aes,
           qg_aes_level(), cipher, qg_production_cipher());
}

int main(void)
{
    make_sbox();
    qg_noise_init();
    check_chacha_blocks();
    check_stream();
    check_aes();
    check_production();
    check_random_faults();
    check_noise();
    check_knobs_read_once();
    printf("asan_noise_paths: simd %s, aes %s, production %s, digest %016llx\n", qg_chacha20_impl(),
           qg_aes_impl(), qg_production_cipher_name(), (unsigned long long)digest);
    return 0;
}
