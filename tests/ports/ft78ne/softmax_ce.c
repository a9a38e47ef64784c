/* softmax_cross_entropy_with_logits and sparse_softmax_cross_entropy_with_logits, as a port author writes them from
 * the manual's pages: one row per unit of work, an _s call gives each core of core_mask a contiguous slice of rows.
 *
 * Seeded bugs here (build.py's SOFTMAX_CE_VARIANTS): BUG_SMCE_NO_MAX (the pages' softmax as printed, e^x over the
 * sum of e^x, no max subtracted: inf / inf for large logits), BUG_SMCE_SPLIT_BY_EIGHT (the dense rows cut for eight
 * cores whatever the mask: rows of a core the mask leaves out are never written), BUG_SMCE_LABELS_SUM_TO_ONE (the
 * dense loss as ln s + m - sum y x, true only when a row of labels sums to 1), BUG_SMCE_SUM_OF_FIRST_ROW (the sparse
 * row sum hoisted out of the core's row loop: every row of a slice normalised by its first row's sum); in the sparse
 * gradient only (is_grad = 1, the cross-entropy gradient row): BUG_SMCE_GRAD_NO_ONE_HOT (the softmax written as the
 * gradient, the label's 1 never subtracted), BUG_SMCE_GRAD_SLICE_ROWS (gradient rows addressed within the core's
 * slice, as in a private tile, in the _s form too: the slices overwrite the first rows, the others are never
 * written).
 * PORT_SMCE_SCALAR_LOSS (not a bug): the pages' other reading, one mean loss per call in output[0] / losses[0]
 * (xloss's option softmax_ce_losses=one). */
#include "port.h"

#include "softmax_cross_entropy_with_logits.h"
#include "sparse_softmax_cross_entropy_with_logits.h"

/* Row r: its max m (0 with BUG_SMCE_NO_MAX) and the sum s of e^(x - m). */
static void row_stats(const void *x, int h, size_t r, size_t k, float *m, float *s) {
    float mx = -INFINITY, sum = 0.0f;
    for (size_t c = 0; c < k; c++) {
        float v = port_ld(x, h, r * k + c);
        mx = v > mx ? v : mx;
    }
#ifdef BUG_SMCE_NO_MAX
    mx = 0.0f; /* BUG: e^x as the page prints it */
#endif
    for (size_t c = 0; c < k; c++)
        sum += expf(port_ld(x, h, r * k + c) - mx);
    *m = mx;
    *s = sum;
}

/* ---- dense ---------------------------------------------------------------------------------------------- */
static float dense_row(const void *x, const void *y, void *probs, void *grads, void *sums, int h, size_t r, size_t k,
                       int need_grads) {
    float m, s;
    row_stats(x, h, r, k, &m, &s);
    float ls = logf(s), loss = 0.0f;
#ifdef BUG_SMCE_LABELS_SUM_TO_ONE
    for (size_t c = 0; c < k; c++) /* BUG: -sum y (x - m - ln s) = ln s + m - sum y x only if sum y = 1 */
        loss -= port_ld(y, h, r * k + c) * port_ld(x, h, r * k + c);
    loss += ls + m;
#else
    for (size_t c = 0; c < k; c++)
        loss -= port_ld(y, h, r * k + c) * ((port_ld(x, h, r * k + c) - m) - ls);
#endif
    for (size_t c = 0; c < k; c++) {
        float p = expf(port_ld(x, h, r * k + c) - m) / s;
        port_st(probs, h, r * k + c, p);
        if (need_grads)
            port_st(grads, h, r * k + c, p - port_ld(y, h, r * k + c));
    }
    port_st(sums, h, r, s);
    return loss;
}

static void dense(const char *fn, int h, int is_private, void *x, void *y, void *probs, void *grads, void *out,
                  void *sums, int n, int k, int need_grads, int core_mask) {
    port_begin();
    int cores = is_private ? 1 : port_cores(fn, core_mask);
    if (!cores)
        return;
    if (n < 0 || k < 0 || (need_grads != 0 && need_grads != 1)) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "batch_size %d, num_of_classes %d, need_grads %d", n, k, need_grads);
        return;
    }
    size_t es = h ? sizeof(half) : sizeof(float), nk = (size_t)n * (size_t)k * es;
    if (n > 0 && (!x || !y || !probs || !out || !sums || (need_grads && !grads))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"logits", x, nk},
                           {"labels", y, nk},
                           {"probs", probs, nk},
                           {"grads", grads, need_grads ? nk : 0},
                           {"output", out, (size_t)n * es},
                           {"sum_data", sums, (size_t)n * es}};
        if (port_check_private(fn, bufs, 6))
            return;
    }
#ifdef BUG_SMCE_SPLIT_BY_EIGHT
    int slices = is_private ? 1 : 8; /* BUG: eight slices whatever the mask; the first `cores` run */
#else
    int slices = cores;
#endif
    int base = n / slices;
    float total = 0.0f;
    for (int c = 0; c < cores && c < slices; c++) {
        int lo = c * base, hi = c == slices - 1 ? n : lo + base;
        for (int r = lo; r < hi; r++) {
            float loss = dense_row(x, y, probs, grads, sums, h, (size_t)r, (size_t)k, need_grads);
            total += loss;
#ifndef PORT_SMCE_SCALAR_LOSS
            port_st(out, h, (size_t)r, loss);
#endif
        }
    }
#ifdef PORT_SMCE_SCALAR_LOSS
    if (n > 0) /* the page's "usually a scalar": one mean loss per call */
        port_st(out, h, 0, total / (float)n);
#else
    (void)total;
#endif
}

FT78NE_API void fp_softmax_cross_entropy_with_logits_s(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads, int core_mask) {
    dense(__func__, 0, 0, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes, need_grads,
          core_mask);
}
FT78NE_API void hp_softmax_cross_entropy_with_logits_s(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads, int core_mask) {
    dense(__func__, 1, 0, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes, need_grads,
          core_mask);
}
FT78NE_API void fp_softmax_cross_entropy_with_logits_p(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads) {
    dense(__func__, 0, 1, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes, need_grads, 0);
}
FT78NE_API void hp_softmax_cross_entropy_with_logits_p(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads) {
    dense(__func__, 1, 1, logits, labels, probs, grads, output, sum_data, batch_size, num_of_classes, need_grads, 0);
}

/* ---- sparse --------------------------------------------------------------------------------------------- */
static void sparse(const char *fn, int h, int is_private, void *x, void *losses, void *sums, uint64_t inner,
                   uint64_t outer, uint64_t axis, const int *labels, uint64_t is_grad, void *out, uint64_t batch,
                   uint64_t classes, void *partial, int core_mask) {
    port_begin();
    int cores = is_private ? 1 : port_cores(fn, core_mask);
    if (!cores)
        return;
    if (inner != 1 || outer != batch || axis != classes || is_grad > 1 || batch > INT32_MAX || classes > INT32_MAX) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "shape arguments disagree or is_grad is not 0/1");
        return;
    }
    size_t n = (size_t)batch, k = (size_t)classes, es = h ? sizeof(half) : sizeof(float);
    if (n > 0 && (!x || !losses || !sums || !labels || !partial || (is_grad && !out))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"input", x, n * k * es},
                           {"losses", losses, n * es},
                           {"sum_data", sums, n * es},
                           {"labels", labels, n * sizeof(int)},
                           {"output", out, is_grad ? n * k * es : 0},
                           {"partial_losses", partial, n * es}};
        if (port_check_private(fn, bufs, 6))
            return;
    }
    for (size_t r = 0; r < n; r++)
        if (labels[r] < 0 || (uint64_t)labels[r] >= classes) {
            port_fail(FT78NE_ERR_INDEX, fn, "labels[%zu] = %d", r, labels[r]);
            return;
        }
    size_t base = n / (size_t)cores;
    float total = 0.0f;
    for (int c = 0; c < cores; c++) {
        size_t lo = (size_t)c * base, hi = c == cores - 1 ? n : lo + base;
        float m = 0.0f, s = 0.0f;
        for (size_t r = lo; r < hi; r++) {
#ifdef BUG_SMCE_SUM_OF_FIRST_ROW
            if (r == lo) /* BUG: the slice's first row's statistics for every row */
                row_stats(x, h, r, k, &m, &s);
#else
            row_stats(x, h, r, k, &m, &s);
#endif
            size_t t = (size_t)labels[r];
            float ls = logf(s), loss = ls - (port_ld(x, h, r * k + t) - m);
#ifdef PORT_SMCE_SCALAR_LOSS
            total += loss;
#else
            port_st(losses, h, r, loss);
#endif
            port_st(partial, h, r, loss);
            port_st(sums, h, r, s);
            if (is_grad) {
#ifdef BUG_SMCE_GRAD_SLICE_ROWS
                size_t at = (r - lo) * k; /* BUG: the row within the core's slice, as in a private tile */
#else
                size_t at = r * k;
#endif
                for (size_t j = 0; j < k; j++) {
                    float p = expf(port_ld(x, h, r * k + j) - m) / s;
#ifdef BUG_SMCE_GRAD_NO_ONE_HOT
                    port_st(out, h, at + j, p); /* BUG: the softmax alone, the label's 1 never subtracted */
#else
                    port_st(out, h, at + j, j == t ? p - 1.0f : p);
#endif
                }
            }
        }
    }
#ifdef PORT_SMCE_SCALAR_LOSS
    if (n > 0)
        port_st(losses, h, 0, total / (float)n);
#else
    (void)total;
#endif
}

FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_s(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses,
                                                              int core_mask) {
    sparse(__func__, 0, 0, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad, output,
           batch_size, number_of_classes, partial_losses, core_mask);
}
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_s(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses,
                                                              int core_mask) {
    sparse(__func__, 1, 0, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad, output,
           batch_size, number_of_classes, partial_losses, core_mask);
}
FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_p(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses) {
    sparse(__func__, 0, 1, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad, output,
           batch_size, number_of_classes, partial_losses, 0);
}
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_p(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses) {
    sparse(__func__, 1, 1, input, losses, sum_data, inner_size, outter_size, axis_size, labels, is_grad, output,
           batch_size, number_of_classes, partial_losses, 0);
}
