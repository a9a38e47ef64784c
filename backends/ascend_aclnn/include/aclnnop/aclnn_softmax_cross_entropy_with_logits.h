/* aclnnSoftmaxCrossEntropyWithLogits (CANN aclnnop/aclnn_softmax_cross_entropy_with_logits.h; ops-nn
 * activation/softmax_cross_entropy_with_logits). */
#ifndef XLOSS_ACLNNOP_ACLNN_SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H_
#define XLOSS_ACLNNOP_ACLNN_SOFTMAX_CROSS_ENTROPY_WITH_LOGITS_H_

#include "../aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dense labels: per row n, loss[n] = -sum_c labels[n, c] * log softmax(features[n])[c] and
 * backprop[n, c] = softmax(features[n])[c] - labels[n, c]. features and labels: 2-D (N, C), the same shape
 * and dtype (FLOAT, FLOAT16, BF16); loss: (N), backprop: (N, C), both in features' dtype. An empty features
 * or labels succeeds without writing anything. The vendor's labels parameter is not const. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize(const aclTensor *features,
                                                                                   aclTensor *labels, aclTensor *loss,
                                                                                   aclTensor *backprop,
                                                                                   uint64_t *workspaceSize,
                                                                                   aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnSoftmaxCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                                   aclOpExecutor *executor, const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
