/* aclnnBinaryCrossEntropyBackward: grad * weight * (x - y) / max(x(1-x), 1e-12), / n for mean.
 *
 * Seeded bug here: BUG_BCE_EPS_ADDED (BUG_HALF_OUTPUT_TRUNC, in port.h, reaches its output cast). */
#include "port.h"

#define BCE_EPS 1e-12f /* the vendor's fixed clamp, as PyTorch's */

enum { B_SELF, B_TARGET, B_WEIGHT, B_GRAD, B_OUT };

typedef struct {
    port_tensor t[5];
    int64_t reduction;
} bce_plan;

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
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
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
        if (p->reduction == 1)
            g = (float)((double)g / (double)n);
        port_store(&p->t[B_OUT], w.at[B_OUT], g * v, ELEMENTWISE_OUT_ROUND);
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
    return portCreateExecutor(api, PORT_OP_BINARY_CROSS_ENTROPY_BACKWARD, tensors, 5, &p, sizeof p, bce_kernel, 0,
                              workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackward(void *workspace, uint64_t workspaceSize,
                                                                aclOpExecutor *executor, aclrtStream stream)
{
    return portRunExecutor("aclnnBinaryCrossEntropyBackward", PORT_OP_BINARY_CROSS_ENTROPY_BACKWARD, workspace,
                           workspaceSize, executor, stream);
}
