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

/* Batches of at least QG_NOISE_MT_MIN elements (rows * dim) with per-row keys or fresh noise
   are shared by up to qg_noise_get_threads() threads (one per QG_NOISE_MT_GRAIN elements at
   most), which claim about QG_NOISE_MT_CHUNK elements' worth of whole rows at a time. A worker
   draws fresh noise from its own getrandom-keyed stream and wipes it before it ends. Keyed results
   are identical to the one-thread result; errors are reported for the first failing row, as in
   one thread. A shared seeded stream is never split. The limit defaults to the CPUs this process
   may run on (at most QG_NOISE_THREADS_CAP), or to QG_NOISE_THREADS from the environment (read
   once); 1 turns threading off. */
#define QG_NOISE_MT_MIN ((size_t)1 << 20)
#define QG_NOISE_MT_GRAIN ((size_t)1 << 19)
#define QG_NOISE_MT_CHUNK ((size_t)1 << 16)
#define QG_NOISE_THREADS_CAP 8
/* Set the thread limit (n < 1: back to the default); returns the previous limit. Not
   synchronised: call it while no batch is running. */
int qg_noise_set_threads(int n);
int qg_noise_get_threads(void);

/* x: rows*dim contiguous input (float or double per is_f32); out: same layout and type.
   stream: shared stream for all rows (seeded mode) or NULL; row_keys: rows*32 bytes or NULL;
   with neither, the calling thread's production stream is used. clip_norm <= 0: no clipping. */
int qg_noise_rows(const void *x, void *out, int is_f32, size_t rows, size_t dim, int mechanism,
                  double scale, double step, double clip_norm, qg_stream *stream,
                  const uint8_t *row_keys, const uint8_t nonce[12], size_t *bad_row, size_t *bad_col);

/* The Cosine stored form's norm correction (qdrant_guard.storedform._unit_grid_rows; the reference
   is unit_grid_nudge in qdrant_guard/_noise_py.py). k: rows*dim grid integers held as exact
   doubles, corrected in place; residual: per row 2^40 - sum(k^2), updated; order: per row the
   visiting order, its coordinate index in the low `shift` bits (int32 keys when order32 is not
   NULL, else int64 in order64). Each row, for at most max_passes passes while |residual| > tol,
   visits its coordinates in that order and steps k_j by one unit away from or towards zero
   (towards closing the residual) where |residual| > max(|k_j|, tol) and k_j != 0. Returns 0, or
   -1 with nothing changed when shift is outside 1..62 or a key names a coordinate >= dim. */
int qg_unit_grid_nudge(double *k, double *residual, const int32_t *order32, const int64_t *order64,
                       size_t rows, size_t dim, int shift, double tol, int max_passes);

#endif
