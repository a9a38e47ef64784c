/* nllloss and binarycrossentropy, the manual's forward pages (backends/ft78ne_shim/include/nllloss.h,
 * binarycrossentropy.h): each core of the mask takes a contiguous slice, sums pairwise in float, and the
 * slices' sums are added in core order.
 *
 * Seeded bugs here (the pages read the way an outside port author errs):
 * BUG_NLLF_MEAN_BY_BATCH (mean divides by batch_size, not the weight sum),
 * BUG_NLLF_TOTAL_WEIGHT_COUNT (total_weight counts the rows instead of adding their class weights),
 * BUG_BCEF_LOG_UNCLAMPED (no -100 clamp of the logs: inf at probabilities 0 and 1),
 * BUG_BCEF_WEIGHT_NONE_ONLY (the weight applied to the stored element losses only, not to the sums). */
#include <math.h>
#include <string.h>

#include "port.h"

#include "binarycrossentropy.h"
#include "nllloss.h"

static void nllf(const char *fn, int is_half, int is_private, const void *x, const int *labels, const void *w,
                 void *loss, void *total_weight, int batch, int class_num, int reduction, int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (batch < 0 || class_num < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "batch_size %d or class_num %d < 0", batch, class_num);
        return;
    }
    if (reduction < 0 || reduction > 2) { /* the page's codes: 0 none, 1 sum, 2 mean */
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "reduction_type %d", reduction);
        return;
    }
    if (!loss || !total_weight || (batch > 0 && (!x || !labels || !w))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    size_t es = is_half ? sizeof(half) : sizeof(float), n = (size_t)batch, c = (size_t)class_num;
    if (is_private) {
        port_buf bufs[] = {{"log_probs", x, n * c * es},
                           {"labels", labels, n * sizeof(int)},
                           {"weight", w, n ? c * es : 0},
                           {"loss", loss, reduction == FT78NE_NLL_REDUCTION_NONE ? n * es : es},
                           {"total_weight", total_weight, es}};
        if (port_check_private(fn, bufs, 5))
            return;
    }
    for (int i = 0; i < batch; i++)
        if (labels[i] < 0 || labels[i] >= class_num) {
            port_fail(FT78NE_ERR_INDEX, fn, "labels[%d] = %d is out of range", i, labels[i]);
            return;
        }
    float sum = 0.0f, weights = 0.0f;
    int base = batch / k;
    for (int core = 0; core < k; core++) { /* rows of core `core`; the last core also takes the remainder */
        int lo = core * base, hi = core == k - 1 ? batch : lo + base;
        port_pairwise s, sw;
        memset(&s, 0, sizeof s);
        memset(&sw, 0, sizeof sw);
        for (int i = lo; i < hi; i++) {
            int t = labels[i];
            float wt = port_ld(w, is_half, (size_t)t);
            float l = -(port_ld(x, is_half, (size_t)i * c + (size_t)t) * wt);
            if (reduction == FT78NE_NLL_REDUCTION_NONE)
                port_st(loss, is_half, (size_t)i, l);
            port_pairwise_add(&s, l);
#ifdef BUG_NLLF_TOTAL_WEIGHT_COUNT
            /* BUG: "the sum of all samples' weights" read as the number of samples */
            port_pairwise_add(&sw, 1.0f);
#else
            port_pairwise_add(&sw, wt);
#endif
        }
        sum += port_pairwise_sum(&s);
        weights += port_pairwise_sum(&sw);
    }
#ifdef BUG_NLLF_MEAN_BY_BATCH
    /* BUG: mean over the batch, as most losses' mean: the page's "mean by the weight sum" missed */
    float divisor = (float)batch;
#else
    float divisor = weights;
#endif
    if (reduction != FT78NE_NLL_REDUCTION_NONE)
        port_st(loss, is_half, 0, reduction == FT78NE_NLL_REDUCTION_MEAN ? sum / divisor : sum);
    port_st(total_weight, is_half, 0, weights);
}

FT78NE_API void hp_nllloss_s(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    nllf(__func__, 1, 0, log_probs, labels, weight, loss, total_weight, batch_size, class_num, reduction_type,
         core_mask);
}
FT78NE_API void fp_nllloss_s(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    nllf(__func__, 0, 0, log_probs, labels, weight, loss, total_weight, batch_size, class_num, reduction_type,
         core_mask);
}
FT78NE_API void hp_nllloss_p(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type) {
    nllf(__func__, 1, 1, log_probs, labels, weight, loss, total_weight, batch_size, class_num, reduction_type, 0);
}
FT78NE_API void fp_nllloss_p(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type) {
    nllf(__func__, 0, 1, log_probs, labels, weight, loss, total_weight, batch_size, class_num, reduction_type, 0);
}

static inline float clamp_log(float v) {
#ifdef BUG_BCEF_LOG_UNCLAMPED
    return v; /* BUG: the page's formula taken literally: log(0) = -inf, the loss inf */
#else
    return v < -100.0f ? -100.0f : v;
#endif
}

static void bcef(const char *fn, int is_half, int is_private, int n, int reduction, const void *x, const void *y,
                 const void *w, void *loss, void *tmp, int weighted, int core_mask) {
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
    if (!loss || (n > 0 && (!x || !y || !tmp || (weighted && !w)))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    size_t es = is_half ? sizeof(half) : sizeof(float), nb = (size_t)n * es;
    if (is_private) {
        port_buf bufs[] = {{"input_x", x, nb},
                           {"input_y", y, nb},
                           {"weight", w, weighted ? nb : 0},
                           {"loss", loss, reduction == FT78NE_REDUCTION_NONE ? nb : es},
                           {"tmp_loss", tmp, nb}};
        if (port_check_private(fn, bufs, 5))
            return;
    }
    float sum = 0.0f;
    int base = n / k;
    for (int core = 0; core < k; core++) {
        int lo = core * base, hi = core == k - 1 ? n : lo + base;
        port_pairwise s;
        memset(&s, 0, sizeof s);
        for (int i = lo; i < hi; i++) {
            float xi = port_ld(x, is_half, (size_t)i), yi = port_ld(y, is_half, (size_t)i);
            float l = -(yi * clamp_log(logf(xi)) + (1.0f - yi) * clamp_log(log1pf(-xi)));
            float wl = weighted ? l * port_ld(w, is_half, (size_t)i) : l;
            port_st(tmp, is_half, (size_t)i, wl);
            if (reduction == FT78NE_REDUCTION_NONE)
                port_st(loss, is_half, (size_t)i, wl);
#ifdef BUG_BCEF_WEIGHT_NONE_ONLY
            port_pairwise_add(&s, l); /* BUG: the sums add the unweighted losses */
#else
            port_pairwise_add(&s, wl);
#endif
        }
        sum += port_pairwise_sum(&s);
    }
    if (reduction != FT78NE_REDUCTION_NONE)
        port_st(loss, is_half, 0, reduction == FT78NE_REDUCTION_MEAN ? sum / (float)n : sum);
}

FT78NE_API void fp_binarycrossentropy_s(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined, int core_mask) {
    bcef(__func__, 0, 0, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined, core_mask);
}
FT78NE_API void hp_binarycrossentropy_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined, int core_mask) {
    bcef(__func__, 1, 0, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined, core_mask);
}
FT78NE_API void fp_binarycrossentropy_p(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined) {
    bcef(__func__, 0, 1, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined, 0);
}
FT78NE_API void hp_binarycrossentropy_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined) {
    bcef(__func__, 1, 1, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined, 0);
}
