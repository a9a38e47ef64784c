/* The manual's nllloss page (`#include <nllloss.h>`), its fp_, hp_ and int8 forms:
 *   loss[i] = -log_probs[i][labels[i]] * weight[labels[i]]          (batch_size x class_num log-probabilities)
 *   reduction_type 0 None: loss has batch_size elements; 1 Sum, 2 Mean (over the weight sum): loss[0] only;
 *   total_weight[0] = the sum of weight[labels[i]] over the batch. Labels must lie in [0, class_num): no
 *   ignore_index (the adapter leaves ignored rows out of the call). Signatures verbatim from the page (the
 *   _s forms); the _p forms are ASSUMED: the page shows none; they are the same list without core_mask, as
 *   every other operator's. */
#ifndef NLLLOSS_H
#define NLLLOSS_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

FT78NE_API void hp_nllloss_s(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type, int core_mask);
FT78NE_API void fp_nllloss_s(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type, int core_mask);
/* ASSUMED: the _s list without core_mask */
FT78NE_API void hp_nllloss_p(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type);
FT78NE_API void fp_nllloss_p(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type);

/* The int8 form, FT78NE only ("FT78NE supports fp, int8"; MT7004 hp, fp), verbatim from the page: int8_t
 * log_probs and weight, int32_t loss and total_weight. The page shows no _p form for any dtype: none is declared
 * here for int8. The page gives no scale, no overflow rule and no rounding for the mean ("averaged over the weight
 * sum"). XLOSS'S CHOICE, NOT THE VENDOR'S: the values are the integers themselves; each loss is exact in int32;
 * the sums are exact and saturated to int32; the mean is the exact sum divided by the exact weight sum, truncated
 * toward zero (C's integer division), saturated; a mean over a zero weight sum writes 0. xloss's check of this
 * form accepts a mean rounded to either neighbouring integer. */
FT78NE_API void i8_nllloss_s(const int8_t *log_probs, const int *labels, const int8_t *weight, int32_t *loss,
                             int32_t *total_weight, int batch_size, int class_num, int reduction_type, int core_mask);

#ifdef __cplusplus
}
#endif

#endif
