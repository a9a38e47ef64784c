/* aclnnBinaryCrossEntropyBackward (CANN aclnnop/aclnn_binary_cross_entropy_backward.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_BACKWARD_H_
#define XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_BACKWARD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = gradOutput * weight * (self - target) / max(self * (1 - self), 1e-12), divided by the
 * element count for reduction 1 (mean). gradOutput, target and weightOptional broadcast to self. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackward(void *workspace, uint64_t workspaceSize,
                                                                aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
