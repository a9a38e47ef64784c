/* aclnnNLLLoss2d (CANN aclnnop/aclnn_nll_loss2d.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_NLL_LOSS2D_H_
#define XLOSS_ACLNNOP_ACLNN_NLL_LOSS2D_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* self: (N, C, H, W), FLOAT/FLOAT16/BF16; target: (N, H, W), INT64/INT32/UINT8; weight: (C), self's dtype
 * (required); out: target's shape for reduction 0, else one element; totalWeightOut: one element, written
 * for reductions 1 and 2 only. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                               const aclTensor *weight, int64_t reduction,
                                                               int64_t ignoreIndex, aclTensor *out,
                                                               aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                               aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                               aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
