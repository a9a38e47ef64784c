/* A port written from the FT78NE manual's two pages alone (binarycrossentropygrad, nlllossgrad),
 * fp_ forms only, the way a DSP author writes it: float arithmetic only, no error reporting, no
 * private-memory checks, no xloss helper (no ft78ne_emu_* / ft78ne_shim_* symbol, no shim linked).
 * An _s call runs the cores of core_mask one after another, each on a contiguous slice; a _p call
 * works on the buffers it is given (a DSP program has already placed them in private memory).
 *
 * nlllossgrad's reduction codes: the page contradicts itself. By default this port follows its
 * loss_grad text (0 none, 1 sum, 2 mean); built with -DMANUAL_NLL_PARAMETER_LIST it follows the
 * parameter list (0 sum, 1 mean, 2 none). Both read total_weight for mean only and loss_grad[i] for
 * none only, as the page says. Used by tests/ports/test_verdicts.py (issue 23). */
#include <stddef.h>

#define FT78NE_API __attribute__((visibility("default")))
#include "ft78ne.h"

#ifdef MANUAL_NLL_PARAMETER_LIST
enum { NLL_SUM = 0, NLL_MEAN = 1, NLL_NONE = 2 };
#else
enum { NLL_NONE = 0, NLL_SUM = 1, NLL_MEAN = 2 };
#endif

static int cores(int core_mask) { return core_mask > 0 ? __builtin_popcount((unsigned)core_mask & 0xffu) : 1; }

static void bce(int n, int reduction, const float *x, const float *y, const float *w, const float *dloss, float *dx,
                int weighted, int k) {
    if (n <= 0 || reduction < 0 || reduction > 2)
        return;
    float scale = reduction == FT78NE_REDUCTION_NONE   ? 0.0f
                  : reduction == FT78NE_REDUCTION_MEAN ? dloss[0] / (float)n
                                                       : dloss[0];
    int base = n / k;
    for (int c = 0; c < k; c++) {
        int lo = c * base, hi = c == k - 1 ? n : lo + base;
        for (int i = lo; i < hi; i++) {
            float d = (x[i] - y[i]) / (x[i] * (1.0f - x[i]) + FT78NE_BCE_EPS);
            if (weighted)
                d *= w[i];
            dx[i] = d * (reduction == FT78NE_REDUCTION_NONE ? dloss[i] : scale);
        }
    }
}

static void nll(const float *loss_grad, const int *labels, const float *weight, const float *total_weight,
                float *logits_grad, int batch, int class_num, int reduction, int k) {
    if (batch <= 0 || class_num <= 0 || reduction < 0 || reduction > 2)
        return;
    float g = reduction == NLL_NONE ? 0.0f : loss_grad[0];
    if (reduction == NLL_MEAN)
        g /= total_weight[0];
    int base = batch / k;
    for (int c = 0; c < k; c++) {
        int lo = c * base, hi = c == k - 1 ? batch : lo + base;
        for (int i = lo; i < hi; i++) {
            float *row = logits_grad + (size_t)i * class_num;
            for (int j = 0; j < class_num; j++)
                row[j] = 0.0f;
            int t = labels[i];
            if (t >= 0 && t < class_num)
                row[t] = weight[t] * -(reduction == NLL_NONE ? loss_grad[i] : g);
        }
    }
}

FT78NE_API void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined, int core_mask) {
    bce(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, cores(core_mask));
}

FT78NE_API void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined) {
    bce(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, 1);
}

FT78NE_API void fp_nlllossgrad_s(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type, int core_mask) {
    (void)logits;
    nll(loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type, cores(core_mask));
}

FT78NE_API void fp_nlllossgrad_p(float *logits, float *loss_grad, int *labels, float *weight, float *total_weight,
                                 float *logits_grad, int batch, int class_num, int reduction_type) {
    (void)logits;
    nll(loss_grad, labels, weight, total_weight, logits_grad, batch, class_num, reduction_type, 1);
}
