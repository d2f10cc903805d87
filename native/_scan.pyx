# cython: language_level=3, boundscheck=False, wraparound=False
"""Native structural query scanner: binding of native/scan.c.

The specification and the docstrings live in :mod:`qdrant_guard._scan_py`; this module returns the
same :class:`~qdrant_guard._scan_py.ScanResult` objects (tests/test_scan_oracle.py compares them).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyObject_GenericSetAttr, PyTypeObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int64_t, uint8_t, uint16_t
from libc.math cimport floor
from libc.string cimport memcpy

cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
    void PyMem_Free(void *p)
    str PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)
    int Py_DTSF_ADD_DOT_0
    long long PyLong_AsLongLongAndOverflow(object obj, int *overflow) except? -1
    void Py_INCREF(object o)
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    int T_OBJECT_EX
    int READONLY

from operator import attrgetter

from scan cimport (QG_SCAN_MAX_BYTES, QG_SCAN_NOMEM, QG_SCAN_OK,
                   qg_glued_out, qg_glued_out_free, qg_glued_scan, qg_mark, qg_scan, qg_scan_index,
                   qg_scan_out, qg_scan_out_free, qg_scan_rules, qg_scan_table)

from qdrant_guard import _scan_py as _ref
from qdrant_guard.errors import GuardArgumentValueError
from qdrant_guard._scan_py import KINDS, ScanResult, Violation

__all__ = ["KINDS", "ScanResult", "Violation", "scan_query"]

# Below this size the scan takes about as long as releasing and re-taking the GIL.
cdef size_t NOGIL_BYTES = 1 << 16

# The token table index of the scans that run with the GIL held, one at a time (scans do not call
# back into Python): its slots zeroed, and left zeroed by every scan, so that a call does not zero
# 8 KB of index first (see qg_scan_index); its short-token keys need no zeroing. Scans without the
# GIL use their own. Without a GIL (free-threaded builds) every scan uses its own.
cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define QG_SHARED_INDEX 0
    #else
    #define QG_SHARED_INDEX 1
    #endif
    """
    int QG_SHARED_INDEX

cdef qg_scan_table _index
# Limits above this are as good as infinite and still fit int64_t.
cdef int64_t HUGE = 1 << 62


cdef inline bint _count_ok(object value, long minimum):
    return value is None or (type(value) is int and value >= minimum)


cdef inline bint _ratio_ok(object value):
    return value is None or (type(value) is float and 0.0 <= <double>value <= 1.0)


cdef inline int64_t _limit(object value) except? -2:
    # min(value, HUGE) for None or an int >= 0 (checked before).
    cdef int overflow = 0
    cdef long long v
    if value is None:
        return -1
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    return HUGE if overflow > 0 or v > HUGE else v


cdef object _EMPTY = ()
cdef PyTypeObject *_RESULT_TYPE = <PyTypeObject *>ScanResult


cdef PyTypeObject *_VIOLATION_TYPE = <PyTypeObject *>Violation
_SORT_KEY = attrgetter("position", "kind", "detail")


# Frozen slots dataclasses built without their generated ``__init__``: it stores each field through
# ``object.__setattr__`` looked up by name at Python speed, which was a third of a short scan's cost.
# Each field is a slot: a member descriptor that stores the object at a fixed offset in the
# instance, which ``tp_new`` leaves NULL. Storing there is what ``object.__setattr__`` ends in (it
# bypasses the frozen ``__setattr__`` exactly as ``__init__`` does), without looking the name up,
# so the objects are the ones ``__init__`` builds. Offsets are read from the descriptors once; if a
# field is not such a slot, _slot_offsets gives -1 and the fields go through
# ``PyObject_GenericSetAttr`` by name instead.
cdef Py_ssize_t _slot_offset(type cls, str name) except -2:
    d = cls.__dict__.get(name)
    if type(d).__name__ != "member_descriptor":
        return -1
    cdef PyMemberDef *member = (<PyMemberDescrObject *><PyObject *>d).d_member
    if member.type != T_OBJECT_EX or member.flags & READONLY:
        return -1
    return member.offset


cdef Py_ssize_t _OFF_OK = _slot_offset(ScanResult, "ok")
cdef Py_ssize_t _OFF_VIOLATIONS = _slot_offset(ScanResult, "violations")
cdef Py_ssize_t _OFF_TOKENS = _slot_offset(ScanResult, "token_count")
cdef Py_ssize_t _OFF_MODEL = _slot_offset(ScanResult, "model_token_estimate")
cdef Py_ssize_t _OFF_REP = _slot_offset(ScanResult, "repetition_ratio")
cdef Py_ssize_t _OFF_NGRAM = _slot_offset(ScanResult, "ngram_run_ratio")
cdef bint _RESULT_SLOTS = min(_OFF_OK, _OFF_VIOLATIONS, _OFF_TOKENS, _OFF_MODEL, _OFF_REP,
                              _OFF_NGRAM) >= 0


cdef inline void _set_slot(object obj, Py_ssize_t offset, object value):
    # The slot is NULL (a fresh object): store a new reference.
    Py_INCREF(value)
    (<PyObject **>(<char *><PyObject *>obj + offset))[0] = <PyObject *>value


cdef object _result(bint ok, tuple violations, int64_t token_count, int64_t model_tokens,
                    double repetition, double ngram):
    cdef object r = _RESULT_TYPE.tp_new(ScanResult, <PyObject *>_EMPTY, NULL)
    if _RESULT_SLOTS:
        _set_slot(r, _OFF_OK, ok)
        _set_slot(r, _OFF_VIOLATIONS, violations)
        _set_slot(r, _OFF_TOKENS, token_count)
        _set_slot(r, _OFF_MODEL, model_tokens)
        _set_slot(r, _OFF_REP, repetition)
        _set_slot(r, _OFF_NGRAM, ngram)
        return r
    PyObject_GenericSetAttr(r, "ok", ok)
    PyObject_GenericSetAttr(r, "violations", violations)
    PyObject_GenericSetAttr(r, "token_count", token_count)
    PyObject_GenericSetAttr(r, "model_token_estimate", model_tokens)
    PyObject_GenericSetAttr(r, "repetition_ratio", repetition)
    PyObject_GenericSetAttr(r, "ngram_run_ratio", ngram)
    return r


cdef str _double_str(double value, char code, int precision, int flags):
    cdef char *text = PyOS_double_to_string(value, code, precision, flags, NULL)
    try:
        return text.decode("ascii")
    finally:
        PyMem_Free(text)


cdef int _fixed3_digits(double x, char *digits) noexcept:
    """Write f"{x:.3f}" for a ratio 0 <= x <= 1 (5 characters) to digits; -1: not decided here.

    x * 1000 is within 2**-43 of the exact product, so unless that lies next to a half, rounding
    it to an integer rounds the exact value the same way; next to a half (ties included), the
    exact formatter decides. Stuffed queries, the ones this detail is written for, come in bulk.
    """
    cdef double y = x * 1000.0
    cdef double low = floor(y)
    cdef double frac = y - low
    cdef long r
    if not (0.0 <= x <= 1.0) or (frac > 0.4999999 and frac < 0.5000001):
        return -1
    r = <long>low + (1 if frac > 0.5 else 0)
    digits[0] = <char>(48 + r // 1000)
    digits[1] = b'.'
    digits[2] = <char>(48 + (r // 100) % 10)
    digits[3] = <char>(48 + (r // 10) % 10)
    digits[4] = <char>(48 + r % 10)
    return 0


cdef str _fixed3(double x):
    """f"{x:.3f}" for a ratio 0 <= x <= 1 (see _fixed3_digits)."""
    cdef char digits[5]
    if _fixed3_digits(x, digits) < 0:
        return _double_str(x, b'f', 3, 0)
    return digits[:5].decode("ascii")


def _fixed3_for_tests(double x):
    """The scanner's fast ``f"{x:.3f}"`` for ratios (tests compare it with Python's formatter)."""
    return _fixed3(x)


# The last max_repetition seen, its repr() and that as bytes: a policy passes the same float
# object on every call. One tuple, replaced whole, so that a reader never pairs parts of two.
cdef tuple _max_rep = (None, None, None)


cdef str _repetition_detail(double repetition, object max_repetition):
    # _scan_py.repetition_detail without the format-spec parsing: f"{x:.3f}" of a ratio and f"{y}"
    # of an exact float (the same digits as the reference), written into one buffer and decoded
    # once instead of joined from four strings.
    global _max_rep
    cdef tuple cached = _max_rep
    cdef char buf[96]
    cdef bytes tail
    cdef Py_ssize_t m
    if type(max_repetition) is not float:
        return _ref.repetition_detail(repetition, max_repetition)
    if cached[0] is not max_repetition:
        text = _double_str(<double>max_repetition, b'r', 0, Py_DTSF_ADD_DOT_0)
        cached = (max_repetition, text, text.encode("ascii"))
        _max_rep = cached
    tail = <bytes>cached[2]
    m = PyBytes_GET_SIZE(tail)
    if m > 96 - 40 or _fixed3_digits(repetition, buf + 17) < 0:
        return "repetition ratio " + _fixed3(repetition) + " > max_repetition=" + <str>cached[1]
    memcpy(buf, b"repetition ratio ", 17)
    memcpy(buf + 22, b" > max_repetition=", 18)
    memcpy(buf + 40, PyBytes_AS_STRING(tail), m)
    return PyUnicode_DecodeASCII(buf, 40 + m, NULL)


cdef Py_ssize_t _OFF_KIND = _slot_offset(Violation, "kind")
cdef Py_ssize_t _OFF_POSITION = _slot_offset(Violation, "position")
cdef Py_ssize_t _OFF_DETAIL = _slot_offset(Violation, "detail")
cdef bint _VIOLATION_SLOTS = min(_OFF_KIND, _OFF_POSITION, _OFF_DETAIL) >= 0


cdef object _violation(str kind, int64_t position, str detail):
    cdef object v = _VIOLATION_TYPE.tp_new(Violation, <PyObject *>_EMPTY, NULL)
    if _VIOLATION_SLOTS:
        _set_slot(v, _OFF_KIND, kind)
        _set_slot(v, _OFF_POSITION, position)
        _set_slot(v, _OFF_DETAIL, detail)
        return v
    PyObject_GenericSetAttr(v, "kind", kind)
    PyObject_GenericSetAttr(v, "position", position)
    PyObject_GenericSetAttr(v, "detail", detail)
    return v


# The rule arguments of the last call whose rules all passed the checks below as they were (None,
# or int, float and bool objects: immutable, so the same objects are the same rules), and the
# qg_scan_rules made of them. Callers pass the same objects call after call (the defaults, or a
# policy's fields): then the checks and conversions are skipped. The tuple is replaced whole, after
# _cached_rules, so a call that runs while the old tuple is being freed sees a consistent pair.
cdef tuple _cached_args = None
cdef qg_scan_rules _cached_rules


cdef list _glued_runs(const uint8_t *data, size_t size, int str_input, double cap, bint nogil_pass):
    """_scan_py.glued_runs from the native pass: (position, length, period, matches) per run."""
    cdef qg_glued_out g
    cdef int rc
    cdef size_t k
    if nogil_pass:
        with nogil:
            rc = qg_glued_scan(data, size, str_input, cap, &g)
    else:
        rc = qg_glued_scan(data, size, str_input, cap, &g)
    if rc == QG_SCAN_NOMEM:
        raise MemoryError(f"scan_query(): no memory for the code points of a {size}-byte text")
    try:
        return [(g.runs[k].position, g.runs[k].length, g.runs[k].period, g.runs[k].matches)
                for k in range(g.n_runs)]
    finally:
        qg_glued_out_free(&g)


def scan_query(text, *, max_tokens=500, max_repetition=0.5, max_ngram_run=None,
               encoded_payloads=True, max_model_tokens=None, min_blob_len=32, min_percent_run=2,
               max_glued_repetition=None):
    cdef const char *data
    cdef Py_ssize_t size = 0
    cdef qg_scan_rules rules
    cdef qg_scan_out out
    cdef int rc
    cdef size_t k
    cdef qg_mark *m
    cdef object keep = text

    global _cached_args, _cached_rules
    cdef tuple cached = _cached_args
    cdef bint plain
    if not isinstance(text, (str, bytes)):
        _ref.check_text(text)
    if (cached is not None and cached[0] is max_tokens and cached[1] is max_repetition
            and cached[2] is max_ngram_run and cached[3] is encoded_payloads
            and cached[4] is max_model_tokens and cached[5] is min_blob_len
            and cached[6] is min_percent_run):
        rules = _cached_rules
    else:
        plain = (_count_ok(max_tokens, 0) and _ratio_ok(max_repetition)
                 and _ratio_ok(max_ngram_run)
                 and (encoded_payloads is True or encoded_payloads is False)
                 and _count_ok(max_model_tokens, 0) and _count_ok(min_blob_len, 8)
                 and _count_ok(min_percent_run, 1))
        if not plain:
            # Unusual argument types or bad values: the reference validates and words the error.
            (max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
             min_blob_len, min_percent_run) = _ref.check_rules(
                max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
                min_blob_len, min_percent_run)[:7]
        rules.max_tokens = _limit(max_tokens)
        rules.max_model_tokens = _limit(max_model_tokens)
        rules.min_blob_len = _limit(min_blob_len)
        rules.min_percent_run = _limit(min_percent_run)
        rules.encoded_payloads = encoded_payloads is True
        if plain:
            _cached_rules = rules
            _cached_args = (max_tokens, max_repetition, max_ngram_run, encoded_payloads,
                            max_model_tokens, min_blob_len, min_percent_run)
    # Outside the cache above: the default call (rule off) checks one more None and nothing else.
    if max_glued_repetition is not None and not _ratio_ok(max_glued_repetition):
        max_glued_repetition = _ref.check_rules(
            max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
            min_blob_len, min_percent_run, max_glued_repetition).max_glued_repetition

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
        raise GuardArgumentValueError(
            f"scan_query() argument 'text' is {size} bytes of UTF-8; the scanner accepts at most "
            f"{QG_SCAN_MAX_BYTES} bytes, split the text")

    # Field by field: a memset of the struct compiles to a rep stos, slow to start.
    out.token_count = out.unique_tokens = out.first_repeat = out.token_cap_at = 0
    out.model_tokens = out.model_cap_at = out.run_length = out.run_at = out.run_n = out.probes = 0
    out.marks = NULL
    out.n_marks = out.cap_marks = 0
    if <size_t>size >= NOGIL_BYTES:
        with nogil:
            rc = qg_scan(<const uint8_t *>data, <size_t>size, &rules, &out)
    else:
        rc = qg_scan_index(<const uint8_t *>data, <size_t>size, &rules, &out,
                           &_index if QG_SHARED_INDEX else NULL)
    if rc == QG_SCAN_NOMEM:
        raise MemoryError(f"scan_query(): no memory for the token table of a {size}-byte text")
    cdef list glued = None
    if max_glued_repetition is not None:
        try:
            glued = _glued_runs(<const uint8_t *>data, <size_t>size, rules.str_input,
                                <double>max_glued_repetition, <size_t>size >= NOGIL_BYTES)
        except BaseException:
            qg_scan_out_free(&out)
            raise

    # The figures exactly as _scan_py.assemble computes them: an int / int true division of values
    # below 2**53 is the correctly rounded double quotient, like C's.
    cdef double repetition = (1.0 - <double>out.unique_tokens / <double>out.token_count
                              if out.token_count else 0.0)
    cdef double ngram = (<double>out.run_length / <double>out.token_count
                         if out.run_length else 0.0)
    cdef list found
    if out.n_marks == 0 and not glued:
        # Only whole-text findings: what _scan_py.assemble builds, with its wording functions.
        qg_scan_out_free(&out)
        if (out.token_cap_at < 0 and out.model_cap_at < 0
                and (max_repetition is None or not repetition > <double>max_repetition)
                and (max_ngram_run is None or not ngram > <double>max_ngram_run)):
            return _result(True, _EMPTY, out.token_count, out.model_tokens, repetition, ngram)
        if (out.token_cap_at < 0 and out.model_cap_at < 0
                and (max_ngram_run is None or not ngram > <double>max_ngram_run)):
            # Repetition alone (what stuffed queries get): one violation, no list to sort.
            return _result(False, (_violation("repetition", out.first_repeat,
                                              _repetition_detail(repetition, max_repetition)),),
                           out.token_count, out.model_tokens, repetition, ngram)
        found = []
        if out.token_cap_at >= 0:
            found.append(_violation("token_cap", out.token_cap_at,
                                    _ref.token_cap_detail(out.token_count, max_tokens)))
        if out.model_cap_at >= 0:
            found.append(_violation("token_cap", out.model_cap_at,
                                    _ref.model_cap_detail(out.model_tokens, max_model_tokens)))
        if max_repetition is not None and repetition > <double>max_repetition:
            found.append(_violation("repetition", out.first_repeat,
                                    _repetition_detail(repetition, max_repetition)))
        if max_ngram_run is not None and ngram > <double>max_ngram_run:
            found.append(_violation("ngram_run", out.run_at,
                                    _ref.ngram_detail(out.run_n, out.run_length, out.token_count,
                                                      ngram, max_ngram_run)))
        if not found:
            return _result(True, _EMPTY, out.token_count, out.model_tokens, repetition, ngram)
        if len(found) > 1:
            found.sort(key=_SORT_KEY)
        return _result(False, tuple(found), out.token_count, out.model_tokens, repetition, ngram)

    try:
        marks = []
        for k in range(out.n_marks):
            m = &out.marks[k]
            marks.append((m.position, m.kind, m.count, m.value))
    finally:
        qg_scan_out_free(&out)
    return _ref.assemble(
        _ref.Rules(max_tokens, max_repetition, max_ngram_run, encoded_payloads, max_model_tokens,
                   min_blob_len, min_percent_run, max_glued_repetition),
        marks, out.token_count, out.unique_tokens, out.first_repeat, out.token_cap_at,
        out.model_tokens, out.model_cap_at, out.run_length, out.run_at, out.run_n,
        glued if glued else ())


scan_query.__doc__ = _ref.scan_query.__doc__
