/* aclnnNLLLossBackward: out = 0 except out[i, t_i] = weight[t_i] * -(g_i [/ totalWeight]) for rows
 * whose target is not ignoreIndex. gradOutput, self, weight, totalWeight and out share one dtype.
 *
 * Seeded bugs here: BUG_NLL_IGNORE_BY_RANGE, BUG_NLL_ZERO_FILL_ROUNDED (writes past out),
 * BUG_NLL_ZERO_FILL_SHORT (leaves out's last element unwritten). */
#include "port.h"

enum { N_GRAD, N_SELF, N_TARGET, N_WEIGHT, N_TOTAL, N_OUT };

typedef struct {
    port_tensor t[6];
    int64_t reduction, ignore_index;
} nll_plan;

static int64_t target_of(const nll_plan *p, int64_t row)
{
    const port_tensor *t = &p->t[N_TARGET];
    return port_load_int(t, t->ndim ? t->offset + row * t->strides[0] : t->offset);
}

static aclnnStatus nll_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const nll_plan *p = vplan;
    const port_tensor *self = &p->t[N_SELF], *out = &p->t[N_OUT], *grad = &p->t[N_GRAD], *w = &p->t[N_WEIGHT];
    int two_d = self->ndim == 2;
    int64_t rows = two_d ? self->dims[0] : 1, classes = self->dims[self->ndim - 1];

    /* targets live in device memory: check every row before writing anything */
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = target_of(p, i);
        if (t != p->ignore_index && (t < 0 || t >= classes)) {
            xlossEmuSetErrMsg("aclnnNLLLossBackward: target[%lld] = %lld is outside [0, %lld) and is not ignoreIndex",
                              (long long)i, (long long)t, (long long)classes);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    int64_t cstride = out->strides[out->ndim - 1], rstride = two_d ? out->strides[0] : 0;
#ifdef BUG_NLL_ZERO_FILL_ROUNDED
    /* BUG: a dense out is zero-filled with one DMA-style memset rounded up to the 32-byte block,
     * which writes past the end of out whenever its size is not a multiple of 32 bytes. */
    if (cstride == 1 && (!two_d || rstride == classes)) {
        size_t es = out->dtype == ACL_FLOAT ? 4 : 2;
        memset(out->base + (size_t)out->offset * es, 0, port_align32((uint64_t)(rows * classes) * es));
    } else
#endif
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < classes; j++) {
#ifdef BUG_NLL_ZERO_FILL_SHORT
                /* BUG: the zero-fill stops one element short (an off-by-one in its count): the last
             * element of out keeps whatever the device memory held - right only on zeroed memory. */
                if (i == rows - 1 && j == classes - 1)
                    break;
#endif
                port_store(out, out->offset + i * rstride + j * cstride, 0.0f, PORT_ROUND_RINT);
            }

    int per_row = p->reduction == 0 && two_d;
    float g = per_row || grad->numel == 0 ? 0.0f : port_load(grad, grad->offset);
    float total = p->reduction == 1 ? port_load(&p->t[N_TOTAL], p->t[N_TOTAL].offset) : 1.0f;
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = target_of(p, i);
#ifdef BUG_NLL_IGNORE_BY_RANGE
        /* BUG: rows are skipped by a range check, as if ignoreIndex were always negative (-100);
         * an ignoreIndex that is a valid class gets its rows' gradient anyway. */
        if (t < 0 || t >= classes)
            continue;
#else
        if (t == p->ignore_index)
            continue;
#endif
        float gi = per_row ? port_load(grad, grad->offset + i * grad->strides[0]) : g;
        float wt = port_load(w, w->offset + t * w->strides[0]);
        float v = p->reduction == 1 ? wt * -(gi / total) : wt * -gi; /* PyTorch's order */
        port_store(out, out->offset + i * rstride + t * cstride, v, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                                     const aclTensor *target, const aclTensor *weight,
                                                                     int64_t reduction, int64_t ignoreIndex,
                                                                     const aclTensor *totalWeight, aclTensor *out,
                                                                     uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLossBackwardGetWorkspaceSize";
    static const char *const names[6] = {"gradOutput", "self", "target", "weight", "totalWeight", "out"};
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[6] = {gradOutput, self, target, weight, totalWeight, out};
    for (int k = 0; k < 6; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    nll_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 6; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));

    PORT_TRY(port_need_float(api, "self", &p.t[N_SELF]));
    static const int same[4] = {N_GRAD, N_WEIGHT, N_TOTAL, N_OUT};
    for (int k = 0; k < 4; k++)
        PORT_TRY(port_need_dtype(api, names[same[k]], &p.t[same[k]], p.t[N_SELF].dtype));
    aclDataType tdt = p.t[N_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_INT32 && tdt != ACL_UINT8) {
        xlossEmuSetErrMsg("%s: target has dtype %s; expected INT64, INT32 or UINT8", api, port_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_reduction(api, reduction));

    const port_tensor *s = &p.t[N_SELF], *t = &p.t[N_TARGET], *g = &p.t[N_GRAD], *w = &p.t[N_WEIGHT];
    char a[160], b[160];
    if (s->ndim != 1 && s->ndim != 2) {
        xlossEmuSetErrMsg("%s: self must have shape (N, C) or (C); got %s", api, port_shape(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t classes = s->dims[s->ndim - 1];
    if (s->ndim == 2 ? !(t->ndim == 1 && t->dims[0] == s->dims[0]) : t->ndim != 0) {
        xlossEmuSetErrMsg("%s: target of shape %s does not match self of shape %s", api, port_shape(t, a, sizeof a),
                          port_shape(s, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int grad_ok = reduction == 0 && s->ndim == 2 ? g->ndim == 1 && g->dims[0] == s->dims[0] : port_one_element(g);
    if (!grad_ok) {
        xlossEmuSetErrMsg("%s: gradOutput of shape %s does not fit reduction %lld with self %s", api,
                          port_shape(g, a, sizeof a), (long long)reduction, port_shape(s, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!(w->ndim == 1 && w->dims[0] == classes)) {
        xlossEmuSetErrMsg("%s: weight must have shape (%lld,); got %s", api, (long long)classes,
                          port_shape(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!port_one_element(&p.t[N_TOTAL])) {
        xlossEmuSetErrMsg("%s: totalWeight must have one element; got %s", api, port_shape(&p.t[N_TOTAL], a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_same_shape(api, "out", &p.t[N_OUT], s));
    p.reduction = reduction;
    p.ignore_index = ignoreIndex;
    return port_create_executor("aclnnNLLLossBackward", p.t, names, 6, &p, sizeof p, nll_kernel, 0, workspaceSize,
                                executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                     aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnNLLLossBackward", workspace, workspaceSize, executor, stream);
}
