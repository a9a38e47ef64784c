/* aclnnFusedCrossEntropyLossWithMaxSum (CANN aclnnop/aclnn_fused_cross_entropy_loss_with_max_sum.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_FUSED_CROSS_ENTROPY_LOSS_WITH_MAX_SUM_H_
#define XLOSS_ACLNNOP_ACLNN_FUSED_CROSS_ENTROPY_LOSS_WITH_MAX_SUM_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Vocabulary-parallel cross entropy after the all-reduce: lossOut = log(sumExpLogits) -
 * predictedLogits, and softMaxOutOptional = exp(vocabParallelLogitsOptional - logitsMax) /
 * sumExpLogits. logitsMax, sumExpLogits, predictedLogits, lossOut (BT) FLOAT; labelSmoothing must
 * be 0; inputOptional and weightOptional are ignored (whatever they are, as CANN's op);
 * vocabParallelLogitsOptional (BT, V) FLOAT, FLOAT16 or BF16 needs softMaxOutOptional (BT, V)
 * FLOAT (NULL: ACLNN_ERR_PARAM_NULLPTR); without the logits softMaxOutOptional is ignored. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize(
    const aclTensor *logitsMax, const aclTensor *sumExpLogits, const aclTensor *predictedLogits, float labelSmoothing,
    const aclTensor *inputOptional, const aclTensor *weightOptional, const aclTensor *vocabParallelLogitsOptional,
    aclTensor *lossOut, aclTensor *softMaxOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedCrossEntropyLossWithMaxSum(void *workspace, uint64_t workspaceSize,
                                                                     aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
