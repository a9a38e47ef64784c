/* aclnnXlossSigmoidFocalLoss: xloss's OWN operator (no vendor publishes it), in the aclnn
 * two-phase convention. Named aclnnXloss* so it never collides with a vendor's operator: Ascend's
 * DrivingSDK exports aclnnSigmoidFocalLoss with a different ABI (aclnn_sigmoid_focal_loss.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_XLOSS_SIGMOID_FOCAL_LOSS_H_
#define XLOSS_ACLNNOP_ACLNN_XLOSS_SIGMOID_FOCAL_LOSS_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* loss = w * a_t * bce_with_logits(self, target) * (1 - p_t)^gamma; alpha < 0 disables a_t.
 * target: float, soft targets allowed. out: self's shape for reduction 0 (none), one element
 * (shape () or (1)) for 1 (mean) / 2 (sum). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, double gamma, double alpha,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLoss(void *workspace, uint64_t workspaceSize,
                                                           aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
