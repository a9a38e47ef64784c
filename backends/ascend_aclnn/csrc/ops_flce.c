/* aclnnFusedLinearCrossEntropyLossGrad: the backward of CE(input @ weight.T) for one vocabulary
 * shard (seed 003).
 *
 *   G = softmax, or exp(input @ weight.T - logitsMax) / sumExpLogits   (float32)
 *   G[i, maskedTarget[i]] -= 1 - targetMask[i];  G *= grad[:, None]
 *   G is rounded to input's dtype, then (float32 accumulation)
 *   inputGrad = G @ weight,  weightGrad = G.T @ input  (rounded to input's dtype).
 *
 * High-performance mode (softmaxOptional given; V >= 128) leaves softmaxOptional as ops-nn's kernel
 * (op_kernel/fused_linear_cross_entropy_loss_grad_high_perf.h) does: ProcessUpdate writes the
 * float32 softmax - 1 at each unmasked token's target, then the vector pass writes each row's G,
 * cast to the 16-bit input dtype, over the same buffer at its own row stride, the row's 2V bytes
 * rounded up to 512 (row i at byte i * S; the bytes between and after keep the float data). On a
 * non-contiguous softmax the op works on a contiguous copy (op_api: l0op::Contiguous), so the
 * caller's tensor is left as it was. BT = 0
 * writes nothing. maskedTarget's range is not checked (CANN does not); an out-of-range target is
 * never used as an index. One pass over the tokens. The workspace holds the weight widened to float32, the float32
 * weight-gradient accumulator, one row of G and two rows of H floats. */
#include <stdlib.h>
#include <string.h>

#include "ops_common.h"

enum { FL_GRAD, FL_INPUT, FL_WEIGHT, FL_MASK, FL_MT, FL_LMAX, FL_SUMEXP, FL_SOFTMAX, FL_IGRAD, FL_WGRAD };

typedef struct {
    uint64_t wf, wg, grow, xrow, acc, total; /* byte offsets into the workspace, and its size */
} flce_layout;

static int flce_workspace(int64_t v, int64_t h, flce_layout *l)
{
    uint64_t vh, vh4, v4, h4;
    if (emu_mul_u64((uint64_t)v, (uint64_t)h, &vh) || emu_mul_u64(vh, 4, &vh4) || emu_mul_u64((uint64_t)v, 4, &v4) ||
        emu_mul_u64((uint64_t)h, 4, &h4) || vh4 > (UINT64_MAX >> 4))
        return -1;
    l->wf = 0;
    l->wg = l->wf + emu_round_up(vh4);
    l->grow = l->wg + emu_round_up(vh4);
    l->xrow = l->grow + emu_round_up(v4);
    l->acc = l->xrow + emu_round_up(h4);
    l->total = l->acc + emu_round_up(h4);
    return l->total > (uint64_t)INT64_MAX ? -1 : 0;
}

static inline int mask_bit(const emu_view *m, int64_t i)
{
    if (m->dtype == ACL_BOOL)
        return emu_load_i64(m, emu_at1(m, i)) != 0;
    return (int)((emu_load_i64(m, emu_at1(m, i / 8)) >> (i % 8)) & 1); /* UINT8, LSB first */
}

/* Row i of G (already rounded to dt) as the high-performance kernel writes it over softmaxOptional:
 * 16-bit values at byte i * S from the view's start, S = 2V rounded up to 512. S <= 4V for V >= 128,
 * so the row ends before float row i + 1 starts: rows still to be read are never touched, and every
 * byte written lies inside the (contiguous) view. */
static void store_g_row(const emu_view *sm, int64_t i, int64_t v, aclDataType dt, const float *g)
{
    uint64_t row_bytes = ((uint64_t)v * 2 + 511) / 512 * 512;
    char *row = sm->data + sm->offset * (int64_t)sm->elsize + (uint64_t)i * row_bytes;
    for (int64_t r = 0; r < v; r++) {
        uint16_t bits = dt == ACL_BF16 ? xloss_f32_to_bf16(g[r]) : xloss_f32_to_f16(g[r]);
        memcpy(row + 2 * r, &bits, 2);
    }
}

static aclnnStatus flce_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *grad = &ex->t[FL_GRAD], *input = &ex->t[FL_INPUT], *weight = &ex->t[FL_WEIGHT],
                   *mask = &ex->t[FL_MASK], *mt = &ex->t[FL_MT], *sm = &ex->t[FL_SOFTMAX], *lmax = &ex->t[FL_LMAX],
                   *sexp = &ex->t[FL_SUMEXP], *igrad = &ex->t[FL_IGRAD], *wgrad = &ex->t[FL_WGRAD];
    int64_t bt = input->dims[0], h = input->dims[1], v = weight->dims[0];
    aclDataType dt = input->dtype;
    /* the kernel writes the caller's softmaxOptional only when it is contiguous (else a copy) */
    int sm_in_place = sm->present && sm->strides[1] == 1 && (bt == 1 || sm->strides[0] == v);

    if (bt == 0) /* nothing to do: CANN returns success without writing either output */
        return ACLNN_SUCCESS;
    flce_layout l;
    if (flce_workspace(v, h, &l) != 0 || l.total > ws_size)
        return ACLNN_ERR_INNER; /* phase one sized it; never write past it */
    static float dummy[8];
    char *base = ws ? ws : (char *)dummy; /* a zero-byte workspace may be NULL */
    float *wf = (float *)(base + l.wf), *wg = (float *)(base + l.wg), *grow = (float *)(base + l.grow),
          *xrow = (float *)(base + l.xrow), *acc = (float *)(base + l.acc);

    for (int64_t r = 0; r < v; r++)
        emu_gather_f32(weight, emu_at2(weight, r, 0), weight->strides[1], h, wf + r * h);
    for (int64_t k = 0; k < v * h; k++)
        wg[k] = 0.0f;

    for (int64_t i = 0; i < bt; i++) {
        emu_gather_f32(input, emu_at2(input, i, 0), input->strides[1], h, xrow);
        float gi = emu_load_f32(grad, emu_at1(grad, i));
        if (sm->present) {
            emu_gather_f32(sm, emu_at2(sm, i, 0), sm->strides[1], v, grow);
        } else {
            float m = emu_load_f32(lmax, emu_at1(lmax, i)), se = emu_load_f32(sexp, emu_at1(sexp, i));
            for (int64_t r = 0; r < v; r++)
                grow[r] = expf(emu_dot_f32(xrow, wf + r * h, h) - m) / se;
        }
        if (!mask_bit(mask, i)) {
            /* CANN does not check maskedTarget's range (the adapter does); the emulator never indexes
             * outside the row with it: an out-of-range target subtracts nothing */
            int64_t t = emu_load_i64(mt, emu_at1(mt, i));
            if (t >= 0 && t < v) {
                grow[t] -= 1.0f;
                if (sm_in_place) /* the kernel's ProcessUpdate: softmax - 1, float32, in place */
                    emu_store_f32(sm, emu_at2(sm, i, t), grow[t]);
            }
        }
        for (int64_t r = 0; r < v; r++)
            grow[r] *= gi;
        for (int64_t r = 0; r < v; r++)
            grow[r] = emu_round_to(dt, grow[r]); /* G in the input dtype before the matmuls */
        if (sm_in_place) /* the vector pass: 16-bit G at row stride S over the float rows already read */
            store_g_row(sm, i, v, dt, grow);

        for (int64_t k = 0; k < h; k++)
            acc[k] = 0.0f;
        for (int64_t r = 0; r < v; r++) {
            const float g = grow[r], *wr = wf + r * h;
            for (int64_t k = 0; k < h; k++)
                acc[k] += g * wr[k];
        }
        emu_scatter_f32(igrad, emu_at2(igrad, i, 0), igrad->strides[1], h, acc);
        for (int64_t r = 0; r < v; r++) {
            const float g = grow[r];
            float *gr = wg + r * h;
            for (int64_t k = 0; k < h; k++)
                gr[k] += g * xrow[k];
        }
    }
    for (int64_t r = 0; r < v; r++)
        emu_scatter_f32(wgrad, emu_at2(wgrad, r, 0), wgrad->strides[1], h, wg + r * h);
    return ACLNN_SUCCESS;
}

static aclnnStatus need_shape(const emu_plan *ex, int k, int ndim, int64_t d0, int64_t d1)
{
    const emu_view *t = &ex->t[k];
    if (!t->present)
        return ACLNN_SUCCESS;
    if (t->ndim == ndim && t->dims[0] == d0 && (ndim == 1 || t->dims[1] == d1))
        return ACLNN_SUCCESS;
    char a[160];
    if (ndim == 1)
        emu_set_error("%s: %s must have shape (%lld,); got %s", ex->api, ex->names[k], (long long)d0,
                      emu_shape_str(t, a, sizeof a));
    else
        emu_set_error("%s: %s must have shape (%lld, %lld); got %s", ex->api, ex->names[k], (long long)d0,
                      (long long)d1, emu_shape_str(t, a, sizeof a));
    return ACLNN_ERR_PARAM_INVALID;
}

EMU_EXPORT aclnnStatus aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *grad, const aclTensor *input, const aclTensor *weight, const aclTensor *targetMask,
    const aclTensor *maskedTarget, float labelSmoothing, const aclTensor *logitsMaxOptional,
    const aclTensor *sumExpLogitsOptional, const aclTensor *softmaxOptional, aclTensor *inputGradOut,
    aclTensor *weightGradOut, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnFusedLinearCrossEntropyLossGrad", workspaceSize, executor);
    EMU_REQUIRE(api, grad, "grad");
    EMU_REQUIRE(api, input, "input");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, targetMask, "targetMask");
    EMU_REQUIRE(api, maskedTarget, "maskedTarget");
    if (!softmaxOptional) { /* recompute mode needs both row statistics */
        EMU_REQUIRE(api, logitsMaxOptional, "logitsMaxOptional (softmaxOptional is NULL)");
        EMU_REQUIRE(api, sumExpLogitsOptional, "sumExpLogitsOptional (softmaxOptional is NULL)");
    }
    EMU_REQUIRE(api, inputGradOut, "inputGradOut");
    EMU_REQUIRE(api, weightGradOut, "weightGradOut");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, FL_GRAD, "grad", grad));
    EMU_CHECK(emu_operand(&ex, FL_INPUT, "input", input));
    EMU_CHECK(emu_operand(&ex, FL_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, FL_MASK, "targetMask", targetMask));
    EMU_CHECK(emu_operand(&ex, FL_MT, "maskedTarget", maskedTarget));
    if (softmaxOptional) { /* the row statistics are ignored when softmax is given */
        EMU_CHECK(emu_operand(&ex, FL_SOFTMAX, "softmaxOptional", softmaxOptional));
    } else {
        EMU_CHECK(emu_operand(&ex, FL_LMAX, "logitsMaxOptional", logitsMaxOptional));
        EMU_CHECK(emu_operand(&ex, FL_SUMEXP, "sumExpLogitsOptional", sumExpLogitsOptional));
    }
    EMU_CHECK(emu_operand(&ex, FL_IGRAD, "inputGradOut", inputGradOut));
    EMU_CHECK(emu_operand(&ex, FL_WGRAD, "weightGradOut", weightGradOut));

    if (labelSmoothing != 0.0f) { /* also refuses NaN */
        emu_set_error("%s: labelSmoothing must be 0 (the only value supported); got %g", api, (double)labelSmoothing);
        return ACLNN_ERR_PARAM_INVALID;
    }
    aclDataType dt = ex.t[FL_INPUT].dtype;
    if (dt != ACL_FLOAT16 && dt != ACL_BF16) {
        emu_set_error("%s: input has dtype %s; expected FLOAT16 or BF16", api, emu_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_dtype(&ex, FL_WEIGHT, dt));
    EMU_CHECK(emu_need_dtype(&ex, FL_IGRAD, dt));
    EMU_CHECK(emu_need_dtype(&ex, FL_WGRAD, dt));
    static const int f32s[] = {FL_GRAD, FL_LMAX, FL_SUMEXP, FL_SOFTMAX};
    for (int i = 0; i < 4; i++)
        EMU_CHECK(emu_need_dtype(&ex, f32s[i], ACL_FLOAT));
    aclDataType mdt = ex.t[FL_MASK].dtype, tdt = ex.t[FL_MT].dtype;
    if (mdt != ACL_BOOL && mdt != ACL_UINT8) {
        emu_set_error("%s: targetMask has dtype %s; expected BOOL (one per token) or UINT8 (bit-packed)", api,
                      emu_dtype_name(mdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (tdt != ACL_INT32 && tdt != ACL_INT64) {
        emu_set_error("%s: maskedTarget has dtype %s; expected INT32 or INT64", api, emu_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    for (int k = 0; k < ex.n; k++) { /* op_api CheckFormatValid: every operand given is ND */
        if (ex.t[k].present && ex.t[k].format != ACL_FORMAT_ND) {
            emu_set_error("%s: %s has format %d; only ND is supported", api, ex.names[k], (int)ex.t[k].format);
            return ACLNN_ERR_PARAM_INVALID;
        }
    }

    EMU_CHECK(emu_need_ndim(&ex, FL_GRAD, 1));
    EMU_CHECK(emu_need_ndim(&ex, FL_INPUT, 2));
    EMU_CHECK(emu_need_ndim(&ex, FL_WEIGHT, 2));
    int64_t bt = ex.t[FL_GRAD].dims[0], h = ex.t[FL_INPUT].dims[1], v = ex.t[FL_WEIGHT].dims[0];
    EMU_CHECK(need_shape(&ex, FL_INPUT, 2, bt, h));
    EMU_CHECK(need_shape(&ex, FL_WEIGHT, 2, v, h));
    EMU_CHECK(need_shape(&ex, FL_MT, 1, bt, 0));
    EMU_CHECK(need_shape(&ex, FL_LMAX, 1, bt, 0));
    EMU_CHECK(need_shape(&ex, FL_SUMEXP, 1, bt, 0));
    EMU_CHECK(need_shape(&ex, FL_SOFTMAX, 2, bt, v));
    EMU_CHECK(need_shape(&ex, FL_IGRAD, 2, bt, h));
    EMU_CHECK(need_shape(&ex, FL_WGRAD, 2, v, h));
    const emu_view *m = &ex.t[FL_MASK];
    if (mdt == ACL_BOOL) {
        EMU_CHECK(need_shape(&ex, FL_MASK, 1, bt, 0));
    } else if (m->ndim != 1 || m->dims[0] > INT64_MAX / 8 || m->dims[0] * 8 < bt) {
        char a[160];
        emu_set_error("%s: targetMask (UINT8, bit-packed) must be 1-D with at least %lld bytes for BT=%lld; got %s",
                      api, (long long)((bt + 7) / 8), (long long)bt, emu_shape_str(m, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }

    if (ex.t[FL_SOFTMAX].present && v < 128) { /* the high-performance mode's minimum vocabulary shard */
        emu_set_error("%s: V=%lld: with softmaxOptional the vocabulary shard must hold at least 128 entries", api,
                      (long long)v);
        return ACLNN_ERR_PARAM_INVALID;
    }
    static const int outs[] = {FL_IGRAD, FL_WGRAD}, idx[] = {FL_MASK, FL_MT};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            EMU_CHECK(emu_need_no_overlap(&ex, outs[i], idx[j]));
    flce_layout l;
    if (flce_workspace(v, h, &l) != 0) {
        emu_set_error("%s: V=%lld, H=%lld is too large", api, (long long)v, (long long)h);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.workspace_size = l.total;
    ex.run = flce_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnFusedLinearCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                            aclOpExecutor *executor, aclrtStream stream)
{
    return emu_launch("aclnnFusedLinearCrossEntropyLossGrad", workspace, workspaceSize, executor, stream);
}
