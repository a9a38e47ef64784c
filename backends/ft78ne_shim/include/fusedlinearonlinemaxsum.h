/* OURS, not the vendor's: xloss's extension operator (the manual has no fusedlinearonlinemaxsum page). One
 * vocabulary shard of the vocabulary-parallel cross-entropy forward, before the caller's all-reduce (the
 * math of CANN ops-nn's aclnnFusedLinearOnlineMaxSum):
 *   logits = input @ weight^T (bt x vocab, float32); logits_max_local = the row max;
 *   sum_exp_logits_local = sum(exp(logits - logits_max_local)) per row;
 *   target_mask[i] = target[i] < vocab_start_index || target[i] >= vocab_end_index (one byte per token,
 *   1: not in this shard, as fusedlinearcrossentropylossgrad reads it); masked_target[i] = target[i] -
 *   vocab_start_index, 0 where masked; predicted_logits_local[i] = logits[i][masked_target[i]] -
 *   logits_max_local[i], 0 where masked; vocab_parallel_logits = logits (only if logits_defined).
 * input, weight and vocab_parallel_logits are half in hp_ (MT7004 only), everything else float / int.
 * vocab > 0 and 0 <= vocab_start_index <= vocab_end_index <= vocab_start_index + vocab. The _p form is the
 * same list without core_mask. A library implementing it exports xloss_ft78ne_ext_abi(). */
#ifndef FUSEDLINEARONLINEMAXSUM_H
#define FUSEDLINEARONLINEMAXSUM_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OURS */ FT78NE_API void fp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, float *input, float *weight,
                                                        int *target, int vocab_start_index, int vocab_end_index,
                                                        float *logits_max_local, float *sum_exp_logits_local,
                                                        float *predicted_logits_local, unsigned char *target_mask,
                                                        int *masked_target, float *vocab_parallel_logits,
                                                        int logits_defined, int core_mask);
/* OURS */ FT78NE_API void hp_fusedlinearonlinemaxsum_s(int bt, int hidden, int vocab, half *input, half *weight,
                                                        int *target, int vocab_start_index, int vocab_end_index,
                                                        float *logits_max_local, float *sum_exp_logits_local,
                                                        float *predicted_logits_local, unsigned char *target_mask,
                                                        int *masked_target, half *vocab_parallel_logits,
                                                        int logits_defined, int core_mask);
/* OURS */ FT78NE_API void fp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, float *input, float *weight,
                                                        int *target, int vocab_start_index, int vocab_end_index,
                                                        float *logits_max_local, float *sum_exp_logits_local,
                                                        float *predicted_logits_local, unsigned char *target_mask,
                                                        int *masked_target, float *vocab_parallel_logits,
                                                        int logits_defined);
/* OURS */ FT78NE_API void hp_fusedlinearonlinemaxsum_p(int bt, int hidden, int vocab, half *input, half *weight,
                                                        int *target, int vocab_start_index, int vocab_end_index,
                                                        float *logits_max_local, float *sum_exp_logits_local,
                                                        float *predicted_logits_local, unsigned char *target_mask,
                                                        int *masked_target, half *vocab_parallel_logits,
                                                        int logits_defined);

#ifdef __cplusplus
}
#endif

#endif
