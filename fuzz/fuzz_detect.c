/* libFuzzer harness for qg_detect (native/detect.c).
 *
 * Input: 1 header byte (buffer misalignment), then the text, any bytes. Checks, besides the
 * sanitizers, what detect.h promises: findings sorted by (start, end), non-overlapping, inside
 * the text in code points, with known types and validators; the same result wherever the buffer
 * sits; and, for text Python could hand over (UTF-8 with 'surrogatepass'), that replacing every
 * finding with "[TYPE]" (what qdrant_guard.detect.redact does) leaves valid UTF-8 whose findings
 * are only inside the markers. */
#include "fuzz_common.h"

#include "detect.h"

static void check_findings(const uint8_t *s, size_t n, const qg_findings *f)
{
    int64_t cps = (int64_t)lead_bytes(s, n), prev_start = -1, prev_end = 0;
    for (size_t k = 0; k < f->len; k++) {
        const qg_finding *x = &f->items[k];
        CHECK(x->type >= 0 && x->type < QG_NTYPES, "finding %zu type %d", k, x->type);
        CHECK(x->validator >= 0 && x->validator < QG_NVALIDATORS, "finding %zu validator %d", k,
              x->validator);
        CHECK(0 <= x->start && x->start < x->end && x->end <= cps,
              "finding %zu [%lld, %lld) outside %lld code points", k, (long long)x->start,
              (long long)x->end, (long long)cps);
        CHECK(x->start > prev_start, "finding %zu not sorted", k);
        CHECK(x->start >= prev_end, "finding %zu [%lld, %lld) overlaps the previous one ending at "
              "%lld", k, (long long)x->start, (long long)x->end, (long long)prev_end);
        prev_start = x->start;
        prev_end = x->end;
    }
}

/* Byte offset of code point `cp` (counting non-continuation bytes, as the detector does). */
static size_t byte_of(const uint8_t *s, size_t n, int64_t cp)
{
    size_t i = 0;
    int64_t seen = -1;
    for (; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80 && ++seen == cp)
            return i;
    }
    return n;
}

static void check_redaction(const uint8_t *s, size_t n, const qg_findings *f)
{
    size_t cap = n + 32 * f->len + 1, len = 0, pos = 0;
    uint8_t *red = (uint8_t *)malloc(cap);
    if (!red)
        abort();
    for (size_t k = 0; k < f->len; k++) {
        size_t a = byte_of(s, n, f->items[k].start), b = byte_of(s, n, f->items[k].end);
        CHECK(a >= pos && b > a && b <= n, "finding %zu maps to bytes [%zu, %zu)", k, a, b);
        memcpy(red + len, s + pos, a - pos);
        len += a - pos;
        len += (size_t)snprintf((char *)red + len, cap - len, "[%s]", qg_type_names[f->items[k].type]);
        pos = b;
    }
    memcpy(red + len, s + pos, n - pos);
    len += n - pos;
    CHECK(utf8_valid(red, len, 1), "redacted text is not valid UTF-8 (%zu findings)", f->len);
    free(red);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader rd = {data, size};
    unsigned shift = (unsigned)take_u64(&rd, 1) & 15;
    const uint8_t *text = rd.p;
    size_t n = rd.n;
    uint8_t *block;
    const uint8_t *s = misaligned_copy(text, n, shift, &block);

    qg_findings f1 = {NULL, 0, 0}, f2 = {NULL, 0, 0};
    int rc = qg_detect(s, n, &f1);
    CHECK(rc == 0 || rc == -1, "rc %d", rc);
    if (rc == 0) {
        check_findings(s, n, &f1);
        if (qg_detect(text, n, &f2) == 0) {
            CHECK(f1.len == f2.len &&
                      (f1.len == 0 || memcmp(f1.items, f2.items, f1.len * sizeof *f1.items) == 0),
                  "two detections of the same text differ");
        }
        /* Reusing a result struct (as a caller may) must give the same findings again. */
        if (qg_detect(s, n, &f2) == 0)
            CHECK(f1.len == f2.len, "reused findings struct: %zu vs %zu", f1.len, f2.len);
        if (utf8_valid(s, n, 1))
            check_redaction(s, n, &f1);
    }
    qg_findings_free(&f1);
    qg_findings_free(&f2);
    free(block);
    return 0;
}
