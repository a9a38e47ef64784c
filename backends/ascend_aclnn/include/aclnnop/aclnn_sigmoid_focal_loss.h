/* aclnnSigmoidFocalLoss as Ascend's DrivingSDK (mx_driving) exports it, a custom-operator package,
 * not CANN itself. The ABI, from mx_driving/csrc/SigmoidFocalLoss.cpp (EXEC_NPU_CMD(aclnnSigmoidFocalLoss,
 * input, target_y, weight_y, gamma, alpha, output)): no reduction, no upstream gradient.
 *
 *   logit  (N, C) FLOAT
 *   target (N, C) INT32 one-hot: 1 for the positive class, 0 elsewhere
 *   weight (N, C) FLOAT, required, full shape (mx_driving expands weight[class] to it)
 *   out    (N, C) FLOAT: per element, with p = sigmoid(logit),
 *          target 1: -alpha       * (1 - p)^gamma * log(p)       * weight
 *          target 0: -(1 - alpha) * p^gamma       * log(1 - p)   * weight
 *
 * The emulator implements this ABI under these names so the adapter's path for a DrivingSDK
 * library is exercised; the kernel formula follows mmcv's sigmoid_focal_loss, which this operator
 * replaces (DrivingSDK's kernel source is not public in the material we could read). */
#ifndef XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_H_
#define XLOSS_ACLNNOP_ACLNN_SIGMOID_FOCAL_LOSS_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGetWorkspaceSize(const aclTensor *logit, const aclTensor *target,
                                                                      const aclTensor *weight, double gamma,
                                                                      double alpha, aclTensor *out,
                                                                      uint64_t *workspaceSize,
                                                                      aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
