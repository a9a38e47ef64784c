/* sigmoidcrossentropywithlogits and sigmoidcrossentropywithlogitsgrad, as a port author writes them from the
 * manual's pages: per element, no reduction; an _s call gives each core of core_mask a contiguous slice.
 *
 * Seeded bugs here (build.py's BCE_WITH_LOGITS_VARIANTS): BUG_SCE_LITERAL_LOG (the page's
 * -[y ln p + (1-y) ln(1-p)] as written: ln 0 once sigmoid rounds to 0 or 1), BUG_SCE_SPLIT_BY_EIGHT (the
 * forward's slices cut for eight cores whatever the mask: a core the mask leaves out never writes its
 * slice), BUG_SCE_GRAD_LITERAL (sigmoid(x) - y by subtraction: near 0 every digit is lost),
 * BUG_SCE_GRAD_ONE_SIDED (e^x / (1 + e^x) for every x, the page's x <= 0 form: inf / inf above 88). */
#include "port.h"

static float sce_loss(float x, float y) {
#ifdef BUG_SCE_LITERAL_LOG
    float p = 1.0f / (1.0f + expf(-x)); /* BUG: the formula as the page prints it */
    return -(y * logf(p) + (1.0f - y) * logf(1.0f - p));
#else
    return (x > 0.0f ? x * (1.0f - y) : -x * y) + log1pf(expf(-fabsf(x)));
#endif
}

static float sce_grad(float x, float y) {
#if defined(BUG_SCE_GRAD_ONE_SIDED)
    float ex = expf(x); /* BUG: one form for every x */
    return ex / (1.0f + ex) - y;
#elif defined(BUG_SCE_GRAD_LITERAL)
    float p = x > 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
    return p - y; /* BUG: the page's sigmoid(x) - y by subtraction */
#else
    float e = expf(-fabsf(x)), big = 1.0f / (1.0f + e), small = e * big;
    float p = x >= 0.0f ? big : small, s = x >= 0.0f ? small : big;
    return (1.0f - y) * p - y * s; /* = sigmoid(x) - y, each term in full precision */
#endif
}

static void sce(const char *fn, int is_half, int is_private, int grad, const void *x, const void *y, void *out, int n,
                int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (n < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "length %d < 0", n);
        return;
    }
    if (n > 0 && (!x || !y || !out)) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (input0, input1 or output)");
        return;
    }
    if (is_private) {
        size_t nb = (size_t)n * (is_half ? sizeof(half) : sizeof(float));
        port_buf bufs[] = {{"input0", x, nb}, {"input1", y, nb}, {"output", out, nb}};
        if (port_check_private(fn, bufs, 3))
            return;
    }
#ifdef BUG_SCE_SPLIT_BY_EIGHT
    int slices = grad ? k : 8; /* BUG: the forward cuts eight slices and runs the first k */
#else
    int slices = k;
#endif
    int base = n / slices;
    for (int c = 0; c < k; c++) { /* core c's slice; the last slice also takes the remainder */
        int lo = c * base, hi = c == slices - 1 ? n : lo + base;
        for (int i = lo; i < hi; i++) {
            float xi = port_ld(x, is_half, (size_t)i), yi = port_ld(y, is_half, (size_t)i);
            port_st(out, is_half, (size_t)i, grad ? sce_grad(xi, yi) : sce_loss(xi, yi));
        }
    }
}

FT78NE_API void fp_sigmoidcrossentropywithlogits_s(float *input0, float *input1, float *output, int length,
                                                   int core_mask) {
    sce(__func__, 0, 0, 0, input0, input1, output, length, core_mask);
}
FT78NE_API void hp_sigmoidcrossentropywithlogits_s(half *input0, half *input1, half *output, int length,
                                                   int core_mask) {
    sce(__func__, 1, 0, 0, input0, input1, output, length, core_mask);
}
FT78NE_API void fp_sigmoidcrossentropywithlogits_p(float *input0, float *input1, float *output, int length) {
    sce(__func__, 0, 1, 0, input0, input1, output, length, 0);
}
FT78NE_API void hp_sigmoidcrossentropywithlogits_p(half *input0, half *input1, half *output, int length) {
    sce(__func__, 1, 1, 0, input0, input1, output, length, 0);
}
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_s(float *Input0, float *Input1, float *output, int length,
                                                       int core_mask) {
    sce(__func__, 0, 0, 1, Input0, Input1, output, length, core_mask);
}
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_s(half *Input0, half *Input1, half *output, int length,
                                                       int core_mask) {
    sce(__func__, 1, 0, 1, Input0, Input1, output, length, core_mask);
}
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_p(float *Input0, float *Input1, float *output, int length) {
    sce(__func__, 0, 1, 1, Input0, Input1, output, length, 0);
}
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_p(half *Input0, half *Input1, half *output, int length) {
    sce(__func__, 1, 1, 1, Input0, Input1, output, length, 0);
}
