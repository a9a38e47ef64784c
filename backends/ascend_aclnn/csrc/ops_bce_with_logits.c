/* aclnnBinaryCrossEntropyWithLogits and aclnnBinaryCrossEntropyWithLogitsBackward (CANN ops-nn
 * loss/sigmoid_cross_entropy_with_logits_v2 and ..._grad_v2, op_api): the vendor's checks in the
 * vendor's order, then the arithmetic in float32 per element (sums in float64), each result rounded
 * once to out's dtype.
 *
 * Per element, with pw = posWeight (1 if absent) and lw = 1 + (pw - 1) y: the loss
 * lw log(1 + e^-|x|) + (x > 0 ? x (1 - y) : -x y pw), the vendor's formula without its overflow, and
 * the gradient (1 - y) sigmoid(x) - pw y sigmoid(-x), each sigmoid from e^-|x| (no cancellation). */
#include <float.h>
#include <stdlib.h>

#include "ops_common.h"

enum { BCEL_SELF, BCEL_TARGET, BCEL_WEIGHT, BCEL_POS_WEIGHT, BCEL_OUT, BCEL_GRAD };

static inline float bcel_loss(float x, float y, float pw)
{
    float e = expf(-fabsf(x));
    float linear = x > 0.0f ? x * (1.0f - y) : -x * (y * pw);
    return linear + (1.0f + (pw - 1.0f) * y) * log1pf(e);
}

static inline float bcel_grad(float x, float y, float pw)
{
    float e = expf(-fabsf(x));
    float big = 1.0f / (1.0f + e); /* sigmoid(|x|) */
    float small = e * big;         /* sigmoid(-|x|) */
    float p = x >= 0.0f ? big : small, s = x >= 0.0f ? small : big;
    return (1.0f - y) * p - (pw * y) * s;
}

typedef struct {
    double *partial;  /* forward with a reduction: one float64 partial sum per EMU_REDUCE_BLOCK elements */
    double mean_div;  /* backward: 1 or the element count */
} bcel_ctx;

static void bcel_forward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const bcel_ctx *c = vctx;
    const float *x = in[0], *y = in[1], *w = in[2], *pw = in[3];
    for (int64_t i = 0; i < n; i++) {
        float loss = bcel_loss(x[i], y[i], pw ? pw[i] : 1.0f);
        if (w)
            loss *= w[i];
        if (c->partial)
            c->partial[(flat + i) / EMU_REDUCE_BLOCK] += (double)loss;
        else
            out[0][i] = loss;
    }
}

static void bcel_backward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const bcel_ctx *c = vctx;
    const float *x = in[0], *y = in[1], *w = in[2], *pw = in[3], *g = in[4];
    (void)flat;
    for (int64_t i = 0; i < n; i++) {
        float dx = bcel_grad(x[i], y[i], pw ? pw[i] : 1.0f);
        if (w)
            dx *= w[i];
        /* the scaled gradient in double, rounded once: g / n alone can be a float32 subnormal */
        out[0][i] = (float)((double)dx * (double)g[i] / c->mean_div);
    }
}

static aclnnStatus bcel_forward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *self = &ex->t[BCEL_SELF], *out = &ex->t[BCEL_OUT];
    bcel_ctx c = {NULL, 1.0};
    const emu_view *in[4] = {self, &ex->t[BCEL_TARGET], &ex->t[BCEL_WEIGHT], &ex->t[BCEL_POS_WEIGHT]};
    if (ex->reduction == EMU_REDUCTION_NONE) {
        const emu_view *outs[1] = {out};
        emu_elementwise(self, in, 4, outs, 1, bcel_forward_chunk, &c);
        return ACLNN_SUCCESS;
    }
    double total;
    EMU_CHECK(emu_elementwise_sum(self, in, 4, ex->reduction, bcel_forward_chunk, &c, &c.partial, ws, ws_size, &total));
    /* an empty self fills out whatever its shape (HandleEmptyTensor's Fill); otherwise out has one element */
    int64_t fill = self->numel ? 1 : out->numel;
    for (int64_t i = 0; i < fill; i++) {
        int64_t at = out->offset, rest = i;
        for (int d = out->ndim - 1; d >= 0; d--) {
            at += (rest % out->dims[d]) * out->strides[d];
            rest /= out->dims[d];
        }
        emu_store_f64(out, at, total);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus bcel_backward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *self = &ex->t[BCEL_SELF];
    bcel_ctx c = {NULL, ex->reduction == EMU_REDUCTION_MEAN && self->numel ? (double)self->numel : 1.0};
    const emu_view *in[5] = {self, &ex->t[BCEL_TARGET], &ex->t[BCEL_WEIGHT], &ex->t[BCEL_POS_WEIGHT],
                             &ex->t[BCEL_GRAD]};
    const emu_view *outs[1] = {&ex->t[BCEL_OUT]};
    emu_elementwise(self, in, 5, outs, 1, bcel_backward_chunk, &c);
    return ACLNN_SUCCESS;
}

/* CheckDtypeValid of both op_api files: each listed operand FLOAT, FLOAT16 or BF16 (the emulator takes
 * the Atlas A2/A3 list), and out in target's dtype. */
static aclnnStatus bcel_check_dtypes(emu_plan *ex, const int *floats, int n)
{
    for (int i = 0; i < n; i++)
        EMU_CHECK(emu_need_float(ex, floats[i]));
    return emu_need_dtype(ex, BCEL_OUT, ex->t[BCEL_TARGET].dtype);
}

static aclnnStatus bcel_describe(emu_plan *ex, const aclTensor *self, const aclTensor *target,
                                 const aclTensor *weightOptional, const aclTensor *posWeightOptional, aclTensor *out)
{
    EMU_CHECK(emu_operand(ex, BCEL_SELF, "self", self));
    EMU_CHECK(emu_operand(ex, BCEL_TARGET, "target", target));
    EMU_CHECK(emu_operand(ex, BCEL_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(ex, BCEL_POS_WEIGHT, "posWeightOptional", posWeightOptional));
    return emu_operand(ex, BCEL_OUT, "out", out);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, const aclTensor *posWeightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnBinaryCrossEntropyWithLogits", workspaceSize, executor);
    EMU_REQUIRE(api, self, "self"); /* CheckNotNull: self, target, out */
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(bcel_describe(&ex, self, target, weightOptional, posWeightOptional, out));
    ex.reduction = reduction;
    /* the vendor casts the weights to the promoted type whatever theirs: the emulator takes float ones */
    static const int floats[] = {BCEL_SELF, BCEL_TARGET, BCEL_OUT, BCEL_WEIGHT, BCEL_POS_WEIGHT};
    EMU_CHECK(bcel_check_dtypes(&ex, floats, 5));
    EMU_CHECK(emu_need_reduction(&ex, reduction)); /* CheckReduction */
    EMU_CHECK(emu_need_same_shape(&ex, BCEL_TARGET, BCEL_SELF)); /* CheckShape */
    if (ex.t[BCEL_TARGET].numel) { /* an empty target skips the broadcast checks (its output is fixed) */
        EMU_CHECK(emu_need_broadcast(&ex, BCEL_WEIGHT, BCEL_TARGET));
        EMU_CHECK(emu_need_broadcast(&ex, BCEL_POS_WEIGHT, BCEL_TARGET));
    }
    if (reduction == EMU_REDUCTION_NONE) {
        EMU_CHECK(emu_need_same_shape(&ex, BCEL_OUT, BCEL_SELF));
    } else if (ex.t[BCEL_SELF].numel && !emu_one_element(&ex.t[BCEL_OUT])) {
        /* the vendor only warns and then copies its one-element result into out: the emulator refuses */
        char b[160];
        emu_set_error("%s: out must have shape () or (1,) for reduction %lld; got %s", api, (long long)reduction,
                      emu_shape_str(&ex.t[BCEL_OUT], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (reduction != EMU_REDUCTION_NONE && ex.t[BCEL_SELF].numel) /* one float64 partial per block */
        ex.workspace_size = emu_reduce_workspace(ex.t[BCEL_SELF].numel);
    ex.run = bcel_forward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                         aclOpExecutor *executor, const aclrtStream stream)
{
    return emu_launch("aclnnBinaryCrossEntropyWithLogits", workspace, workspaceSize, executor, stream);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *posWeightOptional, int64_t reduction, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnBinaryCrossEntropyWithLogitsBackward", workspaceSize, executor);
    EMU_REQUIRE(api, gradOutput, "gradOutput"); /* CheckNotNull: gradOutput, self, target, out */
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(bcel_describe(&ex, self, target, weightOptional, posWeightOptional, out));
    EMU_CHECK(emu_operand(&ex, BCEL_GRAD, "gradOutput", gradOutput));
    ex.reduction = reduction;
    static const int floats[] = {BCEL_GRAD, BCEL_SELF, BCEL_TARGET, BCEL_WEIGHT, BCEL_POS_WEIGHT, BCEL_OUT};
    EMU_CHECK(bcel_check_dtypes(&ex, floats, 6));
    static const int same_format[] = {BCEL_TARGET, BCEL_OUT}; /* CheckFormat */
    for (int i = 0; i < 2; i++) {
        const emu_view *v = &ex.t[same_format[i]];
        if (v->format != ex.t[BCEL_SELF].format) {
            emu_set_error("%s: %s has format %d; self has %d (they must be the same)", api, ex.names[same_format[i]],
                          (int)v->format, (int)ex.t[BCEL_SELF].format);
            return ACLNN_ERR_PARAM_INVALID;
        }
    }
    if (ex.t[BCEL_SELF].numel) { /* CheckShape: an empty self passes whatever the other shapes */
        EMU_CHECK(emu_need_same_shape(&ex, BCEL_TARGET, BCEL_SELF));
        EMU_CHECK(emu_need_same_shape(&ex, BCEL_OUT, BCEL_SELF));
        EMU_CHECK(emu_need_broadcast(&ex, BCEL_GRAD, BCEL_SELF));
        EMU_CHECK(emu_need_broadcast(&ex, BCEL_WEIGHT, BCEL_SELF));
        EMU_CHECK(emu_need_broadcast(&ex, BCEL_POS_WEIGHT, BCEL_SELF));
    }
    EMU_CHECK(emu_need_reduction(&ex, reduction)); /* CheckReduction, last */
    ex.run = bcel_backward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackward(void *workspace, uint64_t workspaceSize,
                                                                 aclOpExecutor *executor, const aclrtStream stream)
{
    return emu_launch("aclnnBinaryCrossEntropyWithLogitsBackward", workspace, workspaceSize, executor, stream);
}
