/* fusedlinearcrossentropylossgrad for one vocabulary shard:
 *   G[i,v] = softmax[i,v]  or  exp(input_i . weight_v - logits_max[i]) / sum_exp_logits[i]
 *   G[i, masked_target[i]] -= 1 where target_mask[i] == 0;  G[i,:] *= grad[i]
 *   input_grad = G @ weight (bt x hidden), weight_grad = G^T @ input (vocab x hidden)
 *
 * G is never stored: pass 1 makes each input_grad row (v ascending), pass 2 each weight_grad row
 * (i ascending), recomputing G. Each output row is summed in a float32 row accumulator in that
 * fixed order, starting from the output's current value when accumulating (_p) — so a caller
 * tiling the rows or the vocabulary and accumulating gets the untiled sums exactly (fp_), and
 * no result depends on the core mask. */
#include "emu.h"

#include <stdlib.h>

typedef struct {
    size_t bt, h, v;
    const float *grad, *lm, *se, *sm;
    const void *x, *w;
    const unsigned char *mask;
    const int *mt;
    void *ig, *wg;
    int softmax, accumulate;
    float *scratch; /* one row of h floats per rank */
} flce_job;

EMU_INLINE float flce_g(const flce_job *j, size_t i, size_t v, emu_dtype dt) {
    float g;
    if (j->softmax)
        g = j->sm[i * j->v + v];
    else
        g = expf(emu_dot_rows(j->x, j->w, i, v, j->h, dt) - j->lm[i]) / j->se[i];
    if (!j->mask[i] && (size_t)j->mt[i] == v)
        g -= 1.0f;
    return g * j->grad[i];
}

/* acc += g * row (h elements); restrict lets the float32 form vectorize. */
EMU_INLINE void flce_axpy(float *restrict acc, float g, const void *row, size_t h, emu_dtype dt) {
    if (dt == EMU_FLOAT) {
        const float *restrict r = row;
        for (size_t k = 0; k < h; k++)
            acc[k] += g * r[k];
    } else {
        for (size_t k = 0; k < h; k++)
            acc[k] += g * emu_ld(row, k, dt);
    }
}

EMU_INLINE void input_rows(const flce_job *j, size_t lo, size_t hi, int rank, emu_dtype dt) {
    float *acc = j->scratch + (size_t)rank * j->h;
    for (size_t i = lo; i < hi; i++) {
        for (size_t k = 0; k < j->h; k++)
            acc[k] = j->accumulate ? emu_ld(j->ig, i * j->h + k, dt) : 0.0f;
        for (size_t v = 0; v < j->v; v++)
            flce_axpy(acc, flce_g(j, i, v, dt), (const char *)j->w + v * j->h * emu_size(dt), j->h, dt);
        for (size_t k = 0; k < j->h; k++)
            emu_st(j->ig, i * j->h + k, acc[k], dt);
    }
}

EMU_INLINE void weight_rows(const flce_job *j, size_t lo, size_t hi, int rank, emu_dtype dt) {
    float *acc = j->scratch + (size_t)rank * j->h;
    for (size_t v = lo; v < hi; v++) {
        for (size_t k = 0; k < j->h; k++)
            acc[k] = j->accumulate ? emu_ld(j->wg, v * j->h + k, dt) : 0.0f;
        for (size_t i = 0; i < j->bt; i++)
            flce_axpy(acc, flce_g(j, i, v, dt), (const char *)j->x + i * j->h * emu_size(dt), j->h, dt);
        for (size_t k = 0; k < j->h; k++)
            emu_st(j->wg, v * j->h + k, acc[k], dt);
    }
}

static void in_task_f(void *ctx, size_t lo, size_t hi, int rank) { input_rows(ctx, lo, hi, rank, EMU_FLOAT); }
static void in_task_h(void *ctx, size_t lo, size_t hi, int rank) { input_rows(ctx, lo, hi, rank, EMU_HALF); }
static void w_task_f(void *ctx, size_t lo, size_t hi, int rank) { weight_rows(ctx, lo, hi, rank, EMU_FLOAT); }
static void w_task_h(void *ctx, size_t lo, size_t hi, int rank) { weight_rows(ctx, lo, hi, rank, EMU_HALF); }

static void flce_run(emu_call *c, int bt, int hidden, int vocab, const float *grad, const void *input,
                     const void *weight, const unsigned char *target_mask, const int *masked_target,
                     const float *logits_max, const float *sum_exp_logits, const float *softmax, void *input_grad,
                     void *weight_grad, int softmax_defined, int accumulate) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (bt < 0 || hidden < 0 || vocab < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: bt, hidden and vocab must be >= 0, got bt=%d hidden=%d vocab=%d", fn,
                 bt, hidden, vocab);
        return;
    }
    size_t n = (size_t)bt, h = (size_t)hidden, v = (size_t)vocab, es = emu_size(dt), fs = sizeof(float);
    size_t x_bytes, w_bytes, sm_bytes;
    if (emu_extent(c, "input (bt x hidden)", n, h, es, &x_bytes) ||
        emu_extent(c, "weight (vocab x hidden)", v, h, es, &w_bytes) ||
        emu_extent(c, "softmax (bt x vocab)", n, v, fs, &sm_bytes))
        return;
    emu_buf bufs[] = {
        {"grad", grad, n * fs, fs, EMU_IN},
        {"input", input, x_bytes, es, EMU_IN},
        {"weight", weight, w_bytes, es, EMU_IN},
        {"target_mask", target_mask, n, 1, EMU_IN},
        {"masked_target", masked_target, n * sizeof(int), sizeof(int), EMU_IN},
        {"logits_max", logits_max, softmax_defined ? 0 : n * fs, fs, EMU_IN},
        {"sum_exp_logits", sum_exp_logits, softmax_defined ? 0 : n * fs, fs, EMU_IN},
        {"softmax", softmax, softmax_defined ? sm_bytes : 0, fs, EMU_IN},
        {"input_grad", input_grad, x_bytes, es, EMU_OUT},   /* rows are re-read while summed: never in place */
        {"weight_grad", weight_grad, w_bytes, es, EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        return;
    for (size_t i = 0; i < n; i++) { /* the rows whose target is in this shard index G */
        if (!target_mask[i] && (masked_target[i] < 0 || masked_target[i] >= vocab)) {
            emu_fail(FT78NE_ERR_INDEX,
                     "%s: masked_target[%zu] = %d is out of range [0, vocab=%d) for a token whose target_mask is 0", fn,
                     i, masked_target[i], vocab);
            return;
        }
    }
    if (!h)
        return; /* both outputs are empty */
    flce_job j = {n,
                  h,
                  v,
                  grad,
                  logits_max,
                  sum_exp_logits,
                  softmax,
                  input,
                  weight,
                  target_mask,
                  masked_target,
                  input_grad,
                  weight_grad,
                  softmax_defined != 0,
                  c->is_private && accumulate != 0,
                  NULL};
    /* row accumulators: private memory for _p (it is that core's memory), host memory for _s */
    size_t bytes = (size_t)emu_max_ranks(c) * h * fs;
    j.scratch = c->is_private ? emu_private_scratch(c, bytes) : malloc(bytes);
    if (!j.scratch) {
        if (!c->is_private)
            emu_fail(FT78NE_ERR_NO_MEMORY, "%s: no host memory for %zu bytes of row accumulators", fn, bytes);
        return;
    }
    emu_dispatch(c, n, dt == EMU_HALF ? in_task_h : in_task_f, &j);
    emu_dispatch(c, v, dt == EMU_HALF ? w_task_h : w_task_f, &j);
    if (c->is_private)
        emu_private_release(c->core, j.scratch);
    else
        free(j.scratch);
}

static void flce(const char *fn, emu_dtype dt, int is_private, int core_mask, int bt, int hidden, int vocab,
                 const float *grad, const void *input, const void *weight, const unsigned char *target_mask,
                 const int *masked_target, const float *logits_max, const float *sum_exp_logits, const float *softmax,
                 void *input_grad, void *weight_grad, int softmax_defined, int accumulate) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        flce_run(&c, bt, hidden, vocab, grad, input, weight, target_mask, masked_target, logits_max, sum_exp_logits,
                 softmax, input_grad, weight_grad, softmax_defined, accumulate);
    emu_end(&c);
}

FT78NE_API void fp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int core_mask) {
    flce(__func__, EMU_FLOAT, 0, core_mask, bt, hidden, vocab, grad, input, weight, target_mask, masked_target,
         logits_max, sum_exp_logits, softmax, input_grad, weight_grad, softmax_defined, 0);
}
FT78NE_API void hp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, half *input,
                                                     half *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     half *input_grad, half *weight_grad, int softmax_defined,
                                                     int core_mask) {
    flce(__func__, EMU_HALF, 0, core_mask, bt, hidden, vocab, grad, input, weight, target_mask, masked_target,
         logits_max, sum_exp_logits, softmax, input_grad, weight_grad, softmax_defined, 0);
}
FT78NE_API void fp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int accumulate) {
    flce(__func__, EMU_FLOAT, 1, 0, bt, hidden, vocab, grad, input, weight, target_mask, masked_target, logits_max,
         sum_exp_logits, softmax, input_grad, weight_grad, softmax_defined, accumulate);
}
FT78NE_API void hp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, half *input,
                                                     half *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     half *input_grad, half *weight_grad, int softmax_defined,
                                                     int accumulate) {
    flce(__func__, EMU_HALF, 1, 0, bt, hidden, vocab, grad, input, weight, target_mask, masked_target, logits_max,
         sum_exp_logits, softmax, input_grad, weight_grad, softmax_defined, accumulate);
}
