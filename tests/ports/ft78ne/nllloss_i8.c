/* The int8 form of nllloss (FT78NE's i8_nllloss_s), as a port author writes it from the manual's page, which gives
 * int8_t log_probs and weight, int32_t loss and total_weight, and no overflow or rounding rule. This author sums
 * each core's slice in int64_t, adds the slices in core order, saturates to int32 and rounds the mean to nearest
 * (halves away from zero), in integers: not the emulator's truncation toward zero, which xloss's check must accept
 * too. The page shows no _p form: none is exported.
 *
 * Seeded bugs (build.py's NLL_I8_VARIANTS): BUG_NLL_I8_SUM_INT16 (the loss sum kept in int16_t, as the products
 * fit int16: a sum past 32767 wraps, in sum and mean), BUG_NLL_I8_MEAN_BY_BATCH (the mean divides by batch_size,
 * not by the weight sum; none, sum and total_weight stay right). */
#include "port.h"

#include "nllloss.h"

static int32_t sat32(int64_t v) { return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v; }

/* num / den rounded to nearest, halves away from zero (den != 0) */
static int64_t div_round(int64_t num, int64_t den) {
    if (den < 0) {
        num = -num;
        den = -den;
    }
    return num >= 0 ? (2 * num + den) / (2 * den) : -((-2 * num + den) / (2 * den));
}

FT78NE_API void i8_nllloss_s(const int8_t *log_probs, const int *labels, const int8_t *weight, int32_t *loss,
                             int32_t *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    const char *fn = __func__;
    port_begin();
    int k = port_cores(fn, core_mask);
    if (!k)
        return;
    if (batch_size < 0 || class_num < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "batch_size %d or class_num %d < 0", batch_size, class_num);
        return;
    }
    if (port_check_reduction(fn, reduction_type)) /* the page's codes: 0 none, 1 sum, 2 mean */
        return;
    if (!loss || !total_weight || (batch_size > 0 && (!log_probs || !labels || !weight))) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer");
        return;
    }
    for (int i = 0; i < batch_size; i++)
        if (labels[i] < 0 || labels[i] >= class_num) {
            port_fail(FT78NE_ERR_INDEX, fn, "labels[%d] = %d is out of range", i, labels[i]);
            return;
        }
#ifdef BUG_NLL_I8_SUM_INT16
    int16_t sum = 0; /* BUG: each product fits int16_t, their sum need not */
#else
    int64_t sum = 0;
#endif
    int64_t weights = 0;
    int base = batch_size / k;
    for (int core = 0; core < k; core++) { /* rows of core `core`; the last core also takes the remainder */
        int lo = core * base, hi = core == k - 1 ? batch_size : lo + base;
        int64_t s = 0, sw = 0;
        for (int i = lo; i < hi; i++) {
            int t = labels[i];
            int32_t l = -((int32_t)log_probs[(size_t)i * (size_t)class_num + (size_t)t] * weight[t]);
            if (reduction_type == FT78NE_NLL_REDUCTION_NONE)
                loss[i] = l;
#ifdef BUG_NLL_I8_SUM_INT16
            sum = (int16_t)(sum + l);
#else
            s += l;
#endif
            sw += weight[t];
        }
        sum += s;
        weights += sw;
    }
    if (reduction_type == FT78NE_NLL_REDUCTION_SUM)
        loss[0] = sat32(sum);
    else if (reduction_type == FT78NE_NLL_REDUCTION_MEAN) {
#ifdef BUG_NLL_I8_MEAN_BY_BATCH
        int64_t den = batch_size; /* BUG: "averaged" over the rows, not over the weight sum */
#else
        int64_t den = weights;
#endif
        loss[0] = den ? sat32(div_round(sum, den)) : 0;
    }
    total_weight[0] = sat32(weights);
}
