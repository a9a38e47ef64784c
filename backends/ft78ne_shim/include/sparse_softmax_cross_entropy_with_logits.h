/* The manual's sparse_softmax_cross_entropy_with_logits page (`#include <sparse_softmax_cross_entropy_with_logits.h>`),
 * fp_ (FT78NE, MT7004) and hp_ (MT7004; labels stay int). Per row i of the N x C logits `input`, with class
 * index labels[i] in [0, C):
 *   losses[i] = -log softmax(input[i])[labels[i]];
 *   output[i][j] = softmax(input[i])[j] - (j == labels[i]) when is_grad is 1 (0: output is not touched).
 * The page describes a 2-D input three ways: inner_size 1, outter_size N, axis_size C, and batch_size N,
 * number_of_classes C; the library requires them to agree (FT78NE_ERR_INVALID_ARGUMENT otherwise). losses holds
 * batch_size elements (the page's formula is per row; it gives no shape). sum_data (batch_size elements) and
 * partial_losses (batch_size elements) are the page's workspaces (sizes ASSUMED: the page gives none).
 * The _s signatures are the page's up to number_of_classes; partial_losses and core_mask follow in the order of
 * its parameter list (the stored page is cut off there: ASSUMED); the _p forms are ASSUMED: the _s list without
 * core_mask. */
#ifndef SPARSE_SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H
#define SPARSE_SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_s(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses,
                                                              int core_mask);
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_s(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses,
                                                              int core_mask);
/* ASSUMED: the _s list without core_mask */
FT78NE_API void fp_sparse_softmax_cross_entropy_with_logits_p(float *input, float *losses, float *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              float *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, float *partial_losses);
FT78NE_API void hp_sparse_softmax_cross_entropy_with_logits_p(half *input, half *losses, half *sum_data,
                                                              uint64_t inner_size, uint64_t outter_size,
                                                              uint64_t axis_size, int *labels, uint64_t is_grad,
                                                              half *output, uint64_t batch_size,
                                                              uint64_t number_of_classes, half *partial_losses);

#ifdef __cplusplus
}
#endif

#endif
