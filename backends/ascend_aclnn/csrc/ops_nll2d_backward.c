/* aclnnNLLLoss2dBackward: out (N, C, H, W) = 0 except out[n, t, h, w] = weight[t] * -(g [/ totalWeight]) at every
 * position whose target t = target[n, h, w] is not ignoreIndex; g is gradOutput[n, h, w] for reduction 0, its one
 * element otherwise. The checks are ops-nn loss/nll_loss_grad/op_api/aclnn_nll_loss2d_backward.cpp's, in
 * its order (CheckNotNull: weight and totalWeight required; CheckDtypeValid: self FLOAT, FLOAT16 or BF16 (the
 * A2/A3 list), gradOutput, weight, out and totalWeight exactly self's dtype, target INT64, UINT8 or INT32;
 * CheckShape: for reduction 0 gradOutput of target's shape, else at most 1-D with one element; self 4-D, target
 * 3-D, self's dims 0, 2, 3 = target's 0, 1, 2; weight of C elements, any shape (read flat, as the op_api's
 * Contiguous copy is); out of self's shape; totalWeight one element; then CheckReduction), every failure
 * ACLNN_ERR_PARAM_INVALID, a null tensor ACLNN_ERR_PARAM_NULLPTR. An empty self returns before any kernel.
 * Computed in float32 (the op_api widens FLOAT16), rounded once to out's dtype. Ours: out may not overlap target
 * (the kernel indexes with it), and a target outside [0, C) that is not ignoreIndex fails the run
 * (ACLNN_ERR_RUNTIME_ERROR) before anything is written. */
#include "ops_common.h"

enum { B2_GRAD, B2_SELF, B2_TARGET, B2_WEIGHT, B2_TOTAL, B2_OUT };

/* The storage index of element i (row-major over the view's dims) of any view. */
static int64_t flat_at(const emu_view *v, int64_t i)
{
    int64_t at = v->offset;
    for (int d = v->ndim - 1; d >= 0; d--) {
        at += (i % v->dims[d]) * v->strides[d];
        i /= v->dims[d];
    }
    return at;
}

static int64_t at3(const emu_view *v, int64_t n, int64_t h, int64_t w)
{
    return v->offset + n * v->strides[0] + h * v->strides[1] + w * v->strides[2];
}

static aclnnStatus nll2d_backward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ws;
    (void)ws_size;
    const emu_view *target = &ex->t[B2_TARGET], *weight = &ex->t[B2_WEIGHT], *grad = &ex->t[B2_GRAD],
                   *out = &ex->t[B2_OUT];
    int64_t batch = out->dims[0], classes = out->dims[1], height = out->dims[2], width = out->dims[3];

    /* targets are device data: check them all before anything is written */
    for (int64_t n = 0; n < batch; n++)
        for (int64_t h = 0; h < height; h++)
            for (int64_t x = 0; x < width; x++) {
                int64_t t = emu_load_i64(target, at3(target, n, h, x));
                if (t != ex->ignore_index && (t < 0 || t >= classes)) {
                    emu_set_error("aclnnNLLLoss2dBackward: target[%lld, %lld, %lld] = %lld is outside [0, %lld) and "
                                  "is not ignoreIndex %lld",
                                  (long long)n, (long long)h, (long long)x, (long long)t, (long long)classes,
                                  (long long)ex->ignore_index);
                    return ACLNN_ERR_RUNTIME_ERROR;
                }
            }

    float zeros[256] = {0};
    int64_t sw = out->strides[3];
    for (int64_t n = 0; n < batch; n++)
        for (int64_t c = 0; c < classes; c++)
            for (int64_t h = 0; h < height; h++) {
                int64_t base = out->offset + n * out->strides[0] + c * out->strides[1] + h * out->strides[2];
                for (int64_t x = 0; x < width; x += 256)
                    emu_scatter_f32(out, base + x * sw, sw, width - x < 256 ? width - x : 256, zeros);
            }

    int per_position = ex->reduction == EMU_REDUCTION_NONE;
    float g0 = per_position ? 0.0f : emu_load_f32(grad, flat_at(grad, 0));
    const emu_view *total = &ex->t[B2_TOTAL];
    float tw = ex->reduction == EMU_REDUCTION_MEAN ? emu_load_f32(total, flat_at(total, 0)) : 1.0f;
    int changed = 0;
    for (int64_t n = 0; n < batch; n++)
        for (int64_t h = 0; h < height; h++)
            for (int64_t x = 0; x < width; x++) {
                int64_t t = emu_load_i64(target, at3(target, n, h, x));
                if (t == ex->ignore_index)
                    continue;
                if (t < 0 || t >= classes) { /* checked above: only another writer can change it; never index */
                    changed = 1;
                    continue;
                }
                float g = per_position ? emu_load_f32(grad, at3(grad, n, h, x)) : g0;
                if (ex->reduction == EMU_REDUCTION_MEAN)
                    g = g / tw; /* a total weight of 0 gives inf/NaN, as PyTorch */
                float w = emu_load_f32(weight, flat_at(weight, t));
                emu_store_f32(out,
                              out->offset + n * out->strides[0] + t * out->strides[1] + h * out->strides[2] +
                                  x * out->strides[3],
                              w * -g);
            }
    if (changed) {
        emu_set_error("aclnnNLLLoss2dBackward: the targets changed while the kernel ran (another writer of their "
                      "device memory)");
        return ACLNN_ERR_RUNTIME_ERROR;
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus nll2d_backward_empty(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    (void)ex;
    (void)ws;
    (void)ws_size;
    return ACLNN_SUCCESS;
}

static aclnnStatus invalid_shape(const char *api, const char *what, const emu_view *v)
{
    char a[160];
    emu_set_error("%s: %s; got %s", api, what, emu_shape_str(v, a, sizeof a));
    return ACLNN_ERR_PARAM_INVALID;
}

EMU_EXPORT aclnnStatus aclnnNLLLoss2dBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                              const aclTensor *target, const aclTensor *weight,
                                                              int64_t reduction, int64_t ignoreIndex,
                                                              aclTensor *totalWeight, aclTensor *out,
                                                              uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnNLLLoss2dBackwardGetWorkspaceSize";
    emu_plan ex;
    char a[160], b[160];
    emu_phase_one_start(&ex, api, "aclnnNLLLoss2dBackward", workspaceSize, executor);
    EMU_REQUIRE(api, gradOutput, "gradOutput");
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, totalWeight, "totalWeight");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, B2_GRAD, "gradOutput", gradOutput));
    EMU_CHECK(emu_operand(&ex, B2_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, B2_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, B2_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, B2_TOTAL, "totalWeight", totalWeight));
    EMU_CHECK(emu_operand(&ex, B2_OUT, "out", out));
    ex.reduction = reduction;
    ex.ignore_index = ignoreIndex;

    /* CheckDtypeValid */
    EMU_CHECK(emu_need_float(&ex, B2_SELF));
    aclDataType dt = ex.t[B2_SELF].dtype;
    static const int same[] = {B2_GRAD, B2_WEIGHT, B2_OUT, B2_TOTAL};
    for (int i = 0; i < 4; i++)
        EMU_CHECK(emu_need_dtype(&ex, same[i], dt));
    aclDataType tdt = ex.t[B2_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_UINT8 && tdt != ACL_INT32) {
        emu_set_error("%s: target has dtype %s; expected INT64, UINT8 or INT32", api, emu_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }

    /* CheckShape */
    const emu_view *g = &ex.t[B2_GRAD], *s = &ex.t[B2_SELF], *t = &ex.t[B2_TARGET], *w = &ex.t[B2_WEIGHT];
    if (reduction == EMU_REDUCTION_NONE) {
        if (!emu_same_shape(g, t)) {
            emu_set_error("%s: gradOutput must have target's shape %s for reduction 0; got %s", api,
                          emu_shape_str(t, b, sizeof b), emu_shape_str(g, a, sizeof a));
            return ACLNN_ERR_PARAM_INVALID;
        }
    } else if (!(g->ndim <= 1 && g->numel == 1)) {
        return invalid_shape(api, "gradOutput must be a single element of at most one dim for reductions 1 and 2", g);
    }
    if (s->ndim != 4)
        return invalid_shape(api, "self must be 4-D (N, C, H, W)", s);
    if (t->ndim != 3)
        return invalid_shape(api, "target must be 3-D (N, H, W)", t);
    if (t->dims[0] != s->dims[0] || t->dims[1] != s->dims[2] || t->dims[2] != s->dims[3]) {
        emu_set_error("%s: target of shape %s does not match self of shape %s (expected (N, H, W))", api,
                      emu_shape_str(t, a, sizeof a), emu_shape_str(s, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (w->numel != s->dims[1]) {
        emu_set_error("%s: weight must have C = %lld elements; got shape %s", api, (long long)s->dims[1],
                      emu_shape_str(w, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_same_shape(&ex, B2_OUT, B2_SELF));
    if (ex.t[B2_TOTAL].numel != 1)
        return invalid_shape(api, "totalWeight must have one element", &ex.t[B2_TOTAL]);
    /* CheckReduction */
    EMU_CHECK(emu_need_reduction(&ex, reduction));
    EMU_CHECK(emu_need_no_overlap(&ex, B2_OUT, B2_TARGET));
    ex.run = s->numel == 0 ? nll2d_backward_empty : nll2d_backward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnNLLLoss2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                              aclrtStream stream)
{
    return emu_launch("aclnnNLLLoss2dBackward", workspace, workspaceSize, executor, stream);
}
