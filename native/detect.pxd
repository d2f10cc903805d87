# Declarations of native/detect.h for the Cython binding native/_detect.pyx.
from libc.stdint cimport int64_t


cdef extern from "detect.h" nogil:
    enum qg_type:
        QG_IBAN
        QG_NTYPES

    enum qg_validator:
        QG_NVALIDATORS

    ctypedef struct qg_finding:
        int64_t start
        int64_t end
        int type
        int validator

    ctypedef struct qg_findings:
        qg_finding *items
        size_t len
        size_t cap

    const char *const qg_type_names[]
    const char *const qg_validator_names[]

    int qg_detect(const unsigned char *buf, size_t n, qg_findings *out)
    void qg_findings_free(qg_findings *f)
