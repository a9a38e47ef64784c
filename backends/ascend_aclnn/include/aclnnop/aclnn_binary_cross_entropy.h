/* aclnnBinaryCrossEntropy (CANN aclnnop/aclnn_binary_cross_entropy.h). */
#ifndef XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_H_
#define XLOSS_ACLNNOP_ACLNN_BINARY_CROSS_ENTROPY_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* self: probabilities, 1 to 8 dims, FLOAT/FLOAT16/BF16; target and weight (weight may be NULL: all ones):
 * self's shape and dtype; out: self's shape for reduction 0, else one element, self's dtype. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                                        const aclTensor *weight, int64_t reduction,
                                                                        aclTensor *out, uint64_t *workspaceSize,
                                                                        aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropy(void *workspace, uint64_t workspaceSize,
                                                        aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
