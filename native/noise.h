/* Samplers and the batch noise kernel. The consumption of keystream words is specified in
   qdrant_guard/_noise_py.py; this file must follow it exactly. */
#ifndef QG_NOISE_H
#define QG_NOISE_H

#include <stddef.h>
#include <stdint.h>

#include "chacha20.h"

enum { QG_GAUSSIAN = 0, QG_LAPLACE_L2 = 1 };

enum {
    QG_OK = 0,
    QG_ERR_NONFINITE = 1,   /* input NaN/Inf at (*bad_row, *bad_col) */
    QG_ERR_CLIP_OVERFLOW = 2, /* squared norm of row *bad_row overflows */
    QG_ERR_OUTPUT_OVERFLOW = 3, /* noised value at (*bad_row, *bad_col) is not finite */
    QG_ERR_RANDOM = 4,      /* the OS gave no randomness; errno value in *bad_col */
    QG_ERR_MEMORY = 5
};

/* Precompute the scaled Ziggurat table; call once before sampling from several threads. */
void qg_noise_init(void);
double qg_normal(qg_stream *s);
/* n consecutive qg_normal() samples (same words, same values), vectorised where the CPU allows. */
void qg_normals(qg_stream *s, double *z, size_t n);
double qg_gamma(qg_stream *s, double shape);

/* x: rows*dim contiguous input (float or double per is_f32); out: same layout and type.
   stream: shared stream for all rows (seeded mode) or NULL; row_keys: rows*32 bytes or NULL;
   with neither, the calling thread's production stream is used. clip_norm <= 0: no clipping. */
int qg_noise_rows(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                  double scale, double step, double clip_norm, qg_stream *stream,
                  const uint8_t *row_keys, const uint8_t nonce[12], size_t *bad_row, size_t *bad_col);

#endif
