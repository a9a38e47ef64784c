/* nlllossgrad, written from the manual's page: logits_grad is zero except
 * logits_grad[i, y_i] = w[y_i] * -g with g = loss_grad[i] (none), loss_grad[0] (sum) or
 * loss_grad[0] / total_weight[0] (mean). logits is read for its size only; labels must lie in
 * [0, class_num). Reduction codes: 0 none, 1 sum, 2 mean (the page's loss_grad text); built with
 * PORT_NLL_CODES_SUM_MEAN_NONE, the page's parameter list instead (0 sum, 1 mean, 2 none). */
#include <string.h>

#include "port.h"

#ifdef PORT_NLL_CODES_SUM_MEAN_NONE
enum { NLL_SUM = 0, NLL_MEAN = 1, NLL_NONE = 2 };
#else
enum { NLL_NONE = FT78NE_NLL_REDUCTION_NONE, NLL_SUM = FT78NE_NLL_REDUCTION_SUM, NLL_MEAN = FT78NE_NLL_REDUCTION_MEAN };
#endif

static void nll(const char *fn, int is_half, int is_private, const void *logits, const void *loss_grad,
                const int *labels, const void *weight, const void *total_weight, void *logits_grad, int batch,
                int class_num, int reduction, int core_mask) {
    (void)logits;
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (batch < 0 || class_num < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "batch %d and class_num %d must be >= 0", batch, class_num);
        return;
    }
    if (reduction < 0 || reduction > 2) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "reduction_type %d is not 0, 1 or 2", reduction);
        return;
    }
    size_t cells = (size_t)batch * (size_t)class_num, elem = is_half ? sizeof(half) : sizeof(float);
    if (batch > 0 && (!labels || !loss_grad || !logits_grad || !weight || (reduction == NLL_MEAN && !total_weight))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (labels, loss_grad, weight, total_weight or logits_grad)");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"loss_grad", loss_grad,
                            batch == 0              ? 0
                            : reduction == NLL_NONE ? (size_t)batch * elem
                                                    : elem},
                           {"labels", labels, (size_t)batch * sizeof(int)},
                           {"weight", weight, batch ? (size_t)class_num * elem : 0},
                           {"total_weight", total_weight, reduction == NLL_MEAN && batch > 0 ? elem : 0},
                           {"logits_grad", logits_grad, cells * elem}};
        if (port_check_private(fn, bufs, 5))
            return;
    }
    for (int i = 0; i < batch; i++) { /* every label is checked before anything is written */
        int t = labels[i];
        if (t < 0 || t >= class_num) {
            port_fail(FT78NE_ERR_INDEX, fn, "labels[%d] = %d is outside [0, %d)", i, t, class_num);
            return;
        }
    }
    float g0 = reduction == NLL_NONE || batch == 0 ? 0.0f : port_ld(loss_grad, is_half, 0);
    if (reduction == NLL_MEAN && batch > 0) {
#ifdef BUG_NLL_MEAN_BY_BATCH
        g0 /= (float)batch; /* BUG: the mean of the rows, where the manual divides by total_weight (the weight sum) */
#else
        g0 /= port_ld(total_weight, is_half, 0); /* PyTorch's order: w * -(g / total_weight) */
#endif
    }
    int base = batch / k;
    for (int c = 0; c < k; c++) { /* rows of core c; the last core also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? batch : lo + base;
        size_t rows = (size_t)(hi - lo);
#ifdef BUG_NLL_ROW_PAST_END
        size_t clear = (rows + 1) * class_num; /* BUG: clears one row too many: past the end on the last core */
#else
        size_t clear = rows * class_num;
#endif
#ifdef BUG_NLL_FILL_U16
        clear = (uint16_t)clear; /* BUG: the zero-fill DMA's element count is 16 bits: wraps above 65535 */
#endif
        if (rows > 0 && class_num > 0)
            memset((char *)logits_grad + (size_t)lo * class_num * elem, 0, clear * elem); /* +0 */
        for (int i = lo; i < hi; i++) {
            int t = labels[i];
            float g = reduction == NLL_NONE ? port_ld(loss_grad, is_half, i) : g0;
            port_st(logits_grad, is_half, (size_t)i * class_num + t, port_ld(weight, is_half, t) * -g);
        }
    }
}

FT78NE_API void fp_nlllossgrad_s(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type, int core_mask) {
    nll(__func__, 0, 0, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type,
        core_mask);
}

FT78NE_API void hp_nlllossgrad_s(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type, int core_mask) {
    nll(__func__, 1, 0, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type,
        core_mask);
}

FT78NE_API void fp_nlllossgrad_p(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type) {
    nll(__func__, 0, 1, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type,
        0);
}

FT78NE_API void hp_nlllossgrad_p(half *logits, half *loss_grad, int *labels, half *weight, half *total_weight,
                                 half *logits_grad, int batch, int class_num, int reduction_type) {
    nll(__func__, 1, 1, logits, loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type,
        0);
}
