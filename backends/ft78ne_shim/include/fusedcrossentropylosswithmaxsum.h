/* OURS, not the vendor's: xloss's extension operator (the manual has no fusedcrossentropylosswithmaxsum
 * page). The vocabulary-parallel cross entropy after the caller's all-reduce (the math of CANN ops-nn's
 * aclnnFusedCrossEntropyLossWithMaxSum, label smoothing 0):
 *   loss[i] = log(sum_exp_logits[i]) - predicted_logits[i]                        (bt floats)
 *   softmax[i][v] = exp(vocab_parallel_logits[i][v] - logits_max[i]) / sum_exp_logits[i]
 *                                                       (bt x vocab floats, only if softmax_defined)
 * vocab_parallel_logits is half in hp_ (MT7004 only), everything else float. vocab_parallel_logits and
 * softmax are not accessed unless softmax_defined. The _p form is the same list without core_mask. A
 * library implementing it exports xloss_ft78ne_ext_abi(). */
#ifndef FUSEDCROSSENTROPYLOSSWITHMAXSUM_H
#define FUSEDCROSSENTROPYLOSSWITHMAXSUM_H
#include "ft78ne.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OURS */ FT78NE_API void fp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max,
                                                                float *sum_exp_logits, float *predicted_logits,
                                                                float *vocab_parallel_logits, float *loss,
                                                                float *softmax, int softmax_defined, int core_mask);
/* OURS */ FT78NE_API void hp_fusedcrossentropylosswithmaxsum_s(int bt, int vocab, float *logits_max,
                                                                float *sum_exp_logits, float *predicted_logits,
                                                                half *vocab_parallel_logits, float *loss,
                                                                float *softmax, int softmax_defined, int core_mask);
/* OURS */ FT78NE_API void fp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max,
                                                                float *sum_exp_logits, float *predicted_logits,
                                                                float *vocab_parallel_logits, float *loss,
                                                                float *softmax, int softmax_defined);
/* OURS */ FT78NE_API void hp_fusedcrossentropylosswithmaxsum_p(int bt, int vocab, float *logits_max,
                                                                float *sum_exp_logits, float *predicted_logits,
                                                                half *vocab_parallel_logits, float *loss,
                                                                float *softmax, int softmax_defined);

#ifdef __cplusplus
}
#endif

#endif
