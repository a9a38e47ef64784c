/* aclnnSigmoidFocalLoss / aclnnSigmoidFocalLossGrad with the ABI of Ascend's DrivingSDK
 * (mx_driving), a vendor custom-operator package: see include/aclnnop/aclnn_sigmoid_focal_loss.h.
 *
 *   (logit, target INT32, weight full shape (required), double gamma, double alpha, out, ...)
 *   logit, weight, out: FLOAT, or FLOAT16 (DrivingSDK kernels/sigmoid_focal_loss op_host: the
 *   op's DataType lists); target INT32
 *
 * All four tensors have one shape; no reduction, no upstream gradient, no check of gamma or alpha.
 * The arithmetic is the vendor kernel's (op_kernel/arch35/sigmoid_focal_loss.cpp and
 * sigmoid_focal_loss_grad.cpp), step for step in the logit's type T (float, or half: each step
 * rounded to half), with t = T(target) entering as pos * t + neg * (1 - t):
 *   p = 1 / (1 + exp(-x)); s = 1 - p; lp = log(p); ls = log(s); pg = exp(gamma lp); sg = exp(gamma ls)
 *   forward: pos = -alpha sg lp;                        neg = (alpha - 1) pg ls
 *   grad:    pos = -alpha sg s + alpha gamma sg p lp;   neg = (alpha - 1) gamma pg s ls + (1 - alpha) pg p
 *   out = (pos t + neg (1 - t)) w
 * So it is the vendor's numerics, not an accurate focal loss: for float32, 1 - p rounds to 0 above
 * about +16.6 and exp(-x) overflows below about -88.7, giving inf or NaN there, and the error grows
 * with |x| before that (the adapter declares the range it passes xloss's tolerance in). */
#include <math.h>

#include "ops_common.h"

enum { DS_LOGIT, DS_TARGET, DS_WEIGHT, DS_OUT };

typedef struct {
    float alpha, gamma;
    int half; /* the logit's type is FLOAT16: every step rounds to half */
} ds_ctx;

/* one step's result in the kernel's type */
static inline float ds_r(const ds_ctx *c, float v) { return c->half ? xloss_f16_to_f32(xloss_f32_to_f16(v)) : v; }

/* MulAddDst: dst = a * b + dst, one rounding in float (a product of halves is exact in float) */
static inline float ds_fma(const ds_ctx *c, float a, float b, float dst)
{
    return c->half ? ds_r(c, a * b + dst) : fmaf(a, b, dst);
}

typedef struct {
    float p, s, lp, ls, pg, sg;
} ds_terms;

static inline ds_terms ds_eval(const ds_ctx *c, float x)
{
    ds_terms k;
    float e = ds_r(c, expf(-x));
    k.p = ds_r(c, 1.0f / ds_r(c, e + 1.0f));
    k.s = ds_r(c, -k.p + 1.0f);
    k.lp = ds_r(c, logf(k.p));
    k.ls = ds_r(c, logf(k.s));
    float g = ds_r(c, c->gamma);
    k.pg = ds_r(c, expf(ds_r(c, k.lp * g)));
    k.sg = ds_r(c, expf(ds_r(c, k.ls * g)));
    return k;
}

static inline float ds_combine(const ds_ctx *c, float pos, float neg, float t, float w)
{
    t = ds_r(c, t); /* INT32 -> T (through float for half) */
    float omt = ds_r(c, -t + 1.0f);
    float res = ds_r(c, pos * t);
    res = ds_fma(c, neg, omt, res);
    return ds_r(c, res * w);
}

static void ds_forward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const ds_ctx *c = vctx;
    const float *x = in[0], *t = in[1], *w = in[2];
    (void)flat;
    float minus_alpha = ds_r(c, -c->alpha), alpha_m1 = ds_r(c, c->alpha - 1.0f);
    for (int64_t i = 0; i < n; i++) {
        ds_terms k = ds_eval(c, x[i]);
        float pos = ds_r(c, ds_r(c, k.sg * minus_alpha) * k.lp);
        float neg = ds_r(c, ds_r(c, k.pg * alpha_m1) * k.ls);
        out[0][i] = ds_combine(c, pos, neg, t[i], w[i]);
    }
}

static void ds_grad_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const ds_ctx *c = vctx;
    const float *x = in[0], *t = in[1], *w = in[2];
    (void)flat;
    float minus_alpha = ds_r(c, -c->alpha), alpha_gamma = ds_r(c, c->alpha * c->gamma);
    float alpha_m1_gamma = ds_r(c, (c->alpha - 1.0f) * c->gamma), one_m_alpha = ds_r(c, 1.0f - c->alpha);
    for (int64_t i = 0; i < n; i++) {
        ds_terms k = ds_eval(c, x[i]);
        float t5 = ds_r(c, k.sg * minus_alpha), t3 = ds_r(c, k.sg * alpha_gamma), t4 = ds_r(c, k.p * k.lp);
        float pos = ds_fma(c, k.s, t5, ds_r(c, t3 * t4));
        float t6 = ds_r(c, k.pg * alpha_m1_gamma), t7 = ds_r(c, k.pg * one_m_alpha), t8 = ds_r(c, k.s * k.ls);
        float neg = ds_fma(c, t6, t8, ds_r(c, t7 * k.p));
        out[0][i] = ds_combine(c, pos, neg, t[i], w[i]);
    }
}

static aclnnStatus ds_run(const emu_plan *ex, emu_ew_fn fn)
{
    ds_ctx c = {(float)ex->alpha, (float)ex->gamma, ex->t[DS_LOGIT].dtype == ACL_FLOAT16};
    const emu_view *in[3] = {&ex->t[DS_LOGIT], &ex->t[DS_TARGET], &ex->t[DS_WEIGHT]};
    const emu_view *outs[1] = {&ex->t[DS_OUT]};
    emu_elementwise(&ex->t[DS_LOGIT], in, 3, outs, 1, fn, &c);
    return ACLNN_SUCCESS;
}

static aclnnStatus ds_forward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    return ds_run(ex, ds_forward_chunk);
}

static aclnnStatus ds_grad_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    return ds_run(ex, ds_grad_chunk);
}

static aclnnStatus ds_phase_one(const char *api, const char *op, const aclTensor *logit, const aclTensor *target,
                                const aclTensor *weight, double gamma, double alpha, aclTensor *out,
                                const char *out_name, uint64_t *workspaceSize, aclOpExecutor **executor, emu_kernel run)
{
    emu_plan ex;
    emu_phase_one_start(&ex, api, op, workspaceSize, executor);
    EMU_REQUIRE(api, logit, "logit");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, out, out_name);
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, DS_LOGIT, "logit", logit));
    EMU_CHECK(emu_operand(&ex, DS_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, DS_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, DS_OUT, out_name, out));
    aclDataType dt = ex.t[DS_LOGIT].dtype;
    if (dt != ACL_FLOAT && dt != ACL_FLOAT16) {
        emu_set_error("%s: logit has dtype %s; expected FLOAT or FLOAT16", api, emu_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_dtype(&ex, DS_TARGET, ACL_INT32));
    EMU_CHECK(emu_need_dtype(&ex, DS_WEIGHT, dt));
    EMU_CHECK(emu_need_dtype(&ex, DS_OUT, dt));
    EMU_CHECK(emu_need_same_shape(&ex, DS_TARGET, DS_LOGIT));
    EMU_CHECK(emu_need_same_shape(&ex, DS_WEIGHT, DS_LOGIT));
    EMU_CHECK(emu_need_same_shape(&ex, DS_OUT, DS_LOGIT));
    ex.gamma = gamma; /* no check: the vendor's tiling takes any float attribute */
    ex.alpha = alpha;
    ex.run = run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnSigmoidFocalLossGetWorkspaceSize(const aclTensor *logit, const aclTensor *target,
                                                             const aclTensor *weight, double gamma, double alpha,
                                                             aclTensor *out, uint64_t *workspaceSize,
                                                             aclOpExecutor **executor)
{
    return ds_phase_one("aclnnSigmoidFocalLossGetWorkspaceSize", "aclnnSigmoidFocalLoss", logit, target, weight, gamma,
                        alpha, out, "out", workspaceSize, executor, ds_forward_run);
}

EMU_EXPORT aclnnStatus aclnnSigmoidFocalLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream)
{
    return emu_launch("aclnnSigmoidFocalLoss", workspace, workspaceSize, executor, stream);
}

EMU_EXPORT aclnnStatus aclnnSigmoidFocalLossGradGetWorkspaceSize(const aclTensor *logit, const aclTensor *target,
                                                                 const aclTensor *weight, double gamma, double alpha,
                                                                 aclTensor *gradInput, uint64_t *workspaceSize,
                                                                 aclOpExecutor **executor)
{
    return ds_phase_one("aclnnSigmoidFocalLossGradGetWorkspaceSize", "aclnnSigmoidFocalLossGrad", logit, target, weight,
                        gamma, alpha, gradInput, "gradInput", workspaceSize, executor, ds_grad_run);
}

EMU_EXPORT aclnnStatus aclnnSigmoidFocalLossGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                 aclrtStream stream)
{
    return emu_launch("aclnnSigmoidFocalLossGrad", workspace, workspaceSize, executor, stream);
}
