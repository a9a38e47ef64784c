/* aclnnCrossEntropyLoss (CANN aclnnop/aclnn_cross_entropy_loss.h; ops-nn loss/cross_entropy_loss). */
#ifndef XLOSS_ACLNNOP_ACLNN_CROSS_ENTROPY_LOSS_H_
#define XLOSS_ACLNNOP_ACLNN_CROSS_ENTROPY_LOSS_H_

#include "../aclnn/aclnn_base.h"

#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* input: (N, C), FLOAT, FLOAT16 or BF16, C > 0; target: (N), INT64 or INT32, each in [0, C) or ignoreIndex;
 * weightOptional: (C) FLOAT or NULL; reductionOptional: "none", "mean" or "sum" (NULL: "mean");
 * labelSmoothing in [0, 1]. lossOut: (N) for "none", else one element; logProbOut: (N, C); zlossOut: lossOut's
 * shape; lseForZlossOut: (N); every output in input's dtype. CANN does not compute the z-loss yet
 * (lseSquareScaleForZloss and returnZloss take no effect; zlossOut and lseForZlossOut are not written). */
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(
    const aclTensor *input, const aclTensor *target, const aclTensor *weightOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss,
    const aclTensor *lossOut, const aclTensor *logProbOut, const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
