/* aclnnBinaryCrossEntropyBackward: grad * weight * (x - y) / max(x(1-x), 1e-12), / n for mean.
 *
 * Seeded bugs here: BUG_BCE_EPS_ADDED, BUG_BCE_MEAN_COUNT_24BIT (above 2^24 elements), BUG_BCE_CONTIGUOUS_FAST_PATH (a stride/offset bug: only
 * strided tensors show it); BUG_HALF_OUTPUT_TRUNC, in port.h, reaches its output cast. */
#include "port.h"

#define BCE_EPS 1e-12f /* the vendor's fixed clamp, as PyTorch's */

enum { B_SELF, B_TARGET, B_WEIGHT, B_GRAD, B_OUT };

typedef struct {
    port_tensor t[5];
    int64_t reduction;
} bce_plan;

#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
static int same_dims(const port_tensor *a, const port_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}
#endif

static aclnnStatus bce_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const bce_plan *p = vplan;
    const port_tensor *x = &p->t[B_SELF];
    const port_tensor *ops[5] = {x, &p->t[B_TARGET], &p->t[B_WEIGHT], &p->t[B_GRAD], &p->t[B_OUT]};
    port_walk w;
    port_walk_init(&w, x, ops, 5);
    int64_t n = x->numel;
#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
    /* BUG: a fast path for the common call, where target and out have self's shape: the three are
     * indexed as contiguous runs from their view offsets. Right for compact tensors (all xloss check
     * passes by default); wrong for any other stride. */
    int fast = same_dims(&p->t[B_TARGET], x) && same_dims(&p->t[B_OUT], x);
#endif
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
        if (fast) {
            w.at[B_SELF] = x->offset + i;
            w.at[B_TARGET] = p->t[B_TARGET].offset + i;
            w.at[B_OUT] = p->t[B_OUT].offset + i;
        }
#endif
        float xv = port_load(x, w.at[B_SELF]), yv = port_load(&p->t[B_TARGET], w.at[B_TARGET]);
#ifdef BUG_BCE_EPS_ADDED
        /* BUG: the epsilon is added (the FT78NE manual's form) where the op declares a clamp. */
        float denom = xv * (1.0f - xv) + BCE_EPS;
#else
        float denom = fmaxf(xv * (1.0f - xv), BCE_EPS);
#endif
        float v = (xv - yv) / denom;
        if (p->t[B_WEIGHT].present)
            v *= port_load(&p->t[B_WEIGHT], w.at[B_WEIGHT]);
        float g = port_load(&p->t[B_GRAD], w.at[B_GRAD]);
        /* mean: (g / n) * value in float, as the vector unit computes (g / n may underflow: allowed) */
#ifdef BUG_BCE_MEAN_COUNT_24BIT
        /* BUG: the tiling hands the kernel the element count in a 24-bit field: above 2^24 elements
         * the mean divides by the count modulo 2^24. */
        float scale = p->reduction == 1 ? (float)(n & 0xFFFFFF) : 1.0f;
#else
        float scale = p->reduction == 1 ? (float)n : 1.0f;
#endif
        port_store(&p->t[B_OUT], w.at[B_OUT], g / scale * v, ELEMENTWISE_OUT_ROUND);
    }
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize";
    static const char *const names[5] = {"self", "target", "weightOptional", "gradOutput", "out"};
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, gradOutput, "gradOutput");
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    bce_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[5] = {self, target, weightOptional, gradOutput, out};
    for (int k = 0; k < 5; k++) {
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
        PORT_TRY(port_need_float(api, names[k], &p.t[k]));
    }
    PORT_TRY(port_need_broadcast(api, "target", &p.t[B_TARGET], &p.t[B_SELF]));
    PORT_TRY(port_need_broadcast(api, "weightOptional", &p.t[B_WEIGHT], &p.t[B_SELF]));
    PORT_TRY(port_need_broadcast(api, "gradOutput", &p.t[B_GRAD], &p.t[B_SELF]));
    PORT_TRY(port_need_same_shape(api, "out", &p.t[B_OUT], &p.t[B_SELF]));
    PORT_TRY(port_need_reduction(api, reduction));
    p.reduction = reduction;
    return port_create_executor("aclnnBinaryCrossEntropyBackward", p.t, names, 5, &p, sizeof p, bce_kernel, 0,
                                workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackward(void *workspace, uint64_t workspaceSize,
                                                                aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnBinaryCrossEntropyBackward", workspace, workspaceSize, executor, stream);
}
