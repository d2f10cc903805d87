/* Structural query scanner: one pass over UTF-8 text (see qdrant_guard/_scan_py.py for the
 * definitions; this file and that module must agree exactly). Plain C99, no Python. */
#ifndef QG_SCAN_H
#define QG_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* Violation kind codes: the index of the name in qdrant_guard._scan_py.KINDS. */
enum {
    QG_K_TOKEN_CAP, QG_K_REPETITION, QG_K_NGRAM_RUN, QG_K_PERCENT, QG_K_HEX_ESCAPE,
    QG_K_UNICODE_ESCAPE, QG_K_HTML, QG_K_BASE64, QG_K_HEXBLOB, QG_K_CONTROL, QG_K_INVALID_UTF8,
    QG_K_SURROGATE, QG_K_INVISIBLE, QG_K_BIDI, QG_K_GLUED_REPETITION
};

enum { QG_SCAN_OK = 0, QG_SCAN_NOMEM = -1, QG_SCAN_TOO_BIG = -2 };

/* A negative limit switches its rule off. */
typedef struct {
    int64_t max_tokens;
    int64_t max_model_tokens;
    int64_t min_blob_len;
    int64_t min_percent_run;
    int encoded_payloads;
    /* 1: the bytes are a str encoded with 'surrogatepass' (surrogates are lone_surrogate and
     * positions are code-point indices); 0: raw bytes (positions are byte offsets). */
    int str_input;
} qg_scan_rules;

/* One character or escape finding: a run of `count` flagged units starting at `position`.
 * `value` is the first code point (or the invalid byte) for character kinds. */
typedef struct {
    int64_t position;
    int64_t count;
    uint32_t value;
    int32_t kind;
} qg_mark;

typedef struct {
    int64_t token_count, unique_tokens;
    int64_t first_repeat;   /* position of the first repeated token, -1 if none */
    int64_t token_cap_at;   /* position of token number max_tokens, -1 if none */
    int64_t model_tokens;
    int64_t model_cap_at;   /* position of the token where the estimate exceeds the cap, -1 */
    int64_t run_length, run_at, run_n; /* longest n-gram run; run_length 0 if none */
    int64_t probes; /* table slots stepped past in all lookups: a diagnostic of hash collisions */
    qg_mark *marks;
    size_t n_marks, cap_marks;
} qg_scan_out;

/* Largest input accepted (token ids are 32-bit). */
#define QG_SCAN_MAX_BYTES ((size_t)0xFFFFFFF0u)

/* Scan s[0..n). Does not touch Python; safe to call without the GIL. `out` must be zeroed; free
 * its marks with qg_scan_out_free. Returns QG_SCAN_OK, QG_SCAN_NOMEM or QG_SCAN_TOO_BIG. */
int qg_scan(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out);

/* The index of a scan's first token table, for qg_scan_index: slots (zeroed between scans) and,
 * beside each slot, the key of a short token put there (both zeroed between scans). */
#define QG_SCAN_INDEX_SLOTS 4096
#if defined(__GNUC__)
#define QG_SCAN_ALIGNED __attribute__((aligned(64))) /* a key never straddles a cache line */
#else
#define QG_SCAN_ALIGNED
#endif
typedef struct {
    uint16_t slots[QG_SCAN_INDEX_SLOTS];
    uint8_t keys[QG_SCAN_INDEX_SLOTS][16];
} QG_SCAN_ALIGNED qg_scan_table;

/* qg_scan with the index of the scan's first token table supplied: a qg_scan_table whose slots
 * are zeroed and that no other scan uses meanwhile, its slots left zeroed again when the call
 * returns. Saves zeroing a fresh index on every call (what qg_scan does); index NULL is qg_scan. */
int qg_scan_index(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out,
                  qg_scan_table *index);
void qg_scan_out_free(qg_scan_out *out);

/* Glued repetition (see _scan_py.glued_runs): the whitespace-free runs of at least
 * QG_GLUED_MIN_RUN code points (invalid bytes count as one each) whose best self-similarity,
 * matches / length at a period of 1..min(QG_GLUED_MAX_PERIOD, length / 2) code points, is above
 * cap. Matches are code points equal to the one a period before; an ASCII one other than a letter
 * counts only inside a stretch of at least QG_GLUED_STRETCH consecutive matches. A pass of its own
 * over s[0..n): qg_scan does not run it. */
#define QG_GLUED_MIN_RUN 64
#define QG_GLUED_MAX_PERIOD 256
#define QG_GLUED_STRETCH 8

typedef struct {
    int64_t position; /* the run's first code point: index (str input) or byte offset (bytes) */
    int64_t length;   /* code points in the run */
    int64_t period;   /* the best period, in code points */
    int64_t matches;  /* code points equal to the one `period` before, as counted */
} qg_glued;

typedef struct {
    qg_glued *runs;
    size_t n_runs, cap_runs;
} qg_glued_out;

/* Fills `out` (its runs in text order; free with qg_glued_out_free). str_input as in
 * qg_scan_rules. Returns QG_SCAN_OK, QG_SCAN_NOMEM (out then empty) or QG_SCAN_TOO_BIG. Does not
 * touch Python. */
int qg_glued_scan(const uint8_t *s, size_t n, int str_input, double cap, qg_glued_out *out);
void qg_glued_out_free(qg_glued_out *out);

#endif
