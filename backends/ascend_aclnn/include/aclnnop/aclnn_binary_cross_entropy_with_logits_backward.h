/* aclnnBinaryCrossEntropyWithLogitsBackward (CANN aclnnop/aclnn_binary_cross_entropy_with_logits_backward.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_WITH_LOGITS_BACKWARD_H_
#define XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_WITH_LOGITS_BACKWARD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = gradOutput * weight * ((1 - target) * sigmoid(self) - posWeight * target * sigmoid(-self)), divided by
 * the element count for reduction 1 (mean). target and out have self's shape; gradOutput, weightOptional and
 * posWeightOptional broadcast to it; every operand FLOAT, FLOAT16 or BF16, out in target's dtype. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *posWeightOptional, int64_t reduction, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackward(void *workspace, uint64_t workspaceSize,
                                                                          aclOpExecutor *executor,
                                                                          const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
