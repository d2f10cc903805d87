# Declarations of native/scan.h for the Cython binding native/_scan.pyx.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t


cdef extern from "scan.h" nogil:
    enum:
        QG_SCAN_OK
        QG_SCAN_NOMEM
        QG_SCAN_TOO_BIG

    size_t QG_SCAN_MAX_BYTES

    ctypedef struct qg_scan_rules:
        int64_t max_tokens
        int64_t max_model_tokens
        int64_t min_blob_len
        int64_t min_percent_run
        int encoded_payloads
        int str_input

    ctypedef struct qg_mark:
        int64_t position
        int64_t count
        uint32_t value
        int32_t kind

    ctypedef struct qg_scan_out:
        int64_t token_count
        int64_t unique_tokens
        int64_t first_repeat
        int64_t token_cap_at
        int64_t model_tokens
        int64_t model_cap_at
        int64_t run_length
        int64_t run_at
        int64_t run_n
        int64_t probes
        qg_mark *marks
        size_t n_marks
        size_t cap_marks

    int qg_scan(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out)
    enum:
        QG_SCAN_INDEX_SLOTS
    ctypedef struct qg_scan_table:
        pass
    int qg_scan_index(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out,
                      qg_scan_table *index)
    void qg_scan_out_free(qg_scan_out *out)

    enum:
        QG_GLUED_MIN_RUN
        QG_GLUED_MAX_PERIOD

    ctypedef struct qg_glued:
        int64_t position
        int64_t length
        int64_t period
        int64_t matches

    ctypedef struct qg_glued_out:
        qg_glued *runs
        size_t n_runs
        size_t cap_runs

    int qg_glued_scan(const uint8_t *s, size_t n, int str_input, double cap, qg_glued_out *out)
    void qg_glued_out_free(qg_glued_out *out)
