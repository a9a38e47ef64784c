/* aclnnSigmoidFocalLoss as Ascend's DrivingSDK (mx_driving) exports it, a custom-operator package,
 * not CANN itself. The ABI, from mx_driving/csrc/SigmoidFocalLoss.cpp (EXEC_NPU_CMD(aclnnSigmoidFocalLoss,
 * input, target_y, weight_y, gamma, alpha, output)), the op's definition and its kernel
 * (kernels/sigmoid_focal_loss/op_host, op_kernel/arch35): no reduction, no upstream gradient.
 *
 *   logit  (N, C) FLOAT or FLOAT16
 *   target (N, C) INT32 (mx_driving passes one-hot; the kernel takes t = float(target) as it is)
 *   weight (N, C) in logit's dtype, required, full shape (mx_driving expands weight[class] to it)
 *   out    (N, C) in logit's dtype: per element, with p = sigmoid(logit),
 *          (-alpha (1 - p)^gamma log(p) t - (1 - alpha) p^gamma log(1 - p) (1 - t)) * weight
 *   gamma, alpha: any values (no check), used as float.
 *
 * The kernel computes this naively in the logit's type (see ops_focal_drivingsdk.c): inf or NaN
 * for float32 logits above about +16.6 or below about -88.7. */
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
