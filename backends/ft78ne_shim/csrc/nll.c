/* nlllossgrad, the manual's page: logits_grad is zero except logits_grad[i, y_i] = -g * w[y_i] with
 * g = loss_grad[i] (none), loss_grad[0] (sum), loss_grad[0] / total_weight[0] (mean).
 * Reduction codes: FT78NE_NLL_REDUCTION_* (0 none, 1 sum, 2 mean; ft78ne.h explains the manual's
 * contradiction). logits is read for its size only, so it is never dereferenced (it may be NULL).
 * The manual checks labels (0 <= label < class_num): out-of-range labels are FT78NE_ERR_INDEX. */
#include "emu.h"

typedef struct {
    size_t classes;
    int reduction;
    const int *labels;
    const void *w, *dl;
    void *dx;
    double g; /* sum/mean: the scalar factor (mean: g / total_weight in double, so a tiny g cannot underflow) */
} nll_job;

EMU_INLINE void nll_body(const nll_job *j, size_t lo, size_t hi, emu_dtype dt) {
    size_t es = emu_size(dt);
    for (size_t r = lo; r < hi; r++) {
        memset((unsigned char *)j->dx + r * j->classes * es, 0, j->classes * es); /* +0.0 in both formats */
        size_t t = (size_t)j->labels[r];
        double g = j->reduction == FT78NE_NLL_REDUCTION_NONE ? emu_ld(j->dl, r, dt) : j->g;
        emu_st(j->dx, r * j->classes + t, (float)(emu_ld(j->w, t, dt) * -g), dt); /* PyTorch's order: w * (-g) */
    }
}
static void nll_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    nll_body(ctx, lo, hi, EMU_FLOAT);
}
static void nll_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    nll_body(ctx, lo, hi, EMU_HALF);
}

static void nll_run(emu_call *c, const void *dl, const int *labels, const void *w, const void *total_weight, void *dx,
                    int batch, int class_num, int reduction) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (batch < 0 || class_num < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: batch and class_num must be >= 0, got batch=%d class_num=%d", fn,
                 batch, class_num);
        return;
    }
    if (!emu_nll_reduction_valid(reduction)) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: reduction_type must be 0 (none), 1 (sum) or 2 (mean), got %d", fn,
                 reduction);
        return;
    }
    size_t n = (size_t)batch, k = (size_t)class_num, es = emu_size(dt), dx_bytes;
    if (emu_extent(c, "logits_grad (batch x class_num)", n, k, es, &dx_bytes))
        return;
    /* every label must be a class, so with rows there are classes and weight is read */
    emu_buf bufs[] = {
        {"loss_grad", dl,
         n == 0                                   ? 0
         : reduction == FT78NE_NLL_REDUCTION_NONE ? n * es
                                                  : es,
         es, EMU_IN},
        {"labels", labels, n * sizeof(int), sizeof(int), EMU_IN},
        {"weight", w, n ? k * es : 0, es, EMU_IN},
        {"total_weight", total_weight, reduction == FT78NE_NLL_REDUCTION_MEAN && n ? es : 0, es, EMU_IN},
        {"logits_grad", dx, dx_bytes, es, EMU_OUT}, /* rows are cleared before their label is read: never in place */
    };
    if (emu_check_buffers(c, bufs, 5))
        return;
    if (emu_check_labels(fn, labels, n, (uint64_t)class_num))
        return;
    if (n == 0)
        return; /* nothing to write (logits_grad may be NULL) */
    nll_job j = {k, reduction, labels, w, dl, dx, 0.0};
    if (reduction != FT78NE_NLL_REDUCTION_NONE) {
        j.g = emu_ld(dl, 0, dt);
        if (reduction == FT78NE_NLL_REDUCTION_MEAN)
            j.g = j.g / (double)emu_ld(total_weight, 0, dt); /* total_weight 0: inf/nan, as in PyTorch */
    }
    emu_dispatch(c, n, dt == EMU_HALF ? nll_task_h : nll_task_f, &j);
}

static void nll(const char *fn, emu_dtype dt, int is_private, int core_mask, const void *logits, const void *dl,
                const int *labels, const void *w, const void *total_weight, void *dx, int batch, int class_num,
                int reduction) {
    (void)logits; /* the manual: read for its size only, which batch and class_num already give */
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        nll_run(&c, dl, labels, w, total_weight, dx, batch, class_num, reduction);
    emu_end(&c);
}

FT78NE_API void fp_nlllossgrad_s(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type, int core_mask) {
    nll(__func__, EMU_FLOAT, 0, core_mask, logits, loss_grad, labels, weight, total_weight, logits_grad, batch,
        class_num, reduction_type);
}
FT78NE_API void hp_nlllossgrad_s(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type, int core_mask) {
    nll(__func__, EMU_HALF, 0, core_mask, logits, loss_grad, labels, weight, total_weight, logits_grad, batch,
        class_num, reduction_type);
}
FT78NE_API void fp_nlllossgrad_p(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type) {
    nll(__func__, EMU_FLOAT, 1, 0, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num,
        reduction_type);
}
FT78NE_API void hp_nlllossgrad_p(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type) {
    nll(__func__, EMU_HALF, 1, 0, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num,
        reduction_type);
}
