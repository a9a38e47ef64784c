/* binarycrossentropygrad: dx = dloss * w * (x - y) / (x(1-x) + eps), the manual's formula. */
#include "port.h"

#define PORT_L1_CHUNK 256 /* elements a _p call moves from private memory (L2) to L1 at a time */

/* is_private: the _p form, one core, every buffer in its private memory (core_mask unused) */
static void bce(const char *fn, int is_half, int is_private, int n, int reduction, const void *x, const void *y,
                const void *w, const void *dloss, void *dx, int weighted, int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (n < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "input_size %d < 0", n);
        return;
    }
    if (port_check_reduction(fn, reduction))
        return;
    if (n > 0 && (!x || !y || !dloss || !dx || (weighted && !w))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn,
                  "NULL buffer (input_x, input_y, dloss, dx, or weight with "
                  "weight_defined)");
        return;
    }
    if (is_private) {
        size_t elem = is_half ? sizeof(half) : sizeof(float), nb = (size_t)n * elem;
        port_buf bufs[] = {{"input_x", x, nb},
                           {"input_y", y, nb},
                           {"weight", w, weighted ? nb : 0},
                           {"dloss", dloss,
                            n == 0                               ? 0
                            : reduction == FT78NE_REDUCTION_NONE ? nb
                                                                 : elem},
                           {"dx", dx, nb}};
        if (port_check_private(fn, bufs, 5))
            return;
    }
    if (n == 0)
        return;
    /* mean and sum share one upstream value; mean spreads it over all n elements (g / n in float: a
     * subnormal quotient may round to zero, which the tolerance contract allows) */
    float g0 = reduction == FT78NE_REDUCTION_NONE ? 0.0f : port_ld(dloss, is_half, 0);
    float scale = reduction == FT78NE_REDUCTION_MEAN ? g0 / (float)n : g0;
#ifdef BUG_BCE_MASK_CONTIGUOUS
    /* BUG: splits over cores 0..highest as if the mask were contiguous low bits; a core whose bit is
     * clear never runs, so its slice is never written (right for 0x01, 0x07, 0xff; wrong for 0x55) */
    int span = is_private ? 1 : 32 - __builtin_clz((unsigned)core_mask);
    int base = n / span;
    for (int c = 0; c < span; c++) {
        if (!is_private && !(core_mask >> c & 1))
            continue;
        int lo = c * base, hi = c == span - 1 ? n : lo + base;
#else
    int base = n / k;
    for (int c = 0; c < k; c++) { /* core c's slice; the last core also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? n : lo + base;
#endif
        for (int i = lo; i < hi; i++) {
#ifdef BUG_BCE_MEAN_PER_CHUNK
            /* BUG: _p streams its private buffers through L1 in chunks and takes mean over the chunk */
            if (is_private && reduction == FT78NE_REDUCTION_MEAN && (i - lo) % PORT_L1_CHUNK == 0)
                scale = g0 / (float)(hi - i < PORT_L1_CHUNK ? hi - i : PORT_L1_CHUNK);
#endif
            float xi = port_ld(x, is_half, i), yi = port_ld(y, is_half, i);
#ifdef BUG_BCE_EPS_CLAMP
            float denom = fmaxf(xi * (1.0f - xi), FT78NE_BCE_EPS); /* BUG: PyTorch's clamp, not the manual's + eps */
#else
            float denom = xi * (1.0f - xi) + FT78NE_BCE_EPS;
#endif
            float d = (xi - yi) / denom;
#ifdef BUG_BCE_WEIGHT_ALWAYS
            d *= port_ld(w, is_half, i); /* BUG: reads weight even when weight_defined = 0 (then it is NULL) */
#else
            if (weighted)
                d *= port_ld(w, is_half, i);
#endif
            float g = reduction == FT78NE_REDUCTION_NONE ? port_ld(dloss, is_half, i) : scale;
            port_st(dx, is_half, i, d * g);
        }
    }
#ifdef BUG_BCE_P_VECTOR_TAIL
    /* BUG: _p stores dx in 8-lane vectors: the last store writes the unused lanes (zeros) past dx */
    for (int i = n; is_private && i % 8; i++)
        port_st(dx, is_half, (size_t)i, 0.0f);
#endif
}

FT78NE_API void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined, int core_mask) {
    bce(__func__, 0, 0, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, core_mask);
}

FT78NE_API void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined, int core_mask) {
    bce(__func__, 1, 0, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, core_mask);
}

FT78NE_API void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined) {
    bce(__func__, 0, 1, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, 0);
}

FT78NE_API void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined) {
    bce(__func__, 1, 1, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined, 0);
}
