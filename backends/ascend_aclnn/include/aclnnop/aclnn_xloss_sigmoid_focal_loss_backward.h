/* aclnnXlossSigmoidFocalLossBackward: xloss's OWN operator (no vendor publishes it), in the aclnn
 * two-phase convention; see aclnn_xloss_sigmoid_focal_loss.h for the naming. */
#ifndef XLOSS_ACLNNOP_ACLNN_XLOSS_SIGMOID_FOCAL_LOSS_BACKWARD_H_
#define XLOSS_ACLNNOP_ACLNN_XLOSS_SIGMOID_FOCAL_LOSS_BACKWARD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = d loss / d self times gradOutput (which broadcasts to self); divided by the element
 * count for reduction 1 (mean). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    double gamma, double alpha, int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossBackward(void *workspace, uint64_t workspaceSize,
                                                                   aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
