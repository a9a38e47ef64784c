/* OURS: the vocabulary-parallel cross-entropy forward (fusedlinearonlinemaxsum.h,
 * fusedcrossentropylosswithmaxsum.h), the math of CANN ops-nn's aclnnFusedLinearOnlineMaxSum and
 * aclnnFusedCrossEntropyLossWithMaxSum in the DSP calling convention.
 *
 * Each token row is one unit of work: its logits are recomputed per pass (max, then sum of exp) with
 * the same fixed-order dot product, so no scratch is needed and no result depends on the core mask.
 * Statistics come from the float32 logits; each output is rounded once. */
#include "emu.h"
#include "fusedcrossentropylosswithmaxsum.h"
#include "fusedlinearonlinemaxsum.h"

typedef struct {
    size_t h, v;
    const void *x, *w;
    const int *target;
    long long start, end;
    float *lmax, *sexp, *pred;
    unsigned char *mask;
    int *mt;
    void *logits; /* NULL: not wanted */
} ms_job;

EMU_INLINE void ms_rows(const ms_job *j, size_t lo, size_t hi, emu_dtype dt) {
    for (size_t i = lo; i < hi; i++) {
        float m = -INFINITY, s = 0.0f;
        for (size_t r = 0; r < j->v; r++) {
            float l = emu_dot_rows(j->x, j->w, i, r, j->h, dt);
            m = l > m ? l : m;
            if (j->logits)
                emu_st(j->logits, i * j->v + r, l, dt);
        }
        for (size_t r = 0; r < j->v; r++)
            s += expf(emu_dot_rows(j->x, j->w, i, r, j->h, dt) - m);
        long long t = j->target[i];
        int masked = t < j->start || t >= j->end; /* checked: end - start <= v */
        j->lmax[i] = m;
        j->sexp[i] = s;
        j->pred[i] = masked ? 0.0f : emu_dot_rows(j->x, j->w, i, (size_t)(t - j->start), j->h, dt) - m;
        j->mask[i] = (unsigned char)masked;
        j->mt[i] = masked ? 0 : (int)(t - j->start);
    }
}
static void ms_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    ms_rows(ctx, lo, hi, EMU_FLOAT);
}
static void ms_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    ms_rows(ctx, lo, hi, EMU_HALF);
}

static void ms_run(emu_call *c, int bt, int hidden, int vocab, const void *input, const void *weight, const int *target,
                   int start, int end, float *lmax, float *sexp, float *pred, unsigned char *mask, int *mt,
                   void *logits, int logits_defined) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (bt < 0 || hidden < 0 || vocab <= 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                 "%s: need bt >= 0, hidden >= 0 and vocab > 0, got bt=%d hidden=%d "
                 "vocab=%d",
                 fn, bt, hidden, vocab);
        return;
    }
    if (start < 0 || end < start || (long long)end - start > vocab) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                 "%s: need 0 <= vocab_start_index <= vocab_end_index <= "
                 "vocab_start_index + vocab, got %d, %d (vocab=%d)",
                 fn, start, end, vocab);
        return;
    }
    size_t n = (size_t)bt, h = (size_t)hidden, v = (size_t)vocab, es = emu_size(dt), fs = sizeof(float);
    size_t x_bytes, w_bytes, l_bytes;
    if (emu_extent(c, "input (bt x hidden)", n, h, es, &x_bytes) ||
        emu_extent(c, "weight (vocab x hidden)", v, h, es, &w_bytes) ||
        emu_extent(c, "vocab_parallel_logits (bt x vocab)", n, v, es, &l_bytes))
        return;
    emu_buf bufs[] = {
        {"input", input, x_bytes, es, EMU_IN},
        {"weight", weight, w_bytes, es, EMU_IN},
        {"target", target, n * sizeof(int), sizeof(int), EMU_IN},
        {"logits_max_local", lmax, n * fs, fs, EMU_OUT},
        {"sum_exp_logits_local", sexp, n * fs, fs, EMU_OUT},
        {"predicted_logits_local", pred, n * fs, fs, EMU_OUT},
        {"target_mask", mask, n, 1, EMU_OUT},
        {"masked_target", mt, n * sizeof(int), sizeof(int), EMU_OUT},
        {"vocab_parallel_logits", logits, logits_defined ? l_bytes : 0, es, EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        return;
    ms_job j = {h, v, input, weight, target, start, end, lmax, sexp, pred, mask, mt, logits_defined ? logits : NULL};
    emu_dispatch(c, n, dt == EMU_HALF ? ms_task_h : ms_task_f, &j);
}

static void ms(const char *fn, emu_dtype dt, int is_private, int core_mask, int bt, int hidden, int vocab,
               const void *input, const void *weight, const int *target, int start, int end, float *lmax, float *sexp,
               float *pred, unsigned char *mask, int *mt, void *logits, int logits_defined) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        ms_run(&c, bt, hidden, vocab, input, weight, target, start, end, lmax, sexp, pred, mask, mt, logits,
               logits_defined);
    emu_end(&c);
}

FT78NE_API void fp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, float *input, float *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             float *vocab_parallel_logits, int logits_defined, int core_mask) {
    ms(__func__, EMU_FLOAT, 0, core_mask, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
       logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
       vocab_parallel_logits, logits_defined);
}
FT78NE_API void hp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, half *input, half *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             half *vocab_parallel_logits, int logits_defined, int core_mask) {
    ms(__func__, EMU_HALF, 0, core_mask, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
       logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
       vocab_parallel_logits, logits_defined);
}
FT78NE_API void fp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, float *input, float *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             float *vocab_parallel_logits, int logits_defined) {
    ms(__func__, EMU_FLOAT, 1, 0, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
       logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
       vocab_parallel_logits, logits_defined);
}
FT78NE_API void hp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, half *input, half *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             half *vocab_parallel_logits, int logits_defined) {
    ms(__func__, EMU_HALF, 1, 0, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
       logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
       vocab_parallel_logits, logits_defined);
}

/* ---- fusedcrossentropylosswithmaxsum --------------------------------------------------------------------- */

typedef struct {
    size_t v;
    const float *lmax, *sexp, *pred;
    const void *logits; /* NULL: no softmax */
    float *loss, *softmax;
} ce_job;

EMU_INLINE void ce_rows(const ce_job *j, size_t lo, size_t hi, emu_dtype dt) {
    for (size_t i = lo; i < hi; i++) {
        double m = j->lmax[i], s = j->sexp[i];
        j->loss[i] = (float)(log(s) - (double)j->pred[i]);
        if (j->logits)
            for (size_t r = 0; r < j->v; r++)
                j->softmax[i * j->v + r] = (float)(exp((double)emu_ld(j->logits, i * j->v + r, dt) - m) / s);
    }
}
static void ce_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    ce_rows(ctx, lo, hi, EMU_FLOAT);
}
static void ce_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    ce_rows(ctx, lo, hi, EMU_HALF);
}

static void ce_run(emu_call *c, int bt, int vocab, const float *lmax, const float *sexp, const float *pred,
                   const void *logits, float *loss, float *softmax, int softmax_defined) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (bt < 0 || vocab < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: bt and vocab must be >= 0, got bt=%d vocab=%d", fn, bt, vocab);
        return;
    }
    size_t n = (size_t)bt, v = (size_t)vocab, es = emu_size(dt), fs = sizeof(float);
    size_t l_bytes, s_bytes;
    if (emu_extent(c, "vocab_parallel_logits (bt x vocab)", n, v, es, &l_bytes) ||
        emu_extent(c, "softmax (bt x vocab)", n, v, fs, &s_bytes))
        return;
    emu_buf bufs[] = {
        {"logits_max", lmax, n * fs, fs, EMU_IN},
        {"sum_exp_logits", sexp, n * fs, fs, EMU_IN},
        {"predicted_logits", pred, n * fs, fs, EMU_IN},
        {"vocab_parallel_logits", logits, softmax_defined ? l_bytes : 0, es, EMU_IN},
        {"loss", loss, n * fs, fs, EMU_OUT},
        {"softmax", softmax, softmax_defined ? s_bytes : 0, fs, EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        return;
    ce_job j = {v, lmax, sexp, pred, softmax_defined ? logits : NULL, loss, softmax};
    emu_dispatch(c, n, dt == EMU_HALF ? ce_task_h : ce_task_f, &j);
}

static void ce(const char *fn, emu_dtype dt, int is_private, int core_mask, int bt, int vocab, const float *lmax,
               const float *sexp, const float *pred, const void *logits, float *loss, float *softmax,
               int softmax_defined) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        ce_run(&c, bt, vocab, lmax, sexp, pred, logits, loss, softmax, softmax_defined);
    emu_end(&c);
}

FT78NE_API void fp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, float *vocab_parallel_logits, float *loss,
                                                     float *softmax, int softmax_defined, int core_mask) {
    ce(__func__, EMU_FLOAT, 0, core_mask, bt, vocab, logits_max, sum_exp_logits, predicted_logits,
       vocab_parallel_logits, loss, softmax, softmax_defined);
}
FT78NE_API void hp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, half *vocab_parallel_logits, float *loss,
                                                     float *softmax, int softmax_defined, int core_mask) {
    ce(__func__, EMU_HALF, 0, core_mask, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits,
       loss, softmax, softmax_defined);
}
FT78NE_API void fp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, float *vocab_parallel_logits, float *loss,
                                                     float *softmax, int softmax_defined) {
    ce(__func__, EMU_FLOAT, 1, 0, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss,
       softmax, softmax_defined);
}
FT78NE_API void hp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, half *vocab_parallel_logits, float *loss,
                                                     float *softmax, int softmax_defined) {
    ce(__func__, EMU_HALF, 1, 0, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss,
       softmax, softmax_defined);
}
