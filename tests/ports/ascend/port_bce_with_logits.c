/* aclnnBinaryCrossEntropyWithLogits and aclnnBinaryCrossEntropyWithLogitsBackward, as a port author writes
 * them from CANN's pages: loss = w ((1-y) x + lw softplus(-x)) with lw = 1 + (pw - 1) y, reduced by tiles
 * of pairwise float sums; gradient = g w ((1-y) sigmoid(x) - pw y sigmoid(-x)), over n for a mean.
 *
 * Seeded bugs here (built by build.py's BCE_WITH_LOGITS_VARIANTS): BUG_BCEL_NAIVE_SOFTPLUS (the forward's
 * log(1 + exp(-x)) taken literally: exp overflows below x = -88), BUG_BCEL_POS_WEIGHT_NEGATIVE (pos_weight
 * on the negative term, both operators), BUG_BCEL_HALF_ACCUMULATE (the forward's sum kept in the output's
 * 16-bit dtype), BUG_BCEL_MEAN_BY_ROWS (the backward's mean divides by the leading dimension). */
#include "port.h"

#define BCEL_TILE 4096

enum { L_SELF, L_TARGET, L_WEIGHT, L_POS_WEIGHT, L_GRAD, L_OUT };

typedef struct {
    port_tensor t[6];
    int64_t reduction;
} bcel_plan;

static const char *const operand_names[6] = {"self",       "target", "weightOptional", "posWeightOptional",
                                             "gradOutput", "out"};

static float at_or_one(const bcel_plan *p, const port_walk *w, int k)
{
    return p->t[k].present ? port_load(&p->t[k], w->at[k]) : 1.0f;
}

/* the pos_weight factors of the positive and negative terms */
static void bcel_weights(float y, float pw, float *pos, float *neg)
{
#ifdef BUG_BCEL_POS_WEIGHT_NEGATIVE
    /* BUG: pos_weight multiplies the negative (1 - y) term instead of the positive one. */
    *pos = y;
    *neg = (1.0f - y) * pw;
#else
    *pos = pw * y;
    *neg = 1.0f - y;
#endif
}

static float bcel_loss(float x, float y, float pw)
{
    float pos, neg;
    bcel_weights(y, pw, &pos, &neg);
#ifdef BUG_BCEL_NAIVE_SOFTPLUS
    /* BUG: -log(sigmoid(x)) = log(1 + exp(-x)) and -log(1 - sigmoid(x)) = x + log(1 + exp(-x)) as written:
     * exp(-x) overflows to inf for x < -88 (and x + inf for the other term). */
    float sp = logf(1.0f + expf(-x));
    return pos * sp + neg * (x + sp);
#else
    float tail = log1pf(expf(-fabsf(x)));           /* softplus(-|x|) */
    float sp_neg = (x < 0.0f ? -x : 0.0f) + tail;    /* softplus(-x) = -log(sigmoid(x)) */
    float sp_pos = (x > 0.0f ? x : 0.0f) + tail;     /* softplus(x) = -log(1 - sigmoid(x)) */
    return pos * sp_neg + neg * sp_pos;
#endif
}

static float bcel_grad(float x, float y, float pw)
{
    float pos, neg;
    bcel_weights(y, pw, &pos, &neg);
    float e = expf(-fabsf(x)), big = 1.0f / (1.0f + e), small = e * big;
    float p = x >= 0.0f ? big : small, s = x >= 0.0f ? small : big;
    return neg * p - pos * s;
}

static aclnnStatus bcel_forward_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    const bcel_plan *p = vplan;
    const port_tensor *x = &p->t[L_SELF], *out = &p->t[L_OUT];
    const port_tensor *ops[6] = {
        x, &p->t[L_TARGET], &p->t[L_WEIGHT], &p->t[L_POS_WEIGHT], NULL, p->reduction == 0 ? out : NULL};
    port_walk w;
    port_walk_init(&w, x, ops, 6);
    int64_t n = x->numel, tiles = (n + BCEL_TILE - 1) / BCEL_TILE;
    float *partial = workspace;
    if (p->reduction != 0 && (uint64_t)tiles * sizeof(float) > workspaceSize)
        return ACLNN_ERR_INNER;
    port_pairwise tile = {0};
#ifdef BUG_BCEL_HALF_ACCUMULATE
    float running = 0.0f;
#endif
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
        float xv = port_load(x, w.at[L_SELF]), yv = port_load(&p->t[L_TARGET], w.at[L_TARGET]);
        float loss = bcel_loss(xv, yv, at_or_one(p, &w, L_POS_WEIGHT)) * at_or_one(p, &w, L_WEIGHT);
        if (p->reduction == 0) {
            port_store(out, w.at[L_OUT], loss, ELEMENTWISE_OUT_ROUND);
            continue;
        }
#ifdef BUG_BCEL_HALF_ACCUMULATE
        /* BUG: the running sum is kept in the output's dtype (a 16-bit accumulator for FLOAT16/BF16). */
        running = port_round_to(out->dtype, running + loss);
        (void)tile;
        (void)partial;
#else
        port_pairwise_add(&tile, loss);
        if (i % BCEL_TILE == BCEL_TILE - 1 || i == n - 1) {
            partial[i / BCEL_TILE] = port_pairwise_sum(&tile);
            tile = (port_pairwise){0};
        }
#endif
    }
    if (p->reduction == 0)
        return ACLNN_SUCCESS;
#ifdef BUG_BCEL_HALF_ACCUMULATE
    float total = running;
#else
    for (int64_t stride = 1; stride < tiles; stride *= 2) /* the tiles' sums added as a tree */
        for (int64_t t = 0; t + stride < tiles; t += 2 * stride)
            partial[t] += partial[t + stride];
    float total = tiles ? partial[0] : 0.0f;
#endif
    if (p->reduction == 1)
        total /= (float)n; /* 0/0: the mean of nothing is NaN, as CANN */
    for (int64_t k = 0; k < out->numel; k++)
        port_store(out, port_element_at(out, k), total, ELEMENTWISE_OUT_ROUND);
    return ACLNN_SUCCESS;
}

static aclnnStatus bcel_backward_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const bcel_plan *p = vplan;
    const port_tensor *x = &p->t[L_SELF];
    const port_tensor *ops[6] = {x, &p->t[L_TARGET], &p->t[L_WEIGHT], &p->t[L_POS_WEIGHT], &p->t[L_GRAD], &p->t[L_OUT]};
    port_walk w;
    port_walk_init(&w, x, ops, 6);
    int64_t n = x->numel;
#ifdef BUG_BCEL_MEAN_BY_ROWS
    /* BUG: the mean divides by the batch (the leading dimension), as a per-row loss would. */
    float count = x->ndim ? (float)x->dims[0] : 1.0f;
#else
    float count = (float)n;
#endif
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
        float xv = port_load(x, w.at[L_SELF]), yv = port_load(&p->t[L_TARGET], w.at[L_TARGET]);
        float v = bcel_grad(xv, yv, at_or_one(p, &w, L_POS_WEIGHT)) * at_or_one(p, &w, L_WEIGHT);
        float g = port_load(&p->t[L_GRAD], w.at[L_GRAD]);
        float scale = p->reduction == 1 ? g / count : g; /* in float, as the vector unit computes */
        port_store(&p->t[L_OUT], w.at[L_OUT], scale * v, ELEMENTWISE_OUT_ROUND);
    }
    return ACLNN_SUCCESS;
}

static aclnnStatus describe(const char *api, bcel_plan *p, const aclTensor *const *tensors)
{
    for (int k = 0; k < 6; k++) {
        PORT_TRY(port_describe(api, operand_names[k], tensors[k], &p->t[k]));
        PORT_TRY(port_need_float(api, operand_names[k], &p->t[k]));
    }
    PORT_TRY(port_need_dtype(api, "out", &p->t[L_OUT], p->t[L_TARGET].dtype));
    PORT_TRY(port_need_same_shape(api, "target", &p->t[L_TARGET], &p->t[L_SELF]));
    if (p->t[L_SELF].numel) {
        PORT_TRY(port_need_broadcast(api, "weightOptional", &p->t[L_WEIGHT], &p->t[L_SELF]));
        PORT_TRY(port_need_broadcast(api, "posWeightOptional", &p->t[L_POS_WEIGHT], &p->t[L_SELF]));
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional, const aclTensor *posWeightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize";
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    bcel_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[6] = {self, target, weightOptional, posWeightOptional, NULL, out};
    PORT_TRY(describe(api, &p, tensors));
    PORT_TRY(port_need_reduction(api, reduction));
    if (reduction == 0 || p.t[L_SELF].numel) /* an empty self's mean/sum fills out whatever its shape */
        PORT_TRY(port_need_loss_out(api, &p.t[L_OUT], &p.t[L_SELF], reduction));
    p.reduction = reduction;
    uint64_t ws = port_tile_workspace(p.t[L_SELF].numel, BCEL_TILE, reduction);
    return port_create_executor("aclnnBinaryCrossEntropyWithLogits", p.t, operand_names, 6, &p, sizeof p,
                                bcel_forward_kernel, ws, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogits(void *workspace, uint64_t workspaceSize,
                                                                  aclOpExecutor *executor, const aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnBinaryCrossEntropyWithLogits", workspace, workspaceSize, executor, stream);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *posWeightOptional, int64_t reduction, aclTensor *out, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize";
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, gradOutput, "gradOutput");
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    bcel_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[6] = {self, target, weightOptional, posWeightOptional, gradOutput, out};
    PORT_TRY(describe(api, &p, tensors));
    if (p.t[L_SELF].numel) {
        PORT_TRY(port_need_broadcast(api, "gradOutput", &p.t[L_GRAD], &p.t[L_SELF]));
        PORT_TRY(port_need_same_shape(api, "out", &p.t[L_OUT], &p.t[L_SELF]));
    }
    PORT_TRY(port_need_reduction(api, reduction));
    p.reduction = reduction;
    return port_create_executor("aclnnBinaryCrossEntropyWithLogitsBackward", p.t, operand_names, 6, &p, sizeof p,
                                bcel_backward_kernel, 0, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyWithLogitsBackward(void *workspace, uint64_t workspaceSize,
                                                                          aclOpExecutor *executor,
                                                                          const aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnBinaryCrossEntropyWithLogitsBackward", workspace, workspaceSize, executor, stream);
}
