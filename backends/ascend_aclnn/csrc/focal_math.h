/* The sigmoid-focal-loss terms in float32, shared by xloss's own focal operators
 * (ops_elementwise.c) and the DrivingSDK-ABI ones (ops_focal_drivingsdk.c). */
#ifndef XLOSS_EMU_FOCAL_MATH_H_
#define XLOSS_EMU_FOCAL_MATH_H_

#include <float.h>
#include <math.h>

typedef struct {
    float ce, qg, r, pmy;
} focal_terms;

/* p = sigmoid(x), s = 1 - p, q = 1 - p_t, ce = bce_with_logits, qg = q^gamma, r = p*s/q (the
 * finite limit of q^(gamma-1)*p*s / q^gamma), pmy = p - y. Where the smaller sigmoid is
 * subnormal in float32 (|x| > 87.3) it has lost its precision, so q^gamma and r come from logs. */
static inline focal_terms focal_eval(float x, float y, float gamma)
{
    focal_terms t;
    float ax = fabsf(x);
    float e = expf(-ax);
    float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
    int pos = x >= 0.0f;
    float p = pos ? big : small, s = pos ? small : big;
    float q = p * (1.0f - y) + s * y;
    float lin = x > 0.0f ? x * (1.0f - y) : -x * y;
    t.ce = lin + log1pf(e);
    t.pmy = p * (1.0f - y) - s * y;
    if (e >= FLT_MIN) {
        t.qg = powf(q, gamma); /* powf(0, 0) == 1, as torch */
        t.r = q > 0.0f ? (p * s) / q : 1.0f;
        return t;
    }
    float l1p = log1pf(e);
    float log_big = -l1p, log_small = -ax - l1p;
    float log_p = pos ? log_big : log_small, log_s = pos ? log_small : log_big;
    float a = y < 1.0f ? log_p + log1pf(-y) : -INFINITY; /* log(p (1-y)) */
    float b = y > 0.0f ? log_s + logf(y) : -INFINITY;    /* log(s y) */
    float hi = fmaxf(a, b), lo = fminf(a, b);
    float log_q = hi == -INFINITY ? -INFINITY : hi + log1pf(expf(lo - hi));
    t.qg = gamma == 0.0f ? 1.0f : expf(gamma * log_q);
    t.r = log_q == -INFINITY ? 1.0f : fminf(1.0f, expf(log_p + log_s - log_q));
    return t;
}

#endif
