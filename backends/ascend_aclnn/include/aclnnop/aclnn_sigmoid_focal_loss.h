/* aclnnSigmoidFocalLoss: xloss's own operator, in the aclnn two-phase convention. */
#ifndef XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_H_
#define XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_H_

#include "../aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* loss = w * a_t * bce_with_logits(self, target) * (1 - p_t)^gamma; alpha < 0 disables a_t.
 * out: self's shape for reduction 0 (none), one element (shape () or (1)) for 1 (mean) / 2 (sum). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, double gamma, double alpha,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLoss(void *workspace, uint64_t workspaceSize,
                                                      aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
