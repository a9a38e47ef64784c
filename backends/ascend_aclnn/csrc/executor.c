/* Executors: creation at the end of phase one, the common phase two, repeatable and destroy.
 *
 * Executors live in a registry, so a stale or foreign pointer is reported rather than
 * dereferenced. A single-use executor leaves the registry when a run starts (whatever that
 * run's outcome) and is freed when it ends; a repeatable one stays until
 * aclDestroyAclOpExecutor (deferred to the end of a run in progress).
 */
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_EXECUTOR_MAGIC 0x4558454355543031ULL /* "EXECUT01" */

aclnnStatus emu_make_executor(const char *api, const aclOpExecutor *proto, uint64_t *workspaceSize,
                              aclOpExecutor **executor)
{
    aclOpExecutor *e = malloc(sizeof *e);
    if (!e) {
        emu_set_error("%s: cannot allocate the executor", api);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    *e = *proto;
    e->magic = EMU_EXECUTOR_MAGIC;
    e->api = api;
    e->repeatable = 0;
    e->busy = 0;
    e->doomed = 0;
    emu_lock();
    int rc = emu_ptrset_add(&emu_executors, e);
    emu_unlock();
    if (rc != 0) {
        free(e);
        emu_set_error("%s: cannot register the executor", api);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    *workspaceSize = proto->workspace_size;
    *executor = e;
    return ACLNN_SUCCESS;
}

static void free_executor(aclOpExecutor *e)
{
    e->magic = 0;
    free(e);
}

EMU_EXPORT aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor)
{
    if (!executor) {
        emu_set_error("aclSetAclOpExecutorRepeatable: executor is NULL");
        return ACLNN_ERR_INNER_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_executors, executor)) {
        emu_unlock();
        emu_set_error("aclSetAclOpExecutorRepeatable: %p is not a live executor (a single-use executor is "
                      "released by its run; call this right after phase one)", (void *)executor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    executor->repeatable = 1;
    emu_unlock();
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)
{
    if (!executor) {
        emu_set_error("aclDestroyAclOpExecutor: executor is NULL");
        return ACLNN_ERR_INNER_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_remove(&emu_executors, executor)) {
        emu_unlock();
        emu_set_error("aclDestroyAclOpExecutor: %p is not a live executor (already destroyed, or a single-use "
                      "executor released by its run)", (void *)executor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (executor->busy)
        executor->doomed = 1; /* the run in progress frees it */
    else
        free_executor(executor);
    emu_unlock();
    return ACLNN_SUCCESS;
}

static const char *op_api(emu_op op)
{
    switch (op) {
    case EMU_OP_FOCAL_FORWARD: return "aclnnSigmoidFocalLossGetWorkspaceSize";
    case EMU_OP_FOCAL_BACKWARD: return "aclnnSigmoidFocalLossBackwardGetWorkspaceSize";
    case EMU_OP_BCE_BACKWARD: return "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize";
    case EMU_OP_NLL_BACKWARD: return "aclnnNLLLossBackwardGetWorkspaceSize";
    case EMU_OP_FLCE_GRAD: return "aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize";
    }
    return "?";
}

/* Called with the lock held after a failed check: a single-use executor is spent anyway. */
static void spend_locked(aclOpExecutor *e)
{
    if (!e->repeatable) {
        emu_ptrset_remove(&emu_executors, e);
        if (!e->busy)
            free_executor(e);
        else
            e->doomed = 1;
    }
}

aclnnStatus emu_launch(const char *api, emu_op op, void *workspace, uint64_t workspaceSize,
                       aclOpExecutor *executor, aclrtStream stream)
{
    if (!executor) {
        emu_set_error("%s: executor is NULL", api);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_executors, executor)) {
        emu_unlock();
        emu_set_error("%s: %p is not a live executor (a single-use executor runs once; make it repeatable "
                      "with aclSetAclOpExecutorRepeatable to run it again)", api, (void *)executor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (executor->op != op) {
        emu_unlock();
        emu_set_error("%s: the executor was created by %s", api, op_api(executor->op));
        return ACLNN_ERR_PARAM_INVALID;
    }

    aclnnStatus st = ACLNN_SUCCESS;
    uint64_t need = executor->workspace_size;
    if (!emu_runtime_ready_locked()) {
        emu_set_error("%s: no runtime context in this thread (aclInit and aclrtSetDevice first)", api);
        st = ACLNN_ERR_RUNTIME_ERROR;
    } else if (stream && !emu_ptrset_has(&emu_streams, stream)) {
        emu_set_error("%s: stream %p is not a live stream", api, stream);
        st = ACLNN_ERR_RUNTIME_ERROR;
    } else if (workspaceSize < need) {
        emu_set_error("%s: workspaceSize %llu is smaller than the %llu bytes phase one asked for", api,
                      (unsigned long long)workspaceSize, (unsigned long long)need);
        st = ACLNN_ERR_PARAM_INVALID;
    } else if (need && !workspace) {
        emu_set_error("%s: workspace is NULL but %llu bytes are needed", api, (unsigned long long)need);
        st = ACLNN_ERR_PARAM_NULLPTR;
    }

    /* pin every operand's storage and the workspace so that aclrtFree cannot pull them away */
    emu_alloc *pins[EMU_MAX_OPERANDS + 1];
    int npins = 0;
    if (st == ACLNN_SUCCESS && need) {
        emu_alloc *a = ((uintptr_t)workspace % EMU_ALIGN) ? NULL : emu_find_alloc_locked(workspace, need);
        if (!a) {
            emu_set_error("%s: workspace %p..+%llu is not %d-byte aligned live device memory", api, workspace,
                          (unsigned long long)need, EMU_ALIGN);
            st = ACLNN_ERR_PARAM_INVALID;
        } else {
            emu_pin_locked(a);
            pins[npins++] = a;
        }
    }
    for (int k = 0; st == ACLNN_SUCCESS && k < executor->n; k++) {
        const emu_view *v = &executor->t[k];
        if (!v->present || !v->numel)
            continue;
        emu_alloc *a = emu_find_alloc_locked(v->data, v->span_bytes);
        if (!a) {
            emu_set_error("%s: the device memory of %s was freed after phase one", api, executor->names[k]);
            st = ACLNN_ERR_RUNTIME_ERROR;
        } else {
            emu_pin_locked(a);
            pins[npins++] = a;
        }
    }
    if (st != ACLNN_SUCCESS) {
        for (int i = 0; i < npins; i++)
            emu_unpin_locked(pins[i]);
        spend_locked(executor);
        emu_unlock();
        return st;
    }
    if (!executor->repeatable)
        emu_ptrset_remove(&emu_executors, executor); /* no second run, from any thread */
    executor->busy++;
    emu_unlock();

    st = executor->run(executor, workspace);

    emu_lock();
    for (int i = 0; i < npins; i++)
        emu_unpin_locked(pins[i]);
    executor->busy--;
    if ((!executor->repeatable || executor->doomed) && executor->busy == 0)
        free_executor(executor);
    emu_unlock();
    return st;
}
