/* Executors: the emulator's executor interface (xlossEmuCreateExecutor at the end of phase one,
 * xlossEmuRunExecutor as phase two), aclSetAclOpExecutorRepeatable and aclDestroyAclOpExecutor.
 *
 * Executors live in a registry, so a stale or foreign pointer is reported rather than
 * dereferenced. A single-use executor leaves the registry when a run starts (whatever that
 * run's outcome) and is freed when it ends; a repeatable one stays until
 * aclDestroyAclOpExecutor (deferred to the end of a run in progress).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_EXECUTOR_MAGIC 0x4558454355543032ULL /* "EXECUT02" */

static void copy_name(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n > XLOSS_EMU_MAX_NAME)
        n = XLOSS_EMU_MAX_NAME;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Checks one operand descriptor as a kernel will use it; fills *m (the memory to pin). */
static aclnnStatus check_operand(const char *op, uint64_t k, const xlossEmuTensorDesc *d, emu_operand_mem *m)
{
    char who[XLOSS_EMU_MAX_NAME + 1];
    if (d->name)
        copy_name(who, d->name);
    else
        snprintf(who, sizeof who, "operand %llu", (unsigned long long)k);
    memcpy(m->name, who, sizeof who);
    m->data = NULL;
    m->span_bytes = 0;

    size_t elsize = emu_dtype_size(d->dataType);
    if (!elsize) {
        emu_set_error("%s: %s has data type %s (%d), which has no element size", op, who, emu_dtype_name(d->dataType),
                      (int)d->dataType);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (d->viewDimsNum > XLOSS_EMU_MAX_DIMS) {
        emu_set_error("%s: %s has %llu dimensions; at most %d are supported", op, who,
                      (unsigned long long)d->viewDimsNum, XLOSS_EMU_MAX_DIMS);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (d->offset < 0 || d->storageNumel < 0) {
        emu_set_error("%s: %s has a negative offset or storage size", op, who);
        return ACLNN_ERR_PARAM_INVALID;
    }
    uint64_t numel = 1, last = (uint64_t)d->offset;
    int empty = 0;
    for (uint64_t i = 0; i < d->viewDimsNum; i++) {
        if (d->viewDims[i] < 0 || d->strides[i] < 0) {
            emu_set_error("%s: %s has a negative dimension or stride", op, who);
            return ACLNN_ERR_PARAM_INVALID;
        }
        empty |= d->viewDims[i] == 0;
    }
    for (uint64_t i = 0; i < d->viewDimsNum && !empty; i++) {
        if (emu_mul_u64(numel, (uint64_t)d->viewDims[i], &numel) || numel > (uint64_t)INT64_MAX) {
            emu_set_error("%s: %s has more elements than int64 counts", op, who);
            return ACLNN_ERR_PARAM_INVALID;
        }
    }
    if (empty)
        numel = 0;
    if (numel != (uint64_t)d->numel) {
        emu_set_error("%s: %s says numel %lld, but its dims hold %llu elements", op, who, (long long)d->numel,
                      (unsigned long long)numel);
        return ACLNN_ERR_PARAM_INVALID;
    }
    uint64_t span;
    if (emu_mul_u64((uint64_t)d->storageNumel, elsize, &span) || span > (uint64_t)INT64_MAX) {
        emu_set_error("%s: %s storage of %lld elements is too large", op, who, (long long)d->storageNumel);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!numel)
        return ACLNN_SUCCESS; /* an empty view touches no memory */
    for (uint64_t i = 0; i < d->viewDimsNum; i++) {
        uint64_t reach;
        if (emu_mul_u64((uint64_t)(d->viewDims[i] - 1), (uint64_t)d->strides[i], &reach) ||
            emu_add_u64(last, reach, &last)) {
            last = UINT64_MAX;
            break;
        }
    }
    if (last >= (uint64_t)d->storageNumel) {
        emu_set_error("%s: %s reaches element %llu of a storage of %lld elements", op, who, (unsigned long long)last,
                      (long long)d->storageNumel);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if ((uintptr_t)d->data % EMU_ALIGN) {
        emu_set_error("%s: %s data %p is not %d-byte aligned device memory", op, who, d->data, EMU_ALIGN);
        return ACLNN_ERR_PARAM_INVALID;
    }
    emu_lock();
    emu_alloc *a = emu_find_alloc_locked(d->data, span);
    emu_unlock();
    if (!a) {
        emu_set_error("%s: %s storage (%p, %llu bytes) does not lie in live device memory (aclrtMalloc)", op, who,
                      d->data, (unsigned long long)span);
        return ACLNN_ERR_PARAM_INVALID;
    }
    m->data = d->data;
    m->span_bytes = span;
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus xlossEmuCreateExecutor(const char *opName, const xlossEmuTensorDesc *operands,
                                              uint64_t operandNum, const void *plan, uint64_t planSize,
                                              xlossEmuKernel kernel, uint64_t workspaceSize, uint64_t *workspaceSizeOut,
                                              aclOpExecutor **executor)
{
    if (workspaceSizeOut)
        *workspaceSizeOut = 0;
    if (executor)
        *executor = NULL;
    const char *op = opName ? opName : "xlossEmuCreateExecutor";
    if (!opName || !kernel || !workspaceSizeOut || !executor || (operandNum && !operands) || (planSize && !plan)) {
        emu_set_error("%s: xlossEmuCreateExecutor got a null pointer (%s)", op,
                      !opName             ? "opName"
                      : !kernel           ? "kernel"
                      : !workspaceSizeOut ? "workspaceSizeOut"
                      : !executor         ? "executor"
                      : !plan && planSize ? "plan"
                                          : "operands");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (operandNum > XLOSS_EMU_MAX_OPERANDS || planSize > XLOSS_EMU_MAX_PLAN) {
        emu_set_error("%s: an executor holds at most %d operands and %d bytes of plan (got %llu and %llu)", op,
                      XLOSS_EMU_MAX_OPERANDS, XLOSS_EMU_MAX_PLAN, (unsigned long long)operandNum,
                      (unsigned long long)planSize);
        return ACLNN_ERR_PARAM_INVALID;
    }
    emu_operand_mem mem[XLOSS_EMU_MAX_OPERANDS];
    for (uint64_t k = 0; k < operandNum; k++) {
        aclnnStatus st = check_operand(op, k, &operands[k], &mem[k]);
        if (st != ACLNN_SUCCESS)
            return st;
    }
    aclOpExecutor *e = malloc(sizeof *e + (size_t)planSize);
    if (!e) {
        emu_set_error("%s: cannot allocate the executor", op);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    memset(e, 0, sizeof *e);
    e->magic = EMU_EXECUTOR_MAGIC;
    copy_name(e->op, opName);
    e->workspace_size = workspaceSize;
    e->n = (int)operandNum;
    if (operandNum)
        memcpy(e->mem, mem, (size_t)operandNum * sizeof *mem);
    e->kernel = kernel;
    e->plan_size = planSize;
    if (planSize)
        memcpy(e->plan, plan, (size_t)planSize);
    emu_lock();
    int rc = emu_ptrset_add(&emu_executors, e);
    emu_unlock();
    if (rc != 0) {
        free(e);
        emu_set_error("%s: cannot register the executor", op);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    *workspaceSizeOut = workspaceSize;
    *executor = e;
    return ACLNN_SUCCESS;
}

/* Called with the lock held. */
static void free_executor(aclOpExecutor *e)
{
    e->magic = 0;
    emu_retire_locked(e);
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
                      "released by its run; call this right after phase one)",
                      (void *)executor);
        return ACLNN_ERR_INNER; /* opbase acl_op_api.cpp: no executor magic number -> ACLNN_ERR_INNER */
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
                      "executor released by its run)",
                      (void *)executor);
        return ACLNN_ERR_INNER; /* opbase acl_op_api.cpp: no executor magic number -> ACLNN_ERR_INNER */
    }
    if (executor->busy)
        executor->doomed = 1; /* the run in progress frees it */
    else
        free_executor(executor);
    emu_unlock();
    return ACLNN_SUCCESS;
}

/* aclFinalize (lock held): every executor, repeatable or not, is released; one in a run is freed
 * when that run ends. A later phase two with it finds no live executor, as CANN's does. */
void emu_release_executors_locked(void)
{
    for (size_t i = 0; i < emu_executors.cap; i++) {
        aclOpExecutor *e;
        while ((e = emu_executors.slots[i]) != NULL) { /* a removal may shift another entry into slot i */
            emu_ptrset_remove(&emu_executors, e);
            if (e->busy)
                e->doomed = 1;
            else
                free_executor(e);
        }
    }
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

EMU_EXPORT aclnnStatus xlossEmuRunExecutor(const char *opName, void *workspace, uint64_t workspaceSize,
                                           aclOpExecutor *executor, aclrtStream stream)
{
    const char *api = opName ? opName : "xlossEmuRunExecutor";
    if (!opName || !executor) {
        emu_set_error("%s: %s is NULL", api, !opName ? "opName" : "executor");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_executors, executor)) {
        emu_unlock();
        emu_set_error("%s: %p is not a live executor (a single-use executor runs once; make it repeatable "
                      "with aclSetAclOpExecutorRepeatable to run it again)",
                      api, (void *)executor);
        return ACLNN_ERR_INNER; /* CANN's phase two reports an executor it does not know as 561000 */
    }
    if (strncmp(executor->op, opName, XLOSS_EMU_MAX_NAME) != 0) {
        char other[XLOSS_EMU_MAX_NAME + 1];
        memcpy(other, executor->op, sizeof other);
        emu_unlock();
        emu_set_error("%s: the executor was created by %sGetWorkspaceSize", api, other);
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
    emu_alloc *pins[XLOSS_EMU_MAX_OPERANDS + 1];
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
        /* the kernel scribbles over its workspace: it must not share memory with an operand */
        uintptr_t wlo = (uintptr_t)workspace, whi = wlo + need;
        for (int k = 0; st == ACLNN_SUCCESS && k < executor->n; k++) {
            const emu_operand_mem *m = &executor->mem[k];
            uintptr_t lo = (uintptr_t)m->data, hi = lo + m->span_bytes;
            if (m->span_bytes && lo < whi && wlo < hi) {
                emu_set_error("%s: the workspace overlaps the device memory of %s", api, m->name);
                st = ACLNN_ERR_PARAM_INVALID;
            }
        }
    }
    for (int k = 0; st == ACLNN_SUCCESS && k < executor->n; k++) {
        const emu_operand_mem *m = &executor->mem[k];
        if (!m->span_bytes)
            continue;
        emu_alloc *a = emu_find_alloc_locked(m->data, m->span_bytes);
        if (!a) {
            emu_set_error("%s: the device memory of %s was freed after phase one", api, m->name);
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

    /* the kernel sees exactly the region phase one asked for and this call validated */
    st = executor->kernel(executor->plan, need ? workspace : NULL, need);

    emu_lock();
    for (int i = 0; i < npins; i++)
        emu_unpin_locked(pins[i]);
    executor->busy--;
    if ((!executor->repeatable || executor->doomed) && executor->busy == 0)
        free_executor(executor);
    emu_unlock();
    return st;
}
