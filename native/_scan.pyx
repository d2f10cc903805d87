# cython: language_level=3, boundscheck=False, wraparound=False
"""Native structural query scanner: binding of native/scan.c.

The specification and the docstrings live in :mod:`qdrant_guard._scan_py`; this module returns the
same :class:`~qdrant_guard._scan_py.ScanResult` objects (tests/test_scan_oracle.py compares them).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyObject_GenericSetAttr, PyTypeObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memset

from scan cimport (QG_SCAN_MAX_BYTES, QG_SCAN_NOMEM, QG_SCAN_OK, qg_mark, qg_scan, qg_scan_out,
                   qg_scan_out_free, qg_scan_rules)

from qdrant_guard import _scan_py as _ref
from qdrant_guard._scan_py import KINDS, ScanResult, Violation

__all__ = ["KINDS", "ScanResult", "Violation", "scan_query"]

# Below this size the scan takes about as long as releasing and re-taking the GIL.
cdef size_t NOGIL_BYTES = 1 << 16
# Limits above this are as good as infinite and still fit int64_t.
cdef object HUGE = 1 << 62


cdef inline bint _count_ok(object value, long minimum):
    return value is None or (type(value) is int and value >= minimum)


cdef inline bint _ratio_ok(object value):
    return value is None or (type(value) is float and 0.0 <= <double>value <= 1.0)


cdef inline int64_t _limit(object value):
    return -1 if value is None else <int64_t>min(value, HUGE)


cdef object _EMPTY = ()
cdef PyTypeObject *_RESULT_TYPE = <PyTypeObject *>ScanResult


cdef object _clean_result(int64_t token_count, int64_t model_tokens, double repetition,
                          double ngram):
    """``ScanResult(True, (), ...)`` without running the dataclass ``__init__``.

    A frozen slots dataclass's generated ``__init__`` stores each field through
    ``object.__setattr__`` looked up by name at Python speed, which was a third of a short scan's
    cost. ``PyObject_GenericSetAttr`` is that same ``object.__setattr__`` (it bypasses the frozen
    ``__setattr__`` exactly as ``__init__`` does), so the object is the one ``__init__`` builds.
    """
    cdef object r = _RESULT_TYPE.tp_new(ScanResult, <PyObject *>_EMPTY, NULL)
    PyObject_GenericSetAttr(r, "ok", True)
    PyObject_GenericSetAttr(r, "violations", _EMPTY)
    PyObject_GenericSetAttr(r, "token_count", token_count)
    PyObject_GenericSetAttr(r, "model_token_estimate", model_tokens)
    PyObject_GenericSetAttr(r, "repetition_ratio", repetition)
    PyObject_GenericSetAttr(r, "ngram_run_ratio", ngram)
    return r


def scan_query(text, *, max_tokens=500, max_repetition=0.5, max_ngram_run=None,
               encoded_payloads=True, max_model_tokens=None, min_blob_len=32, min_percent_run=2):
    cdef const char *data
    cdef Py_ssize_t size = 0
    cdef qg_scan_rules rules
    cdef qg_scan_out out
    cdef int rc
    cdef size_t k
    cdef qg_mark *m
    cdef object keep = text

    if not isinstance(text, (str, bytes)):
        _ref.check_text(text)
    if not (_count_ok(max_tokens, 0) and _ratio_ok(max_repetition) and _ratio_ok(max_ngram_run)
            and (encoded_payloads is True or encoded_payloads is False)
            and _count_ok(max_model_tokens, 0) and _count_ok(min_blob_len, 8)
            and _count_ok(min_percent_run, 1)):
        # Unusual argument types or bad values: the reference validates and words the error.
        (max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
         min_blob_len, min_percent_run) = _ref.check_rules(
            max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
            min_blob_len, min_percent_run)

    if isinstance(text, bytes):
        data = PyBytes_AS_STRING(text)
        size = PyBytes_GET_SIZE(text)
        rules.str_input = 0
    else:
        rules.str_input = 1
        try:
            data = PyUnicode_AsUTF8AndSize(text, &size)
        except UnicodeEncodeError:
            # Lone surrogates: encode them as 3-byte sequences the scanner reports.
            keep = (<str>text).encode("utf-8", "surrogatepass")
            data = PyBytes_AS_STRING(keep)
            size = PyBytes_GET_SIZE(keep)
    if <size_t>size > QG_SCAN_MAX_BYTES:
        raise ValueError(
            f"scan_query() argument 'text' is {size} bytes of UTF-8; the scanner accepts at most "
            f"{QG_SCAN_MAX_BYTES} bytes, split the text")

    rules.max_tokens = _limit(max_tokens)
    rules.max_model_tokens = _limit(max_model_tokens)
    rules.min_blob_len = _limit(min_blob_len)
    rules.min_percent_run = _limit(min_percent_run)
    rules.encoded_payloads = encoded_payloads is True
    memset(&out, 0, sizeof(out))
    if <size_t>size >= NOGIL_BYTES:
        with nogil:
            rc = qg_scan(<const uint8_t *>data, <size_t>size, &rules, &out)
    else:
        rc = qg_scan(<const uint8_t *>data, <size_t>size, &rules, &out)
    if rc == QG_SCAN_NOMEM:
        raise MemoryError(f"scan_query(): no memory for the token table of a {size}-byte text")

    # The figures exactly as _scan_py.assemble computes them: an int / int true division of values
    # below 2**53 is the correctly rounded double quotient, like C's.
    cdef double repetition = (1.0 - <double>out.unique_tokens / <double>out.token_count
                              if out.token_count else 0.0)
    cdef double ngram = (<double>out.run_length / <double>out.token_count
                         if out.run_length else 0.0)
    if (out.n_marks == 0 and out.token_cap_at < 0 and out.model_cap_at < 0
            and (max_repetition is None or not repetition > <double>max_repetition)
            and (max_ngram_run is None or not ngram > <double>max_ngram_run)):
        qg_scan_out_free(&out)
        return _clean_result(out.token_count, out.model_tokens, repetition, ngram)

    try:
        marks = []
        for k in range(out.n_marks):
            m = &out.marks[k]
            marks.append((m.position, m.kind, m.count, m.value))
    finally:
        qg_scan_out_free(&out)
    return _ref.assemble(
        _ref.Rules(max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
                   min_blob_len, min_percent_run),
        marks, out.token_count, out.unique_tokens, out.first_repeat, out.token_cap_at,
        out.model_tokens, out.model_cap_at, out.run_length, out.run_at, out.run_n)


scan_query.__doc__ = _ref.scan_query.__doc__
