/* nlllossgrad: dx is zero except dx[i, t_i] = -w[t_i] * g for rows whose target is not
 * ignore_index; g = dloss[i] (none), dloss[0] (sum), dloss[0] / total_weight (mean). */
#include "emu.h"

typedef struct {
    size_t classes;
    int reduction, ignore, has_w;
    const int *target;
    const void *w, *dl;
    void *dx;
    double g; /* mean/sum: the scalar factor (mean: g / total_weight in double, so a tiny g cannot underflow) */
} nll_job;

EMU_INLINE void nll_body(const nll_job *j, size_t lo, size_t hi, emu_dtype dt) {
    size_t es = emu_size(dt);
    for (size_t r = lo; r < hi; r++) {
        memset((unsigned char *)j->dx + r * j->classes * es, 0, j->classes * es); /* +0.0 in both formats */
        int t = j->target[r];
        if (t == j->ignore)
            continue;
        double g = j->reduction == FT78NE_REDUCTION_NONE ? emu_ld(j->dl, r, dt) : j->g;
        double v = j->has_w ? emu_ld(j->w, (size_t)t, dt) * -g : -g; /* PyTorch's order: w * (-g) */
        emu_st(j->dx, r * j->classes + (size_t)t, (float)v, dt);
    }
}
static void nll_task_f(void *ctx, size_t lo, size_t hi, int rank) { (void)rank; nll_body(ctx, lo, hi, EMU_FLOAT); }
static void nll_task_h(void *ctx, size_t lo, size_t hi, int rank) { (void)rank; nll_body(ctx, lo, hi, EMU_HALF); }

static void nll_run(emu_call *c, int batch, int classes, int reduction, int ignore_index, const void *dl,
                    const int *target, const void *w, const float *total_weight, void *dx, int weight_defined) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (batch < 0 || classes < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: batch and classes must be >= 0, got batch=%d classes=%d", fn, batch,
                 classes);
        return;
    }
    if (reduction < 0 || reduction > 2) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", fn,
                 reduction);
        return;
    }
    size_t n = (size_t)batch, k = (size_t)classes, es = emu_size(dt), dx_bytes;
    if (emu_extent(c, "dx (batch x classes)", n, k, es, &dx_bytes))
        return;
    emu_buf bufs[] = {
        {"dloss", dl, n == 0 ? 0 : reduction == FT78NE_REDUCTION_NONE ? n * es : es, es, EMU_IN},
        {"target", target, n * sizeof(int), sizeof(int), EMU_IN},
        {"weight", w, weight_defined ? k * es : 0, es, EMU_IN},
        {"total_weight", total_weight, reduction == FT78NE_REDUCTION_MEAN && n ? sizeof(float) : 0, sizeof(float),
         EMU_IN},
        {"dx", dx, dx_bytes, es, EMU_OUT}, /* rows are cleared before their target is read: never in place */
    };
    if (emu_check_buffers(c, bufs, 5))
        return;
    for (size_t r = 0; r < n; r++) { /* every target before any write */
        int t = target[r];
        if (t != ignore_index && (t < 0 || t >= classes)) {
            emu_fail(FT78NE_ERR_INDEX,
                     "%s: target[%zu] = %d is out of range: class indices must lie in [0, %d) or equal "
                     "ignore_index=%d",
                     fn, r, t, classes, ignore_index);
            return;
        }
    }
    if (k == 0)
        return; /* every row is ignored and dx is empty: nothing to write (dx may be NULL) */
    nll_job j = {k, reduction, ignore_index, weight_defined != 0, target, w, dl, dx, 0.0};
    if (reduction != FT78NE_REDUCTION_NONE && n) {
        j.g = emu_ld(dl, 0, dt);
        if (reduction == FT78NE_REDUCTION_MEAN)
            j.g = j.g / (double)*total_weight; /* total_weight 0: inf/nan, as in PyTorch */
    }
    emu_dispatch(c, n, dt == EMU_HALF ? nll_task_h : nll_task_f, &j);
}

static void nll(const char *fn, emu_dtype dt, int is_private, int core_mask, int batch, int classes, int reduction,
                int ignore_index, const void *dl, const int *target, const void *w, const float *total_weight,
                void *dx, int weight_defined) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        nll_run(&c, batch, classes, reduction, ignore_index, dl, target, w, total_weight, dx, weight_defined);
    emu_end(&c);
}

FT78NE_API void fp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, float *dloss,
                                 int *target, float *weight, float *total_weight, float *dx, int weight_defined,
                                 int core_mask) {
    nll(__func__, EMU_FLOAT, 0, core_mask, batch, classes, reduction, ignore_index, dloss, target, weight,
        total_weight, dx, weight_defined);
}
FT78NE_API void hp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, half *dloss,
                                 int *target, half *weight, float *total_weight, half *dx, int weight_defined,
                                 int core_mask) {
    nll(__func__, EMU_HALF, 0, core_mask, batch, classes, reduction, ignore_index, dloss, target, weight,
        total_weight, dx, weight_defined);
}
FT78NE_API void fp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, float *dloss,
                                 int *target, float *weight, float *total_weight, float *dx, int weight_defined) {
    nll(__func__, EMU_FLOAT, 1, 0, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined);
}
FT78NE_API void hp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, half *dloss,
                                 int *target, half *weight, float *total_weight, half *dx, int weight_defined) {
    nll(__func__, EMU_HALF, 1, 0, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined);
}
