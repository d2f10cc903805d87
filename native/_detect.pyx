# cython: language_level=3, boundscheck=False, wraparound=False
"""Native secret/PII detector. The specification is ``qdrant_guard._detect_py``."""
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from detect cimport (
    QG_IBAN,
    QG_NTYPES,
    QG_NVALIDATORS,
    qg_detect,
    qg_findings,
    qg_findings_free,
    qg_type_names,
    qg_validator_names,
)

from qdrant_guard.errors import GuardArgumentTypeError

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o)

__all__ = ["FINDING_TYPES", "PII_TYPES", "find_spans"]

FINDING_TYPES = tuple(qg_type_names[i].decode("ascii") for i in range(<int>QG_NTYPES))
# The PII types close the enum (IBAN .. PHONE); tests compare both sets with the reference.
PII_TYPES = frozenset(FINDING_TYPES[<int>QG_IBAN:])
_VALIDATORS = tuple(qg_validator_names[i].decode("ascii") for i in range(<int>QG_NVALIDATORS))

# Below this size releasing and re-taking the GIL costs more than it lets other threads do.
cdef Py_ssize_t _NOGIL_BYTES = 16384


def find_spans(text):
    """Return ``(start, end, type, validator)`` for every sensitive span, sorted by (start, end).

    Offsets are code points. See :func:`qdrant_guard.detect.find_sensitive` for the contract.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise GuardArgumentTypeError(f"find_spans() argument 'text' must be str, not {type(text).__name__}")
    cdef const char *buf
    cdef Py_ssize_t n = 0
    cdef bytes encoded
    if PyUnicode_IS_ASCII(text):
        buf = PyUnicode_AsUTF8AndSize(text, &n)  # the str's own buffer: no copy
    else:
        # surrogatepass keeps lone surrogates as one 3-byte sequence each (one lead byte per
        # code point), which the byte -> code-point conversion in C relies on.
        encoded = (<str>text).encode("utf-8", "surrogatepass")
        buf = encoded
        n = len(encoded)
    cdef qg_findings found
    found.items = NULL
    found.len = 0
    found.cap = 0
    cdef int rc
    if n >= _NOGIL_BYTES:
        with nogil:
            rc = qg_detect(<const unsigned char *>buf, <size_t>n, &found)
    else:
        rc = qg_detect(<const unsigned char *>buf, <size_t>n, &found)
    cdef size_t k
    try:
        if rc != 0:
            raise MemoryError("find_spans(): out of memory while collecting findings")
        return [
            (found.items[k].start, found.items[k].end, FINDING_TYPES[found.items[k].type],
             _VALIDATORS[found.items[k].validator])
            for k in range(found.len)
        ]
    finally:
        qg_findings_free(&found)
