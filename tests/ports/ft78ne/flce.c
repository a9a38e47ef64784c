/* fusedlinearcrossentropylossgrad, fp32 only (no hp_ form in this port):
 *   G = softmax, or exp(input @ weight.T - logits_max) / sum_exp_logits;
 *   G[i, masked_target[i]] -= 1 where target_mask[i] == 0 (the target lies in this shard);
 *   G *= grad[:, None]; input_grad = G @ weight; weight_grad = G.T @ input.
 * One G row at a time (never the whole BT x V matrix). The _p form adds into the outputs when
 * `accumulate` is nonzero (the caller tiles tokens and vocabulary rows and sums the tiles). */
#include <stdlib.h>
#include <string.h>

#include "port.h"

static void flce(const char *fn, int is_private, int bt, int hidden, int vocab, const float *grad, const float *input,
                 const float *weight, const unsigned char *target_mask, const int *masked_target,
                 const float *logits_max, const float *sum_exp_logits, const float *softmax, float *input_grad,
                 float *weight_grad, int softmax_defined, int core_mask, int accumulate) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (bt < 0 || hidden < 0 || vocab < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "bt %d, hidden %d and vocab %d must be >= 0", bt, hidden, vocab);
        return;
    }
    int tokens = bt > 0, rows_x = bt > 0 && hidden > 0, rows_w = vocab > 0 && hidden > 0;
    if ((tokens && (!grad || !target_mask || !masked_target)) || (rows_x && (!input || !input_grad)) ||
        (rows_w && (!weight || !weight_grad)) ||
        (softmax_defined ? (tokens && vocab > 0 && !softmax) : (tokens && (!logits_max || !sum_exp_logits)))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    if (is_private) {
        size_t f = sizeof(float), n = (size_t)bt, x = n * (size_t)hidden * f, w = (size_t)vocab * (size_t)hidden * f;
        port_buf bufs[] = {{"grad", grad, n * f},
                           {"input", input, x},
                           {"weight", weight, w},
                           {"target_mask", target_mask, n},
                           {"masked_target", masked_target, n * sizeof(int)},
                           {"logits_max", logits_max, softmax_defined ? 0 : n * f},
                           {"sum_exp_logits", sum_exp_logits, softmax_defined ? 0 : n * f},
                           {"softmax", softmax, softmax_defined ? n * (size_t)vocab * f : 0},
                           {"input_grad", input_grad, x},
                           {"weight_grad", weight_grad, w}};
        if (port_check_private(fn, bufs, 10))
            return;
    }
#ifdef BUG_FLCE_ACCUMULATE_IGNORED
    accumulate = 0; /* BUG: the _p form copied from _s: it overwrites where the caller asked it to add */
#endif
    for (int i = 0; i < bt; i++) {
        if (!target_mask[i] && (masked_target[i] < 0 || masked_target[i] >= vocab)) {
            port_fail(FT78NE_ERR_INDEX, fn, "masked_target[%d] = %d is outside [0, %d) for a token in this shard", i,
                      masked_target[i], vocab);
            return;
        }
    }
    float *g = malloc(sizeof(float) * (size_t)(vocab > 0 ? vocab : 1));     /* one row of G */
    float *acc = malloc(sizeof(float) * (size_t)(hidden > 0 ? hidden : 1)); /* one row of input_grad */
    if (!g || !acc) {
        free(g);
        free(acc);
        port_fail(FT78NE_ERR_NO_MEMORY, fn, "no host memory for a row of G");
        return;
    }
    if (rows_w && !accumulate)
        memset(weight_grad, 0, sizeof(float) * (size_t)vocab * hidden);
    int base = bt / k;
    for (int c = 0; c < k; c++) { /* tokens of core c; the last core also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? bt : lo + base;
        for (int i = lo; i < hi; i++) {
            const float *xi = input + (size_t)i * hidden;
            for (int v = 0; v < vocab; v++) {
                if (softmax_defined) {
                    g[v] = softmax[(size_t)i * vocab + v];
                } else {
                    const float *wv = weight + (size_t)v * hidden;
                    float logit = 0.0f;
                    for (int h = 0; h < hidden; h++)
                        logit += xi[h] * wv[h];
                    g[v] = expf(logit - logits_max[i]) / sum_exp_logits[i];
                }
            }
#ifdef BUG_FLCE_MASKED_ROWS
            int t = masked_target[i];
            if (t >= 0 && t < vocab) /* BUG: guards the index, not the mask: masked tokens are corrected too */
                g[t] -= 1.0f;
#else
            if (!target_mask[i])
                g[masked_target[i]] -= 1.0f;
#endif
            for (int h = 0; h < hidden; h++)
                acc[h] = 0.0f;
#ifdef BUG_FLCE_INPUT_IN_PLACE
            /* BUG: folds grad[i] into the token's input row in place (one multiply per element saved
             * in the weight_grad update) and never undoes it: the caller's `input` is changed */
            float *xs = (float *)xi;
            for (int h = 0; h < hidden; h++)
                xs[h] *= grad[i];
#endif
            for (int v = 0; v < vocab; v++) {
                float gv = g[v] * grad[i];
                const float *wv = weight + (size_t)v * hidden;
                float *wg = weight_grad + (size_t)v * hidden;
                for (int h = 0; h < hidden; h++) {
                    acc[h] += gv * wv[h];
#ifdef BUG_FLCE_INPUT_IN_PLACE
                    wg[h] += g[v] * xi[h];
#else
                    wg[h] += gv * xi[h];
#endif
                }
            }
            for (int h = 0; h < hidden; h++) {
                float *out = &input_grad[(size_t)i * hidden + h];
                *out = accumulate ? acc[h] + *out : acc[h];
            }
        }
    }
    free(g);
    free(acc);
}

FT78NE_API void fp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int core_mask) {
    flce(__func__, 0, bt, hidden, vocab, grad, input, weight, target_mask, masked_target, logits_max, sum_exp_logits,
         softmax, input_grad, weight_grad, softmax_defined, core_mask, 0);
}

FT78NE_API void fp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, float *input,
                                                     float *weight, unsigned char *target_mask, int *masked_target,
                                                     float *logits_max, float *sum_exp_logits, float *softmax,
                                                     float *input_grad, float *weight_grad, int softmax_defined,
                                                     int accumulate) {
    flce(__func__, 1, bt, hidden, vocab, grad, input, weight, target_mask, masked_target, logits_max, sum_exp_logits,
         softmax, input_grad, weight_grad, softmax_defined, 0, accumulate);
}
