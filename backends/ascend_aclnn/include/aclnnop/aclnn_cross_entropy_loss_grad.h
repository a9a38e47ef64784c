/* aclnnCrossEntropyLossGrad (CANN aclnnop/aclnn_cross_entropy_loss_grad.h; ops-nn loss/cross_entropy_loss_grad). */
#ifndef XLOSS_ACLNNOP_ACLNN_CROSS_ENTROPY_LOSS_GRAD_H_
#define XLOSS_ACLNNOP_ACLNN_CROSS_ENTROPY_LOSS_GRAD_H_

#include "../aclnn/aclnn_base.h"

#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* gradLoss: (N) for "none", else 0-D; logProb: (N, C), C > 0; target: (N) INT64; weightOptional: (C) FLOAT or
 * NULL; out: (N, C). gradLoss, logProb, out (and the z-loss inputs) share one dtype: FLOAT, FLOAT16 or BF16.
 * The z-loss inputs (gradZlossOptional, lseForZlossOptional, lseSquareScaleForZloss) take no effect yet. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
