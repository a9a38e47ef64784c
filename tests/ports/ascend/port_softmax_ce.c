/* aclnnSoftmaxCrossEntropyWithLogits as a port author writes it from CANN's page (ops-nn
 * activation/softmax_cross_entropy_with_logits): per row, loss = -sum_c labels_c log softmax(features)_c and
 * backprop = softmax(features) - labels, in float, each result rounded once (CAST_RINT).
 *
 * Seeded bugs here: BUG_SCE_NO_MAX_SHIFT (exp of the raw logits: overflows above ~88), BUG_SCE_BACKPROP_SIGN
 * (backprop written as labels - softmax, the negated gradient), BUG_SCE_HALF_LOSS_SUM (the loss accumulated in
 * the 16-bit output dtype, rounded after every class), BUG_SCE_ONE_HOT_LABELS (the loss read off the label row's
 * largest entry, as if labels were one-hot). */
#include "port.h"

enum { S_FEATURES, S_LABELS, S_LOSS, S_BACKPROP };

typedef struct {
    port_tensor t[4];
} sce_plan;

static float sce_at(const port_tensor *v, int64_t i, int64_t j)
{
    return port_load(v, v->offset + i * v->strides[0] + j * v->strides[1]);
}

static aclnnStatus sce_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const sce_plan *p = vplan;
    const port_tensor *x = &p->t[S_FEATURES], *y = &p->t[S_LABELS], *loss = &p->t[S_LOSS], *bp = &p->t[S_BACKPROP];
    if (x->numel == 0)
        return ACLNN_SUCCESS;
    int64_t rows = x->dims[0], classes = x->dims[1];
    for (int64_t i = 0; i < rows; i++) {
#ifdef BUG_SCE_NO_MAX_SHIFT
        /* BUG: softmax from exp(x) straight: overflows to inf / inf for logits above ~88 */
        float m = 0.0f;
#else
        float m = -INFINITY;
        for (int64_t c = 0; c < classes; c++)
            m = fmaxf(m, sce_at(x, i, c));
#endif
        port_pairwise sum;
        memset(&sum, 0, sizeof sum);
        for (int64_t c = 0; c < classes; c++)
            port_pairwise_add(&sum, expf(sce_at(x, i, c) - m));
        float s = port_pairwise_sum(&sum), log_s = logf(s);
        port_pairwise acc;
        memset(&acc, 0, sizeof acc);
#if defined(BUG_SCE_HALF_LOSS_SUM)
        float half = 0.0f;
#elif defined(BUG_SCE_ONE_HOT_LABELS)
        float top = -INFINITY, l = 0.0f;
#endif
        for (int64_t c = 0; c < classes; c++) {
            float d = sce_at(x, i, c) - m, yc = sce_at(y, i, c), p_c = expf(d) / s;
#ifdef BUG_SCE_BACKPROP_SIGN
            /* BUG: the gradient written as labels - softmax */
            float g = yc - p_c;
#else
            float g = p_c - yc;
#endif
            port_store(bp, bp->offset + i * bp->strides[0] + c * bp->strides[1], g, PORT_ROUND_RINT);
#if defined(BUG_SCE_HALF_LOSS_SUM)
            /* BUG: the loss accumulated in the 16-bit output dtype, one rounding per class */
            half = port_round_to(loss->dtype, half + yc * (log_s - d));
#elif defined(BUG_SCE_ONE_HOT_LABELS)
            /* BUG: labels taken as one-hot: the loss is -log softmax at the label row's largest entry */
            if (yc > top)
                top = yc, l = log_s - d;
#else
            port_pairwise_add(&acc, yc * (log_s - d));
#endif
        }
#if defined(BUG_SCE_HALF_LOSS_SUM)
        float l = half;
#elif !defined(BUG_SCE_ONE_HOT_LABELS)
        float l = port_pairwise_sum(&acc);
#endif
        port_store(loss, loss->offset + i * loss->strides[0], l, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize(const aclTensor *features,
                                                                                   aclTensor *labels, aclTensor *loss,
                                                                                   aclTensor *backprop,
                                                                                   uint64_t *workspaceSize,
                                                                                   aclOpExecutor **executor)
{
    static const char api[] = "aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize";
    static const char *const names[4] = {"features", "labels", "loss", "backprop"};
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[4] = {features, labels, loss, backprop};
    for (int k = 0; k < 4; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    sce_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 4; k++) {
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
        PORT_TRY(port_need_dtype(api, names[k], &p.t[k], p.t[S_FEATURES].dtype));
    }
    PORT_TRY(port_need_float(api, "features", &p.t[S_FEATURES]));
    const port_tensor *x = &p.t[S_FEATURES];
    if (x->ndim != 2) {
        xlossEmuSetErrMsg("%s: features must be 2-D", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_same_shape(api, "labels", &p.t[S_LABELS], x));
    PORT_TRY(port_need_same_shape(api, "backprop", &p.t[S_BACKPROP], x));
    if (p.t[S_LOSS].ndim != 1 || p.t[S_LOSS].dims[0] != x->dims[0]) {
        xlossEmuSetErrMsg("%s: loss must have shape (N,)", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return port_create_executor("aclnnSoftmaxCrossEntropyWithLogits", p.t, names, 4, &p, sizeof p, sce_kernel, 0,
                                workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSoftmaxCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                                   aclOpExecutor *executor, const aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnSoftmaxCrossEntropyWithLogits", workspace, workspaceSize, executor, stream);
}
