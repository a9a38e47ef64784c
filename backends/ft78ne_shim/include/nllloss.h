/* The manual's nllloss page (`#include <nllloss.h>`), its fp_ and hp_ forms (its int8 form is not emulated):
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

#ifdef __cplusplus
}
#endif

#endif
