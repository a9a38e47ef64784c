/* aclnnSoftmaxCrossEntropyWithLogits: dense labels (ops-nn activation/softmax_cross_entropy_with_logits:
 * docs/aclnnSoftmaxCrossEntropyWithLogits.md, op_api/aclnn_softmax_cross_entropy_with_logits.cpp and the
 * arch35 kernel op_kernel/arch35/softmax_cross_entropy_with_logits_full_load.h).
 *
 * Per row, in float32 as the vendor's kernel: m = max_c x, d_c = x_c - m, e_c = exp(d_c), s = sum_c e_c;
 * backprop_c = e_c / s - y_c and loss = sum_c y_c (log s - d_c), each rounded once to the dtype.
 *
 * Phase one in the op_api's order: NULL features/labels/loss/backprop 161001; any of the four outside
 * FLOAT/FLOAT16/BF16, or loss/backprop not in features' dtype, 161002; features or labels not 2-D 161002
 * (CheckShape; every operand at most 8-D is the runtime's check). An empty features or labels then succeeds
 * with nothing to run (the op_api returns before its kernel). The rest is the page's rule, which the op_api
 * does not check (its kernel would broadcast labels, and the 950 tiling refuses labels of another dtype):
 * labels of features' shape and dtype, loss (N), backprop (N, C), else 161002. Ours: a class count whose row
 * workspace no int64 byte count holds 561002 (a tiling failure). */
#include "aclnnop/aclnn_softmax_cross_entropy_with_logits.h"
#include "ops_common.h"

enum { SCE_FEATURES, SCE_LABELS, SCE_LOSS, SCE_BACKPROP };

/* the kernel's row buffers in the workspace: d (x - max), e (exp d, then backprop) and the labels */
enum { SCE_ROW_BUFFERS = 3 };

/* a sum in eight float32 lanes combined in a fixed tree (the vector unit's reduction, deterministic) */
static float sce_sum(const float *v, int64_t n)
{
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            s[j] += v[k + j];
    float t = 0.0f;
    for (; k < n; k++)
        t += v[k];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

static aclnnStatus sce_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *x = &ex->t[SCE_FEATURES], *y = &ex->t[SCE_LABELS];
    const emu_view *loss = &ex->t[SCE_LOSS], *bp = &ex->t[SCE_BACKPROP];
    if (x->numel == 0 || y->numel == 0)
        return ACLNN_SUCCESS; /* the op_api's empty-tensor return: nothing written */
    int64_t rows = x->dims[0], classes = x->dims[1];
    if ((uint64_t)classes * SCE_ROW_BUFFERS * sizeof(float) > ws_size)
        return ACLNN_ERR_INNER; /* phase one sized it; never write past it */
    float *d = (float *)ws, *e = d + classes, *lab = e + classes;
    for (int64_t i = 0; i < rows; i++) {
        emu_gather_f32(x, emu_at2(x, i, 0), x->strides[1], classes, d);
        emu_gather_f32(y, emu_at2(y, i, 0), y->strides[1], classes, lab);
        float m = -INFINITY;
        for (int64_t c = 0; c < classes; c++)
            m = d[c] > m ? d[c] : m; /* a NaN logit is passed over here and makes its exp, so the row, NaN */
        for (int64_t c = 0; c < classes; c++) {
            d[c] -= m;
            e[c] = expf(d[c]);
        }
        float s = sce_sum(e, classes), log_s = logf(s);
        for (int64_t c = 0; c < classes; c++) {
            float p = e[c] / s;
            e[c] = lab[c] * (log_s - d[c]); /* the loss term; p is stored below */
            d[c] = p - lab[c];
        }
        emu_scatter_f32(bp, emu_at2(bp, i, 0), bp->strides[1], classes, d);
        emu_store_f32(loss, emu_at1(loss, i), sce_sum(e, classes));
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus sce_need_dims(const emu_plan *ex, int k, int64_t d0, int64_t d1, int ndim)
{
    const emu_view *v = &ex->t[k];
    if (v->ndim != ndim || v->dims[0] != d0 || (ndim == 2 && v->dims[1] != d1)) {
        char a[160];
        emu_set_error("%s: %s has shape %s; expected (%lld%s) for features of shape (%lld, %lld)", ex->api,
                      ex->names[k], emu_shape_str(v, a, sizeof a), (long long)d0, ndim == 2 ? ", C" : ",",
                      (long long)d0, (long long)d1);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize(const aclTensor *features, aclTensor *labels,
                                                                          aclTensor *loss, aclTensor *backprop,
                                                                          uint64_t *workspaceSize,
                                                                          aclOpExecutor **executor)
{
    static const char api[] = "aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnSoftmaxCrossEntropyWithLogits", workspaceSize, executor);
    EMU_REQUIRE(api, features, "features");
    EMU_REQUIRE(api, labels, "labels");
    EMU_REQUIRE(api, loss, "loss");
    EMU_REQUIRE(api, backprop, "backprop");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, SCE_FEATURES, "features", features));
    EMU_CHECK(emu_operand(&ex, SCE_LABELS, "labels", labels));
    EMU_CHECK(emu_operand(&ex, SCE_LOSS, "loss", loss));
    EMU_CHECK(emu_operand(&ex, SCE_BACKPROP, "backprop", backprop));

    for (int k = SCE_FEATURES; k <= SCE_BACKPROP; k++) /* CheckDtypeValid */
        EMU_CHECK(emu_need_float(&ex, k));
    aclDataType dt = ex.t[SCE_FEATURES].dtype;
    EMU_CHECK(emu_need_dtype(&ex, SCE_LOSS, dt));
    EMU_CHECK(emu_need_dtype(&ex, SCE_BACKPROP, dt));
    EMU_CHECK(emu_need_ndim(&ex, SCE_FEATURES, 2)); /* CheckShape */
    EMU_CHECK(emu_need_ndim(&ex, SCE_LABELS, 2));

    const emu_view *x = &ex.t[SCE_FEATURES];
    if (x->numel != 0 && ex.t[SCE_LABELS].numel != 0) { /* the page's rules, for a call that computes */
        EMU_CHECK(emu_need_dtype(&ex, SCE_LABELS, dt));
        EMU_CHECK(emu_need_same_shape(&ex, SCE_LABELS, SCE_FEATURES));
        EMU_CHECK(sce_need_dims(&ex, SCE_LOSS, x->dims[0], x->dims[1], 1));
        EMU_CHECK(sce_need_dims(&ex, SCE_BACKPROP, x->dims[0], x->dims[1], 2));
        EMU_CHECK(emu_need_row_workspace(&ex, SCE_FEATURES, x->dims[1], SCE_ROW_BUFFERS, ACLNN_ERR_INNER_TILING_ERROR,
                                         &ex.workspace_size));
        ex.workspace_size = emu_round_up(ex.workspace_size);
    }
    ex.run = sce_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnSoftmaxCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, const aclrtStream stream)
{
    return emu_launch("aclnnSoftmaxCrossEntropyWithLogits", workspace, workspaceSize, executor, stream);
}
