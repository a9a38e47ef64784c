/* aclnnNLLLossBackward (CANN aclnnop/aclnn_nll_loss_backward.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_NLL_LOSS_BACKWARD_H_
#define XLOSS_ACLNNOP_ACLNN_NLL_LOSS_BACKWARD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gradOutput: (N) for reduction 0 with self (N, C), else one element; self: (N, C) or (C);
 * target: (N) or (), INT64/INT32/UINT8; weight: (C); totalWeight: one element; out: self's shape.
 * gradOutput, self, weight, totalWeight and out share one dtype (FLOAT, FLOAT16, BF16). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                                     const aclTensor *target, const aclTensor *weight,
                                                                     int64_t reduction, int64_t ignoreIndex,
                                                                     const aclTensor *totalWeight, aclTensor *out,
                                                                     uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                     aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
