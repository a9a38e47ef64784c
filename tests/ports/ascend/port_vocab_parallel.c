/* aclnnFusedLinearOnlineMaxSum (one vocabulary shard, before the caller's all-reduce) and
 * aclnnFusedCrossEntropyLossWithMaxSum (the loss after it), as a port author reads CANN ops-nn:
 *
 *   logits = input @ weight.T (float32); logitsMaxLocal = max(logits); sumExpLogitsLocal =
 *   sum(exp(logits - max)); a token is masked where target < vocabStartIndex or target >=
 *   vocabEndIndex; maskedTarget = masked ? 0 : target - start; predictedLogitsLocal = masked ? 0 :
 *   logits[maskedTarget] - max; targetMaskOut bit-packed LSB first, the padding bits the mask of
 *   target 0 (the kernel pads the targets with 0).
 *   loss = log(sumExpLogits) - predictedLogits; softmax = exp(logits - logitsMax) / sumExpLogits.
 *
 * Workspace (max/sum): one row of logits (V floats) and one input row (H floats). Seeded bugs here:
 * BUG_VP_END_INCLUSIVE, BUG_VP_PADDING_SET, BUG_VP_PRED_UNSHIFTED, BUG_VP_SOFTMAX_HALF_INV. */
#include "aclnnop/aclnn_fused_cross_entropy_loss_with_max_sum.h"
#include "aclnnop/aclnn_fused_linear_online_max_sum.h"
#include "port.h"

enum { M_INPUT, M_WEIGHT, M_TARGET, M_LMAX, M_SUMEXP, M_PRED, M_MASK, M_MT, M_LOGITS, M_COUNT };

typedef struct {
    port_tensor t[M_COUNT];
    int64_t start, end;
} ms_plan;

static void store_int(const port_tensor *t, int64_t at, int64_t v)
{
    char *p = t->base;
    if (t->dtype == ACL_INT64) {
        memcpy(p + at * 8, &v, 8);
    } else if (t->dtype == ACL_INT32) {
        int32_t x = (int32_t)v;
        memcpy(p + at * 4, &x, 4);
    } else {
        p[at] = (char)(uint8_t)v;
    }
}

static float load1(const port_tensor *t, int64_t i) { return port_load(t, t->offset + i * t->strides[0]); }

static float load2(const port_tensor *t, int64_t i, int64_t j)
{
    return port_load(t, t->offset + i * t->strides[0] + j * t->strides[1]);
}

static int ms_masked(int64_t t, int64_t start, int64_t end)
{
#ifdef BUG_VP_END_INCLUSIVE
    /* BUG: the doc page's formula ("target > vocabEndIndex"): the row at vocabEndIndex counts as in
     * the shard, where CANN's kernel and golden script compare ">=" (an exclusive end). */
    return t < start || t > end;
#else
    return t < start || t >= end;
#endif
}

static aclnnStatus ms_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    const ms_plan *p = vplan;
    const port_tensor *input = &p->t[M_INPUT], *weight = &p->t[M_WEIGHT], *target = &p->t[M_TARGET],
                      *mask = &p->t[M_MASK], *mt = &p->t[M_MT], *logits = &p->t[M_LOGITS];
    int64_t bt = input->dims[0], h = input->dims[1], v = weight->dims[0];
    if (bt == 0)
        return ACLNN_SUCCESS;
    if ((uint64_t)(v + h) * 4 > workspaceSize)
        return ACLNN_ERR_INNER; /* phase one sized the workspace; never write past it */
    float *row = workspace, *xrow = row + v;
    uint8_t byte = 0;
    for (int64_t i = 0; i < bt; i++) {
        for (int64_t k = 0; k < h; k++)
            xrow[k] = load2(input, i, k);
        float m = -INFINITY;
        for (int64_t r = 0; r < v; r++) {
            float z = 0.0f;
            for (int64_t k = 0; k < h; k++)
                z += xrow[k] * load2(weight, r, k);
            row[r] = z;
            m = z > m ? z : m;
        }
        float s = 0.0f;
        for (int64_t r = 0; r < v; r++)
            s += expf(row[r] - m);
        int64_t t = port_load_int(target, target->offset + i * target->strides[0]);
        int masked = ms_masked(t, p->start, p->end);
        int64_t local = masked ? 0 : t - p->start;
        float pred = 0.0f;
        if (!masked && local < v) /* (the buggy end lets local reach V: never read past the row) */
#ifdef BUG_VP_PRED_UNSHIFTED
            pred = row[local]; /* BUG: the target's logit itself, not relative to the shard's max */
#else
            pred = row[local] - m;
#endif
        port_store(&p->t[M_LMAX], p->t[M_LMAX].offset + i * p->t[M_LMAX].strides[0], m, PORT_ROUND_RINT);
        port_store(&p->t[M_SUMEXP], p->t[M_SUMEXP].offset + i * p->t[M_SUMEXP].strides[0], s, PORT_ROUND_RINT);
        port_store(&p->t[M_PRED], p->t[M_PRED].offset + i * p->t[M_PRED].strides[0], pred, PORT_ROUND_RINT);
        store_int(mt, mt->offset + i * mt->strides[0], local);
        if (logits->present)
            for (int64_t r = 0; r < v; r++)
                port_store(logits, logits->offset + i * logits->strides[0] + r * logits->strides[1], row[r],
                           PORT_ROUND_RINT);
        byte |= (uint8_t)(masked << (i % 8));
        if (i % 8 == 7 || i == bt - 1) {
#ifdef BUG_VP_PADDING_SET
            int pad = 1; /* the doc page's reading: the padding bits always set */
#else
            int pad = ms_masked(0, p->start, p->end); /* the padding is target 0, as the kernel pads */
#endif
            if (i % 8 != 7 && pad)
                byte |= (uint8_t)(0xffu << (i % 8 + 1));
            store_int(mask, mask->offset + (i / 8) * mask->strides[0], byte);
            byte = 0;
        }
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus need_1d(const char *api, const char *name, const port_tensor *t, int64_t n)
{
    if (!t->present || (t->ndim == 1 && t->dims[0] == n))
        return ACLNN_SUCCESS;
    char s[160];
    xlossEmuSetErrMsg("%s: %s must have shape (%lld,); got %s", api, name, (long long)n, port_shape(t, s, sizeof s));
    return ACLNN_ERR_PARAM_INVALID;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearOnlineMaxSumGetWorkspaceSize(
    const aclTensor *input, const aclTensor *weight, const aclTensor *target, int64_t vocabStartIndex,
    int64_t vocabEndIndex, aclTensor *logitsMaxLocalOut, aclTensor *sumExpLogitsLocalOut,
    aclTensor *predictedLogitsLocalOut, aclTensor *targetMaskOut, aclTensor *maskedTargetOut,
    aclTensor *vocabParallelLogitsOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedLinearOnlineMaxSumGetWorkspaceSize";
    static const char *const names[M_COUNT] = {"input",
                                               "weight",
                                               "target",
                                               "logitsMaxLocalOut",
                                               "sumExpLogitsLocalOut",
                                               "predictedLogitsLocalOut",
                                               "targetMaskOut",
                                               "maskedTargetOut",
                                               "vocabParallelLogitsOutOptional"};
    const aclTensor *tensors[M_COUNT] = {input,
                                         weight,
                                         target,
                                         logitsMaxLocalOut,
                                         sumExpLogitsLocalOut,
                                         predictedLogitsLocalOut,
                                         targetMaskOut,
                                         maskedTargetOut,
                                         vocabParallelLogitsOutOptional};
    port_phase_one_start(workspaceSize, executor);
    for (int k = 0; k < M_LOGITS; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    ms_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < M_COUNT; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
    const port_tensor *x = &p.t[M_INPUT], *w = &p.t[M_WEIGHT];
    aclDataType dt = x->dtype, tdt = p.t[M_TARGET].dtype;
    if (dt != ACL_FLOAT16 && dt != ACL_BF16) {
        xlossEmuSetErrMsg("%s: input has dtype %s; expected FLOAT16 or BF16", api, port_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_dtype(api, "weight", w, dt));
    PORT_TRY(port_need_dtype(api, "vocabParallelLogitsOutOptional", &p.t[M_LOGITS], dt));
    for (int k = M_LMAX; k <= M_PRED; k++)
        PORT_TRY(port_need_dtype(api, names[k], &p.t[k], ACL_FLOAT));
    PORT_TRY(port_need_dtype(api, "targetMaskOut", &p.t[M_MASK], ACL_UINT8));
    if (tdt != ACL_INT32 && tdt != ACL_INT64) {
        xlossEmuSetErrMsg("%s: target has dtype %s; expected INT32 or INT64", api, port_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(port_need_dtype(api, "maskedTargetOut", &p.t[M_MT], tdt));
    if (x->ndim != 2 || w->ndim != 2 || w->dims[1] != x->dims[1] || w->dims[0] < 1 || x->dims[1] > 65534) {
        xlossEmuSetErrMsg("%s: input (BT, H) and weight (V, H) with V >= 1 and H <= 65534 expected", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t bt = x->dims[0], h = x->dims[1], v = w->dims[0];
    if (vocabStartIndex < 0 || vocabEndIndex < vocabStartIndex || vocabEndIndex - vocabStartIndex > v) {
        xlossEmuSetErrMsg("%s: need 0 <= vocabStartIndex <= vocabEndIndex <= vocabStartIndex + V; got %lld, %lld", api,
                          (long long)vocabStartIndex, (long long)vocabEndIndex);
        return ACLNN_ERR_PARAM_INVALID;
    }
    PORT_TRY(need_1d(api, "target", &p.t[M_TARGET], bt));
    for (int k = M_LMAX; k <= M_PRED; k++)
        PORT_TRY(need_1d(api, names[k], &p.t[k], bt));
    PORT_TRY(need_1d(api, "targetMaskOut", &p.t[M_MASK], (bt + 7) / 8));
    PORT_TRY(need_1d(api, "maskedTargetOut", &p.t[M_MT], bt));
    const port_tensor *lg = &p.t[M_LOGITS];
    if (lg->present && (lg->ndim != 2 || lg->dims[0] != bt || lg->dims[1] != v)) {
        xlossEmuSetErrMsg("%s: vocabParallelLogitsOutOptional must have shape (BT, V)", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p.start = vocabStartIndex;
    p.end = vocabEndIndex;
    return port_create_executor("aclnnFusedLinearOnlineMaxSum", p.t, names, M_COUNT, &p, sizeof p, ms_kernel,
                                port_align32((uint64_t)(v + h) * 4), workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearOnlineMaxSum(void *workspace, uint64_t workspaceSize,
                                                             aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnFusedLinearOnlineMaxSum", workspace, workspaceSize, executor, stream);
}

/* ---- aclnnFusedCrossEntropyLossWithMaxSum -------------------------------------------------------------------- */

enum { C_LMAX, C_SUMEXP, C_PRED, C_LOGITS, C_LOSS, C_SOFTMAX, C_COUNT };

typedef struct {
    port_tensor t[C_COUNT];
} ce_plan;

static aclnnStatus ce_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    const ce_plan *p = vplan;
    const port_tensor *logits = &p->t[C_LOGITS], *softmax = &p->t[C_SOFTMAX], *loss = &p->t[C_LOSS];
    int64_t bt = p->t[C_LMAX].dims[0], v = logits->present ? logits->dims[1] : 0;
    if (logits->present && (uint64_t)v * 4 > workspaceSize)
        return ACLNN_ERR_INNER;
    float *row = workspace;
    for (int64_t i = 0; i < bt; i++) {
        float m = load1(&p->t[C_LMAX], i), s = load1(&p->t[C_SUMEXP], i), pred = load1(&p->t[C_PRED], i);
        if (logits->present) { /* read the whole row first: the softmax may alias the logits */
            for (int64_t r = 0; r < v; r++)
                row[r] = load2(logits, i, r);
#ifdef BUG_VP_SOFTMAX_HALF_INV
            /* BUG: 1 / sum kept in FLOAT16 (the vector unit's half reciprocal) before the multiply */
            float inv = port_round_to(ACL_FLOAT16, 1.0f / s);
#else
            float inv = 1.0f / s;
#endif
            for (int64_t r = 0; r < v; r++)
                port_store(softmax, softmax->offset + i * softmax->strides[0] + r * softmax->strides[1],
                           expf(row[r] - m) * inv, PORT_ROUND_RINT);
        }
        port_store(loss, loss->offset + i * loss->strides[0], logf(s) - pred, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize(
    const aclTensor *logitsMax, const aclTensor *sumExpLogits, const aclTensor *predictedLogits, float labelSmoothing,
    const aclTensor *inputOptional, const aclTensor *weightOptional, const aclTensor *vocabParallelLogitsOptional,
    aclTensor *lossOut, aclTensor *softMaxOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize";
    static const char *const names[C_COUNT] = {
        "logitsMax", "sumExpLogits", "predictedLogits", "vocabParallelLogitsOptional", "lossOut", "softMaxOutOptional"};
    const aclTensor *tensors[C_COUNT] = {logitsMax, sumExpLogits,      predictedLogits, vocabParallelLogitsOptional,
                                         lossOut,   softMaxOutOptional};
    port_phase_one_start(workspaceSize, executor);
    for (int k = C_LMAX; k <= C_PRED; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, lossOut, "lossOut");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    if (labelSmoothing != 0.0f || inputOptional || weightOptional ||
        !vocabParallelLogitsOptional != !softMaxOutOptional) {
        xlossEmuSetErrMsg("%s: labelSmoothing must be 0, inputOptional and weightOptional NULL, and the logits and "
                          "the softmax given together",
                          api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ce_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < C_COUNT; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
    if (p.t[C_LMAX].ndim != 1) {
        xlossEmuSetErrMsg("%s: logitsMax must be 1-D", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t bt = p.t[C_LMAX].dims[0];
    static const int f32[5] = {C_LMAX, C_SUMEXP, C_PRED, C_LOSS, C_SOFTMAX};
    for (int k = 0; k < 5; k++) {
        PORT_TRY(port_need_dtype(api, names[f32[k]], &p.t[f32[k]], ACL_FLOAT));
        if (f32[k] != C_SOFTMAX)
            PORT_TRY(need_1d(api, names[f32[k]], &p.t[f32[k]], bt));
    }
    const port_tensor *lg = &p.t[C_LOGITS], *sm = &p.t[C_SOFTMAX];
    int64_t v = lg->present ? lg->dims[1] : 0;
    if (lg->present && (!port_is_float(lg->dtype) || lg->ndim != 2 || lg->dims[0] != bt || sm->ndim != 2 ||
                        sm->dims[0] != bt || sm->dims[1] != v)) {
        xlossEmuSetErrMsg("%s: vocabParallelLogitsOptional and softMaxOutOptional must be (BT, V) floats", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return port_create_executor("aclnnFusedCrossEntropyLossWithMaxSum", p.t, names, C_COUNT, &p, sizeof p, ce_kernel,
                                port_align32((uint64_t)v * 4), workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedCrossEntropyLossWithMaxSum(void *workspace, uint64_t workspaceSize,
                                                                     aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnFusedCrossEntropyLossWithMaxSum", workspace, workspaceSize, executor, stream);
}
