/* aclnnCrossEntropyLoss and aclnnCrossEntropyLossGrad as a port author writes them from CANN's pages:
 * loss and log-probabilities from logits (class weights, ignoreIndex, label smoothing; no z-loss, as
 * CANN computes none yet), and the gradient from the log-probabilities.
 *
 * Seeded bugs here: BUG_CE_SMOOTH_OVER_C_MINUS_1 (the smoothing mass spread over the C - 1 other
 * classes), BUG_CE_MEAN_COUNTS_IGNORED (the forward's mean divides by the weights of every row,
 * ignored ones too), BUG_CE_NO_MAX_SHIFT (log-sum-exp without subtracting the row max: overflows),
 * BUG_CE_GRAD_SMOOTH_UNWEIGHTED (the gradient's smoothing term without the class weights),
 * BUG_CE_GRAD_MEAN_COUNTS_IGNORED (the gradient's mean divides by the row count N). */
#include <stdbool.h>

#include "port.h"

enum { F_INPUT, F_TARGET, F_WEIGHT, F_LOSS, F_LOGPROB, F_ZLOSS, F_LSE };
enum { G_GRAD, G_LOGPROB, G_TARGET, G_WEIGHT, G_GRADZ, G_LSE, G_OUT };

typedef struct {
    port_tensor t[7];
    int64_t reduction, ignore_index;
    float smoothing;
} ce_plan;

static int64_t ce_reduction_code(const char *s)
{
    if (s == NULL || strcmp(s, "mean") == 0)
        return 1;
    if (strcmp(s, "sum") == 0)
        return 2;
    return strcmp(s, "none") == 0 ? 0 : -1;
}

static int64_t ce_target(const ce_plan *p, int k, int64_t i, int64_t classes)
{
    const port_tensor *t = &p->t[k];
    int64_t v = port_load_int(t, t->offset + i * t->strides[0]);
    return v == p->ignore_index || v < 0 || v >= classes ? -1 : v;
}

static float ce_w(const port_tensor *w, int64_t c)
{
    return w->present ? port_load(w, w->offset + c * w->strides[0]) : 1.0f;
}

static aclnnStatus ce_check(const ce_plan *p, int k, int64_t rows, int64_t classes)
{
    const port_tensor *t = &p->t[k];
    for (int64_t i = 0; i < rows; i++) {
        int64_t v = port_load_int(t, t->offset + i * t->strides[0]);
        if (v != p->ignore_index && (v < 0 || v >= classes)) {
            xlossEmuSetErrMsg("cross entropy: target[%lld] = %lld is outside [0, %lld)", (long long)i, (long long)v,
                              (long long)classes);
            return ACLNN_ERR_RUNTIME_ERROR;
        }
    }
    return ACLNN_SUCCESS;
}

static float ce_at(const port_tensor *v, int64_t i, int64_t j)
{
    return port_load(v, v->offset + i * v->strides[0] + j * v->strides[1]);
}

static aclnnStatus ce_forward_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const ce_plan *p = vplan;
    const port_tensor *x = &p->t[F_INPUT], *w = &p->t[F_WEIGHT], *loss = &p->t[F_LOSS], *lp = &p->t[F_LOGPROB];
    int64_t rows = x->dims[0], classes = x->dims[1];
    PORT_TRY(ce_check(p, F_TARGET, rows, classes));
#ifdef BUG_CE_SMOOTH_OVER_C_MINUS_1
    /* BUG: the smoothing mass goes to the C - 1 classes that are not the target */
    float spread = classes > 1 ? p->smoothing / (float)(classes - 1) : 0.0f;
#else
    float spread = p->smoothing / (float)classes;
#endif
    float nll_sum = 0.0f, smooth_sum = 0.0f, weight_sum = 0.0f;
    for (int64_t i = 0; i < rows; i++) {
#ifdef BUG_CE_NO_MAX_SHIFT
        /* BUG: log(sum exp(x)) straight: exp overflows for logits above ~88 */
        float m = 0.0f;
#else
        float m = -INFINITY;
        for (int64_t c = 0; c < classes; c++)
            m = fmaxf(m, ce_at(x, i, c));
#endif
        float s = 0.0f;
        for (int64_t c = 0; c < classes; c++)
            s += expf(ce_at(x, i, c) - m);
        float lse = m + logf(s), smooth = 0.0f;
        for (int64_t c = 0; c < classes; c++) {
            float v = ce_at(x, i, c) - lse;
            smooth -= ce_w(w, c) * v;
            port_store(lp, lp->offset + i * lp->strides[0] + c * lp->strides[1], v, PORT_ROUND_RINT);
        }
        int64_t t = ce_target(p, F_TARGET, i, classes);
        float wt = t < 0 ? 0.0f : ce_w(w, t);
        float nll = t < 0 ? 0.0f : -wt * (ce_at(x, i, t) - lse);
        smooth = t < 0 ? 0.0f : smooth;
        if (p->reduction == 0) {
            port_store(loss, loss->offset + i * loss->strides[0], (1.0f - p->smoothing) * nll + spread * smooth,
                       PORT_ROUND_RINT);
            continue;
        }
        nll_sum += nll;
        smooth_sum += smooth;
#ifdef BUG_CE_MEAN_COUNTS_IGNORED
        /* BUG: the mean's divisor takes every row's target weight, ignored rows too */
        weight_sum += ce_w(w, t < 0 ? 0 : t);
#else
        weight_sum += wt;
#endif
    }
    if (p->reduction != 0) {
        float d = p->reduction == 1 ? weight_sum : 1.0f;
        port_store(loss, loss->offset, (1.0f - p->smoothing) * (nll_sum / d) + spread * (smooth_sum / d),
                   PORT_ROUND_RINT);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_grad_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const ce_plan *p = vplan;
    const port_tensor *lp = &p->t[G_LOGPROB], *w = &p->t[G_WEIGHT], *grad = &p->t[G_GRAD], *out = &p->t[G_OUT];
    int64_t rows = lp->dims[0], classes = lp->dims[1];
    PORT_TRY(ce_check(p, G_TARGET, rows, classes));
    float ls = p->smoothing, wsum = 0.0f, d = 1.0f;
    for (int64_t c = 0; c < classes; c++)
        wsum += ce_w(w, c);
    if (p->reduction == 1) {
#ifdef BUG_CE_GRAD_MEAN_COUNTS_IGNORED
        /* BUG: the mean divides by the number of rows, as if there were no weights and no ignored rows */
        d = (float)rows;
#else
        d = 0.0f;
        for (int64_t i = 0; i < rows; i++) {
            int64_t t = ce_target(p, G_TARGET, i, classes);
            d += t < 0 ? 0.0f : ce_w(w, t);
        }
#endif
    }
    float g0 = p->reduction == 0 ? 0.0f : port_load(grad, grad->offset);
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = ce_target(p, G_TARGET, i, classes);
        float g = p->reduction == 0 ? port_load(grad, grad->offset + i * grad->strides[0]) : g0;
        float g_nll = t < 0 ? 0.0f : g * (1.0f - ls) / d * ce_w(w, t);
        float g_smooth = t < 0 ? 0.0f : g / d * ls / (float)classes;
#ifdef BUG_CE_GRAD_SMOOTH_UNWEIGHTED
        /* BUG: the smoothing term of the gradient as if every class weight were 1 */
        float a = g_nll + g_smooth * (float)classes;
#else
        float a = g_nll + g_smooth * wsum;
#endif
        for (int64_t c = 0; c < classes; c++) {
#ifdef BUG_CE_GRAD_SMOOTH_UNWEIGHTED
            float v = expf(ce_at(lp, i, c)) * a - g_smooth;
#else
            float v = expf(ce_at(lp, i, c)) * a - g_smooth * ce_w(w, c);
#endif
            if (c == t)
                v -= g_nll;
            port_store(out, out->offset + i * out->strides[0] + c * out->strides[1], v, PORT_ROUND_RINT);
        }
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus ce_shapes(const char *api, const ce_plan *p, int x, int t, int w)
{
    const port_tensor *xv = &p->t[x], *tv = &p->t[t], *wv = &p->t[w];
    char a[160];
    if (xv->ndim != 2 || xv->dims[1] <= 0) {
        xlossEmuSetErrMsg("%s: logits must be (N, C) with C > 0; got %s", api, port_shape(xv, a, sizeof a));
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    if (tv->ndim != 1 || tv->dims[0] != xv->dims[0] || (wv->present && (wv->ndim != 1 || wv->dims[0] != xv->dims[1]))) {
        xlossEmuSetErrMsg("%s: target or weight does not match the logits %s", api, port_shape(xv, a, sizeof a));
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    if (!(p->smoothing >= 0.0f && p->smoothing <= 1.0f) || p->reduction < 0) {
        xlossEmuSetErrMsg("%s: labelSmoothing or reductionOptional out of range", api);
        return ACLNN_ERR_INNER_TILING_ERROR;
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(
    const aclTensor *input, const aclTensor *target, const aclTensor *weightOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, bool returnZloss,
    const aclTensor *lossOut, const aclTensor *logProbOut, const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLossGetWorkspaceSize";
    static const char *const names[7] = {"input",      "target",   "weightOptional", "lossOut",
                                         "logProbOut", "zlossOut", "lseForZlossOut"};
    (void)lseSquareScaleForZloss;
    (void)returnZloss;
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[7] = {input, target, weightOptional, lossOut, logProbOut, zlossOut, lseForZlossOut};
    for (int k = 0; k < 7; k++)
        if (k != F_WEIGHT)
            PORT_NOT_NULL(api, tensors[k], names[k]);
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    ce_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 7; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
    PORT_TRY(port_need_float(api, "input", &p.t[F_INPUT]));
    for (int k = F_LOSS; k <= F_LSE; k++)
        PORT_TRY(port_need_dtype(api, names[k], &p.t[k], p.t[F_INPUT].dtype));
    if (p.t[F_WEIGHT].present)
        PORT_TRY(port_need_dtype(api, "weightOptional", &p.t[F_WEIGHT], ACL_FLOAT));
    if (p.t[F_TARGET].dtype != ACL_INT64 && p.t[F_TARGET].dtype != ACL_INT32) {
        xlossEmuSetErrMsg("%s: target must be INT64 or INT32", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p.reduction = ce_reduction_code(reductionOptional);
    p.ignore_index = ignoreIndex;
    p.smoothing = (float)labelSmoothing;
    PORT_TRY(ce_shapes(api, &p, F_INPUT, F_TARGET, F_WEIGHT));
    PORT_TRY(port_need_same_shape(api, "logProbOut", &p.t[F_LOGPROB], &p.t[F_INPUT]));
    int64_t n = p.t[F_INPUT].dims[0];
    int loss_ok = p.reduction == 0 ? p.t[F_LOSS].ndim == 1 && p.t[F_LOSS].dims[0] == n : port_one_element(&p.t[F_LOSS]);
    if (!loss_ok) {
        xlossEmuSetErrMsg("%s: lossOut has the wrong shape for the reduction", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return port_create_executor("aclnnCrossEntropyLoss", p.t, names, 7, &p, sizeof p, ce_forward_kernel, 0,
                                workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnCrossEntropyLoss", workspace, workspaceSize, executor, stream);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLossGradGetWorkspaceSize";
    static const char *const names[7] = {
        "gradLoss", "logProb", "target", "weightOptional", "gradZlossOptional", "lseForZlossOptional", "out"};
    (void)lseSquareScaleForZloss;
    port_phase_one_start(workspaceSize, executor);
    const aclTensor *tensors[7] = {gradLoss, logProb, target, weightOptional, gradZlossOptional, lseForZlossOptional,
                                   out};
    PORT_NOT_NULL(api, gradLoss, "gradLoss");
    PORT_NOT_NULL(api, logProb, "logProb");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    ce_plan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < 7; k++)
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
    PORT_TRY(port_need_float(api, "gradLoss", &p.t[G_GRAD]));
    PORT_TRY(port_need_dtype(api, "logProb", &p.t[G_LOGPROB], p.t[G_GRAD].dtype));
    PORT_TRY(port_need_dtype(api, "out", &p.t[G_OUT], p.t[G_GRAD].dtype));
    PORT_TRY(port_need_dtype(api, "target", &p.t[G_TARGET], ACL_INT64));
    if (p.t[G_WEIGHT].present)
        PORT_TRY(port_need_dtype(api, "weightOptional", &p.t[G_WEIGHT], ACL_FLOAT));
    p.reduction = ce_reduction_code(reductionOptional);
    p.ignore_index = ignoreIndex;
    p.smoothing = (float)labelSmoothing;
    PORT_TRY(ce_shapes(api, &p, G_LOGPROB, G_TARGET, G_WEIGHT));
    PORT_TRY(port_need_same_shape(api, "out", &p.t[G_OUT], &p.t[G_LOGPROB]));
    const port_tensor *g = &p.t[G_GRAD];
    int grad_ok = p.reduction == 0 ? g->ndim == 1 && g->dims[0] == p.t[G_LOGPROB].dims[0] : g->ndim == 0;
    if (!grad_ok) {
        xlossEmuSetErrMsg("%s: gradLoss has the wrong shape for the reduction", api);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return port_create_executor("aclnnCrossEntropyLossGrad", p.t, names, 7, &p, sizeof p, ce_grad_kernel, 0,
                                workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnCrossEntropyLossGrad", workspace, workspaceSize, executor, stream);
}
