/* nlllossgrad: dx is zero except dx[i, t_i] = w[t_i] * -g for rows whose target is not ignore_index,
 * g = dloss[i] (none), dloss (sum) or dloss / total_weight (mean). total_weight is float in both forms. */
#include <string.h>

#include "port.h"

static void nll(const char *fn, int is_half, int is_private, int batch, int classes, int reduction, int ignore_index,
                const void *dloss, const int *target, const void *weight, const float *total_weight, void *dx,
                int weighted, int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (batch < 0 || classes < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "batch %d and classes %d must be >= 0", batch, classes);
        return;
    }
    if (port_check_reduction(fn, reduction))
        return;
    size_t cells = (size_t)batch * (size_t)classes, elem = is_half ? sizeof(half) : sizeof(float);
    if ((batch > 0 && (!target || !dloss)) || (cells > 0 && !dx) || (weighted && classes > 0 && !weight) ||
        (reduction == FT78NE_REDUCTION_MEAN && batch > 0 && !total_weight)) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (target, dloss, dx, weight or total_weight)");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {
            {"dloss", dloss, batch == 0 ? 0 : reduction == FT78NE_REDUCTION_NONE ? (size_t)batch * elem : elem},
            {"target", target, (size_t)batch * sizeof(int)},
            {"weight", weight, weighted ? (size_t)classes * elem : 0},
            {"total_weight", total_weight, reduction == FT78NE_REDUCTION_MEAN && batch > 0 ? sizeof(float) : 0},
            {"dx", dx, cells * elem}};
        if (port_check_private(fn, bufs, 5))
            return;
    }
    for (int i = 0; i < batch; i++) { /* every index is checked before anything is written */
        int t = target[i];
        if (t != ignore_index && (t < 0 || t >= classes)) {
            port_fail(FT78NE_ERR_INDEX, fn, "target[%d] = %d is outside [0, %d) and is not ignore_index %d", i, t,
                      classes, ignore_index);
            return;
        }
    }
    double g0 = reduction == FT78NE_REDUCTION_NONE || batch == 0 ? 0.0 : port_ld(dloss, is_half, 0);
    if (reduction == FT78NE_REDUCTION_MEAN && batch > 0)
        g0 /= total_weight[0]; /* PyTorch's order: w * -(g / total_weight); 0 gives inf/NaN, as PyTorch */
    int base = batch / k;
    for (int c = 0; c < k; c++) { /* rows of core c; the last core also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? batch : lo + base;
        if (hi > lo && classes > 0) /* dx may be NULL when it is empty */
            memset((char *)dx + (size_t)lo * classes * elem, 0, (size_t)(hi - lo) * classes * elem); /* +0 */
        for (int i = lo; i < hi; i++) {
            int t = target[i];
#ifdef BUG_NLL_IGNORE_INDEX
            if (t < 0 || t >= classes) /* BUG: skips "no class" targets only: an ignore_index in [0, C) is kept */
                continue;
#else
            if (t == ignore_index)
                continue;
#endif
            double g = reduction == FT78NE_REDUCTION_NONE ? port_ld(dloss, is_half, i) : g0;
            double w = weighted ? port_ld(weight, is_half, t) : 1.0;
            port_st(dx, is_half, (size_t)i * classes + t, (float)(w * -g));
        }
    }
}

FT78NE_API void fp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, float *dloss, int *target,
                                 float *weight, float *total_weight, float *dx, int weight_defined, int core_mask) {
    nll(__func__, 0, 0, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined, core_mask);
}

FT78NE_API void hp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, half *dloss, int *target,
                                 half *weight, float *total_weight, half *dx, int weight_defined, int core_mask) {
    nll(__func__, 1, 0, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined, core_mask);
}

FT78NE_API void fp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, float *dloss, int *target,
                                 float *weight, float *total_weight, float *dx, int weight_defined) {
    nll(__func__, 0, 1, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined, 0);
}

FT78NE_API void hp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, half *dloss, int *target,
                                 half *weight, float *total_weight, half *dx, int weight_defined) {
    nll(__func__, 1, 1, batch, classes, reduction, ignore_index, dloss, target, weight, total_weight, dx,
        weight_defined, 0);
}
