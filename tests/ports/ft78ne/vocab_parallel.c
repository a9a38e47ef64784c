/* fusedlinearonlinemaxsum and fusedcrossentropylosswithmaxsum (xloss's own operators, the math of
 * CANN's aclnnFusedLinearOnlineMaxSum / aclnnFusedCrossEntropyLossWithMaxSum), fp_ and hp_:
 *   logits = input @ weight.T (float32); logits_max_local = the row max; sum_exp_logits_local =
 *   sum(exp(logits - max)); target_mask[i] = target[i] outside [vocab_start, vocab_end) (one byte
 *   per token); masked_target = target - vocab_start, 0 where masked; predicted = logits[masked_target]
 *   - max, 0 where masked. loss = log(sum_exp_logits) - predicted_logits; softmax = exp(logits -
 *   logits_max) / sum_exp_logits. One token row at a time; the logits of a row are recomputed per pass.
 * Seeded bugs here: BUG_VP_SUM_UNSHIFTED, BUG_VP_MASKED_TARGET_KEPT, BUG_VP_LOSS_HALF. */
#include "port.h" /* first: it defines FT78NE_API (exported) before the headers use it */

#include "fusedcrossentropylosswithmaxsum.h"
#include "fusedlinearonlinemaxsum.h"

static float logit(const void *x, const void *w, int is_half, int i, int r, int hidden) {
    float z = 0.0f;
    for (int k = 0; k < hidden; k++)
        z += port_ld(x, is_half, (size_t)i * hidden + k) * port_ld(w, is_half, (size_t)r * hidden + k);
    return z;
}

static void max_sum(const char *fn, int is_half, int is_private, int bt, int hidden, int vocab, const void *input,
                    const void *weight, const int *target, int start, int end, float *lmax, float *sexp, float *pred,
                    unsigned char *mask, int *mt, void *logits, int logits_defined, int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (bt < 0 || hidden < 0 || vocab <= 0 || start < 0 || end < start || (long long)end - start > vocab) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "bt %d, hidden %d, vocab %d, shard [%d, %d)", bt, hidden, vocab,
                  start, end);
        return;
    }
    size_t n = (size_t)bt, e = is_half ? sizeof(half) : sizeof(float), f = sizeof(float);
    if (bt > 0 &&
        (!input || !weight || !target || !lmax || !sexp || !pred || !mask || !mt || (logits_defined && !logits))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"input", input, n * (size_t)hidden * e},
                           {"weight", weight, bt ? (size_t)vocab * (size_t)hidden * e : 0},
                           {"target", target, n * sizeof(int)},
                           {"logits_max_local", lmax, n * f},
                           {"sum_exp_logits_local", sexp, n * f},
                           {"predicted_logits_local", pred, n * f},
                           {"target_mask", mask, n},
                           {"masked_target", mt, n * sizeof(int)},
                           {"vocab_parallel_logits", logits, logits_defined ? n * (size_t)vocab * e : 0}};
        if (port_check_private(fn, bufs, 9))
            return;
    }
    int base = bt / k;
    for (int c = 0; c < k; c++) { /* tokens of core c; the last core also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? bt : lo + base;
        for (int i = lo; i < hi; i++) {
            float m = -INFINITY, s = 0.0f;
            for (int r = 0; r < vocab; r++) {
                float z = logit(input, weight, is_half, i, r, hidden);
                m = z > m ? z : m;
                if (logits_defined)
                    port_st(logits, is_half, (size_t)i * vocab + r, z);
            }
#ifdef BUG_VP_SUM_UNSHIFTED
            /* BUG: the exponentials summed unshifted and scaled to the max afterwards (one exp per row saved):
             * exp overflows to inf above logits of ~88.7 */
            for (int r = 0; r < vocab; r++)
                s += expf(logit(input, weight, is_half, i, r, hidden));
            s *= expf(-m);
#else
            for (int r = 0; r < vocab; r++)
                s += expf(logit(input, weight, is_half, i, r, hidden) - m);
#endif
            int t = target[i], masked = t < start || t >= end;
            lmax[i] = m;
            sexp[i] = s;
            pred[i] = masked ? 0.0f : logit(input, weight, is_half, i, t - start, hidden) - m;
            mask[i] = (unsigned char)masked;
#ifdef BUG_VP_MASKED_TARGET_KEPT
            mt[i] = masked ? t : t - start; /* BUG: a masked token keeps its global target, not 0 */
#else
            mt[i] = masked ? 0 : t - start;
#endif
        }
    }
}

FT78NE_API void fp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, float *input, float *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             float *vocab_parallel_logits, int logits_defined, int core_mask) {
    max_sum(__func__, 0, 0, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
            logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
            vocab_parallel_logits, logits_defined, core_mask);
}

FT78NE_API void hp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, half *input, half *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             half *vocab_parallel_logits, int logits_defined, int core_mask) {
    max_sum(__func__, 1, 0, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
            logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
            vocab_parallel_logits, logits_defined, core_mask);
}

FT78NE_API void fp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, float *input, float *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             float *vocab_parallel_logits, int logits_defined) {
    max_sum(__func__, 0, 1, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
            logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
            vocab_parallel_logits, logits_defined, 0);
}

FT78NE_API void hp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, half *input, half *weight, int *target,
                                             int vocab_start_index, int vocab_end_index, float *logits_max_local,
                                             float *sum_exp_logits_local, float *predicted_logits_local,
                                             unsigned char *target_mask, int *masked_target,
                                             half *vocab_parallel_logits, int logits_defined) {
    max_sum(__func__, 1, 1, bt, hidden, vocab, input, weight, target, vocab_start_index, vocab_end_index,
            logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
            vocab_parallel_logits, logits_defined, 0);
}

/* ---- fusedcrossentropylosswithmaxsum ------------------------------------------------------------------------ */

static void loss(const char *fn, int is_half, int is_private, int bt, int vocab, const float *lmax, const float *sexp,
                 const float *pred, const void *logits, float *out, float *softmax, int softmax_defined,
                 int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (bt < 0 || vocab < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "bt %d and vocab %d must be >= 0", bt, vocab);
        return;
    }
    size_t n = (size_t)bt, f = sizeof(float), cells = n * (size_t)(softmax_defined ? vocab : 0);
    if (bt > 0 && (!lmax || !sexp || !pred || !out || (softmax_defined && vocab > 0 && (!logits || !softmax)))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"logits_max", lmax, n * f},
                           {"sum_exp_logits", sexp, n * f},
                           {"predicted_logits", pred, n * f},
                           {"vocab_parallel_logits", logits, cells * (is_half ? sizeof(half) : f)},
                           {"loss", out, n * f},
                           {"softmax", softmax, cells * f}};
        if (port_check_private(fn, bufs, 6))
            return;
    }
    for (int i = 0; i < bt; i++) {
        float l = logf(sexp[i]) - pred[i];
#ifdef BUG_VP_LOSS_HALF
        l = port_h2f(port_f2h(l)); /* BUG: the loss goes through a half register (the vector unit's 16-bit path) */
#endif
        out[i] = l;
        if (softmax_defined)
            for (int r = 0; r < vocab; r++)
                softmax[(size_t)i * vocab + r] =
                    expf(port_ld(logits, is_half, (size_t)i * vocab + r) - lmax[i]) / sexp[i];
    }
}

FT78NE_API void fp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, float *vocab_parallel_logits,
                                                     float *loss_out, float *softmax, int softmax_defined,
                                                     int core_mask) {
    loss(__func__, 0, 0, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss_out,
         softmax, softmax_defined, core_mask);
}

FT78NE_API void hp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, half *vocab_parallel_logits,
                                                     float *loss_out, float *softmax, int softmax_defined,
                                                     int core_mask) {
    loss(__func__, 1, 0, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss_out,
         softmax, softmax_defined, core_mask);
}

FT78NE_API void fp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, float *vocab_parallel_logits,
                                                     float *loss_out, float *softmax, int softmax_defined) {
    loss(__func__, 0, 1, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss_out,
         softmax, softmax_defined, 0);
}

FT78NE_API void hp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max, float *sum_exp_logits,
                                                     float *predicted_logits, half *vocab_parallel_logits,
                                                     float *loss_out, float *softmax, int softmax_defined) {
    loss(__func__, 1, 1, bt, vocab, logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, loss_out,
         softmax, softmax_defined, 0);
}
