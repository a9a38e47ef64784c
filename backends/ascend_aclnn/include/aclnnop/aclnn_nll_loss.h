/* aclnnNLLLoss (CANN aclnnop/aclnn_nll_loss.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_NLL_LOSS_H_
#define XLOSS_ACLNNOP_ACLNN_NLL_LOSS_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* self: (N, C) or (C), FLOAT/FLOAT16/BF16; target: (N) or (), INT64/INT32/UINT8; weight: (C), self's dtype
 * (required); out: (N) for reduction 0 with (N, C) self, else one element; totalWeightOut: one element,
 * written for reductions 1 and 2 only. out and totalWeightOut: any float type self casts to. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                             const aclTensor *weight, int64_t reduction,
                                                             int64_t ignoreIndex, aclTensor *out,
                                                             aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                             aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
