/* aclnnSigmoidFocalLossGrad as Ascend's DrivingSDK (mx_driving) exports it (see
 * aclnn_sigmoid_focal_loss.h): EXEC_NPU_CMD(aclnnSigmoidFocalLossGrad, input, target_y, weight_y,
 * gamma, alpha, grad_input). No upstream gradient and no reduction: out is d(out of
 * aclnnSigmoidFocalLoss)/d logit, element by element (weight included), i.e. the gradient of the
 * SUM of the elementwise loss; a caller scales it by its upstream gradient itself. The kernel's
 * closed form, computed naively in the logit's type (FLOAT or FLOAT16), with t = float(target):
 *   (-alpha (1-p)^gamma (1-p) + alpha gamma (1-p)^gamma p log p) t
 *   + ((alpha-1) gamma p^gamma (1-p) log(1-p) + (1-alpha) p^gamma p) (1 - t), times weight. */
#ifndef XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_GRAD_H_
#define XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_GRAD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGradGetWorkspaceSize(
    const aclTensor *logit, const aclTensor *target, const aclTensor *weight, double gamma, double alpha,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGrad(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
