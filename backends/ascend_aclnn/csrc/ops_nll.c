/* aclnnNLLLossBackward: out = 0 except out[i, t_i] = w[t_i] * -(g_i [/ totalWeight]). The checks are
 * ops-nn loss/nll_loss_grad/op_api/aclnn_nll_loss_backward.cpp's (CheckDtypeValid, CheckShape): out
 * in any float type self casts to (computed in float32, rounded once to out's type); totalWeight
 * any one-element shape; a 1-D self (C) takes target () or a 1-D target of length C (the shape
 * check compares self.dim(0) with target.dim(0)), the kernel's one row using its first element. */
#include "ops_common.h"

enum { NLL_GRAD, NLL_SELF, NLL_TARGET, NLL_WEIGHT, NLL_TOTAL, NLL_OUT };

static aclnnStatus nll_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *self = &ex->t[NLL_SELF], *target = &ex->t[NLL_TARGET], *weight = &ex->t[NLL_WEIGHT],
                   *grad = &ex->t[NLL_GRAD], *out = &ex->t[NLL_OUT];
    int two_d = self->ndim == 2;
    int64_t rows = two_d ? self->dims[0] : 1, classes = self->dims[self->ndim - 1];
    if (self->numel == 0)
        return ACLNN_SUCCESS; /* op_api: an empty self returns before any kernel */

    /* targets are device data: check them all before anything is written */
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = emu_load_i64(target, two_d ? emu_at1(target, i) : target->offset);
        if (t != ex->ignore_index && (t < 0 || t >= classes)) {
            emu_set_error("aclnnNLLLossBackward: target[%lld] = %lld is outside [0, %lld) and is not ignoreIndex "
                          "%lld",
                          (long long)i, (long long)t, (long long)classes, (long long)ex->ignore_index);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }

    /* zero the output view */
    float zeros[256] = {0};
    for (int64_t i = 0; i < rows; i++) {
        int64_t base = two_d ? out->offset + i * out->strides[0] : out->offset;
        int64_t st = out->strides[out->ndim - 1];
        for (int64_t j = 0; j < classes; j += 256)
            emu_scatter_f32(out, base + j * st, st, classes - j < 256 ? classes - j : 256, zeros);
    }

    int per_row = ex->reduction == EMU_REDUCTION_NONE && two_d;
    float g0 = per_row || grad->numel == 0 ? 0.0f : emu_load_f32(grad, grad->offset);
    float tw = ex->reduction == EMU_REDUCTION_MEAN ? emu_load_f32(&ex->t[NLL_TOTAL], ex->t[NLL_TOTAL].offset) : 1.0f;
    int changed = 0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = emu_load_i64(target, two_d ? emu_at1(target, i) : target->offset);
        if (t == ex->ignore_index)
            continue;
        if (t < 0 || t >= classes) { /* checked above; only a concurrent writer can change it: never index with it */
            changed = 1;
            continue;
        }
        float g = per_row ? emu_load_f32(grad, emu_at1(grad, i)) : g0;
        if (ex->reduction == EMU_REDUCTION_MEAN)
            g = g / tw; /* total weight 0 gives inf/NaN, as PyTorch */
        float w = emu_load_f32(weight, emu_at1(weight, t));
        int64_t at = two_d ? emu_at2(out, i, t) : emu_at1(out, t);
        emu_store_f32(out, at, w * -g);
    }
    if (changed) {
        emu_set_error("aclnnNLLLossBackward: the targets changed while the kernel ran (another writer of their "
                      "device memory)");
        return ACLNN_ERR_RUNTIME_ERROR;
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                            const aclTensor *target, const aclTensor *weight,
                                                            int64_t reduction, int64_t ignoreIndex,
                                                            const aclTensor *totalWeight, aclTensor *out,
                                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLossBackwardGetWorkspaceSize";
    emu_plan ex;
    char a[160], b[160];
    emu_phase_one_start(&ex, api, "aclnnNLLLossBackward", workspaceSize, executor);
    EMU_REQUIRE(api, gradOutput, "gradOutput");
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, totalWeight, "totalWeight");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, NLL_GRAD, "gradOutput", gradOutput));
    EMU_CHECK(emu_operand(&ex, NLL_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, NLL_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, NLL_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, NLL_TOTAL, "totalWeight", totalWeight));
    EMU_CHECK(emu_operand(&ex, NLL_OUT, "out", out));
    ex.reduction = reduction;
    ex.ignore_index = ignoreIndex;

    EMU_CHECK(emu_need_float(&ex, NLL_SELF));
    aclDataType dt = ex.t[NLL_SELF].dtype;
    static const int same[] = {NLL_GRAD, NLL_WEIGHT, NLL_TOTAL};
    for (int i = 0; i < 3; i++)
        EMU_CHECK(emu_need_dtype(&ex, same[i], dt));
    EMU_CHECK(emu_need_float(&ex, NLL_OUT)); /* OP_CHECK_RESULT_DTYPE_CAST_FAILED(self, out): a float type */
    aclDataType tdt = ex.t[NLL_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_INT32 && tdt != ACL_UINT8) {
        emu_set_error("%s: target has dtype %s; expected INT64, INT32 or UINT8", api, emu_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_reduction(&ex, reduction));

    const emu_view *s = &ex.t[NLL_SELF], *t = &ex.t[NLL_TARGET], *g = &ex.t[NLL_GRAD];
    if (s->ndim != 1 && s->ndim != 2) {
        emu_set_error("%s: self must have shape (N, C) or (C); got %s", api, emu_shape_str(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    int64_t classes = s->dims[s->ndim - 1];
    if (t->ndim > 1 || (!(s->ndim == 1 && t->ndim == 0) && !(t->ndim == 1 && t->dims[0] == s->dims[0]))) {
        emu_set_error("%s: target of shape %s does not match self of shape %s (expected (N) for (N, C), () or (C) "
                      "for (C))",
                      api, emu_shape_str(t, a, sizeof a), emu_shape_str(s, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (reduction == EMU_REDUCTION_NONE && s->ndim == 2) {
        if (!(g->ndim == 1 && g->dims[0] == s->dims[0])) {
            emu_set_error("%s: gradOutput must have shape (%lld,) for reduction 0 with self %s; got %s", api,
                          (long long)s->dims[0], emu_shape_str(s, b, sizeof b), emu_shape_str(g, a, sizeof a));
            return ACLNN_ERR_PARAM_INVALID;
        }
    } else if (!emu_one_element(g)) {
        emu_set_error("%s: gradOutput must have shape () or (1,) here; got %s", api, emu_shape_str(g, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    const emu_view *w = &ex.t[NLL_WEIGHT];
    if (!(w->ndim == 1 && w->dims[0] == classes)) {
        emu_set_error("%s: weight must have shape (%lld,); got %s", api, (long long)classes,
                      emu_shape_str(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (ex.t[NLL_TOTAL].numel != 1) {
        emu_set_error("%s: totalWeight must have one element; got shape %s", api,
                      emu_shape_str(&ex.t[NLL_TOTAL], a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_same_shape(&ex, NLL_OUT, NLL_SELF));
    EMU_CHECK(emu_need_no_overlap(&ex, NLL_OUT, NLL_TARGET));
    ex.run = nll_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream)
{
    return emu_launch("aclnnNLLLossBackward", workspace, workspaceSize, executor, stream);
}
