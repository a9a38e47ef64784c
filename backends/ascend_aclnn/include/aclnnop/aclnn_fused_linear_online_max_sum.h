/* aclnnFusedLinearOnlineMaxSum (CANN aclnnop/aclnn_fused_linear_online_max_sum.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_FUSED_LINEAR_ONLINE_MAX_SUM_H_
#define XLOSS_ACLNNOP_ACLNN_FUSED_LINEAR_ONLINE_MAX_SUM_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One vocabulary shard of Megatron's vocabulary-parallel cross entropy, before the all-reduce.
 * input (BT, H) and weight (V, H) FLOAT16 or BF16, V > 0, H <= 65534; target (BT) INT32/INT64;
 * logitsMaxLocalOut, sumExpLogitsLocalOut, predictedLogitsLocalOut (BT) FLOAT; targetMaskOut
 * ((BT + 7) / 8) UINT8, bit-packed LSB first, the padding bits the mask of target 0 (the kernel
 * pads with target 0); maskedTargetOut (BT) in target's dtype; vocabParallelLogitsOutOptional
 * (BT, V) in input's dtype or NULL. A token's target is in the shard when vocabStartIndex <=
 * target < vocabEndIndex; vocabEndIndex - vocabStartIndex > V is not checked (as CANN's op). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearOnlineMaxSumGetWorkspaceSize(
    const aclTensor *input, const aclTensor *weight, const aclTensor *target, int64_t vocabStartIndex,
    int64_t vocabEndIndex, aclTensor *logitsMaxLocalOut, aclTensor *sumExpLogitsLocalOut,
    aclTensor *predictedLogitsLocalOut, aclTensor *targetMaskOut, aclTensor *maskedTargetOut,
    aclTensor *vocabParallelLogitsOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearOnlineMaxSum(void *workspace, uint64_t workspaceSize,
                                                             aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
