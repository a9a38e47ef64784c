/* aclnnNLLLoss, aclnnNLLLoss2d and aclnnBinaryCrossEntropy (issue #30), in float as an AI Core computes:
 * products and logs in float, sums pairwise (../pairwise.h), each result rounded once (CAST_RINT).
 *
 * Seeded bugs here, the way an outside port author errs reading the vendor pages:
 * BUG_NLLF_MEAN_BY_N (mean divides by the number of positions, not the total weight),
 * BUG_NLL2D_TARGET_COLUMN_MAJOR (aclnnNLLLoss2d reads each target plane column-major, as a W x H array,
 * which a (N, C, H, 1) input cannot show),
 * BUG_NLLF_IGNORED_IN_TOTAL (a position whose target is ignoreIndex still adds its class weight to the
 * total when ignoreIndex is a class),
 * BUG_BCEF_LOG_UNCLAMPED (no -100 clamp of the logs: inf at probabilities 0 and 1),
 * BUG_BCEF_MEAN_BY_WEIGHT_SUM (mean divides by the sum of the weights, a "weighted mean"). */
#include "port.h"

/* ---- NLL ---------------------------------------------------------------------------------------- */

enum { F_SELF, F_TARGET, F_WEIGHT, F_OUT, F_TOTAL };

typedef struct {
    port_tensor t[5];
    int64_t reduction, ignore_index;
} nllf_plan;

/* (N, C, H, W) strides of self, (N, H, W) of target and out: (C) and (N, C) self are views with N = 1 or H = W = 1. */
typedef struct {
    int64_t n, c, h, w, sn, sc, sh, sw, tn, th, tw, on, oh, ow;
} nllf_walk;

static nllf_walk nllf_walk_of(const nllf_plan *p)
{
    const port_tensor *s = &p->t[F_SELF], *t = &p->t[F_TARGET], *o = &p->t[F_OUT];
    nllf_walk k = {1, s->dims[s->ndim == 1 ? 0 : 1], 1, 1, 0, s->strides[s->ndim == 1 ? 0 : 1], 0, 0, 0, 0, 0, 0, 0, 0};
    if (s->ndim >= 2) {
        k.n = s->dims[0];
        k.sn = s->strides[0];
        k.tn = t->strides[0];
        k.on = o->ndim >= 1 ? o->strides[0] : 0;
    }
    if (s->ndim == 4) {
        k.h = s->dims[2], k.w = s->dims[3], k.sh = s->strides[2], k.sw = s->strides[3];
#ifdef BUG_NLL2D_TARGET_COLUMN_MAJOR
        /* BUG: the target plane read column-major (a W x H array; in bounds, wrong wherever W > 1). */
        k.th = t->strides[2], k.tw = t->strides[2] * t->dims[1];
#else
        k.th = t->strides[1], k.tw = t->strides[2];
#endif
        k.oh = o->ndim == 3 ? o->strides[1] : 0, k.ow = o->ndim == 3 ? o->strides[2] : 0;
    }
    return k;
}

static aclnnStatus nllf_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const nllf_plan *p = vplan;
    const port_tensor *self = &p->t[F_SELF], *target = &p->t[F_TARGET], *w = &p->t[F_WEIGHT], *out = &p->t[F_OUT];
    nllf_walk k = nllf_walk_of(p);
    int64_t positions = k.n * k.h * k.w, plane = k.h * k.w;
    if (self->numel == 0 || positions == 0) {
        if (p->reduction != 0) {
            port_store(out, out->offset, p->reduction == 1 ? NAN : 0.0f, PORT_ROUND_RINT);
            port_store(&p->t[F_TOTAL], p->t[F_TOTAL].offset, 0.0f, PORT_ROUND_RINT);
        }
        return ACLNN_SUCCESS;
    }
    for (int64_t q = 0; q < positions; q++) { /* device targets: all checked before anything is written */
        int64_t n = q / plane, h = (q / k.w) % k.h, x = q % k.w;
        int64_t t = port_load_int(target, target->offset + n * k.tn + h * k.th + x * k.tw);
        if (t != p->ignore_index && (t < 0 || t >= k.c)) {
            xlossEmuSetErrMsg("NLLLoss: target[%lld] = %lld is outside [0, %lld)", (long long)q, (long long)t,
                              (long long)k.c);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    port_pairwise sum, weights;
    memset(&sum, 0, sizeof sum);
    memset(&weights, 0, sizeof weights);
    for (int64_t q = 0; q < positions; q++) {
        int64_t n = q / plane, h = (q / k.w) % k.h, x = q % k.w;
        int64_t t = port_load_int(target, target->offset + n * k.tn + h * k.th + x * k.tw);
        float loss = 0.0f;
#ifdef BUG_NLLF_IGNORED_IN_TOTAL
        /* BUG: the total weight counts every position whose target is a class, ignored or not (the ignore
         * test was put on the loss term only): wrong where ignoreIndex is a class index. */
        if (t >= 0 && t < k.c)
            port_pairwise_add(&weights, port_load(w, w->offset + t * w->strides[0]));
#endif
        if (t != p->ignore_index) {
            float wt = port_load(w, w->offset + t * w->strides[0]);
            loss = -(wt * port_load(self, self->offset + n * k.sn + t * k.sc + h * k.sh + x * k.sw));
            port_pairwise_add(&sum, loss);
#ifndef BUG_NLLF_IGNORED_IN_TOTAL
            port_pairwise_add(&weights, wt);
#endif
        }
        if (p->reduction == 0)
            port_store(out, out->offset + n * k.on + h * k.oh + x * k.ow, loss, PORT_ROUND_RINT);
    }
    if (p->reduction != 0) {
        float total = port_pairwise_sum(&weights), s = port_pairwise_sum(&sum);
#ifdef BUG_NLLF_MEAN_BY_N
        /* BUG: "mean" read as the mean over the batch: the sum divided by the number of positions. */
        float divisor = (float)positions;
#else
        float divisor = total;
#endif
        port_store(out, out->offset, p->reduction == 1 ? s / divisor : s, PORT_ROUND_RINT);
        port_store(&p->t[F_TOTAL], p->t[F_TOTAL].offset, total, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus nllf_phase_one(const char *api, const char *op, int two_d, const aclTensor *self,
                                  const aclTensor *target, const aclTensor *weight, int64_t reduction,
                                  int64_t ignoreIndex, aclTensor *out, aclTensor *totalWeightOut,
                                  uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char *const names[5] = {"self", "target", "weight", "out", "totalWeightOut"};
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[5] = {self, target, weight, out, totalWeightOut};
    for (int i = 0; i < 5; i++)
        PORT_NOT_NULL(api, tensors[i], names[i]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    nllf_plan p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 5; i++)
        PORT_TRY(port_describe(api, names[i], tensors[i], &p.t[i]));
    PORT_TRY(port_need_float(api, "self", &p.t[F_SELF]));
    PORT_TRY(port_need_dtype(api, "weight", &p.t[F_WEIGHT], p.t[F_SELF].dtype));
    PORT_TRY(port_need_float(api, "out", &p.t[F_OUT]));
    PORT_TRY(port_need_float(api, "totalWeightOut", &p.t[F_TOTAL]));
    aclDataType tdt = p.t[F_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_INT32 && tdt != ACL_UINT8) {
        xlossEmuSetErrMsg("%s: target has dtype %s", api, port_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_reduction(api, reduction));
    const port_tensor *s = &p.t[F_SELF], *t = &p.t[F_TARGET], *w = &p.t[F_WEIGHT], *o = &p.t[F_OUT];
    char a[160];
    int ok = two_d ? s->ndim == 4 && t->ndim == 3 && t->dims[0] == s->dims[0] && t->dims[1] == s->dims[2] &&
                         t->dims[2] == s->dims[3]
                   : (s->ndim == 1 && t->ndim == 0) || (s->ndim == 2 && t->ndim == 1 && t->dims[0] == s->dims[0]);
    int64_t classes = s->ndim >= 2 ? s->dims[1] : s->ndim == 1 ? s->dims[0] : 0;
    if (!ok || !(w->ndim == 1 && w->dims[0] == classes)) {
        xlossEmuSetErrMsg("%s: self %s, target and weight shapes do not match", api, port_shape(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int per_position = reduction == 0 && s->ndim >= 2;
    if (per_position ? !(o->ndim == t->ndim && o->numel == t->numel) : o->numel != 1) {
        xlossEmuSetErrMsg("%s: out has shape %s", api, port_shape(o, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (p.t[F_TOTAL].numel != 1) {
        xlossEmuSetErrMsg("%s: totalWeightOut must have one element", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p.reduction = reduction;
    p.ignore_index = ignoreIndex;
    return port_create_executor(op, p.t, names, 5, &p, sizeof p, nllf_kernel, 0, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                             const aclTensor *weight, int64_t reduction,
                                                             int64_t ignoreIndex, aclTensor *out,
                                                             aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                             aclOpExecutor **executor)
{
    return nllf_phase_one("aclnnNLLLossGetWorkspaceSize", "aclnnNLLLoss", 0, self, target, weight, reduction,
                          ignoreIndex, out, totalWeightOut, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnNLLLoss", workspace, workspaceSize, executor, stream);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2dGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                               const aclTensor *weight, int64_t reduction,
                                                               int64_t ignoreIndex, aclTensor *out,
                                                               aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                               aclOpExecutor **executor)
{
    return nllf_phase_one("aclnnNLLLoss2dGetWorkspaceSize", "aclnnNLLLoss2d", 1, self, target, weight, reduction,
                          ignoreIndex, out, totalWeightOut, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnNLLLoss2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                               aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnNLLLoss2d", workspace, workspaceSize, executor, stream);
}

/* ---- BCE ---------------------------------------------------------------------------------------- */

enum { BF_SELF, BF_TARGET, BF_WEIGHT, BF_OUT };

typedef struct {
    port_tensor t[4];
    int64_t reduction;
} bcef_plan;

static inline float clamp_log(float v)
{
#ifdef BUG_BCEF_LOG_UNCLAMPED
    /* BUG: the page's formula taken literally: no clamp of the log at -100 (inf at probability 0 or 1). */
    return v;
#else
    return v < -100.0f ? -100.0f : v;
#endif
}

static aclnnStatus bcef_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const bcef_plan *p = vplan;
    const port_tensor *x = &p->t[BF_SELF], *y = &p->t[BF_TARGET], *w = &p->t[BF_WEIGHT], *out = &p->t[BF_OUT];
    port_pairwise sum, weights;
    memset(&sum, 0, sizeof sum);
    memset(&weights, 0, sizeof weights);
    for (int64_t k = 0; k < x->numel; k++) {
        float xv = port_load(x, port_element_at(x, k)), yv = port_load(y, port_element_at(y, k));
        float wv = w->present ? port_load(w, port_element_at(w, k)) : 1.0f;
        float loss = -(yv * clamp_log(logf(xv)) + (1.0f - yv) * clamp_log(log1pf(-xv))) * wv;
        if (p->reduction == 0)
            port_store(out, port_element_at(out, k), loss, PORT_ROUND_RINT);
        port_pairwise_add(&sum, loss);
        port_pairwise_add(&weights, wv);
    }
    if (p->reduction != 0) {
        float s = port_pairwise_sum(&sum);
#ifdef BUG_BCEF_MEAN_BY_WEIGHT_SUM
        /* BUG: mean read as a weighted mean: the sum divided by the sum of the weights. */
        float n = port_pairwise_sum(&weights);
#else
        float n = (float)x->numel;
#endif
        port_store(out, out->offset, p->reduction == 2 ? s : x->numel ? s / n : NAN, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                                        const aclTensor *weight, int64_t reduction,
                                                                        aclTensor *out, uint64_t *workspaceSize,
                                                                        aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyGetWorkspaceSize";
    static const char *const names[4] = {"self", "target", "weight", "out"};
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    bcef_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[4] = {self, target, weight, out};
    for (int i = 0; i < 4; i++)
        PORT_TRY(port_describe(api, names[i], tensors[i], &p.t[i]));
    PORT_TRY(port_need_float(api, "self", &p.t[BF_SELF]));
    for (int i = 1; i < 4; i++)
        if (p.t[i].present)
            PORT_TRY(port_need_dtype(api, names[i], &p.t[i], p.t[BF_SELF].dtype));
    PORT_TRY(port_need_reduction(api, reduction));
    PORT_TRY(port_need_same_shape(api, "target", &p.t[BF_TARGET], &p.t[BF_SELF]));
    if (p.t[BF_WEIGHT].present)
        PORT_TRY(port_need_same_shape(api, "weight", &p.t[BF_WEIGHT], &p.t[BF_SELF]));
    if (reduction == 0)
        PORT_TRY(port_need_same_shape(api, "out", &p.t[BF_OUT], &p.t[BF_SELF]));
    else if (p.t[BF_OUT].numel != 1) {
        xlossEmuSetErrMsg("%s: out must have one element", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p.reduction = reduction;
    return port_create_executor("aclnnBinaryCrossEntropy", p.t, names, 4, &p, sizeof p, bcef_kernel, 0, workspaceSize,
                                executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropy(void *workspace, uint64_t workspaceSize,
                                                        aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnBinaryCrossEntropy", workspace, workspaceSize, executor, stream);
}
