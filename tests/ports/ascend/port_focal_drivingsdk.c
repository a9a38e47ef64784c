/* DrivingSDK's focal ABI, aclnnSigmoidFocalLoss and aclnnSigmoidFocalLossGrad (see
 * include/aclnnop/aclnn_sigmoid_focal_loss.h): FLOAT logit, INT32 one-hot target, FLOAT weight of
 * the full shape (required), double gamma and alpha, FLOAT out of the same shape; no reduction,
 * no upstream gradient. Per element, y = (target != 0), alpha_t = alpha for y = 1 and 1 - alpha
 * for y = 0: loss = weight * alpha_t * ce * q^gamma; the Grad operator writes d loss / d logit.
 *
 * Compiled only with PORT_FOCAL_DRIVINGSDK (the variant then leaves xloss's own focal operators
 * out, so DrivingSDK's is the library's only focal ABI). Seeded bug here: BUG_DS_GRAD_ALPHA_SWAPPED.
 * With PORT_DS_VENDOR_NUMERICS the kernel is instead DrivingSDK's own arithmetic (kernels/
 * sigmoid_focal_loss/op_kernel/arch35), reproduced in float32 step for step: p = 1/(1 + exp(-x)),
 * 1 - p, log p, log(1 - p), powers as exp(gamma log), t = float(target) in pos*t + neg*(1 - t). Not
 * a bug: the vendor's numerics, exact within |x| <= 4 and inf/NaN far outside. */
#include "port.h"

#ifdef PORT_FOCAL_DRIVINGSDK

enum { D_LOGIT, D_TARGET, D_WEIGHT, D_OUT, D_COUNT };

typedef struct {
    port_tensor t[D_COUNT];
    float gamma, alpha;
    int grad; /* 0: the loss, 1: its derivative */
} ds_plan;

static float alpha_t(float y, float alpha) { return y != 0.0f ? alpha : 1.0f - alpha; }

#ifdef PORT_DS_VENDOR_NUMERICS
/* the vendor kernel's value for one element (float32 throughout; MulAddDst as fmaf) */
static float vendor_value(float x, float t, float w, float gamma, float alpha, int grad)
{
    float p = 1.0f / (expf(-x) + 1.0f), s = -p + 1.0f;
    float lp = logf(p), ls = logf(s);
    float pg = expf(lp * gamma), sg = expf(ls * gamma);
    float pos, neg;
    if (!grad) {
        pos = sg * -alpha * lp;
        neg = pg * (alpha - 1.0f) * ls;
    } else {
        pos = fmaf(s, sg * -alpha, sg * (alpha * gamma) * (p * lp));
        neg = fmaf(pg * ((alpha - 1.0f) * gamma), s * ls, pg * (1.0f - alpha) * p);
    }
    return fmaf(neg, -t + 1.0f, pos * t) * w;
}
#endif

static aclnnStatus ds_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const ds_plan *p = vplan;
    const port_tensor *x = &p->t[D_LOGIT];
    const port_tensor *ops[D_COUNT] = {x, &p->t[D_TARGET], &p->t[D_WEIGHT], &p->t[D_OUT]};
    port_walk w;
    port_walk_init(&w, x, ops, D_COUNT);
    for (int64_t i = 0; i < x->numel; i++, port_walk_next(&w)) {
        float xv = port_load(x, w.at[D_LOGIT]);
        float wt = port_load(&p->t[D_WEIGHT], w.at[D_WEIGHT]);
#ifdef PORT_DS_VENDOR_NUMERICS
        float tv = (float)port_load_int(&p->t[D_TARGET], w.at[D_TARGET]);
        port_store(&p->t[D_OUT], w.at[D_OUT], vendor_value(xv, tv, wt, p->gamma, p->alpha, p->grad), PORT_ROUND_RINT);
        continue;
#endif
        float y = port_load_int(&p->t[D_TARGET], w.at[D_TARGET]) != 0 ? 1.0f : 0.0f;
        focal_parts f = focal_split(xv, y);
        float qg = powf(f.q, p->gamma);
        float v;
        if (!p->grad) {
            v = wt * alpha_t(y, p->alpha) * f.ce * qg;
        } else {
            float pmy = f.p * (1.0f - y) - f.s * y; /* p - y as a difference of non-negative parts */
            float dx = pmy * qg + focal_gamma_term(f, y, p->gamma, qg);
#ifdef BUG_DS_GRAD_ALPHA_SWAPPED
            /* BUG: the gradient weighs the classes the other way round (alpha for the negatives),
             * a slip when the forward's alpha_t was copied into the backward kernel. */
            v = wt * alpha_t(1.0f - y, p->alpha) * dx;
#else
            v = wt * alpha_t(y, p->alpha) * dx;
#endif
        }
        port_store(&p->t[D_OUT], w.at[D_OUT], v, PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ds_phase_one(const char *api, const char *op, const aclTensor *logit, const aclTensor *target,
                                const aclTensor *weight, double gamma, double alpha, aclTensor *out,
                                const char *out_name, int grad, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *const names[D_COUNT] = {"logit", "target", "weight", out_name};
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, logit, "logit");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, weight, "weight");
    PORT_NOT_NULL(api, out, out_name);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    ds_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[D_COUNT] = {logit, target, weight, out};
    static const aclDataType dtypes[D_COUNT] = {ACL_FLOAT, ACL_INT32, ACL_FLOAT, ACL_FLOAT};
    for (int k = 0; k < D_COUNT; k++) {
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
        PORT_TRY(port_need_dtype(api, names[k], &p.t[k], dtypes[k]));
        PORT_TRY(port_need_same_shape(api, names[k], &p.t[k], &p.t[D_LOGIT]));
    }
    if (!isfinite(gamma) || gamma < 0.0 || !isfinite(alpha)) {
        xlossEmuSetErrMsg("%s: gamma must be finite and >= 0 and alpha finite; got gamma %g, alpha %g", api, gamma,
                          alpha);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p.gamma = (float)gamma;
    p.alpha = (float)alpha;
    p.grad = grad;
    return port_create_executor(op, p.t, names, D_COUNT, &p, sizeof p, ds_kernel, 0, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGetWorkspaceSize(const aclTensor *logit, const aclTensor *target,
                                                                      const aclTensor *weight, double gamma,
                                                                      double alpha, aclTensor *out,
                                                                      uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return ds_phase_one("aclnnSigmoidFocalLossGetWorkspaceSize", "aclnnSigmoidFocalLoss", logit, target, weight, gamma,
                        alpha, out, "out", 0, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnSigmoidFocalLoss", workspace, workspaceSize, executor, stream);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGradGetWorkspaceSize(
    const aclTensor *logit, const aclTensor *target, const aclTensor *weight, double gamma, double alpha,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return ds_phase_one("aclnnSigmoidFocalLossGradGetWorkspaceSize", "aclnnSigmoidFocalLossGrad", logit, target, weight,
                        gamma, alpha, gradInput, "gradInput", 1, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnSigmoidFocalLossGrad(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnSigmoidFocalLossGrad", workspace, workspaceSize, executor, stream);
}

#endif /* PORT_FOCAL_DRIVINGSDK */
