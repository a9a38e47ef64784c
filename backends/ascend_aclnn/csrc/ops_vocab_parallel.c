/* The vocabulary-parallel cross-entropy forward of CANN ops-nn (Megatron's
 * fused_vocab_parallel_cross_entropy split around the caller's all-reduce):
 *
 * aclnnFusedLinearOnlineMaxSum, per vocabulary shard (float32 throughout):
 *   logits = input @ weight.T;  logitsMaxLocal = max(logits, -1)
 *   sumExpLogitsLocal = sum(exp(logits - logitsMaxLocal), -1)
 *   targetMask = target < vocabStartIndex | target >= vocabEndIndex
 *   maskedTarget = targetMask ? 0 : target - vocabStartIndex
 *   predictedLogitsLocal = targetMask ? 0 : logits[maskedTarget] - logitsMaxLocal
 *   targetMaskOut: the mask bit-packed LSB first; the padding bits of the last byte are the mask
 *     of target 0, as the kernel computes them (it pads the target tile with 0) and as its golden
 *     script does (it pads the targets with 0 before packing)
 *   a target in [vocabStartIndex + V, vocabEndIndex) (the op does not check end - start <= V):
 *     not masked, maskedTarget = target - vocabStartIndex, predictedLogitsLocal = -logitsMaxLocal,
 *     as the kernel leaves it (its per-tile gather never reaches the index, so the zero it starts
 *     from has the max subtracted)
 *   vocabParallelLogitsOutOptional = logits rounded to input's dtype
 * aclnnFusedCrossEntropyLossWithMaxSum, after the all-reduce:
 *   loss = log(sumExpLogits) - predictedLogits
 *   softMaxOutOptional = exp(vocabParallelLogitsOptional - logitsMax) / sumExpLogits
 *
 * The shard's end is exclusive, as ops-nn's kernel (CompareScalar ... GE vocabEndIndex) and its
 * golden script compute it and Megatron defines it; the doc page's formula writes
 * "target > vocabEndIndex". Each output is rounded once. The workspace (ours) holds the weight
 * widened to float32 and one row of logits and of input. */
#include <stdlib.h>

#include "ops_common.h"

enum { MS_INPUT, MS_WEIGHT, MS_TARGET, MS_LMAX, MS_SUMEXP, MS_PRED, MS_MASK, MS_MT, MS_LOGITS };
enum { CE_LMAX, CE_SUMEXP, CE_PRED, CE_INPUT, CE_WEIGHT, CE_LOGITS, CE_LOSS, CE_SOFTMAX };

#define MS_MAX_HIDDEN 65534 /* the doc page: input.size(1) <= 65534 */

typedef struct {
    uint64_t wf, row, xrow, total; /* byte offsets into the workspace, and its size */
} ms_layout;

static int ms_workspace(int64_t v, int64_t h, ms_layout *l)
{
    uint64_t vh, vh4, v4, h4;
    if (emu_mul_u64((uint64_t)v, (uint64_t)h, &vh) || emu_mul_u64(vh, 4, &vh4) || emu_mul_u64((uint64_t)v, 4, &v4) ||
        emu_mul_u64((uint64_t)h, 4, &h4) || vh4 > (UINT64_MAX >> 4) || v4 > (UINT64_MAX >> 4))
        return -1;
    l->wf = 0;
    l->row = l->wf + emu_round_up(vh4);
    l->xrow = l->row + emu_round_up(v4);
    l->total = l->xrow + emu_round_up(h4);
    return l->total > (uint64_t)INT64_MAX ? -1 : 0;
}

static void store_int(const emu_view *v, int64_t index, int64_t value)
{
    char *p = v->data + index * (int64_t)v->elsize;
    if (v->dtype == ACL_INT64) {
        memcpy(p, &value, 8);
    } else if (v->dtype == ACL_INT32) {
        int32_t x = (int32_t)value;
        memcpy(p, &x, 4);
    } else {
        uint8_t x = (uint8_t)value; /* UINT8 */
        memcpy(p, &x, 1);
    }
}

static aclnnStatus ms_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *input = &ex->t[MS_INPUT], *weight = &ex->t[MS_WEIGHT], *target = &ex->t[MS_TARGET],
                   *lmax = &ex->t[MS_LMAX], *sexp = &ex->t[MS_SUMEXP], *pred = &ex->t[MS_PRED], *mask = &ex->t[MS_MASK],
                   *mt = &ex->t[MS_MT], *logits = &ex->t[MS_LOGITS];
    int64_t bt = input->dims[0], h = input->dims[1], v = weight->dims[0];
    int64_t start = ex->vocab_start, end = ex->vocab_end;

    if (bt == 0)
        return ACLNN_SUCCESS; /* every output is empty */
    ms_layout l;
    if (ms_workspace(v, h, &l) != 0 || l.total > ws_size)
        return ACLNN_ERR_INNER; /* phase one sized it; never write past it */
    float *wf = (float *)(ws + l.wf), *row = (float *)(ws + l.row), *xrow = (float *)(ws + l.xrow);

    for (int64_t r = 0; r < v; r++)
        emu_gather_f32(weight, emu_at2(weight, r, 0), weight->strides[1], h, wf + r * h);
    uint8_t byte = 0;
    for (int64_t i = 0; i < bt; i++) {
        emu_gather_f32(input, emu_at2(input, i, 0), input->strides[1], h, xrow);
        float m = -INFINITY;
        for (int64_t r = 0; r < v; r++) {
            row[r] = emu_dot_f32(xrow, wf + r * h, h);
            m = row[r] > m ? row[r] : m;
        }
        float s = 0.0f;
        for (int64_t r = 0; r < v; r++)
            s += expf(row[r] - m);
        int64_t t = emu_load_i64(target, emu_at1(target, i));
        int masked = t < start || t >= end;
        float hit = !masked && t - start < v ? row[t - start] : 0.0f; /* past the shard: never gathered */
        emu_store_f32(lmax, emu_at1(lmax, i), m);
        emu_store_f32(sexp, emu_at1(sexp, i), s);
        emu_store_f32(pred, emu_at1(pred, i), masked ? 0.0f : hit - m);
        store_int(mt, emu_at1(mt, i), masked ? 0 : t - start);
        if (logits->present)
            emu_scatter_f32(logits, emu_at2(logits, i, 0), logits->strides[1], v, row);
        byte |= (uint8_t)(masked << (i % 8));
        if (i % 8 == 7) {
            store_int(mask, emu_at1(mask, i / 8), byte);
            byte = 0;
        }
    }
    if (bt % 8) { /* the padding bits: the mask of the padded target 0 (the kernel's and golden script's) */
        uint8_t pad = (0 < start || 0 >= end) ? (uint8_t)(0xffu << (bt % 8)) : 0;
        store_int(mask, emu_at1(mask, bt / 8), byte | pad);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus need_1d(const emu_plan *ex, int k, int64_t n)
{
    const emu_view *t = &ex->t[k];
    if (!t->present || (t->ndim == 1 && t->dims[0] == n))
        return ACLNN_SUCCESS;
    char a[160];
    emu_set_error("%s: %s must have shape (%lld,); got %s", ex->api, ex->names[k], (long long)n,
                  emu_shape_str(t, a, sizeof a));
    return ACLNN_ERR_PARAM_INVALID;
}

static aclnnStatus need_2d(const emu_plan *ex, int k, int64_t d0, int64_t d1)
{
    const emu_view *t = &ex->t[k];
    if (!t->present || (t->ndim == 2 && t->dims[0] == d0 && t->dims[1] == d1))
        return ACLNN_SUCCESS;
    char a[160];
    emu_set_error("%s: %s must have shape (%lld, %lld); got %s", ex->api, ex->names[k], (long long)d0, (long long)d1,
                  emu_shape_str(t, a, sizeof a));
    return ACLNN_ERR_PARAM_INVALID;
}

static aclnnStatus need_one_of(const emu_plan *ex, int k, aclDataType a, aclDataType b)
{
    aclDataType dt = ex->t[k].dtype;
    if (dt == a || dt == b)
        return ACLNN_SUCCESS;
    emu_set_error("%s: %s has dtype %s; expected %s or %s", ex->api, ex->names[k], emu_dtype_name(dt),
                  emu_dtype_name(a), emu_dtype_name(b));
    return ACLNN_ERR_PARAM_INVALID;
}

EMU_EXPORT aclnnStatus aclnnFusedLinearOnlineMaxSumGetWorkspaceSize(
    const aclTensor *input, const aclTensor *weight, const aclTensor *target, int64_t vocabStartIndex,
    int64_t vocabEndIndex, aclTensor *logitsMaxLocalOut, aclTensor *sumExpLogitsLocalOut,
    aclTensor *predictedLogitsLocalOut, aclTensor *targetMaskOut, aclTensor *maskedTargetOut,
    aclTensor *vocabParallelLogitsOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedLinearOnlineMaxSumGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnFusedLinearOnlineMaxSum", workspaceSize, executor);
    EMU_REQUIRE(api, input, "input");
    EMU_REQUIRE(api, weight, "weight");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, logitsMaxLocalOut, "logitsMaxLocalOut");
    EMU_REQUIRE(api, sumExpLogitsLocalOut, "sumExpLogitsLocalOut");
    EMU_REQUIRE(api, predictedLogitsLocalOut, "predictedLogitsLocalOut");
    EMU_REQUIRE(api, targetMaskOut, "targetMaskOut");
    EMU_REQUIRE(api, maskedTargetOut, "maskedTargetOut");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, MS_INPUT, "input", input));
    EMU_CHECK(emu_operand(&ex, MS_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, MS_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, MS_LMAX, "logitsMaxLocalOut", logitsMaxLocalOut));
    EMU_CHECK(emu_operand(&ex, MS_SUMEXP, "sumExpLogitsLocalOut", sumExpLogitsLocalOut));
    EMU_CHECK(emu_operand(&ex, MS_PRED, "predictedLogitsLocalOut", predictedLogitsLocalOut));
    EMU_CHECK(emu_operand(&ex, MS_MASK, "targetMaskOut", targetMaskOut));
    EMU_CHECK(emu_operand(&ex, MS_MT, "maskedTargetOut", maskedTargetOut));
    EMU_CHECK(emu_operand(&ex, MS_LOGITS, "vocabParallelLogitsOutOptional", vocabParallelLogitsOutOptional));

    EMU_CHECK(need_one_of(&ex, MS_INPUT, ACL_FLOAT16, ACL_BF16));
    aclDataType dt = ex.t[MS_INPUT].dtype;
    EMU_CHECK(emu_need_dtype(&ex, MS_WEIGHT, dt));
    EMU_CHECK(emu_need_dtype(&ex, MS_LOGITS, dt));
    EMU_CHECK(need_one_of(&ex, MS_TARGET, ACL_INT32, ACL_INT64));
    EMU_CHECK(emu_need_dtype(&ex, MS_MT, ex.t[MS_TARGET].dtype));
    static const int f32s[] = {MS_LMAX, MS_SUMEXP, MS_PRED};
    for (int i = 0; i < 3; i++)
        EMU_CHECK(emu_need_dtype(&ex, f32s[i], ACL_FLOAT));
    EMU_CHECK(emu_need_dtype(&ex, MS_MASK, ACL_UINT8));

    EMU_CHECK(emu_need_ndim(&ex, MS_INPUT, 2));
    EMU_CHECK(emu_need_ndim(&ex, MS_WEIGHT, 2));
    int64_t bt = ex.t[MS_INPUT].dims[0], h = ex.t[MS_INPUT].dims[1], v = ex.t[MS_WEIGHT].dims[0];
    if (h > MS_MAX_HIDDEN) {
        emu_set_error("%s: input.size(1)=%lld; at most %d is supported", api, (long long)h, MS_MAX_HIDDEN);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (v <= 0) {
        emu_set_error("%s: weight.size(0) must be greater than 0", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(need_2d(&ex, MS_WEIGHT, v, h));
    static const int rows[] = {MS_TARGET, MS_LMAX, MS_SUMEXP, MS_PRED, MS_MT};
    for (int i = 0; i < 5; i++)
        EMU_CHECK(need_1d(&ex, rows[i], bt));
    EMU_CHECK(need_1d(&ex, MS_MASK, (bt + 7) / 8));
    EMU_CHECK(need_2d(&ex, MS_LOGITS, bt, v));

    if (vocabStartIndex < 0) {
        emu_set_error("%s: vocabStartIndex=%lld is less than 0", api, (long long)vocabStartIndex);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (vocabEndIndex < vocabStartIndex) {
        emu_set_error("%s: vocabEndIndex=%lld is less than vocabStartIndex=%lld", api, (long long)vocabEndIndex,
                      (long long)vocabStartIndex);
        return ACLNN_ERR_PARAM_INVALID;
    }
    static const int outs[] = {MS_LMAX, MS_SUMEXP, MS_PRED, MS_MASK, MS_MT, MS_LOGITS};
    for (int i = 0; i < 6; i++)
        EMU_CHECK(emu_need_no_overlap(&ex, outs[i], MS_TARGET));
    ms_layout l;
    if (ms_workspace(v, h, &l) != 0) {
        emu_set_error("%s: V=%lld, H=%lld is too large", api, (long long)v, (long long)h);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.vocab_start = vocabStartIndex;
    ex.vocab_end = vocabEndIndex;
    ex.workspace_size = l.total;
    ex.run = ms_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnFusedLinearOnlineMaxSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                    aclrtStream stream)
{
    return emu_launch("aclnnFusedLinearOnlineMaxSum", workspace, workspaceSize, executor, stream);
}

/* ---- aclnnFusedCrossEntropyLossWithMaxSum ----------------------------------------------------- */

static aclnnStatus ce_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *lmax = &ex->t[CE_LMAX], *sexp = &ex->t[CE_SUMEXP], *pred = &ex->t[CE_PRED],
                   *logits = &ex->t[CE_LOGITS], *loss = &ex->t[CE_LOSS], *sm = &ex->t[CE_SOFTMAX];
    int64_t bt = lmax->dims[0], v = logits->present ? logits->dims[1] : 0;
    if ((uint64_t)v * 4 > ws_size)
        return ACLNN_ERR_INNER;
    float *row = (float *)ws;
    for (int64_t i = 0; i < bt; i++) {
        double m = emu_load_f32(lmax, emu_at1(lmax, i)), s = emu_load_f32(sexp, emu_at1(sexp, i));
        double p = emu_load_f32(pred, emu_at1(pred, i));
        if (logits->present) { /* read the whole row before writing: softmax may alias the logits */
            emu_gather_f32(logits, emu_at2(logits, i, 0), logits->strides[1], v, row);
            for (int64_t r = 0; r < v; r++)
                row[r] = (float)(exp((double)row[r] - m) / s);
        }
        emu_store_f64(loss, emu_at1(loss, i), log(s) - p);
        if (logits->present)
            emu_scatter_f32(sm, emu_at2(sm, i, 0), sm->strides[1], v, row);
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize(
    const aclTensor *logitsMax, const aclTensor *sumExpLogits, const aclTensor *predictedLogits, float labelSmoothing,
    const aclTensor *inputOptional, const aclTensor *weightOptional, const aclTensor *vocabParallelLogitsOptional,
    aclTensor *lossOut, aclTensor *softMaxOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize";
    emu_plan ex;
    emu_phase_one_start(&ex, api, "aclnnFusedCrossEntropyLossWithMaxSum", workspaceSize, executor);
    EMU_REQUIRE(api, logitsMax, "logitsMax");
    EMU_REQUIRE(api, sumExpLogits, "sumExpLogits");
    EMU_REQUIRE(api, predictedLogits, "predictedLogits");
    EMU_REQUIRE(api, lossOut, "lossOut");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    (void)inputOptional; /* ignored, as ops-nn's op_api ([[maybe_unused]]): never read, whatever it is */
    (void)weightOptional;
    if (vocabParallelLogitsOptional && !softMaxOutOptional) { /* op_api's CheckNotNull: 161001 */
        emu_set_error("%s: softMaxOutOptional is NULL while vocabParallelLogitsOptional is given", api);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (!vocabParallelLogitsOptional) /* op_api: softMaxOutOptional is neither checked nor written then */
        softMaxOutOptional = NULL;
    EMU_CHECK(emu_operand(&ex, CE_LMAX, "logitsMax", logitsMax));
    EMU_CHECK(emu_operand(&ex, CE_SUMEXP, "sumExpLogits", sumExpLogits));
    EMU_CHECK(emu_operand(&ex, CE_PRED, "predictedLogits", predictedLogits));
    EMU_CHECK(emu_operand(&ex, CE_INPUT, "inputOptional", NULL));
    EMU_CHECK(emu_operand(&ex, CE_WEIGHT, "weightOptional", NULL));
    EMU_CHECK(emu_operand(&ex, CE_LOGITS, "vocabParallelLogitsOptional", vocabParallelLogitsOptional));
    EMU_CHECK(emu_operand(&ex, CE_LOSS, "lossOut", lossOut));
    EMU_CHECK(emu_operand(&ex, CE_SOFTMAX, "softMaxOutOptional", softMaxOutOptional));

    if (labelSmoothing != 0.0f) { /* also refuses NaN */
        emu_set_error("%s: labelSmoothing must be 0 (the only value supported); got %g", api, (double)labelSmoothing);
        return ACLNN_ERR_PARAM_INVALID;
    }
    static const int f32s[] = {CE_LMAX, CE_SUMEXP, CE_PRED, CE_LOSS, CE_SOFTMAX};
    for (int i = 0; i < 5; i++)
        EMU_CHECK(emu_need_dtype(&ex, f32s[i], ACL_FLOAT));
    EMU_CHECK(emu_need_float(&ex, CE_LOGITS));
    EMU_CHECK(emu_need_ndim(&ex, CE_LMAX, 1));
    int64_t bt = ex.t[CE_LMAX].dims[0];
    static const int rows[] = {CE_SUMEXP, CE_PRED, CE_LOSS};
    for (int i = 0; i < 3; i++)
        EMU_CHECK(need_1d(&ex, rows[i], bt));
    int64_t v = 0;
    if (ex.t[CE_LOGITS].present) {
        EMU_CHECK(emu_need_ndim(&ex, CE_LOGITS, 2));
        v = ex.t[CE_LOGITS].dims[1];
        EMU_CHECK(need_2d(&ex, CE_LOGITS, bt, v));
        EMU_CHECK(need_2d(&ex, CE_SOFTMAX, bt, v));
    }
    uint64_t bytes;
    if (emu_mul_u64((uint64_t)v, 4, &bytes) || bytes > (uint64_t)INT64_MAX / 2) {
        emu_set_error("%s: V=%lld is too large", api, (long long)v);
        return ACLNN_ERR_PARAM_INVALID;
    }
    ex.workspace_size = emu_round_up(bytes);
    ex.run = ce_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnFusedCrossEntropyLossWithMaxSum(void *workspace, uint64_t workspaceSize,
                                                            aclOpExecutor *executor, aclrtStream stream)
{
    return emu_launch("aclnnFusedCrossEntropyLossWithMaxSum", workspace, workspaceSize, executor, stream);
}
