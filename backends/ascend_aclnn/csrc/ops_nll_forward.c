/* aclnnNLLLoss and aclnnNLLLoss2d: out = -w[t] * self[.., t, ..] per position (0 where t == ignoreIndex),
 * summed (reduction 2) or divided by totalWeight = sum of w[t] over the positions not ignored (reduction 1).
 * The checks are ops-nn loss/nll_loss/op_api/aclnn_nll_loss.cpp's and aclnn_nll_loss2d.cpp's (CheckNotNull:
 * weight is required; CheckDtypeValid: weight in self's dtype, out and totalWeightOut any float type;
 * CheckShape/CheckShape2D). As there, totalWeightOut is written only for reductions 1 and 2, and an empty
 * self (2d: self, target or weight) gives NaN (mean) or 0 (sum) and a total weight of 0 without a kernel.
 * Products and sums in double, each result rounded once to its output's type. */
#include <math.h>

#include "ops_common.h"

enum { NLLF_SELF, NLLF_TARGET, NLLF_WEIGHT, NLLF_OUT, NLLF_TOTAL };

/* The (N, C, H, W) walk of either operator: (C) and (N, C) self are N = 1 / H = W = 1 views. */
typedef struct {
    int64_t n, c, h, w;
    int64_t s_n, s_c, s_h, s_w; /* self */
    int64_t t_n, t_h, t_w;      /* target */
    int64_t o_n, o_h, o_w;      /* out (reduction 0) */
} nll_walk;

static nll_walk walk_of(const emu_plan *ex)
{
    const emu_view *s = &ex->t[NLLF_SELF], *t = &ex->t[NLLF_TARGET], *o = &ex->t[NLLF_OUT];
    nll_walk k = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (s->ndim == 1) {
        k.c = s->dims[0];
        k.s_c = s->strides[0];
    } else {
        k.n = s->dims[0];
        k.c = s->dims[1];
        k.s_n = s->strides[0];
        k.s_c = s->strides[1];
        k.t_n = t->strides[0];
        k.o_n = o->ndim >= 1 ? o->strides[0] : 0;
    }
    if (s->ndim == 4) {
        k.h = s->dims[2];
        k.w = s->dims[3];
        k.s_h = s->strides[2];
        k.s_w = s->strides[3];
        k.t_h = t->strides[1];
        k.t_w = t->strides[2];
        k.o_h = o->ndim == 3 ? o->strides[1] : 0;
        k.o_w = o->ndim == 3 ? o->strides[2] : 0;
    }
    return k;
}

static aclnnStatus nll_forward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *self = &ex->t[NLLF_SELF], *target = &ex->t[NLLF_TARGET], *weight = &ex->t[NLLF_WEIGHT],
                   *out = &ex->t[NLLF_OUT], *total = &ex->t[NLLF_TOTAL];
    nll_walk k = walk_of(ex);
    int64_t positions = k.n * k.h * k.w, plane = k.h * k.w;

    /* targets are device data: check them all before anything is written */
    for (int64_t p = 0; p < positions; p++) {
        int64_t n = p / plane, h = (p / k.w) % k.h, w = p % k.w;
        int64_t t = emu_load_i64(target, target->offset + n * k.t_n + h * k.t_h + w * k.t_w);
        if (t != ex->ignore_index && (t < 0 || t >= k.c)) {
            emu_set_error("%s: target[%lld] = %lld is outside [0, %lld) and is not ignoreIndex %lld", ex->op,
                          (long long)p, (long long)t, (long long)k.c, (long long)ex->ignore_index);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    double sum = 0.0, weights = 0.0;
    int changed = 0;
    for (int64_t p = 0; p < positions; p++) {
        int64_t n = p / plane, h = (p / k.w) % k.h, w = p % k.w;
        int64_t t = emu_load_i64(target, target->offset + n * k.t_n + h * k.t_h + w * k.t_w);
        double loss = 0.0;
        if (t != ex->ignore_index) {
            if (t < 0 || t >= k.c) { /* checked above; only a concurrent writer can change it: never index with it */
                changed = 1;
                continue;
            }
            double wt = emu_load_f32(weight, emu_at1(weight, t));
            double x = emu_load_f32(self, self->offset + n * k.s_n + t * k.s_c + h * k.s_h + w * k.s_w);
            loss = -(wt * x);
            sum += loss;
            weights += wt;
        }
        if (ex->reduction == EMU_REDUCTION_NONE)
            emu_store_f64(out, out->offset + n * k.o_n + h * k.o_h + w * k.o_w, loss);
    }
    if (changed) {
        emu_set_error("%s: the targets changed while the kernel ran (another writer of their device memory)", ex->op);
        return ACLNN_ERR_RUNTIME_ERROR;
    }
    if (ex->reduction != EMU_REDUCTION_NONE) {
        emu_store_f64(out, out->offset, ex->reduction == EMU_REDUCTION_MEAN ? sum / weights : sum);
        emu_store_f64(total, total->offset, weights);
    }
    return ACLNN_SUCCESS;
}

/* op_api's empty-tensor path: no kernel; the fills of NLLLossEmptyTensorCompute. */
static aclnnStatus nll_forward_empty(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    if (ex->reduction == EMU_REDUCTION_NONE)
        return ACLNN_SUCCESS;
    emu_store_f64(&ex->t[NLLF_OUT], ex->t[NLLF_OUT].offset, ex->reduction == EMU_REDUCTION_MEAN ? NAN : 0.0);
    emu_store_f64(&ex->t[NLLF_TOTAL], ex->t[NLLF_TOTAL].offset, 0.0);
    return ACLNN_SUCCESS;
}

/* CheckNotNull and CheckDtypeValid (shared by both operators). */
static aclnnStatus nll_forward_operands(emu_plan *ex, const aclTensor *self, const aclTensor *target,
                                        const aclTensor *weight, int64_t reduction, int64_t ignoreIndex, aclTensor *out,
                                        aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *api = ex->api;
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, totalWeightOut, "totalWeightOut");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(ex, NLLF_SELF, "self", self));
    EMU_CHECK(emu_operand(ex, NLLF_TARGET, "target", target));
    EMU_CHECK(emu_operand(ex, NLLF_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(ex, NLLF_OUT, "out", out));
    EMU_CHECK(emu_operand(ex, NLLF_TOTAL, "totalWeightOut", totalWeightOut));
    ex->reduction = reduction;
    ex->ignore_index = ignoreIndex;
    EMU_CHECK(emu_need_float(ex, NLLF_SELF));
    EMU_CHECK(emu_need_dtype(ex, NLLF_WEIGHT, ex->t[NLLF_SELF].dtype));
    EMU_CHECK(emu_need_float(ex, NLLF_OUT));   /* OP_CHECK_RESULT_DTYPE_CAST_FAILED(self, out) */
    EMU_CHECK(emu_need_float(ex, NLLF_TOTAL)); /* ... (self, totalWeightOut) */
    aclDataType tdt = ex->t[NLLF_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_INT32 && tdt != ACL_UINT8) {
        emu_set_error("%s: target has dtype %s; expected INT64, UINT8 or INT32", api, emu_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return emu_need_reduction(ex, reduction);
}

static aclnnStatus nll_forward_outputs(const emu_plan *ex, int per_position)
{
    char a[160];
    const emu_view *o = &ex->t[NLLF_OUT];
    if (!per_position && !(o->ndim <= 1 && o->numel == 1)) {
        emu_set_error("%s: out must have one element (shape () or (1,)); got %s", ex->api,
                      emu_shape_str(o, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (ex->t[NLLF_TOTAL].numel != 1) {
        emu_set_error("%s: totalWeightOut must have one element; got shape %s", ex->api,
                      emu_shape_str(&ex->t[NLLF_TOTAL], a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_no_overlap(ex, NLLF_OUT, NLLF_TARGET));
    return emu_need_no_overlap(ex, NLLF_TOTAL, NLLF_TARGET);
}

EMU_EXPORT aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                    const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
                                                    aclTensor *out, aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLossGetWorkspaceSize";
    emu_plan ex;
    char a[160], b[160];
    emu_phase_one_start(&ex, api, "aclnnNLLLoss", workspaceSize, executor);
    EMU_CHECK(nll_forward_operands(&ex, self, target, weight, reduction, ignoreIndex, out, totalWeightOut,
                                   workspaceSize, executor));
    const emu_view *s = &ex.t[NLLF_SELF], *t = &ex.t[NLLF_TARGET], *w = &ex.t[NLLF_WEIGHT], *o = &ex.t[NLLF_OUT];
    if (s->ndim != 1 && s->ndim != 2) {
        emu_set_error("%s: self must be 1-D or 2-D ((C) or (N, C)); got %s", api, emu_shape_str(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int no_batch = s->ndim == 1 && t->ndim == 0, batch = s->ndim == 2 && t->ndim == 1 && t->dims[0] == s->dims[0];
    if (!no_batch && !batch) {
        emu_set_error("%s: target of shape %s does not match self of shape %s (expected () for (C), (N) for (N, C))",
                      api, emu_shape_str(t, a, sizeof a), emu_shape_str(s, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t classes = s->dims[s->ndim - 1];
    if (!(w->ndim == 1 && w->dims[0] == classes)) {
        emu_set_error("%s: weight must have shape (%lld,); got %s", api, (long long)classes,
                      emu_shape_str(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int per_position = reduction == EMU_REDUCTION_NONE && s->ndim == 2;
    if (per_position && !(o->ndim == 1 && o->dims[0] == s->dims[0])) {
        emu_set_error("%s: out must have shape (%lld,); got %s", api, (long long)s->dims[0],
                      emu_shape_str(o, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(nll_forward_outputs(&ex, per_position));
    if (s->numel == 0 && classes == 0 && t->numel > 0) {
        emu_set_error("%s: target is out of bounds (self has no classes)", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.run = s->numel == 0 ? nll_forward_empty : nll_forward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return emu_launch("aclnnNLLLoss", workspace, workspaceSize, executor, stream);
}

EMU_EXPORT aclnnStatus aclnnNLLLoss2dGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                      const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
                                                      aclTensor *out, aclTensor *totalWeightOut,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLoss2dGetWorkspaceSize";
    emu_plan ex;
    char a[160], b[160];
    emu_phase_one_start(&ex, api, "aclnnNLLLoss2d", workspaceSize, executor);
    EMU_CHECK(nll_forward_operands(&ex, self, target, weight, reduction, ignoreIndex, out, totalWeightOut,
                                   workspaceSize, executor));
    const emu_view *s = &ex.t[NLLF_SELF], *t = &ex.t[NLLF_TARGET], *w = &ex.t[NLLF_WEIGHT], *o = &ex.t[NLLF_OUT];
    if (s->ndim != 4) {
        emu_set_error("%s: self must be 4-D (N, C, H, W); got %s", api, emu_shape_str(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!(w->ndim >= 1 && w->dims[0] == s->dims[1])) { /* CheckShape2D reads weight's first dim only */
        emu_set_error("%s: weight's first dim must be self's C = %lld; got shape %s", api, (long long)s->dims[1],
                      emu_shape_str(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (t->ndim != 3 || t->dims[0] != s->dims[0] || t->dims[1] != s->dims[2] || t->dims[2] != s->dims[3]) {
        emu_set_error("%s: target must have shape (N, H, W) of self %s; got %s", api, emu_shape_str(s, b, sizeof b),
                      emu_shape_str(t, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int per_position = reduction == EMU_REDUCTION_NONE;
    if (per_position)
        EMU_CHECK(emu_need_same_shape(&ex, NLLF_OUT, NLLF_TARGET));
    else if (o->numel != 1) {
        emu_set_error("%s: out must have one element; got shape %s", api, emu_shape_str(o, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (ex.t[NLLF_TOTAL].numel != 1) {
        emu_set_error("%s: totalWeightOut must have one element; got shape %s", api,
                      emu_shape_str(&ex.t[NLLF_TOTAL], a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_no_overlap(&ex, NLLF_OUT, NLLF_TARGET));
    EMU_CHECK(emu_need_no_overlap(&ex, NLLF_TOTAL, NLLF_TARGET));
    if (w->ndim != 1) { /* the kernel indexes weight as (C): a weight of more dims is not one a caller means */
        emu_set_error("%s: weight must be 1-D (C); got %s", api, emu_shape_str(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.run = s->numel == 0 || t->numel == 0 || w->numel == 0 ? nll_forward_empty : nll_forward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnNLLLoss2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                      aclrtStream stream)
{
    return emu_launch("aclnnNLLLoss2d", workspace, workspaceSize, executor, stream);
}
