/* aclnnFusedLinearCrossEntropyLossGrad (CANN aclnnop/aclnn_fused_linear_cross_entropy_loss_grad.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_FUSED_LINEAR_CROSS_ENTROPY_LOSS_GRAD_H_
#define XLOSS_ACLNNOP_ACLNN_FUSED_LINEAR_CROSS_ENTROPY_LOSS_GRAD_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* grad (BT) FLOAT; input (BT, H) and weight (V, H) FLOAT16 or BF16; targetMask BOOL (BT) or UINT8
 * bit-packed LSB first; maskedTarget (BT) INT32/INT64; labelSmoothing must be 0; softmaxOptional
 * (BT, V) FLOAT, or logitsMaxOptional and sumExpLogitsOptional (BT) FLOAT; outputs in input's dtype;
 * every operand ND. A contiguous softmaxOptional is written, as CANN's kernel leaves it: float32
 * softmax - 1 at the unmasked targets, then each row's G in input's dtype at row i * S bytes
 * (S = 2V rounded up to 512). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *grad, const aclTensor *input, const aclTensor *weight, const aclTensor *targetMask,
    const aclTensor *maskedTarget, float labelSmoothing, const aclTensor *logitsMaxOptional,
    const aclTensor *sumExpLogitsOptional, const aclTensor *softmaxOptional, aclTensor *inputGradOut,
    aclTensor *weightGradOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                                     aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
