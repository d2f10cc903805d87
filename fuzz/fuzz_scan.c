/* libFuzzer harness for qg_scan and qg_scan_index (native/scan.c).
 *
 * Input: 4 header bytes choosing the rules and the buffer misalignment, then the text.
 * Checks, besides the sanitizers: every figure and mark lies inside the text; character runs and
 * escapes come out in order without overlapping; the scan is deterministic, also through a shared
 * table index (qg_scan_index), whose slots and short-token keys every scan leaves zeroed (no
 * word of one query stays behind in the process's shared index); on strict UTF-8
 * the bytes mode and the str mode agree exactly once byte offsets are mapped to code points; and
 * the glued-repetition pass (qg_glued_scan) keeps its runs in range and, on ASCII text, agrees
 * with a naive recount. */
#include "fuzz_common.h"

#include "scan.h"

static int is_char_kind(int k)
{
    return k == QG_K_CONTROL || k == QG_K_INVALID_UTF8 || k == QG_K_SURROGATE ||
           k == QG_K_INVISIBLE || k == QG_K_BIDI;
}

static int escape_min_len(int k)
{
    switch (k) {
    case QG_K_PERCENT: return 3;     /* %XX */
    case QG_K_HEX_ESCAPE: return 4;  /* \xXX */
    case QG_K_UNICODE_ESCAPE: return 6; /* \uXXXX */
    case QG_K_HTML: return 4;        /* &lt; &#1; */
    default: return 0;
    }
}

static unsigned hexv(uint8_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* Whether the count %XX escapes at p escape an RFC 3986 unreserved character (bytes mode, where
 * positions are byte offsets). */
static int hides_unreserved(const uint8_t *p, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        unsigned b = hexv(p[3 * k + 1]) << 4 | hexv(p[3 * k + 2]);
        if ((b >= '0' && b <= '9') || ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') || b == '-' ||
            b == '.' || b == '_' || b == '~')
            return 1;
    }
    return 0;
}

static void check_out(const uint8_t *s, size_t n, const qg_scan_rules *r, const qg_scan_out *o)
{
    /* In str mode an invalid continuation byte is its own unit, so bound by bytes there; the
     * exact code-point bound applies when the text is valid. */
    int64_t units = (int64_t)(r->str_input && utf8_valid(s, n, 1) ? lead_bytes(s, n) : n);
    CHECK(o->token_count >= 0 && o->unique_tokens >= 0 && o->unique_tokens <= o->token_count,
          "tokens %lld unique %lld", (long long)o->token_count, (long long)o->unique_tokens);
    CHECK(o->token_count <= (int64_t)n / 2 + 1, "token_count %lld for %zu bytes",
          (long long)o->token_count, n);
    CHECK(o->model_tokens >= o->token_count, "model %lld < tokens %lld",
          (long long)o->model_tokens, (long long)o->token_count);
    CHECK(o->first_repeat == -1 || (o->first_repeat >= 0 && o->first_repeat < units),
          "first_repeat %lld", (long long)o->first_repeat);
    CHECK((o->first_repeat >= 0) == (o->unique_tokens < o->token_count), "first_repeat vs unique");
    CHECK(o->token_cap_at == -1 || (o->token_cap_at >= 0 && o->token_cap_at < units), "token_cap_at");
    CHECK((o->token_cap_at >= 0) == (r->max_tokens >= 0 && o->token_count > r->max_tokens),
          "token_cap_at %lld with %lld tokens, cap %lld", (long long)o->token_cap_at,
          (long long)o->token_count, (long long)r->max_tokens);
    CHECK(o->model_cap_at == -1 || (o->model_cap_at >= 0 && o->model_cap_at < units), "model_cap_at");
    CHECK((o->model_cap_at >= 0) ==
              (r->max_model_tokens >= 0 && o->model_tokens > r->max_model_tokens),
          "model_cap_at");
    CHECK(o->run_length >= 0 && o->run_length <= o->token_count, "run_length %lld of %lld",
          (long long)o->run_length, (long long)o->token_count);
    if (o->run_length) {
        CHECK(o->run_n >= 1 && o->run_n <= 8 && o->run_length >= 2 * o->run_n, "run_n %lld len %lld",
              (long long)o->run_n, (long long)o->run_length);
        CHECK(o->run_at >= 0 && o->run_at < units, "run_at %lld", (long long)o->run_at);
    }
    CHECK(o->n_marks <= o->cap_marks && (o->n_marks == 0 || o->marks), "marks array");

    int64_t char_end = 0, esc_end = 0;
    for (size_t k = 0; k < o->n_marks; k++) {
        const qg_mark *m = &o->marks[k];
        CHECK(m->kind >= QG_K_PERCENT && m->kind <= QG_K_BIDI, "mark %zu kind %d", k, m->kind);
        CHECK(m->position >= 0 && m->count >= 1 && m->position + m->count <= units,
              "mark %zu kind %d at %lld count %lld, %lld units", k, m->kind,
              (long long)m->position, (long long)m->count, (long long)units);
        if (is_char_kind(m->kind)) {
            CHECK(m->position >= char_end, "character mark %zu at %lld overlaps the previous run "
                  "ending at %lld", k, (long long)m->position, (long long)char_end);
            char_end = m->position + m->count;
            if (m->kind == QG_K_INVALID_UTF8)
                CHECK(m->value >= 0x80 && m->value <= 0xFF, "invalid byte value %u", m->value);
            else
                CHECK(m->value <= 0x10FFFF, "code point %u", m->value);
        } else if (escape_min_len(m->kind)) {
            int64_t len = escape_min_len(m->kind);
            CHECK(m->position >= esc_end, "escape mark %zu at %lld overlaps the previous escape",
                  k, (long long)m->position);
            CHECK(m->position + len * m->count <= units, "escape mark %zu runs past the end", k);
            esc_end = m->position + len * m->count;
            if (m->kind == QG_K_PERCENT)
                CHECK(r->min_percent_run >= 1 &&
                          (m->count >= r->min_percent_run ||
                           (r->str_input || hides_unreserved(s + m->position, m->count))),
                      "percent run %lld", (long long)m->count);
        } else {
            /* Runs from 12 characters are decoded whatever min_blob_len says. */
            CHECK(r->min_blob_len >= 0 && (m->count >= r->min_blob_len || m->count >= 12),
                  "blob of %lld < %lld", (long long)m->count, (long long)r->min_blob_len);
        }
        if (!r->encoded_payloads)
            CHECK(is_char_kind(m->kind), "escape/blob mark with encoded_payloads off");
    }
}

/* Byte offset -> code-point index for strict UTF-8. */
static int64_t to_cp(const uint8_t *s, int64_t byte)
{
    return byte < 0 ? byte : (int64_t)lead_bytes(s, (size_t)byte);
}

static void check_modes_agree(const uint8_t *s, const qg_scan_out *b, const qg_scan_out *u)
{
    CHECK(b->token_count == u->token_count && b->unique_tokens == u->unique_tokens &&
              b->model_tokens == u->model_tokens && b->run_length == u->run_length &&
              b->run_n == u->run_n,
          "token figures differ between bytes and str mode");
    CHECK(to_cp(s, b->first_repeat) == u->first_repeat, "first_repeat %lld vs %lld",
          (long long)to_cp(s, b->first_repeat), (long long)u->first_repeat);
    CHECK(to_cp(s, b->token_cap_at) == u->token_cap_at, "token_cap_at");
    CHECK(to_cp(s, b->model_cap_at) == u->model_cap_at, "model_cap_at");
    CHECK(!b->run_length || to_cp(s, b->run_at) == u->run_at, "run_at");
    CHECK(b->n_marks == u->n_marks, "%zu marks in bytes mode, %zu in str mode", b->n_marks, u->n_marks);
    for (size_t k = 0; k < b->n_marks; k++) {
        const qg_mark *x = &b->marks[k], *y = &u->marks[k];
        CHECK(x->kind == y->kind && x->count == y->count && x->value == y->value &&
                  to_cp(s, x->position) == y->position,
              "mark %zu: bytes (%d, %lld, %lld, %u) str (%d, %lld, %lld, %u)", k, x->kind,
              (long long)to_cp(s, x->position), (long long)x->count, x->value, y->kind,
              (long long)y->position, (long long)y->count, y->value);
    }
}

/* The index the binding shares between the scans it runs under the GIL, kept across inputs as
 * across calls there: slots and keys zero between scans, so a scan that leaves a slot or a key
 * byte set is caught by the check below, and one that reads an earlier scan's entry as a match by
 * the next input's comparison with qg_scan. */
static qg_scan_table shared_index;

static int run_with(const uint8_t *s, size_t n, const qg_scan_rules *r, qg_scan_out *o, qg_scan_table *index)
{
    memset(o, 0, sizeof *o);
    int rc = index ? qg_scan_index(s, n, r, o, index) : qg_scan(s, n, r, o);
    CHECK(rc == QG_SCAN_OK || rc == QG_SCAN_NOMEM, "rc %d", rc);
    if (rc == QG_SCAN_NOMEM)
        CHECK(o->marks == NULL && o->n_marks == 0, "NOMEM left marks behind");
    if (index)
        for (size_t k = 0; k < QG_SCAN_INDEX_SLOTS; k++) {
            CHECK(index->slots[k] == 0, "the shared index slot %zu is %u after a scan", k, index->slots[k]);
            for (size_t b = 0; b < 16; b++)
                CHECK(index->keys[k][b] == 0, "the shared index key %zu holds a byte after a scan", k);
        }
    return rc;
}

static int run(const uint8_t *s, size_t n, const qg_scan_rules *r, qg_scan_out *o)
{
    return run_with(s, n, r, o, NULL);
}

/* qg_glued_scan: runs in order, inside the text, of at least QG_GLUED_MIN_RUN units, with a period
 * in range, their matches above the cap; on ASCII text (units are bytes) the matches and the
 * period are recounted naively, over every period, each stretch of matches walked. */
static void check_glued(const uint8_t *s, size_t n, int str_input, double cap, const qg_glued_out *g)
{
    int64_t units = (int64_t)(str_input && utf8_valid(s, n, 1) ? lead_bytes(s, n) : n);
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++)
        ascii = s[i] < 0x80;
    int64_t end = 0;
    for (size_t k = 0; k < g->n_runs; k++) {
        const qg_glued *r = &g->runs[k];
        int64_t max_p = r->length / 2 < QG_GLUED_MAX_PERIOD ? r->length / 2 : QG_GLUED_MAX_PERIOD;
        CHECK(r->position >= end && r->length >= QG_GLUED_MIN_RUN && r->position + r->length <= units,
              "glued run %zu at %lld length %lld, previous end %lld, %lld units", k,
              (long long)r->position, (long long)r->length, (long long)end, (long long)units);
        CHECK(r->period >= 1 && r->period <= max_p && r->matches >= 1 &&
                  r->matches <= r->length - r->period && (double)r->matches / (double)r->length > cap,
              "glued run %zu: period %lld matches %lld length %lld cap %g", k, (long long)r->period,
              (long long)r->matches, (long long)r->length, cap);
        end = r->position + r->length;
        if (ascii) {
            const uint8_t *u = s + r->position;
            int64_t best_m = 0, best_p = 0;
            for (int64_t p = 1; p <= max_p; p++) {
                /* A match counts unless it is ASCII other than a letter in a stretch of
                 * consecutive matches shorter than QG_GLUED_STRETCH. */
                int64_t m = 0;
                for (int64_t i = p; i < r->length;) {
                    int64_t end = i;
                    while (end < r->length && u[end] == u[end - p])
                        end++;
                    for (int64_t j = i; j < end; j++)
                        m += end - i >= QG_GLUED_STRETCH || (u[j] | 0x20) - 'a' < 26u;
                    i = end > i ? end : i + 1;
                }
                if (m > best_m) {
                    best_m = m;
                    best_p = p;
                }
            }
            CHECK(best_m == r->matches && best_p == r->period,
                  "glued run %zu: period %lld matches %lld, recounted %lld at %lld", k,
                  (long long)r->period, (long long)r->matches, (long long)best_m, (long long)best_p);
        }
    }
}

static void run_glued(const uint8_t *s, const uint8_t *again, size_t n, int str_input, double cap)
{
    qg_glued_out g1, g2;
    int rc = qg_glued_scan(s, n, str_input, cap, &g1);
    CHECK(rc == QG_SCAN_OK || rc == QG_SCAN_NOMEM, "glued rc %d", rc);
    if (rc != QG_SCAN_OK) {
        CHECK(g1.runs == NULL && g1.n_runs == 0, "NOMEM left glued runs behind");
        return;
    }
    check_glued(s, n, str_input, cap, &g1);
    if (qg_glued_scan(again, n, str_input, cap, &g2) == QG_SCAN_OK) {
        CHECK(g1.n_runs == g2.n_runs &&
                  (g1.n_runs == 0 || memcmp(g1.runs, g2.runs, g1.n_runs * sizeof *g1.runs) == 0),
              "two glued passes over the same text differ");
        qg_glued_out_free(&g2);
    }
    qg_glued_out_free(&g1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader rd = {data, size};
    uint8_t flags = (uint8_t)take_u64(&rd, 1);
    uint8_t cap = (uint8_t)take_u64(&rd, 1);
    uint8_t blob = (uint8_t)take_u64(&rd, 1);
    uint8_t pct = (uint8_t)take_u64(&rd, 1);
    const uint8_t *text = rd.p;
    size_t n = rd.n;

    qg_scan_rules r;
    memset(&r, 0, sizeof r);
    r.str_input = flags & 1;
    r.encoded_payloads = (flags >> 1) & 1;
    /* Limits in the API's domain: negative = off, token caps >= 0, blobs >= 8, percent >= 1. */
    r.max_tokens = (flags & 4) ? -1 : (flags & 8) ? (int64_t)cap : INT64_C(1) << 62;
    r.max_model_tokens = (flags & 16) ? -1 : (int64_t)cap * 3;
    r.min_blob_len = blob == 0 ? -1 : 8 + (blob & 63);
    r.min_percent_run = pct == 0 ? -1 : 1 + (pct & 7);
    unsigned shift = (flags >> 5) & 7;

    uint8_t *block;
    const uint8_t *s = misaligned_copy(text, n, shift, &block);
    qg_scan_out o1, o2;
    if (run(s, n, &r, &o1) == QG_SCAN_OK) {
        check_out(s, n, &r, &o1);
        /* Deterministic, independent of where the buffer sits, and the same with the binding's
         * shared index as with a fresh one. */
        if (run_with(text, n, &r, &o2, &shared_index) == QG_SCAN_OK) {
            CHECK(o1.n_marks == o2.n_marks &&
                      (o1.n_marks == 0 ||
                       memcmp(o1.marks, o2.marks, o1.n_marks * sizeof *o1.marks) == 0) &&
                      o1.token_count == o2.token_count && o1.unique_tokens == o2.unique_tokens &&
                      o1.model_tokens == o2.model_tokens && o1.run_length == o2.run_length &&
                      o1.run_n == o2.run_n && o1.run_at == o2.run_at &&
                      o1.first_repeat == o2.first_repeat,
                  "two scans of the same text differ");
            qg_scan_out_free(&o2);
        }
        if (utf8_valid(s, n, 0)) {
            qg_scan_rules other = r;
            other.str_input = !r.str_input;
            if (run(s, n, &other, &o2) == QG_SCAN_OK) {
                check_out(s, n, &other, &o2);
                if (r.str_input)
                    check_modes_agree(s, &o2, &o1);
                else
                    check_modes_agree(s, &o1, &o2);
                qg_scan_out_free(&o2);
            }
        }
        qg_scan_out_free(&o1);
    }
    /* The glued pass at a cap of 0, 1/16, ..., 15/16 (the header's cap byte). */
    run_glued(s, text, n, r.str_input, (cap & 15) / 16.0);
    free(block);
    return 0;
}
