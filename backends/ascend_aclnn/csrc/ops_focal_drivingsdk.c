/* aclnnSigmoidFocalLoss / aclnnSigmoidFocalLossGrad with the ABI of Ascend's DrivingSDK
 * (mx_driving), a vendor custom-operator package: see include/aclnnop/aclnn_sigmoid_focal_loss.h.
 *
 *   (logit FLOAT, target INT32 one-hot, weight FLOAT full shape (required), double gamma,
 *    double alpha, out FLOAT, workspaceSize, executor)
 *
 * All four tensors have one shape; no reduction, no upstream gradient. Per element, with
 * y = (target != 0): loss = weight * a_t * bce_with_logits(logit, y) * (1 - p_t)^gamma where
 * a_t = alpha for y = 1 and 1 - alpha for y = 0 (mmcv's convention, which mx_driving replaces: no
 * "alpha < 0 disables" rule); the Grad operator writes d loss / d logit of that same element. */
#include "focal_math.h"
#include "ops_common.h"

enum { DS_LOGIT, DS_TARGET, DS_WEIGHT, DS_OUT };

typedef struct {
    float alpha, gamma;
} ds_ctx;

static inline float ds_alpha_t(float y, float alpha) { return y != 0.0f ? alpha : 1.0f - alpha; }

static void ds_forward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const ds_ctx *c = vctx;
    const float *x = in[0], *t = in[1], *w = in[2];
    (void)flat;
    for (int64_t i = 0; i < n; i++) {
        float y = t[i] != 0.0f ? 1.0f : 0.0f;
        focal_terms f = focal_eval(x[i], y, c->gamma);
        out[0][i] = w[i] * ds_alpha_t(y, c->alpha) * f.ce * f.qg;
    }
}

static void ds_grad_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const ds_ctx *c = vctx;
    const float *x = in[0], *t = in[1], *w = in[2];
    (void)flat;
    for (int64_t i = 0; i < n; i++) {
        float y = t[i] != 0.0f ? 1.0f : 0.0f;
        focal_terms f = focal_eval(x[i], y, c->gamma);
        float dx = f.pmy * f.qg + c->gamma * f.qg * f.r * (1.0f - 2.0f * y) * f.ce;
        out[0][i] = (float)((double)w[i] * (double)ds_alpha_t(y, c->alpha) * (double)dx);
    }
}

static aclnnStatus ds_run(const emu_plan *ex, emu_ew_fn fn)
{
    ds_ctx c = {(float)ex->alpha, (float)ex->gamma};
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
    EMU_CHECK(emu_need_dtype(&ex, DS_LOGIT, ACL_FLOAT));
    EMU_CHECK(emu_need_dtype(&ex, DS_TARGET, ACL_INT32));
    EMU_CHECK(emu_need_dtype(&ex, DS_WEIGHT, ACL_FLOAT));
    EMU_CHECK(emu_need_dtype(&ex, DS_OUT, ACL_FLOAT));
    EMU_CHECK(emu_need_same_shape(&ex, DS_TARGET, DS_LOGIT));
    EMU_CHECK(emu_need_same_shape(&ex, DS_WEIGHT, DS_LOGIT));
    EMU_CHECK(emu_need_same_shape(&ex, DS_OUT, DS_LOGIT));
    if (!isfinite(gamma) || gamma < 0.0 || !isfinite(alpha)) {
        emu_set_error("%s: gamma must be finite and >= 0 and alpha finite; got gamma %g, alpha %g", api, gamma, alpha);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.gamma = gamma;
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
