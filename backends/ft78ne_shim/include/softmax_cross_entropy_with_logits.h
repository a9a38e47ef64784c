/* The manual's softmax_cross_entropy_with_logits page (`#include <softmax_cross_entropy_with_logits.h>`), its fp_
 * and hp_ forms (its int8 form is not emulated). Per row i of the row-major batch_size x num_of_classes logits:
 *   probs[i][j] = softmax(logits[i])[j]; output[i] = -sum_j labels[i][j] log probs[i][j];
 *   grads[i][j] = probs[i][j] - labels[i][j] when need_grads is 1 (0: grads is not touched).
 * sum_data is the page's workspace "for row sums": batch_size elements (ASSUMED: the page gives no size; the
 * emulator leaves each row's sum of exp(logits - max) there). The page calls output "usually a scalar or each
 * sample's loss": its formula is per row, and so is this library (batch_size elements). The page spells the
 * hp_ element type float16: the same IEEE binary16 as `half` here. Signatures verbatim from the page (the _s
 * forms); the _p forms are ASSUMED: the stored page is cut off before them; they are the _s list without
 * core_mask, as every other operator's. */
#ifndef SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H
#define SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

FT78NE_API void fp_softmax_cross_entropy_with_logits_s(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads, int core_mask);
FT78NE_API void hp_softmax_cross_entropy_with_logits_s(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads, int core_mask);
/* ASSUMED: the _s list without core_mask */
FT78NE_API void fp_softmax_cross_entropy_with_logits_p(float *logits, float *labels, float *probs, float *grads,
                                                       float *output, float *sum_data, int batch_size,
                                                       int num_of_classes, int need_grads);
FT78NE_API void hp_softmax_cross_entropy_with_logits_p(half *logits, half *labels, half *probs, half *grads,
                                                       half *output, half *sum_data, int batch_size, int num_of_classes,
                                                       int need_grads);

#ifdef __cplusplus
}
#endif

#endif
