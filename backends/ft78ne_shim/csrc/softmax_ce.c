/* softmax_cross_entropy_with_logits and sparse_softmax_cross_entropy_with_logits, the manual's pages
 * (include/softmax_cross_entropy_with_logits.h, include/sparse_softmax_cross_entropy_with_logits.h).
 *
 * One row per unit of work, rows split over the cores of the mask: every result of a row comes from one core,
 * in a fixed order, so no result depends on the mask. Float arithmetic, as the DSP's: the row's max m, the
 * compensated sum s of e^(x-m), and the loss from log-probabilities (x - m) - ln s, never from ln(softmax)
 * (which underflows to -inf for a far-off class). The sparse gradient at the label is -(s - e_t)/s, the sum of
 * the other classes' terms, not p_t - 1 (which cancels when p_t is near 1). Each result rounded once. */
#include "emu.h"

#include "softmax_cross_entropy_with_logits.h"
#include "sparse_softmax_cross_entropy_with_logits.h"

typedef struct {
    size_t classes;
    int grads_on;
    const void *x, *y; /* y: dense labels (NULL for the sparse form) */
    const int *labels; /* sparse labels (NULL for the dense form) */
    void *probs, *grads, *loss, *sums, *partial;
} sce_rows_job;

EMU_INLINE void sce_row(const sce_rows_job *j, size_t r, emu_dtype dt) {
    size_t k = j->classes, base = r * k;
    float m = -INFINITY;
    for (size_t c = 0; c < k; c++) {
        float v = emu_ld(j->x, base + c, dt);
        m = v > m ? v : m;
    }
    emu_kahan s = {0.0f, 0.0f}, rest = {0.0f, 0.0f};
    size_t t = j->labels ? (size_t)j->labels[r] : 0;
    for (size_t c = 0; c < k; c++) {
        float e = expf(emu_ld(j->x, base + c, dt) - m);
        emu_kahan_add(&s, e);
        if (j->labels && c != t)
            emu_kahan_add(&rest, e);
    }
    float ls = logf(s.sum), loss;
    if (j->labels) {
        loss = ls - (emu_ld(j->x, base + t, dt) - m);
    } else {
        emu_kahan acc = {0.0f, 0.0f};
        for (size_t c = 0; c < k; c++)
            emu_kahan_add(&acc, emu_ld(j->y, base + c, dt) * ((emu_ld(j->x, base + c, dt) - m) - ls));
        loss = -acc.sum;
    }
    for (size_t c = 0; c < k; c++) {
        float p = expf(emu_ld(j->x, base + c, dt) - m) / s.sum;
        if (j->probs)
            emu_st(j->probs, base + c, p, dt);
        if (j->grads_on) {
            float g = j->labels ? (c == t ? -rest.sum / s.sum : p) : p - emu_ld(j->y, base + c, dt);
            emu_st(j->grads, base + c, g, dt);
        }
    }
    emu_st(j->loss, r, loss, dt);
    emu_st(j->sums, r, s.sum, dt);
    if (j->partial)
        emu_st(j->partial, r, loss, dt);
}
static void sce_rows_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    for (size_t r = lo; r < hi; r++)
        sce_row(ctx, r, EMU_FLOAT);
}
static void sce_rows_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    for (size_t r = lo; r < hi; r++)
        sce_row(ctx, r, EMU_HALF);
}

/* ---- softmax_cross_entropy_with_logits: dense labels -------------------------------------------------- */
static void dense(const char *fn, emu_dtype dt, int is_private, int core_mask, const void *logits, const void *labels,
                  void *probs, void *grads, void *output, void *sum_data, int batch, int classes, int need_grads) {
    emu_call c;
    if (emu_begin(&c, fn, dt, is_private, core_mask))
        goto done;
    if (batch < 0 || classes < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: batch_size and num_of_classes must be >= 0, got %d and %d", fn,
                 batch, classes);
        goto done;
    }
    if (need_grads != 0 && need_grads != 1) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: need_grads must be 0 or 1, got %d", fn, need_grads);
        goto done;
    }
    size_t n = (size_t)batch, es = emu_size(dt), nk;
    if (emu_extent(&c, "logits (batch_size x num_of_classes)", n, (size_t)classes, es, &nk))
        goto done;
    emu_buf bufs[] = {
        {"logits", logits, nk, es, EMU_IN},      {"labels", labels, nk, es, EMU_IN},
        {"probs", probs, nk, es, EMU_OUT},       {"grads", grads, need_grads ? nk : 0, es, EMU_OUT},
        {"output", output, n * es, es, EMU_OUT}, {"sum_data", sum_data, n * es, es, EMU_OUT},
    };
    if (emu_check_buffers(&c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        goto done;
    sce_rows_job j = {(size_t)classes, need_grads, logits, labels, NULL, probs, grads, output, sum_data, NULL};
    emu_dispatch(&c, n, dt == EMU_HALF ? sce_rows_h : sce_rows_f, &j);
done:
    emu_end(&c);
}

FT78NE_API void fp_softmax_cross_entropy_with_logits_s(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads, int core_mask) {
    dense(__func__, EMU_FLOAT, 0, core_mask, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes,
          need_grads);
}
FT78NE_API void hp_softmax_cross_entropy_with_logits_s(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads, int core_mask) {
    dense(__func__, EMU_HALF, 0, core_mask, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes,
          need_grads);
}
FT78NE_API void fp_softmax_cross_entropy_with_logits_p(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads) {
    dense(__func__, EMU_FLOAT, 1, 0, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes,
          need_grads);
}
FT78NE_API void hp_softmax_cross_entropy_with_logits_p(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads) {
    dense(__func__, EMU_HALF, 1, 0, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes,
          need_grads);
}

/* ---- sparse_softmax_cross_entropy_with_logits: class-index labels ------------------------------------- */
static void sparse(const char *fn, emu_dtype dt, int is_private, int core_mask, const void *input, void *losses,
                   void *sum_data, uint64_t inner, uint64_t outer, uint64_t axis, const int *labels, uint64_t is_grad,
                   void *output, uint64_t batch, uint64_t classes, void *partial) {
    emu_call c;
    if (emu_begin(&c, fn, dt, is_private, core_mask))
        goto done;
    if (inner != 1 || outer != batch || axis != classes) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                 "%s: the input must be 2-D [batch_size, number_of_classes]: inner_size 1, outter_size batch_size, "
                 "axis_size number_of_classes; got inner_size %llu, outter_size %llu, axis_size %llu, batch_size "
                 "%llu, number_of_classes %llu",
                 fn, (unsigned long long)inner, (unsigned long long)outer, (unsigned long long)axis,
                 (unsigned long long)batch, (unsigned long long)classes);
        goto done;
    }
    if (is_grad > 1) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: is_grad must be 0 or 1, got %llu", fn, (unsigned long long)is_grad);
        goto done;
    }
    if (batch > SIZE_MAX / 4 || classes > SIZE_MAX) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: batch_size x number_of_classes is too large to address", fn);
        goto done;
    }
    size_t n = (size_t)batch, k = (size_t)classes, es = emu_size(dt), nk;
    if (emu_extent(&c, "input (batch_size x number_of_classes)", n, k, es, &nk))
        goto done;
    emu_buf bufs[] = {
        {"input", input, nk, es, EMU_IN},
        {"losses", losses, n * es, es, EMU_OUT},
        {"sum_data", sum_data, n * es, es, EMU_OUT},
        {"labels", labels, n * sizeof(int), sizeof(int), EMU_IN},
        {"output", output, is_grad ? nk : 0, es, EMU_OUT},
        {"partial_losses", partial, n * es, es, EMU_OUT},
    };
    if (emu_check_buffers(&c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        goto done;
    if (emu_check_labels(fn, labels, n, classes))
        goto done;
    sce_rows_job j = {k, (int)is_grad, input, NULL, labels, NULL, output, losses, sum_data, partial};
    emu_dispatch(&c, n, dt == EMU_HALF ? sce_rows_h : sce_rows_f, &j);
done:
    emu_end(&c);
}

FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_s(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses,
                                                              int core_mask) {
    sparse(__func__, EMU_FLOAT, 0, core_mask, input, losses, sum_data, inner_size, outter_size, axis_size, labels,
           is_grad, output, batch_size, number_of_classes, partial_losses);
}
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_s(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses,
                                                              int core_mask) {
    sparse(__func__, EMU_HALF, 0, core_mask, input, losses, sum_data, inner_size, outter_size, axis_size, labels,
           is_grad, output, batch_size, number_of_classes, partial_losses);
}
FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_p(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses) {
    sparse(__func__, EMU_FLOAT, 1, 0, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad,
           output, batch_size, number_of_classes, partial_losses);
}
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_p(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses) {
    sparse(__func__, EMU_HALF, 1, 0, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad,
           output, batch_size, number_of_classes, partial_losses);
}
