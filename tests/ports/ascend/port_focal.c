/* aclnnXlossSigmoidFocalLoss and aclnnXlossSigmoidFocalLossBackward (float32 math, any mix of float dtypes).
 *
 * Seeded bugs here: BUG_FOCAL_MEAN_PADDED_COUNT (forward mean), BUG_FOCAL_GRAD_GAMMA_SIGN
 * (backward, 0 < gamma < 1), BUG_FOCAL_WEIGHT_TILED (both), BUG_FOCAL_GRAD_SCRATCH_IN_SELF (backward,
 * writes into its input); BUG_HALF_OUTPUT_TRUNC (port.h) reaches
 * both output casts. PORT_FOCAL_DRIVINGSDK leaves this file out: the variant exports DrivingSDK's focal
 * ABI instead (port_focal_drivingsdk.c). */
#include "port.h"

#ifndef PORT_FOCAL_DRIVINGSDK

/* Elements one core reduces per pass: the forward reduction keeps one float64 partial per tile. */
#define FOCAL_TILE 2048

enum { F_SELF, F_TARGET, F_WEIGHT, F_GRAD, F_OUT };
static const char *const operand_names[5] = {"self", "target", "weightOptional", "gradOutput", "out"};

typedef struct {
    port_tensor t[5]; /* indexed by the enum above; F_GRAD absent in the forward plan */
    float gamma, alpha;
    int64_t reduction;
} focal_plan;

static float class_weight(float y, float alpha)
{
    return alpha < 0.0f ? 1.0f : alpha * y + (1.0f - alpha) * (1.0f - y);
}

static float weight_at(const focal_plan *p, const port_walk *w, int64_t flat)
{
    const port_tensor *wt = &p->t[F_WEIGHT];
    if (!wt->present)
        return 1.0f;
#ifdef BUG_FOCAL_WEIGHT_TILED
    /* BUG: the weight is taken as repeating over the flattened input - right for per-class weights
     * (C,) or (1, C), wrong for per-anchor weights (N, 1), whose values repeat along the last dim. */
    return port_load(wt, port_element_at(wt, flat % wt->numel));
#else
    (void)flat;
    return port_load(wt, w->at[F_WEIGHT]);
#endif
}

/* ---- kernels ---------------------------------------------------------------------------------- */

static aclnnStatus focal_forward_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    const focal_plan *p = vplan;
    const port_tensor *x = &p->t[F_SELF], *out = &p->t[F_OUT];
    const port_tensor *ops[5] = {x, &p->t[F_TARGET], &p->t[F_WEIGHT], NULL, p->reduction == 0 ? out : NULL};
    port_walk w;
    port_walk_init(&w, x, ops, 5); /* walk slots follow the enum: w.at[F_OUT] is out's element */
    int64_t n = x->numel, tiles = (n + FOCAL_TILE - 1) / FOCAL_TILE;
    float *partial = workspace; /* one float sum per tile, pairwise within it */
    if (p->reduction != 0 && (uint64_t)tiles * sizeof(float) > workspaceSize)
        return ACLNN_ERR_INNER; /* phase one sized it; never write past it */
    port_pairwise tile = {0};

    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
        float xv = port_load(x, w.at[F_SELF]), yv = port_load(&p->t[F_TARGET], w.at[F_TARGET]);
        focal_parts f = focal_split(xv, yv);
        float loss = class_weight(yv, p->alpha) * weight_at(p, &w, i) * f.ce * powf(f.q, p->gamma);
        if (p->reduction == 0)
            port_store(out, w.at[F_OUT], loss, ELEMENTWISE_OUT_ROUND);
        else
            port_pairwise_add(&tile, loss);
        if (p->reduction != 0 && (i % FOCAL_TILE == FOCAL_TILE - 1 || i == n - 1)) {
            partial[i / FOCAL_TILE] = port_pairwise_sum(&tile);
            tile = (port_pairwise){0};
        }
    }
    if (p->reduction == 0)
        return ACLNN_SUCCESS;
    for (int64_t stride = 1; stride < tiles; stride *= 2) /* the tiles' sums added as a tree */
        for (int64_t t = 0; t + stride < tiles; t += 2 * stride)
            partial[t] += partial[t + stride];
    float total = tiles ? partial[0] : 0.0f;
    if (p->reduction == 1) {
#ifdef BUG_FOCAL_MEAN_PADDED_COUNT
        /* BUG: the mean divides by the elements the tiles cover (the padded count), not by n. */
        total /= (float)(tiles * FOCAL_TILE);
#else
        total /= (float)n; /* 0/0: the mean of nothing is NaN, as torch */
#endif
    }
    port_store(out, out->offset, total, ELEMENTWISE_OUT_ROUND);
    return ACLNN_SUCCESS;
}

#ifndef PORT_OMIT_FOCAL_BACKWARD
static aclnnStatus focal_backward_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const focal_plan *p = vplan;
    const port_tensor *x = &p->t[F_SELF];
    const port_tensor *ops[5] = {x, &p->t[F_TARGET], &p->t[F_WEIGHT], &p->t[F_GRAD], &p->t[F_OUT]};
    port_walk w;
    port_walk_init(&w, x, ops, 5);
    int64_t n = x->numel;
    float gamma = p->gamma;
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
        float xv = port_load(x, w.at[F_SELF]), yv = port_load(&p->t[F_TARGET], w.at[F_TARGET]);
        focal_parts f = focal_split(xv, yv);
        float qg = powf(f.q, gamma);
        float pmy = f.p * (1.0f - yv) - f.s * yv; /* p - y as a difference of non-negative parts */
        float mod;                                 /* d(q^gamma)/dx * ce */
        if (gamma >= 1.0f) {
            mod = gamma * powf(f.q, gamma - 1.0f) * (f.p * f.s) * (1.0f - 2.0f * yv) * f.ce;
        } else if (gamma > 0.0f) {
            /* q^(gamma-1) blows up as q -> 0: use q^gamma * (p(1-p)/q), whose limit at q = 0 is 1 */
            float r = f.q > 0.0f ? fminf(1.0f, (f.p * f.s) / f.q) : 1.0f;
#ifdef BUG_FOCAL_GRAD_GAMMA_SIGN
            /* BUG: the sign of (1 - 2y) slipped when this branch was rewritten for gamma < 1. */
            mod = gamma * qg * r * (2.0f * yv - 1.0f) * f.ce;
#else
            mod = gamma * qg * r * (1.0f - 2.0f * yv) * f.ce;
#endif
        } else {
            mod = 0.0f;
        }
        float dx = class_weight(yv, p->alpha) * weight_at(p, &w, i) * (pmy * qg + mod);
        float g = port_load(&p->t[F_GRAD], w.at[F_GRAD]);
        /* mean: g * (1 / n) in float, as the vector unit computes (it may underflow: allowed) */
        float scale = p->reduction == 1 ? 1.0f / (float)n : 1.0f;
        port_store(&p->t[F_OUT], w.at[F_OUT], g * scale * dx, ELEMENTWISE_OUT_ROUND);
#ifdef BUG_FOCAL_GRAD_SCRATCH_IN_SELF
        /* BUG: the sigmoid is parked in self's buffer as scratch (to save on-chip memory for a second
         * pass that was later removed): the results are right, the caller's input is not. */
        port_store(x, w.at[F_SELF], f.p, PORT_ROUND_RINT);
#endif
    }
    return ACLNN_SUCCESS;
}
#endif

/* ---- phase one -------------------------------------------------------------------------------- */

static aclnnStatus check_operands(const char *api, focal_plan *p, double gamma, double alpha, int64_t reduction)
{
    for (int k = 0; k < 5; k++)
        PORT_TRY(port_need_float(api, operand_names[k], &p->t[k]));
    PORT_TRY(port_need_broadcast(api, "target", &p->t[F_TARGET], &p->t[F_SELF]));
    PORT_TRY(port_need_broadcast(api, "weightOptional", &p->t[F_WEIGHT], &p->t[F_SELF]));
    PORT_TRY(port_need_broadcast(api, "gradOutput", &p->t[F_GRAD], &p->t[F_SELF]));
    PORT_TRY(port_need_reduction(api, reduction));
    if (!isfinite(gamma) || gamma < 0.0) {
        xlossEmuSetErrMsg("%s: gamma must be finite and >= 0; got %g", api, gamma);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!isfinite(alpha) || alpha > 1.0) {
        xlossEmuSetErrMsg("%s: alpha must be at most 1 (negative disables it) and finite; got %g", api, alpha);
        return ACLNN_ERR_PARAM_INVALID;
    }
    p->gamma = (float)gamma;
    p->alpha = (float)alpha;
    p->reduction = reduction;
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, double gamma, double alpha,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnXlossSigmoidFocalLossGetWorkspaceSize";
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    focal_plan p;
    memset(&p, 0, sizeof p);
    PORT_TRY(port_describe(api, "self", self, &p.t[F_SELF]));
    PORT_TRY(port_describe(api, "target", target, &p.t[F_TARGET]));
    PORT_TRY(port_describe(api, "weightOptional", weightOptional, &p.t[F_WEIGHT]));
    PORT_TRY(port_describe(api, "out", out, &p.t[F_OUT]));
    PORT_TRY(check_operands(api, &p, gamma, alpha, reduction));
    PORT_TRY(port_need_loss_out(api, &p.t[F_OUT], &p.t[F_SELF], reduction));
    uint64_t ws = port_tile_workspace(p.t[F_SELF].numel, FOCAL_TILE, reduction);
    return port_create_executor("aclnnXlossSigmoidFocalLoss", p.t, operand_names, 5, &p, sizeof p, focal_forward_kernel,
                                ws, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLoss(void *workspace, uint64_t workspaceSize,
                                                           aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnXlossSigmoidFocalLoss", workspace, workspaceSize, executor, stream);
}

#ifndef PORT_OMIT_FOCAL_BACKWARD
ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    double gamma, double alpha, int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize";
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, gradOutput, "gradOutput");
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    focal_plan p;
    memset(&p, 0, sizeof p);
    PORT_TRY(port_describe(api, "gradOutput", gradOutput, &p.t[F_GRAD]));
    PORT_TRY(port_describe(api, "self", self, &p.t[F_SELF]));
    PORT_TRY(port_describe(api, "target", target, &p.t[F_TARGET]));
    PORT_TRY(port_describe(api, "weightOptional", weightOptional, &p.t[F_WEIGHT]));
    PORT_TRY(port_describe(api, "out", out, &p.t[F_OUT]));
    PORT_TRY(check_operands(api, &p, gamma, alpha, reduction));
    PORT_TRY(port_need_same_shape(api, "out", &p.t[F_OUT], &p.t[F_SELF]));
    return port_create_executor("aclnnXlossSigmoidFocalLossBackward", p.t, operand_names, 5, &p, sizeof p,
                                focal_backward_kernel, 0, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnXlossSigmoidFocalLossBackward(void *workspace, uint64_t workspaceSize,
                                                                   aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnXlossSigmoidFocalLossBackward", workspace, workspaceSize, executor, stream);
}
#endif
#endif /* PORT_FOCAL_DRIVINGSDK */
