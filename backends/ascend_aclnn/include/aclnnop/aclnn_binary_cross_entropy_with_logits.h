/* aclnnBinaryCrossEntropyWithLogits (CANN aclnnop/aclnn_binary_cross_entropy_with_logits.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_WITH_LOGITS_H_
#define XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_WITH_LOGITS_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = -weight * (posWeight * target * log(sigmoid(self)) + (1 - target) * log(1 - sigmoid(self))),
 * reduced by reduction (0 none: self's shape; 1 mean, 2 sum: one element). self, target and out are
 * FLOAT, FLOAT16 or BF16, out in target's dtype; target has self's shape; weightOptional and
 * posWeightOptional broadcast to it. An empty self gives NaN (mean) or 0 (sum). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, const aclTensor *posWeightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                                  aclOpExecutor *executor, const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
