/* aclnnXlossSigmoidFocalLoss[Backward] (xloss's own operators) and aclnnBinaryCrossEntropyBackward.
 *
 * Operands broadcast to self; mixed float dtypes are accepted (the aclnn promotion rule: all
 * are widened to float32) and the result is rounded once to out's dtype. */
#include <float.h>
#include <stdlib.h>

#include "ops_common.h"

enum { FOCAL_SELF, FOCAL_TARGET, FOCAL_WEIGHT, FOCAL_OUT, FOCAL_GRAD };

#include "focal_math.h"

static inline float alpha_t(float y, float alpha)
{
    return alpha >= 0.0f ? alpha * y + (1.0f - alpha) * (1.0f - y) : 1.0f;
}

typedef struct {
    float alpha, gamma;
    int64_t reduction;
    double *partial;   /* forward with a reduction: one float64 partial sum per EMU_REDUCE_BLOCK elements */
    double mean_div;   /* backward: 1 or the element count */
} focal_ctx;

static void focal_forward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const focal_ctx *c = vctx;
    const float *x = in[0], *y = in[1], *w = in[2];
    for (int64_t i = 0; i < n; i++) {
        focal_terms t = focal_eval(x[i], y[i], c->gamma);
        float wt = alpha_t(y[i], c->alpha);
        if (w)
            wt *= w[i];
        float loss = wt * t.ce * t.qg;
        if (c->partial)
            c->partial[(flat + i) / EMU_REDUCE_BLOCK] += (double)loss;
        else
            out[0][i] = loss;
    }
}

static void focal_backward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const focal_ctx *c = vctx;
    const float *x = in[0], *y = in[1], *w = in[2], *g = in[3];
    (void)flat;
    for (int64_t i = 0; i < n; i++) {
        focal_terms t = focal_eval(x[i], y[i], c->gamma);
        float wt = alpha_t(y[i], c->alpha);
        if (w)
            wt *= w[i];
        float dx = wt * (t.pmy * t.qg + c->gamma * t.qg * t.r * (1.0f - 2.0f * y[i]) * t.ce);
        /* the scaled gradient in double, rounded once: g / n alone can be a float32 subnormal */
        out[0][i] = (float)((double)dx * (double)g[i] / c->mean_div);
    }
}

static aclnnStatus focal_forward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *self = &ex->t[FOCAL_SELF], *out = &ex->t[FOCAL_OUT];
    focal_ctx c = {(float)ex->alpha, (float)ex->gamma, ex->reduction, NULL, 1.0};
    const emu_view *in[3] = {self, &ex->t[FOCAL_TARGET], &ex->t[FOCAL_WEIGHT]};
    if (ex->reduction == EMU_REDUCTION_NONE) {
        const emu_view *outs[1] = {out};
        emu_elementwise(self, in, 3, outs, 1, focal_forward_chunk, &c);
        return ACLNN_SUCCESS;
    }
    double total;
    EMU_CHECK(
        emu_elementwise_sum(self, in, 3, ex->reduction, focal_forward_chunk, &c, &c.partial, ws, ws_size, &total));
    emu_store_f64(out, out->offset, total);
    return ACLNN_SUCCESS;
}

static aclnnStatus focal_backward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *self = &ex->t[FOCAL_SELF];
    focal_ctx c = {(float)ex->alpha, (float)ex->gamma, ex->reduction, NULL,
                   ex->reduction == EMU_REDUCTION_MEAN && self->numel ? (double)self->numel : 1.0};
    const emu_view *in[4] = {self, &ex->t[FOCAL_TARGET], &ex->t[FOCAL_WEIGHT], &ex->t[FOCAL_GRAD]};
    const emu_view *outs[1] = {&ex->t[FOCAL_OUT]};
    emu_elementwise(self, in, 4, outs, 1, focal_backward_chunk, &c);
    return ACLNN_SUCCESS;
}

static aclnnStatus check_floats(emu_plan *ex)
{
    static const int floats[] = {FOCAL_SELF, FOCAL_TARGET, FOCAL_WEIGHT, FOCAL_OUT, FOCAL_GRAD};
    for (int i = 0; i < 5; i++)
        EMU_CHECK(emu_need_float(ex, floats[i]));
    return ACLNN_SUCCESS;
}

/* Checks shared by the three operators: dtypes, broadcasting and the reduction. */
static aclnnStatus check_elementwise(emu_plan *ex, int has_grad)
{
    EMU_CHECK(check_floats(ex));
    EMU_CHECK(emu_need_broadcast(ex, FOCAL_TARGET, FOCAL_SELF));
    EMU_CHECK(emu_need_broadcast(ex, FOCAL_WEIGHT, FOCAL_SELF));
    if (has_grad)
        EMU_CHECK(emu_need_broadcast(ex, FOCAL_GRAD, FOCAL_SELF));
    return emu_need_reduction(ex, ex->reduction);
}

static aclnnStatus check_focal_attrs(const emu_plan *ex)
{
    if (!isfinite(ex->gamma) || ex->gamma < 0.0) {
        emu_set_error("%s: gamma must be finite and >= 0; got %g", ex->api, ex->gamma);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!isfinite(ex->alpha) || ex->alpha > 1.0) {
        emu_set_error("%s: alpha must be in [0, 1], or negative to disable the class weighting; got %g", ex->api,
                      ex->alpha);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnXlossSigmoidFocalLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                                  const aclTensor *weightOptional, double gamma,
                                                                  double alpha, int64_t reduction, aclTensor *out,
                                                                  uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnXlossSigmoidFocalLossGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnXlossSigmoidFocalLoss", workspaceSize, executor);
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, FOCAL_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, FOCAL_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, FOCAL_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(&ex, FOCAL_OUT, "out", out));
    ex.gamma = gamma;
    ex.alpha = alpha;
    ex.reduction = reduction;
    EMU_CHECK(check_elementwise(&ex, 0));
    EMU_CHECK(check_focal_attrs(&ex));
    if (reduction == EMU_REDUCTION_NONE) {
        EMU_CHECK(emu_need_same_shape(&ex, FOCAL_OUT, FOCAL_SELF));
    } else if (!emu_one_element(&ex.t[FOCAL_OUT])) {
        char b[160];
        emu_set_error("%s: out must have shape () or (1,) for reduction %lld; got %s", api, (long long)reduction,
                      emu_shape_str(&ex.t[FOCAL_OUT], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (reduction != EMU_REDUCTION_NONE) /* one float64 partial sum per block of EMU_REDUCE_BLOCK elements */
        ex.workspace_size = emu_reduce_workspace(ex.t[FOCAL_SELF].numel);
    ex.run = focal_forward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnXlossSigmoidFocalLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                  aclrtStream stream)
{
    return emu_launch("aclnnXlossSigmoidFocalLoss", workspace, workspaceSize, executor, stream);
}

EMU_EXPORT aclnnStatus aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    double gamma, double alpha, int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnXlossSigmoidFocalLossBackward", workspaceSize, executor);
    EMU_REQUIRE(api, gradOutput, "gradOutput");
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, FOCAL_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, FOCAL_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, FOCAL_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(&ex, FOCAL_OUT, "out", out));
    EMU_CHECK(emu_operand(&ex, FOCAL_GRAD, "gradOutput", gradOutput));
    ex.gamma = gamma;
    ex.alpha = alpha;
    ex.reduction = reduction;
    EMU_CHECK(check_elementwise(&ex, 1));
    EMU_CHECK(check_focal_attrs(&ex));
    EMU_CHECK(emu_need_same_shape(&ex, FOCAL_OUT, FOCAL_SELF));
    ex.run = focal_backward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnXlossSigmoidFocalLossBackward(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream)
{
    return emu_launch("aclnnXlossSigmoidFocalLossBackward", workspace, workspaceSize, executor, stream);
}

/* ---- binary cross entropy backward ----------------------------------------------------------- */

static void bce_backward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const double mean_div = *(const double *)vctx;
    const float *x = in[0], *y = in[1], *w = in[2], *g = in[3];
    const float eps = 1e-12f; /* fixed by the vendor: max(x(1-x), 1e-12), as PyTorch */
    (void)flat;
    for (int64_t i = 0; i < n; i++) {
        float d = fmaxf(x[i] * (1.0f - x[i]), eps);
        float v = (x[i] - y[i]) / d;
        if (w)
            v *= w[i];
        out[0][i] = (float)((double)g[i] * (double)v / mean_div); /* as in focal: one rounding */
    }
}

static aclnnStatus bce_backward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *self = &ex->t[FOCAL_SELF];
    if (self->numel == 0)
        return ACLNN_SUCCESS; /* nothing to write (out's shape was not checked) */
    double mean_div = ex->reduction == EMU_REDUCTION_MEAN && self->numel ? (double)self->numel : 1.0;
    const emu_view *in[4] = {self, &ex->t[FOCAL_TARGET], &ex->t[FOCAL_WEIGHT], &ex->t[FOCAL_GRAD]};
    const emu_view *outs[1] = {&ex->t[FOCAL_OUT]};
    emu_elementwise(self, in, 4, outs, 1, bce_backward_chunk, &mean_div);
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnBinaryCrossEntropyBackward", workspaceSize, executor);
    EMU_REQUIRE(api, gradOutput, "gradOutput");
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, FOCAL_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, FOCAL_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, FOCAL_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(&ex, FOCAL_OUT, "out", out));
    EMU_CHECK(emu_operand(&ex, FOCAL_GRAD, "gradOutput", gradOutput));
    ex.reduction = reduction;
    /* ops-nn loss/binary_cross_entropy_grad/op_api: dtypes, then CheckFormat (target and weight in
     * self's format), then CheckShape, which an empty self passes whatever the other shapes */
    EMU_CHECK(check_floats(&ex));
    static const int same_format[] = {FOCAL_TARGET, FOCAL_WEIGHT};
    for (int i = 0; i < 2; i++) {
        const emu_view *v = &ex.t[same_format[i]];
        if (v->present && v->format != ex.t[FOCAL_SELF].format) {
            emu_set_error("%s: %s has format %d; self has %d (they must be the same)", api, ex.names[same_format[i]],
                          (int)v->format, (int)ex.t[FOCAL_SELF].format);
            return ACLNN_ERR_PARAM_INVALID;
        }
    }
    if (ex.t[FOCAL_SELF].numel == 0) {
        EMU_CHECK(emu_need_reduction(&ex, reduction));
    } else {
        EMU_CHECK(check_elementwise(&ex, 1));
        EMU_CHECK(emu_need_same_shape(&ex, FOCAL_OUT, FOCAL_SELF));
    }
    ex.run = bce_backward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                       aclrtStream stream)
{
    return emu_launch("aclnnBinaryCrossEntropyBackward", workspace, workspaceSize, executor, stream);
}
