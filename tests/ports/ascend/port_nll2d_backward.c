/* aclnnNLLLoss2dBackward (issue #30): out (N, C, H, W) = 0 except out[n, t, h, w] = weight[t] * -(g [/ totalWeight])
 * at every position whose target t = target[n, h, w] is not ignoreIndex; g is gradOutput[n, h, w] for reduction
 * 0 (gradOutput has target's shape), its one element otherwise. In float, as an AI Core computes, each result
 * rounded once (CAST_RINT).
 *
 * Seeded bugs here, the way an outside port author errs reading the vendor page:
 * BUG_NLL2DB_TARGET_TRANSPOSED (each target plane read as a W x H array, column-major: in bounds, wrong wherever
 * H and W both exceed 1),
 * BUG_NLL2DB_GRAD_PER_SAMPLE (reduction 0 reads gradOutput as aclnnNLLLossBackward's (N): one value per sample,
 * gradOutput[n, 0, 0], for every position of its plane),
 * BUG_NLL2DB_MEAN_OWN_TOTAL (reduction 1 ignores the totalWeight operand and divides by the total it recomputes as
 * the forward does, the class weights of the positions not ignored: right whenever the caller passes the forward's
 * totalWeight, wrong for any other). */
#include "port.h"

enum { B_GRAD, B_SELF, B_TARGET, B_WEIGHT, B_TOTAL, B_OUT };

typedef struct {
    port_tensor t[6];
    int64_t reduction, ignore_index;
} nll2db_plan;

static int64_t target_at(const port_tensor *t, int64_t n, int64_t h, int64_t x)
{
#ifdef BUG_NLL2DB_TARGET_TRANSPOSED
    /* BUG: the plane read column-major (element (h, x) at x * H + h of a compact plane) */
    return t->offset + n * t->strides[0] + (x * t->dims[1] + h) * t->strides[2];
#else
    return t->offset + n * t->strides[0] + h * t->strides[1] + x * t->strides[2];
#endif
}

static int64_t grad_at(const port_tensor *g, int64_t n, int64_t h, int64_t x)
{
#ifdef BUG_NLL2DB_GRAD_PER_SAMPLE
    /* BUG: gradOutput taken as (N), one upstream value per sample */
    (void)h;
    (void)x;
    return g->offset + n * g->strides[0];
#else
    return g->offset + n * g->strides[0] + h * g->strides[1] + x * g->strides[2];
#endif
}

static aclnnStatus nll2db_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const nll2db_plan *p = vplan;
    const port_tensor *out = &p->t[B_OUT], *target = &p->t[B_TARGET], *grad = &p->t[B_GRAD], *w = &p->t[B_WEIGHT];
    int64_t batch = out->dims[0], classes = out->dims[1], height = out->dims[2], width = out->dims[3];
    if (out->numel == 0)
        return ACLNN_SUCCESS;
    for (int64_t n = 0; n < batch; n++) /* device targets: all checked before anything is written */
        for (int64_t h = 0; h < height; h++)
            for (int64_t x = 0; x < width; x++) {
                int64_t t = port_load_int(target, target_at(target, n, h, x));
                if (t != p->ignore_index && (t < 0 || t >= classes)) {
                    xlossEmuSetErrMsg("aclnnNLLLoss2dBackward: target[%lld, %lld, %lld] = %lld is outside [0, %lld)",
                                      (long long)n, (long long)h, (long long)x, (long long)t, (long long)classes);
                    return ACLNN_ERR_RUNTIME_ERROR;
                }
            }
    for (int64_t k = 0; k < out->numel; k++)
        port_store(out, port_element_at(out, k), 0.0f, PORT_ROUND_RINT);
    float g0 = p->reduction == 0 ? 0.0f : port_load(grad, port_element_at(grad, 0));
    float total = p->reduction == 1 ? port_load(&p->t[B_TOTAL], port_element_at(&p->t[B_TOTAL], 0)) : 1.0f;
#ifdef BUG_NLL2DB_MEAN_OWN_TOTAL
    /* BUG: "the mean divides by the total weight", recomputed here rather than read from totalWeight */
    if (p->reduction == 1) {
        total = 0.0f;
        for (int64_t n = 0; n < batch; n++)
            for (int64_t h = 0; h < height; h++)
                for (int64_t x = 0; x < width; x++) {
                    int64_t t = port_load_int(target, target_at(target, n, h, x));
                    if (t != p->ignore_index)
                        total += port_load(w, port_element_at(w, t));
                }
    }
#endif
    for (int64_t n = 0; n < batch; n++)
        for (int64_t h = 0; h < height; h++)
            for (int64_t x = 0; x < width; x++) {
                int64_t t = port_load_int(target, target_at(target, n, h, x));
                if (t == p->ignore_index)
                    continue;
                float g = p->reduction == 0 ? port_load(grad, grad_at(grad, n, h, x)) : g0;
                float wt = port_load(w, port_element_at(w, t));
                float v = p->reduction == 1 ? wt * -(g / total) : wt * -g; /* PyTorch's order */
                port_store(out,
                           out->offset + n * out->strides[0] + t * out->strides[1] + h * out->strides[2] +
                               x * out->strides[3],
                           v, PORT_ROUND_RINT);
            }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dBackwardGetWorkspaceSize(const aclTensor *gradOutput,
                                                                       const aclTensor *self, const aclTensor *target,
                                                                       const aclTensor *weight, int64_t reduction,
                                                                       int64_t ignoreIndex, aclTensor *totalWeight,
                                                                       aclTensor *out, uint64_t *workspaceSize,
                                                                       aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLoss2dBackwardGetWorkspaceSize";
    static const char *const names[6] = {"gradOutput", "self", "target", "weight", "totalWeight", "out"};
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[6] = {gradOutput, self, target, weight, totalWeight, out};
    for (int k = 0; k < 6; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    nll2db_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 6; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));

    PORT_TRY(port_need_float(api, "self", &p.t[B_SELF]));
    static const int same[4] = {B_GRAD, B_WEIGHT, B_OUT, B_TOTAL};
    for (int k = 0; k < 4; k++)
        PORT_TRY(port_need_dtype(api, names[same[k]], &p.t[same[k]], p.t[B_SELF].dtype));
    aclDataType tdt = p.t[B_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_UINT8 && tdt != ACL_INT32) {
        xlossEmuSetErrMsg("%s: target has dtype %s; expected INT64, UINT8 or INT32", api, port_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    const port_tensor *s = &p.t[B_SELF], *t = &p.t[B_TARGET], *g = &p.t[B_GRAD], *w = &p.t[B_WEIGHT];
    char a[160], b[160];
    int grad_ok = reduction == 0 ? g->ndim == t->ndim : g->ndim <= 1 && g->numel == 1;
    for (int d = 0; grad_ok && reduction == 0 && d < g->ndim; d++)
        grad_ok = g->dims[d] == t->dims[d];
    if (!grad_ok) {
        xlossEmuSetErrMsg("%s: gradOutput of shape %s does not fit reduction %lld", api, port_shape(g, a, sizeof a),
                          (long long)reduction);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (s->ndim != 4 || t->ndim != 3 || t->dims[0] != s->dims[0] || t->dims[1] != s->dims[2] ||
        t->dims[2] != s->dims[3]) {
        xlossEmuSetErrMsg("%s: self %s and target %s are not (N, C, H, W) and (N, H, W)", api,
                          port_shape(s, a, sizeof a), port_shape(t, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (w->numel != s->dims[1]) {
        xlossEmuSetErrMsg("%s: weight %s does not have C elements", api, port_shape(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_same_shape(api, "out", &p.t[B_OUT], s));
    if (p.t[B_TOTAL].numel != 1) {
        xlossEmuSetErrMsg("%s: totalWeight must have one element", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_reduction(api, reduction));
    p.reduction = reduction;
    p.ignore_index = ignoreIndex;
    return port_create_executor("aclnnNLLLoss2dBackward", p.t, names, 6, &p, sizeof p, nll2db_kernel, 0, workspaceSize,
                                executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                       aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnNLLLoss2dBackward", workspace, workspaceSize, executor, stream);
}
