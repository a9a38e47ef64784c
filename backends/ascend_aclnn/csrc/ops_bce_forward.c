/* aclnnBinaryCrossEntropy: out = -weight * (target log(self) + (1 - target) log(1 - self)), each log clamped
 * at -100 as PyTorch's, reduced (1: mean over the elements, 2: sum). The checks follow the vendor's page
 * (ops-nn loss/binary_cross_entropy/docs/aclnnBinaryCrossEntropy.md): self, target and out required (161001),
 * weight optional (NULL: every weight 1); target, weight and out in self's dtype (FLOAT, FLOAT16, BF16) and
 * self's shape (out: one element for reductions 1 and 2); self of 1 to 8 dims. Each element in double,
 * rounded once; a reduction adds one double partial sum per EMU_REDUCE_BLOCK elements (the workspace). */
#include <math.h>

#include "ops_common.h"

enum { BCEF_SELF, BCEF_TARGET, BCEF_WEIGHT, BCEF_OUT };

typedef struct {
    double *partial; /* NULL: reduction 0, each loss stored */
} bce_forward_ctx;

static inline double clamped_log(double v) { return fmax(log(v), -100.0); } /* fmax: NaN in, NaN out (below) */

static void bce_forward_chunk(void *vctx, int64_t flat, int64_t n, float *const *in, float *const *out)
{
    const bce_forward_ctx *c = vctx;
    const float *x = in[0], *y = in[1], *w = in[2];
    for (int64_t i = 0; i < n; i++) {
        double xv = x[i], yv = y[i];
        double lx = isnan(xv) ? xv : clamped_log(xv), l1 = isnan(xv) ? xv : fmax(log1p(-xv), -100.0);
        double loss = -(yv * lx + (1.0 - yv) * l1) * (w ? (double)w[i] : 1.0);
        if (c->partial)
            c->partial[(flat + i) / EMU_REDUCE_BLOCK] += loss;
        else
            out[0][i] = (float)loss;
    }
}

static aclnnStatus bce_forward_run(const emu_plan *ex, char *ws, uint64_t ws_size)
{
    const emu_view *self = &ex->t[BCEF_SELF], *out = &ex->t[BCEF_OUT];
    const emu_view *in[3] = {self, &ex->t[BCEF_TARGET], &ex->t[BCEF_WEIGHT]};
    bce_forward_ctx c = {NULL};
    if (ex->reduction == EMU_REDUCTION_NONE) {
        const emu_view *outs[1] = {out};
        emu_elementwise(self, in, 3, outs, 1, bce_forward_chunk, &c);
        return ACLNN_SUCCESS;
    }
    double total;
    EMU_CHECK(emu_elementwise_sum(self, in, 3, ex->reduction, bce_forward_chunk, &c, &c.partial, ws, ws_size, &total));
    emu_store_f64(out, out->offset, total);
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropyGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                               const aclTensor *weight, int64_t reduction,
                                                               aclTensor *out, uint64_t *workspaceSize,
                                                               aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyGetWorkspaceSize";
    emu_plan ex;
    char a[160];
    emu_phase_one_start(&ex, api, "aclnnBinaryCrossEntropy", workspaceSize, executor);
    EMU_REQUIRE(api, self, "self");
    EMU_REQUIRE(api, target, "target");
    EMU_REQUIRE(api, out, "out");
    EMU_REQUIRE(api, workspaceSize, "workspaceSize");
    EMU_REQUIRE(api, executor, "executor");
    EMU_CHECK(emu_operand(&ex, BCEF_SELF, "self", self));
    EMU_CHECK(emu_operand(&ex, BCEF_TARGET, "target", target));
    EMU_CHECK(emu_operand(&ex, BCEF_WEIGHT, "weight", weight));
    EMU_CHECK(emu_operand(&ex, BCEF_OUT, "out", out));
    ex.reduction = reduction;
    EMU_CHECK(emu_need_float(&ex, BCEF_SELF));
    static const int same[] = {BCEF_TARGET, BCEF_WEIGHT, BCEF_OUT};
    for (int i = 0; i < 3; i++)
        EMU_CHECK(emu_need_dtype(&ex, same[i], ex.t[BCEF_SELF].dtype));
    EMU_CHECK(emu_need_reduction(&ex, reduction));
    const emu_view *s = &ex.t[BCEF_SELF], *o = &ex.t[BCEF_OUT];
    if (s->ndim < 1 || s->ndim > 8) {
        emu_set_error("%s: self must have 1 to 8 dims; got shape %s", api, emu_shape_str(s, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    EMU_CHECK(emu_need_same_shape(&ex, BCEF_TARGET, BCEF_SELF));
    EMU_CHECK(emu_need_same_shape(&ex, BCEF_WEIGHT, BCEF_SELF));
    if (reduction == EMU_REDUCTION_NONE) {
        EMU_CHECK(emu_need_same_shape(&ex, BCEF_OUT, BCEF_SELF));
    } else if (!(o->ndim <= 1 && o->numel == 1)) {
        emu_set_error("%s: out must have shape (1,) for reduction %lld; got %s", api, (long long)reduction,
                      emu_shape_str(o, a, sizeof a));
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (reduction != EMU_REDUCTION_NONE) /* one double partial sum per block of EMU_REDUCE_BLOCK elements */
        ex.workspace_size = emu_reduce_workspace(s->numel);
    ex.run = bce_forward_run;
    return emu_make_executor(&ex, workspaceSize, executor);
}

EMU_EXPORT aclnnStatus aclnnBinaryCrossEntropy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                               aclrtStream stream)
{
    return emu_launch("aclnnBinaryCrossEntropy", workspace, workspaceSize, executor, stream);
}
