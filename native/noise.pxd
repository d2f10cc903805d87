# C declarations of the noise kernel (native/chacha20.h, native/aes256ctr.h, native/noise.h).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef extern from "chacha20.h" nogil:
    ctypedef struct qg_stream:
        pass
    void qg_chacha20_block(const uint32_t *key, uint32_t counter, const uint32_t *nonce, uint32_t *out)
    void qg_chacha20_blocks(const uint32_t *key, uint32_t *counter, uint32_t *nonce, uint32_t *out, size_t nblocks)
    void qg_stream_init(qg_stream *s, const uint8_t *key, const uint8_t *nonce)
    void qg_stream_wipe(qg_stream *s)
    const char *qg_chacha20_impl()
    int qg_cipher_knob_status()
    const char *qg_production_cipher_name()
    enum:
        QG_CIPHER_KNOB_OK
        QG_CIPHER_KNOB_INVALID
        QG_CIPHER_KNOB_NO_AES


cdef extern from "aes256ctr.h" nogil:
    int qg_aes256ctr(const uint8_t *key, uint8_t *ctr, uint8_t *out, size_t nblocks)
    const char *qg_aes_impl()


cdef extern from "noise.h" nogil:
    enum:
        QG_GAUSSIAN
        QG_LAPLACE_L2
        QG_OK
        QG_ERR_NONFINITE
        QG_ERR_CLIP_OVERFLOW
        QG_ERR_OUTPUT_OVERFLOW
        QG_ERR_RANDOM
        QG_ERR_MEMORY
    size_t QG_NOISE_MT_MIN
    int qg_noise_set_threads(int n)
    int qg_noise_get_threads()
    void qg_noise_init()
    double qg_normal(qg_stream *s)
    void qg_normals(qg_stream *s, double *z, size_t n)
    double qg_gamma(qg_stream *s, double shape)
    int qg_noise_rows(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                      double scale, double step, double clip_norm, qg_stream *stream,
                      const uint8_t *row_keys, const uint8_t *nonce, size_t *bad_row, size_t *bad_col)
    int qg_unit_grid_nudge(double *k, double *residual, const int32_t *order32, const int64_t *order64,
                            size_t rows, size_t dim, int shift, double tol, int max_passes)
