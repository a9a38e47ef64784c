/* aclnnCrossEntropyLoss and aclnnCrossEntropyLossGrad (ops-nn loss/cross_entropy_loss and
 * loss/cross_entropy_loss_grad, docs/aclnnCrossEntropyLoss.md and aclnnCrossEntropyLossGrad.md).
 *
 * Forward: per row, lse = max + log(sum exp(x - max)) in float32; logProbOut = x - lse; the NLL term
 * -w[t] * logProb[t] and, with labelSmoothing, the smoothing term -sum_c w[c] * logProb[c], combined as
 * PyTorch's cross_entropy (the pages' golden is torch.ops.aten.cross_entropy_loss): mean divides both by
 * the summed weights of the rows not ignored. Reductions sum in float32 in blocks of EMU_REDUCE_BLOCK
 * rows. Checks (the pages' return-code tables): NULL required pointers 161001; dtypes outside the lists
 * 161002; input/target/weight shapes, reductionOptional and labelSmoothing outside their ranges 561002
 * (as is, ours, a class count whose row workspace no int64 byte count holds).
 * The z-loss is not computed: the pages say lseSquareScaleForZloss and returnZloss take no effect yet,
 * so zlossOut and lseForZlossOut are checked but not written.
 *
 * Backward: the page's formula, which is the gradient of the forward above: with p = exp(logProb) and
 * D the mean's divisor (1 for none/sum), per kept row out = p * (g (1 - ls) w[t] / D + g ls / C / D *
 * sum(w)) - g ls / C / D * w[c], minus g (1 - ls) w[t] / D at the target. The page's usage column says
 * only labelSmoothing 0.0 is supported while its formula carries labelSmoothing: the emulator computes
 * the formula (a library whose grad ignored it would be wrong for every smoothed forward). */
#include <stdio.h>

#include "aclnnop/aclnn_cross_entropy_loss.h"
#include "aclnnop/aclnn_cross_entropy_loss_grad.h"
#include "ops_common.h"

enum { CE_INPUT, CE_TARGET, CE_WEIGHT, CE_LOSS, CE_LOGPROB, CE_ZLOSS, CE_LSE };
enum { CEG_GRAD, CEG_LOGPROB, CEG_TARGET, CEG_WEIGHT, CEG_GRADZ, CEG_LSE, CEG_OUT };

/* "none"/"mean"/"sum" (NULL: "mean") to the reduction code; -1 otherwise, with the bytes read (at most five,
 * NUL-terminated) in seen and *more set when the string goes on past them. Ours: the string is read a byte
 * at a time and no further than the first byte that rules out every name (or its NUL), so an unterminated or
 * over-long string is never read past that byte (strcmp stops there too; a "%s" of it would not). */
static int64_t ce_reduction(const char *s, char seen[6], int *more)
{
    static const char *const names[] = {"none", "mean", "sum"};
    static const int64_t codes[] = {EMU_REDUCTION_NONE, EMU_REDUCTION_MEAN, EMU_REDUCTION_SUM};
    seen[0] = '\0';
    *more = 0;
    if (s == NULL)
        return EMU_REDUCTION_MEAN;
    int alive = 7; /* bit k: s matches names[k] so far (no name is longer than four bytes) */
    for (size_t i = 0; alive; i++) {
        char ch = s[i];
        seen[i] = ch;
        seen[i + 1] = '\0';
        for (int k = 0; k < 3; k++)
            if ((alive >> k & 1) && names[k][i] != ch)
                alive &= ~(1 << k);
        if (ch == '\0')
            for (int k = 0; k < 3; k++)
                if (alive >> k & 1)
                    return codes[k];
        *more = ch != '\0';
    }
    return -1;
}

static float ce_weight(const emu_view *w, int64_t c) { return w->present ? emu_load_f32(w, emu_at1(w, c)) : 1.0f; }

/* every target in [0, C) or ignoreIndex: checked before anything is written (they are device data) */
static aclnnStatus ce_check_targets(const emu_plan *ex, const emu_view *target, int64_t rows, int64_t classes)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = emu_load_i64(target, emu_at1(target, i));
        if (t != ex->ignore_index && (t < 0 || t >= classes)) {
            emu_set_error("%s: target[%lld] = %lld is outside [0, %lld) and is not ignoreIndex %lld", ex->op,
                          (long long)i, (long long)t, (long long)classes, (long long)ex->ignore_index);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    return ACLNN_SUCCESS;
}

/* the target of row i, or -1 when it is ignored (or changed since the check: never index with it) */
static int64_t ce_target(const emu_plan *ex, const emu_view *target, int64_t i, int64_t classes)
{
    int64_t t = emu_load_i64(target, emu_at1(target, i));
    return t == ex->ignore_index || t < 0 || t >= classes ? -1 : t;
}

static aclnnStatus ce_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *x = &ex->t[CE_INPUT], *target = &ex->t[CE_TARGET], *w = &ex->t[CE_WEIGHT];
    const emu_view *loss = &ex->t[CE_LOSS], *logp = &ex->t[CE_LOGPROB];
    int64_t rows = x->dims[0], classes = x->dims[1];
    EMU_CHECK(ce_check_targets(ex, target, rows, classes));
    float *row = (float *)ws; /* one row of logits: the workspace phase one asked for */
    (void)ws_size;
    float ls = (float)ex->smoothing;
    /* block partial sums (one per "core"), combined in order */
    float nll_sum = 0.0f, smooth_sum = 0.0f, weight_sum = 0.0f;
    float nll_part = 0.0f, smooth_part = 0.0f, weight_part = 0.0f;
    for (int64_t i = 0; i < rows; i++) {
        emu_gather_f32(x, emu_at2(x, i, 0), x->strides[1], classes, row);
        float m = -INFINITY;
        for (int64_t c = 0; c < classes; c++)
            m = row[c] > m ? row[c] : m;
        float s = 0.0f;
        for (int64_t c = 0; c < classes; c++)
            s += expf(row[c] - m);
        for (int64_t c = 0; c < classes; c++)
            if (row[c] != row[c])
                s = row[c]; /* a NaN logit: a NaN row */
        float lse = (m == -INFINITY ? m : m + logf(s));
        float smooth = 0.0f;
        for (int64_t c = 0; c < classes; c++) {
            row[c] = row[c] - lse;
            smooth += ce_weight(w, c) * row[c];
        }
        emu_scatter_f32(logp, emu_at2(logp, i, 0), logp->strides[1], classes, row);
        int64_t t = ce_target(ex, target, i, classes);
        float wt = t < 0 ? 0.0f : ce_weight(w, t);
        float nll = t < 0 ? 0.0f : -wt * row[t];
        float sm = t < 0 ? 0.0f : -smooth;
        if (ex->reduction == EMU_REDUCTION_NONE) {
            float l = (1.0f - ls) * nll + (ls != 0.0f ? ls / (float)classes * sm : 0.0f);
            emu_store_f32(loss, emu_at1(loss, i), l);
            continue;
        }
        nll_part += nll;
        smooth_part += sm;
        weight_part += wt;
        if ((i + 1) % EMU_REDUCE_BLOCK == 0) {
            nll_sum += nll_part, smooth_sum += smooth_part, weight_sum += weight_part;
            nll_part = smooth_part = weight_part = 0.0f;
        }
    }
    if (ex->reduction != EMU_REDUCTION_NONE) {
        nll_sum += nll_part, smooth_sum += smooth_part, weight_sum += weight_part;
        float d = ex->reduction == EMU_REDUCTION_MEAN ? weight_sum : 1.0f; /* 0: NaN, as PyTorch */
        float l = (1.0f - ls) * (nll_sum / d);
        if (ls != 0.0f)
            l += ls / (float)classes * (smooth_sum / d);
        emu_store_f32(loss, loss->offset, l);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_need_shape(const emu_plan *ex, int k, int ndim, const int64_t *dims, aclnnStatus code)
{
    const emu_view *v = &ex->t[k];
    int ok = v->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = v->dims[d] == dims[d];
    if (!ok) {
        char a[160];
        emu_set_error("%s: %s has shape %s; expected %d-D of (%lld%s%s)", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a), ndim, ndim ? (long long)dims[0] : 0LL, ndim > 1 ? ", " : "",
                      ndim > 1 ? "C" : "");
        return code;
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_need_one(const emu_plan *ex, int k)
{
    if (!emu_one_element(&ex->t[k])) {
        char a[160];
        emu_set_error("%s: %s must have one element for a mean or sum reduction; got shape %s", ex->api, ex->names[k],
                      emu_shape_str(&ex->t[k], a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_need_logits(const emu_plan *ex, int k)
{
    const emu_view *v = &ex->t[k];
    if (v->ndim != 2 || v->dims[1] <= 0) {
        char a[160];
        emu_set_error("%s: %s must have shape (N, C) with C > 0; got %s", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a));
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_need_smoothing(const emu_plan *ex, double ls)
{
    if (!(ls >= 0.0 && ls <= 1.0)) {
        emu_set_error("%s: labelSmoothing %g is outside [0, 1]", ex->api, ls);
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_need_reduction(emu_plan *ex, const char *reduction)
{
    char seen[6], shown[24] = "";
    int more;
    ex->reduction = ce_reduction(reduction, seen, &more);
    if (ex->reduction < 0) { /* the bytes read: printable ones as they are, others escaped */
        size_t m = 0;
        for (const char *p = seen; *p; p++)
            m += (size_t)snprintf(shown + m, sizeof shown - m, *p >= 0x20 && *p < 0x7f ? "%c" : "\\x%02x",
                                  (unsigned char)*p);
        emu_set_error("%s: reductionOptional \"%s%s\" is not \"none\", \"mean\" or \"sum\"", ex->api, shown,
                      more ? "..." : "");
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(const aclTensor *input, const aclTensor *target,
                                                             const aclTensor *weightOptional, char *reductionOptional,
                                                             int64_t ignoreIndex, double labelSmoothing,
                                                             double lseSquareScaleForZloss, bool returnZloss,
                                                             const aclTensor *lossOut, const aclTensor *logProbOut,
                                                             const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
                                                             uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLossGetWorkspaceSize";
    emu_plan ex;
    (void)lseSquareScaleForZloss; /* no effect yet (the page's constraints) */
    (void)returnZloss;
    emu_phase_one_start(&ex, api, "aclnnCrossEntropyLoss", workspaceSize, executor);
    EMU_REQUIRE(api, input, "input");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, lossOut, "lossOut");
    EMU_REQUIRE(api, logProbOut, "logProbOut");
    EMU_REQUIRE(api, zlossOut, "zlossOut");
    EMU_REQUIRE(api, lseForZlossOut, "lseForZlossOut");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, CE_INPUT, "input", input));
    EMU_CHECK(emu_operand(&ex, CE_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, CE_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(&ex, CE_LOSS, "lossOut", lossOut));
    EMU_CHECK(emu_operand(&ex, CE_LOGPROB, "logProbOut", logProbOut));
    EMU_CHECK(emu_operand(&ex, CE_ZLOSS, "zlossOut", zlossOut));
    EMU_CHECK(emu_operand(&ex, CE_LSE, "lseForZlossOut", lseForZlossOut));
    ex.ignore_index = ignoreIndex;
    ex.smoothing = labelSmoothing;

    EMU_CHECK(emu_need_float(&ex, CE_INPUT));
    aclDataType dt = ex.t[CE_INPUT].dtype;
    for (int k = CE_LOSS; k <= CE_LSE; k++)
        EMU_CHECK(emu_need_dtype(&ex, k, dt));
    EMU_CHECK(emu_need_dtype(&ex, CE_WEIGHT, ACL_FLOAT));
    aclDataType tdt = ex.t[CE_TARGET].dtype;
    if (tdt != ACL_INT64 && tdt != ACL_INT32) {
        emu_set_error("%s: target has dtype %s; expected INT64 or INT32", api, emu_dtype_name(tdt));
        return ACLNN_ERR_PARAM_INVALID;
    }

    EMU_CHECK(ce_need_logits(&ex, CE_INPUT));
    int64_t n = ex.t[CE_INPUT].dims[0], c = ex.t[CE_INPUT].dims[1];
    EMU_CHECK(ce_need_shape(&ex, CE_TARGET, 1, &n, ACLNN_ERR_INNER_TILING_ERROR));
    if (ex.t[CE_WEIGHT].present)
        EMU_CHECK(ce_need_shape(&ex, CE_WEIGHT, 1, &c, ACLNN_ERR_INNER_TILING_ERROR));
    EMU_CHECK(ce_need_reduction(&ex, reductionOptional));
    EMU_CHECK(ce_need_smoothing(&ex, labelSmoothing));
    if (ex.reduction == EMU_REDUCTION_NONE) {
        EMU_CHECK(ce_need_shape(&ex, CE_LOSS, 1, &n, ACLNN_ERR_PARAM_INVALID));
    } else {
        EMU_CHECK(ce_need_one(&ex, CE_LOSS));
    }
    EMU_CHECK(emu_need_same_shape(&ex, CE_LOGPROB, CE_INPUT));
    EMU_CHECK(emu_need_same_shape(&ex, CE_ZLOSS, CE_LOSS));
    EMU_CHECK(ce_need_shape(&ex, CE_LSE, 1, &n, ACLNN_ERR_PARAM_INVALID));
    for (int k = CE_LOSS; k <= CE_LSE; k++)
        EMU_CHECK(emu_need_no_overlap(&ex, k, CE_TARGET));
    EMU_CHECK(emu_need_row_workspace(&ex, CE_INPUT, c, 1, ACLNN_ERR_INNER_TILING_ERROR, &ex.workspace_size));
    ex.run = ce_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream)
{
    return emu_launch("aclnnCrossEntropyLoss", workspace, workspaceSize, executor, stream);
}

static aclnnStatus ceg_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *lp = &ex->t[CEG_LOGPROB], *target = &ex->t[CEG_TARGET], *w = &ex->t[CEG_WEIGHT];
    const emu_view *grad = &ex->t[CEG_GRAD], *out = &ex->t[CEG_OUT];
    int64_t rows = lp->dims[0], classes = lp->dims[1];
    EMU_CHECK(ce_check_targets(ex, target, rows, classes));
    float *row = (float *)ws;
    (void)ws_size;
    float ls = (float)ex->smoothing, wsum = 0.0f, d = 1.0f;
    for (int64_t c = 0; c < classes; c++)
        wsum += ce_weight(w, c);
    if (ex->reduction == EMU_REDUCTION_MEAN) {
        float part = 0.0f;
        d = 0.0f;
        for (int64_t i = 0; i < rows; i++) {
            int64_t t = ce_target(ex, target, i, classes);
            part += t < 0 ? 0.0f : ce_weight(w, t);
            if ((i + 1) % EMU_REDUCE_BLOCK == 0)
                d += part, part = 0.0f;
        }
        d += part;
    }
    int per_row = ex->reduction == EMU_REDUCTION_NONE;
    float g0 = per_row ? 0.0f : emu_load_f32(grad, grad->offset);
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = ce_target(ex, target, i, classes);
        float g = per_row ? emu_load_f32(grad, emu_at1(grad, i)) : g0;
        float g_nll = t < 0 ? 0.0f : g * (1.0f - ls) / d * ce_weight(w, t);
        float g_smooth = t < 0 ? 0.0f : g / d * ls / (float)classes;
        float a = g_nll + g_smooth * wsum;
        emu_gather_f32(lp, emu_at2(lp, i, 0), lp->strides[1], classes, row);
        for (int64_t c = 0; c < classes; c++)
            row[c] = expf(row[c]) * a - g_smooth * ce_weight(w, c);
        if (t >= 0)
            row[t] -= g_nll;
        emu_scatter_f32(out, emu_at2(out, i, 0), out->strides[1], classes, row);
    }
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLossGradGetWorkspaceSize";
    emu_plan ex;
    (void)lseSquareScaleForZloss; /* no effect yet (the page's constraints) */
    emu_phase_one_start(&ex, api, "aclnnCrossEntropyLossGrad", workspaceSize, executor);
    EMU_REQUIRE(api, gradLoss, "gradLoss");
    EMU_REQUIRE(api, logProb, "logProb");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, CEG_GRAD, "gradLoss", gradLoss));
    EMU_CHECK(emu_operand(&ex, CEG_LOGPROB, "logProb", logProb));
    EMU_CHECK(emu_operand(&ex, CEG_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, CEG_WEIGHT, "weightOptional", weightOptional));
    EMU_CHECK(emu_operand(&ex, CEG_GRADZ, "gradZlossOptional", gradZlossOptional));
    EMU_CHECK(emu_operand(&ex, CEG_LSE, "lseForZlossOptional", lseForZlossOptional));
    EMU_CHECK(emu_operand(&ex, CEG_OUT, "out", out));
    ex.ignore_index = ignoreIndex;
    ex.smoothing = labelSmoothing;

    EMU_CHECK(emu_need_float(&ex, CEG_GRAD));
    aclDataType dt = ex.t[CEG_GRAD].dtype;
    static const int same[] = {CEG_LOGPROB, CEG_GRADZ, CEG_LSE, CEG_OUT};
    for (int k = 0; k < 4; k++)
        EMU_CHECK(emu_need_dtype(&ex, same[k], dt));
    EMU_CHECK(emu_need_dtype(&ex, CEG_WEIGHT, ACL_FLOAT));
    EMU_CHECK(emu_need_dtype(&ex, CEG_TARGET, ACL_INT64));

    EMU_CHECK(ce_need_logits(&ex, CEG_LOGPROB));
    int64_t n = ex.t[CEG_LOGPROB].dims[0], c = ex.t[CEG_LOGPROB].dims[1];
    EMU_CHECK(ce_need_shape(&ex, CEG_TARGET, 1, &n, ACLNN_ERR_INNER_TILING_ERROR));
    if (ex.t[CEG_WEIGHT].present)
        EMU_CHECK(ce_need_shape(&ex, CEG_WEIGHT, 1, &c, ACLNN_ERR_INNER_TILING_ERROR));
    EMU_CHECK(ce_need_reduction(&ex, reductionOptional));
    EMU_CHECK(ce_need_smoothing(&ex, labelSmoothing));
    if (ex.reduction == EMU_REDUCTION_NONE) {
        EMU_CHECK(ce_need_shape(&ex, CEG_GRAD, 1, &n, ACLNN_ERR_PARAM_INVALID));
    } else {
        EMU_CHECK(ce_need_shape(&ex, CEG_GRAD, 0, NULL, ACLNN_ERR_PARAM_INVALID));
    }
    EMU_CHECK(emu_need_same_shape(&ex, CEG_OUT, CEG_LOGPROB));
    EMU_CHECK(emu_need_no_overlap(&ex, CEG_OUT, CEG_TARGET));
    EMU_CHECK(emu_need_row_workspace(&ex, CEG_LOGPROB, c, 1, ACLNN_ERR_INNER_TILING_ERROR, &ex.workspace_size));
    ex.run = ceg_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                 aclrtStream stream)
{
    return emu_launch("aclnnCrossEntropyLossGrad", workspace, workspaceSize, executor, stream);
}
