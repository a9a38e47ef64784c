/* sigmoidfocalloss and sigmoidfocallossgrad (xloss SPEC, kernel 1), computed in float.
 *
 * p = sigmoid(x) and s = 1 - p are both taken from exp(-|x|), so neither cancels; ce is a sum of
 * non-negative parts; q^(gamma-1) is never formed (it is infinite at q = 0 for gamma < 1): the
 * gradient uses q^gamma * r with r = p*s/q, which lies in [0, 1]. */
#include "port.h"

typedef struct {
    float loss, dx; /* dx for an upstream gradient of 1 */
} focal_value;

static focal_value focal_element(float x, float y, float alpha, float gamma) {
    float e = expf(-fabsf(x));
    float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
    float p = x >= 0 ? big : small, s = x >= 0 ? small : big;
    float ce = (x > 0 ? x * (1.0f - y) : -x * y) + log1pf(e);
    float q = p * (1.0f - y) + s * y;
    float at = alpha >= 0 ? alpha * y + (1.0f - alpha) * (1.0f - y) : 1.0f; /* alpha < 0: no class weight */
    float qg = powf(q, gamma);                                              /* powf(0, 0) = 1 */
    float r = q > 0 ? p * s / q : 1.0f;                                     /* its limit where q = 0 */
#ifdef BUG_FOCAL_GAMMA_SIGN
    float dq = 2.0f * y - 1.0f; /* BUG: sign slip: d q / d p is 1 - 2y */
#else
    float dq = 1.0f - 2.0f * y;
#endif
    focal_value v;
    v.loss = at * ce * qg;
    v.dx = at * ((p * (1.0f - y) - s * y) * qg + gamma * qg * r * dq * ce);
    return v;
}

/* The checks both operators share; nonzero when the call was refused. is_private: the _p form (one
 * core; its buffers are checked by the caller once it knows their extents). */
static int focal_check(const char *fn, int *k, int is_private, int n, int reduction, float alpha, float gamma,
                       int core_mask) {
    port_begin();
    *k = is_private ? 1 : port_cores(fn, core_mask);
    if (!*k)
        return 1;
    if (n < 0)
        return port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "input_size %d < 0", n);
    if (port_check_reduction(fn, reduction))
        return 1;
    if (!isfinite(alpha) || alpha > 1.0f)
        return port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "alpha %g must be finite and <= 1", (double)alpha);
    if (!isfinite(gamma) || gamma < 0.0f)
        return port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "gamma %g must be finite and >= 0", (double)gamma);
    return 0;
}

static void focal_loss(const char *fn, int is_half, int is_private, int n, int reduction, float alpha, float gamma,
                       const void *x, const void *y, void *loss, int core_mask) {
    int k;
    if (focal_check(fn, &k, is_private, n, reduction, alpha, gamma, core_mask))
        return;
    if ((n > 0 && (!x || !y)) || ((n > 0 || reduction != FT78NE_REDUCTION_NONE) && !loss)) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (input_x, input_y or loss)");
        return;
    }
    if (is_private) {
        size_t elem = is_half ? sizeof(half) : sizeof(float), nb = (size_t)n * elem;
        port_buf bufs[] = {
            {"input_x", x, nb}, {"input_y", y, nb}, {"loss", loss, reduction == FT78NE_REDUCTION_NONE ? nb : elem}};
        if (port_check_private(fn, bufs, 3))
            return;
    }
    float total = 0.0f; /* per-core partial sums (pairwise within a core), added in core order */
#ifdef BUG_FOCAL_SUM_RACE
    /* BUG: each core adds its partial into loss[0] with an unsynchronised read-modify-write; all
     * cores read loss[0] before any of them writes (no barrier), so only the last write survives */
    if (reduction != FT78NE_REDUCTION_NONE)
        port_st(loss, is_half, 0, 0.0f);
    float seen = reduction != FT78NE_REDUCTION_NONE ? port_ld(loss, is_half, 0) : 0.0f;
#endif
    int base = n / k;
    for (int c = 0; c < k; c++) {
        int lo = c * base;
#ifdef BUG_LAST_SLICE
        int hi = lo + base; /* BUG: the last core stops at its equal share: the n % k tail is never computed */
#else
        int hi = c == k - 1 ? n : lo + base;
#endif
        port_pairwise part = {0};
        for (int i = lo; i < hi; i++) {
            float l = focal_element(port_ld(x, is_half, i), port_ld(y, is_half, i), alpha, gamma).loss;
            if (reduction == FT78NE_REDUCTION_NONE)
                port_st(loss, is_half, i, l);
            else
                port_pairwise_add(&part, l);
        }
#ifdef BUG_FOCAL_SUM_RACE
        total = seen + port_pairwise_sum(&part);
#else
        total += port_pairwise_sum(&part);
#endif
    }
    if (reduction == FT78NE_REDUCTION_MEAN)
        port_st(loss, is_half, 0, n ? total / (float)n : NAN); /* the mean of nothing is NaN */
    else if (reduction == FT78NE_REDUCTION_SUM)
        port_st(loss, is_half, 0, total);
}

static void focal_grad(const char *fn, int is_half, int is_private, int n, int reduction, float alpha, float gamma,
                       const void *x, const void *y, const void *dloss, void *dx, int core_mask) {
    int k;
    if (focal_check(fn, &k, is_private, n, reduction, alpha, gamma, core_mask))
        return;
    if (n > 0 && (!x || !y || !dloss || !dx)) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (input_x, input_y, dloss or dx)");
        return;
    }
    if (is_private) {
        size_t elem = is_half ? sizeof(half) : sizeof(float), nb = (size_t)n * elem;
        port_buf bufs[] = {{"input_x", x, nb},
                           {"input_y", y, nb},
                           {"dloss", dloss,
                            n == 0                               ? 0
                            : reduction == FT78NE_REDUCTION_NONE ? nb
                                                                 : elem},
                           {"dx", dx, nb}};
        if (port_check_private(fn, bufs, 4))
            return;
    }
    if (n == 0)
        return;
    float g0 = reduction == FT78NE_REDUCTION_NONE ? 0.0f : port_ld(dloss, is_half, 0);
    int base = n / k;
    for (int c = 0; c < k; c++) {
        int lo = c * base, hi = c == k - 1 ? n : lo + base;
        /* mean: one upstream value spread over all n elements (g0 / n in float, as the chip computes) */
#ifdef BUG_MEAN_PER_SLICE
        float scale = reduction == FT78NE_REDUCTION_MEAN ? g0 / (float)(hi - lo) : g0; /* BUG: this core's count */
#else
        float scale = reduction == FT78NE_REDUCTION_MEAN ? g0 / (float)n : g0;
#endif
        for (int i = lo; i < hi; i++) {
            float d = focal_element(port_ld(x, is_half, i), port_ld(y, is_half, i), alpha, gamma).dx;
            float g = reduction == FT78NE_REDUCTION_NONE ? port_ld(dloss, is_half, i) : scale;
            port_st(dx, is_half, i, d * g);
        }
    }
}

FT78NE_API void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss, int core_mask) {
    focal_loss(__func__, 0, 0, input_size, reduction, alpha, gamma, input_x, input_y, loss, core_mask);
}

FT78NE_API void hp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss, int core_mask) {
    focal_loss(__func__, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, loss, core_mask);
}

FT78NE_API void fp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                          float *input_y, float *dloss, float *dx, int core_mask) {
    focal_grad(__func__, 0, 0, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx, core_mask);
}

FT78NE_API void hp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx, int core_mask) {
    focal_grad(__func__, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx, core_mask);
}

FT78NE_API void fp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss) {
    focal_loss(__func__, 0, 1, input_size, reduction, alpha, gamma, input_x, input_y, loss, 0);
}

FT78NE_API void hp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss) {
    focal_loss(__func__, 1, 1, input_size, reduction, alpha, gamma, input_x, input_y, loss, 0);
}

FT78NE_API void fp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                          float *input_y, float *dloss, float *dx) {
    focal_grad(__func__, 0, 1, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx, 0);
}

FT78NE_API void hp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx) {
    focal_grad(__func__, 1, 1, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx, 0);
}
