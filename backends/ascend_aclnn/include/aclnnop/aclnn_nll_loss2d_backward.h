/* aclnnNLLLoss2dBackward (CANN aclnnop/aclnn_nll_loss2d_backward.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_NLL_LOSS2D_BACKWARD_H_
#define XLOSS_ACLNNOP_ACLNN_NLL_LOSS2D_BACKWARD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gradOutput: target's shape (N, H, W) for reduction 0, else one element of at most one dim; self: (N, C, H, W);
 * target: (N, H, W), INT64/UINT8/INT32; weight: C elements (required); totalWeight: one element; out: self's
 * shape. gradOutput, self, weight, totalWeight and out share one dtype (FLOAT, FLOAT16, BF16). totalWeight is
 * not const in CANN's prototype, though the operator only reads it. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dBackwardGetWorkspaceSize(const aclTensor *gradOutput,
                                                                       const aclTensor *self, const aclTensor *target,
                                                                       const aclTensor *weight, int64_t reduction,
                                                                       int64_t ignoreIndex, aclTensor *totalWeight,
                                                                       aclTensor *out, uint64_t *workspaceSize,
                                                                       aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                       aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
