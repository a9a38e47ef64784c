/* aclnnFusedLinearCrossEntropyLossGrad for one vocabulary shard:
 *
 *   G = softmax, or exp(input @ weight.T - logitsMax) / sumExpLogits    (float32)
 *   G[i, maskedTarget[i]] -= 1 for tokens whose target is in the shard (targetMask bit 0)
 *   G *= grad[:, None], rounded to input's dtype (the vendor contract)
 *   inputGrad = G @ weight, weightGrad = G.T @ input                    (float32 accumulation)
 *
 * Workspace: the weight widened to float32 and the weight-gradient accumulator (V*H floats each),
 * one row of G (V) and two rows of H floats. Tokens are taken in chunks of FLCE_TOKEN_CHUNK, the
 * recompute mode's logits in vocabulary tiles of FLCE_VOCAB_TILE rows. Seeded bugs here:
 * BUG_FLCE_MASK_FROM_TARGET, BUG_FLCE_WGRAD_HALF_PARTIALS, BUG_FLCE_TILE_MAX, BUG_FLCE_G_TRUNC. */
#include "port.h"

#define FLCE_TOKEN_CHUNK 16
#define FLCE_VOCAB_TILE 16

/* G rounded to the input dtype before the two products (the vendor contract) */
static float round_g(aclDataType dt, float v)
{
#ifdef BUG_FLCE_G_TRUNC
    /* BUG: G is cast to FLOAT16/BF16 with CAST_TRUNC (toward zero) instead of CAST_RINT. */
    if (dt == ACL_FLOAT16)
        return port_half_to_float(port_float_to_half(v, PORT_ROUND_TRUNC));
    if (dt == ACL_BF16)
        return port_bf16_to_float(port_float_to_bf16(v, PORT_ROUND_TRUNC));
    return v;
#else
    return port_round_to(dt, v);
#endif
}

enum { L_GRAD, L_INPUT, L_WEIGHT, L_MASK, L_MT, L_LMAX, L_SUMEXP, L_SOFTMAX, L_IGRAD, L_WGRAD, L_COUNT };

typedef struct {
    port_tensor t[L_COUNT];
} flce_plan;

typedef struct {
    uint64_t wf, wacc, grow, xrow, acc, total; /* byte offsets into the workspace, and its size */
} flce_layout;

static int flce_layout_of(int64_t v, int64_t h, flce_layout *l)
{
    uint64_t vh;
    if (v < 0 || h < 0 || __builtin_mul_overflow((uint64_t)v, (uint64_t)h, &vh) || vh > (UINT64_MAX >> 8) ||
        (uint64_t)v > (UINT64_MAX >> 8) || (uint64_t)h > (UINT64_MAX >> 8))
        return -1;
    l->wf = 0;
    l->wacc = l->wf + port_align32(vh * 4);
    l->grow = l->wacc + port_align32(vh * 4);
    l->xrow = l->grow + port_align32((uint64_t)v * 4);
    l->acc = l->xrow + port_align32((uint64_t)h * 4);
    l->total = l->acc + port_align32((uint64_t)h * 4);
    return 0;
}

static int token_masked(const port_tensor *m, int64_t i)
{
    if (m->dtype == ACL_BOOL)
        return port_load_int(m, m->offset + i * m->strides[0]) != 0;
    return (int)((port_load_int(m, m->offset + (i / 8) * m->strides[0]) >> (i % 8)) & 1); /* UINT8, LSB first */
}

static int64_t local_target(const port_tensor *mt, int64_t i)
{
    return port_load_int(mt, mt->offset + i * mt->strides[0]);
}

static float load2(const port_tensor *t, int64_t i, int64_t j)
{
    return port_load(t, t->offset + i * t->strides[0] + j * t->strides[1]);
}

static aclnnStatus flce_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    const flce_plan *p = vplan;
    const port_tensor *input = &p->t[L_INPUT], *weight = &p->t[L_WEIGHT], *mask = &p->t[L_MASK], *mt = &p->t[L_MT],
                      *igrad = &p->t[L_IGRAD], *wgrad = &p->t[L_WGRAD];
    int64_t bt = input->dims[0], h = input->dims[1], v = weight->dims[0];
    aclDataType dt = input->dtype;

    /* local targets live in device memory: check the in-shard ones before writing anything */
    for (int64_t i = 0; i < bt; i++) {
        int64_t t;
        if (!token_masked(mask, i) && ((t = local_target(mt, i)) < 0 || t >= v)) {
            xlossEmuSetErrMsg("aclnnFusedLinearCrossEntropyLossGrad: maskedTarget[%lld] = %lld is outside [0, %lld)",
                              (long long)i, (long long)t, (long long)v);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    flce_layout l;
    if (flce_layout_of(v, h, &l) != 0 || l.total > workspaceSize)
        return ACLNN_ERR_INNER; /* phase one sized the workspace; never write past it */
    static _Thread_local float empty[8];
    char *ws = workspace ? workspace : (char *)empty; /* a zero-byte workspace may be NULL */
    float *wf = (float *)(ws + l.wf), *wacc = (float *)(ws + l.wacc), *grow = (float *)(ws + l.grow),
          *xrow = (float *)(ws + l.xrow), *acc = (float *)(ws + l.acc);

    for (int64_t r = 0; r < v; r++)
        for (int64_t k = 0; k < h; k++) {
            wf[r * h + k] = load2(weight, r, k);
            wacc[r * h + k] = 0.0f;
        }
    for (int64_t i = 0; i < bt; i++) {
        for (int64_t k = 0; k < h; k++)
            xrow[k] = load2(input, i, k);
        if (p->t[L_SOFTMAX].present) {
            for (int64_t r = 0; r < v; r++)
                grow[r] = load2(&p->t[L_SOFTMAX], i, r);
        } else {
            const port_tensor *lm = &p->t[L_LMAX], *se = &p->t[L_SUMEXP];
            float m = port_load(lm, lm->offset + i * lm->strides[0]),
                  s = port_load(se, se->offset + i * se->strides[0]);
            for (int64_t r0 = 0; r0 < v; r0 += FLCE_VOCAB_TILE) {
                int64_t r1 = r0 + FLCE_VOCAB_TILE < v ? r0 + FLCE_VOCAB_TILE : v;
                for (int64_t r = r0; r < r1; r++) {
                    float logit = 0.0f;
                    for (int64_t k = 0; k < h; k++)
                        logit += xrow[k] * wf[r * h + k];
                    grow[r] = logit;
                }
#ifdef BUG_FLCE_TILE_MAX
                /* BUG: the exponentials are taken against the tile's own row max (safe against overflow
                 * within the tile) and moved to the global max with exp(m - mt) instead of exp(mt - m). */
                float mt = grow[r0];
                for (int64_t r = r0 + 1; r < r1; r++)
                    mt = fmaxf(mt, grow[r]);
                for (int64_t r = r0; r < r1; r++)
                    grow[r] = expf(grow[r] - mt) * expf(m - mt) / s;
#else
                for (int64_t r = r0; r < r1; r++)
                    grow[r] = expf(grow[r] - m) / s;
#endif
            }
        }
#ifdef BUG_FLCE_MASK_FROM_TARGET
        /* BUG: "in this shard" is decided from maskedTarget's range instead of targetMask; masked
         * tokens carry maskedTarget 0, so their G[i, 0] is corrected too. */
        int64_t t = local_target(mt, i);
        if (t >= 0 && t < v)
            grow[t] -= 1.0f;
#else
        if (!token_masked(mask, i))
            grow[local_target(mt, i)] -= 1.0f;
#endif
        float gi = port_load(&p->t[L_GRAD], p->t[L_GRAD].offset + i * p->t[L_GRAD].strides[0]);
        for (int64_t r = 0; r < v; r++)
            grow[r] = round_g(dt, grow[r] * gi);
        for (int64_t k = 0; k < h; k++)
            acc[k] = 0.0f;
        for (int64_t r = 0; r < v; r++)
            for (int64_t k = 0; k < h; k++) {
                acc[k] += grow[r] * wf[r * h + k];
                wacc[r * h + k] += grow[r] * xrow[k];
            }
        for (int64_t k = 0; k < h; k++)
            port_store(igrad, igrad->offset + i * igrad->strides[0] + k * igrad->strides[1], acc[k], PORT_ROUND_RINT);
#ifdef BUG_FLCE_WGRAD_HALF_PARTIALS
        /* BUG: the weight gradient is kept in the input dtype between token chunks (float32 only
         * within a chunk): each chunk's partial sum is added to a FLOAT16/BF16 accumulator. */
        if ((i + 1) % FLCE_TOKEN_CHUNK == 0 || i + 1 == bt)
            for (int64_t e = 0; e < v * h; e++)
                wacc[e] = port_round_to(dt, wacc[e]);
#endif
    }
    for (int64_t r = 0; r < v; r++)
        for (int64_t k = 0; k < h; k++)
            port_store(wgrad, wgrad->offset + r * wgrad->strides[0] + k * wgrad->strides[1], wacc[r * h + k],
                       PORT_ROUND_RINT);
    return ACLNN_SUCCESS;
}

/* ---- phase one -------------------------------------------------------------------------------- */

static aclnnStatus need_shape(const char *api, const char *name, const port_tensor *t, int ndim, int64_t d0, int64_t d1)
{
    if (!t->present || (t->ndim == ndim && t->dims[0] == d0 && (ndim == 1 || t->dims[1] == d1)))
        return ACLNN_SUCCESS;
    char s[160];
    if (ndim == 1)
        xlossEmuSetErrMsg("%s: %s must have shape (%lld,); got %s", api, name, (long long)d0,
                          port_shape(t, s, sizeof s));
    else
        xlossEmuSetErrMsg("%s: %s must have shape (%lld, %lld); got %s", api, name, (long long)d0, (long long)d1,
                          port_shape(t, s, sizeof s));
    return ACLNN_ERR_PARAM_INVALID;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *grad, const aclTensor *input, const aclTensor *weight, const aclTensor *targetMask,
    const aclTensor *maskedTarget, float labelSmoothing, const aclTensor *logitsMaxOptional,
    const aclTensor *sumExpLogitsOptional, const aclTensor *softmaxOptional, aclTensor *inputGradOut,
    aclTensor *weightGradOut, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize";
    static const char *const names[L_COUNT] = {"grad",
                                               "input",
                                               "weight",
                                               "targetMask",
                                               "maskedTarget",
                                               "logitsMaxOptional",
                                               "sumExpLogitsOptional",
                                               "softmaxOptional",
                                               "inputGradOut",
                                               "weightGradOut"};
    port_phase_one_start(workspaceSize, executor);
    /* the row statistics are required in recompute mode, and ignored when softmax is given */
    const aclTensor *tensors[L_COUNT] = {grad,
                                         input,
                                         weight,
                                         targetMask,
                                         maskedTarget,
                                         softmaxOptional ? NULL : logitsMaxOptional,
                                         softmaxOptional ? NULL : sumExpLogitsOptional,
                                         softmaxOptional,
                                         inputGradOut,
                                         weightGradOut};
    for (int k = L_GRAD; k <= L_MT; k++)
        PORT_NOT_NULL(api, tensors[k], names[k]);
    if (!softmaxOptional) {
        PORT_NOT_NULL(api, logitsMaxOptional, "logitsMaxOptional (softmaxOptional is NULL)");
        PORT_NOT_NULL(api, sumExpLogitsOptional, "sumExpLogitsOptional (softmaxOptional is NULL)");
    }
    PORT_NOT_NULL(api, inputGradOut, "inputGradOut");
    PORT_NOT_NULL(api, weightGradOut, "weightGradOut");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    flce_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < L_COUNT; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));

    if (labelSmoothing != 0.0f) { /* NaN too */
        xlossEmuSetErrMsg("%s: labelSmoothing must be 0; got %g", api, (double)labelSmoothing);
        return ACLNN_ERR_PARAM_INVALID;
    }
    aclDataType dt = p.t[L_INPUT].dtype;
    if (dt != ACL_FLOAT16 && dt != ACL_BF16) {
        xlossEmuSetErrMsg("%s: input has dtype %s; expected FLOAT16 or BF16", api, port_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    static const int same[3] = {L_WEIGHT, L_IGRAD, L_WGRAD};
    for (int k = 0; k < 3; k++)
        PORT_TRY(port_need_dtype(api, names[same[k]], &p.t[same[k]], dt));
    static const int f32[4] = {L_GRAD, L_LMAX, L_SUMEXP, L_SOFTMAX};
    for (int k = 0; k < 4; k++)
        PORT_TRY(port_need_dtype(api, names[f32[k]], &p.t[f32[k]], ACL_FLOAT));
    aclDataType mdt = p.t[L_MASK].dtype, tdt = p.t[L_MT].dtype;
    if ((mdt != ACL_BOOL && mdt != ACL_UINT8) || (tdt != ACL_INT32 && tdt != ACL_INT64)) {
        xlossEmuSetErrMsg("%s: targetMask must be BOOL or UINT8 and maskedTarget INT32 or INT64; got %s and %s", api,
                          port_dtype_name(mdt), port_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    const port_tensor *g = &p.t[L_GRAD], *x = &p.t[L_INPUT], *w = &p.t[L_WEIGHT], *m = &p.t[L_MASK];
    if (g->ndim != 1 || x->ndim != 2 || w->ndim != 2) {
        xlossEmuSetErrMsg("%s: grad must be 1-D, input and weight 2-D", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t bt = g->dims[0], h = x->dims[1], v = w->dims[0];
    PORT_TRY(need_shape(api, "input", x, 2, bt, h));
    PORT_TRY(need_shape(api, "weight", w, 2, v, h));
    PORT_TRY(need_shape(api, "maskedTarget", &p.t[L_MT], 1, bt, 0));
    PORT_TRY(need_shape(api, "logitsMaxOptional", &p.t[L_LMAX], 1, bt, 0));
    PORT_TRY(need_shape(api, "sumExpLogitsOptional", &p.t[L_SUMEXP], 1, bt, 0));
    PORT_TRY(need_shape(api, "softmaxOptional", &p.t[L_SOFTMAX], 2, bt, v));
    PORT_TRY(need_shape(api, "inputGradOut", &p.t[L_IGRAD], 2, bt, h));
    PORT_TRY(need_shape(api, "weightGradOut", &p.t[L_WGRAD], 2, v, h));
    if (mdt == ACL_BOOL) {
        PORT_TRY(need_shape(api, "targetMask", m, 1, bt, 0));
    } else if (m->ndim != 1 || m->dims[0] < (bt + 7) / 8) {
        char s[160];
        xlossEmuSetErrMsg("%s: a bit-packed targetMask needs %lld bytes for BT=%lld; got %s", api,
                          (long long)((bt + 7) / 8), (long long)bt, port_shape(m, s, sizeof s));
        return ACLNN_ERR_PARAM_INVALID;
    }
    flce_layout l;
    if (flce_layout_of(v, h, &l) != 0) {
        xlossEmuSetErrMsg("%s: V=%lld, H=%lld is too large", api, (long long)v, (long long)h);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return port_create_executor("aclnnFusedLinearCrossEntropyLossGrad", p.t, names, L_COUNT, &p, sizeof p, flce_kernel,
                                l.total, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnFusedLinearCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                                     aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnFusedLinearCrossEntropyLossGrad", workspace, workspaceSize, executor, stream);
}
