/* port_rt.h over the emulator's runtime objects (the vendor side of the port ABI).
 *
 * Linked into each port library together with the emulator's runtime.c, tensor.c, executor.c and
 * cast.c (not its operators), so the runtime state, registries and executor life cycle are the
 * emulator's own. This is the only file of the ports that includes emu_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"
#include "port_rt.h"

_Static_assert((int)PORT_OP_SIGMOID_FOCAL_LOSS == (int)EMU_OP_FOCAL_FORWARD &&
                   (int)PORT_OP_SIGMOID_FOCAL_LOSS_BACKWARD == (int)EMU_OP_FOCAL_BACKWARD &&
                   (int)PORT_OP_BINARY_CROSS_ENTROPY_BACKWARD == (int)EMU_OP_BCE_BACKWARD &&
                   (int)PORT_OP_NLL_LOSS_BACKWARD == (int)EMU_OP_NLL_BACKWARD &&
                   (int)PORT_OP_FUSED_LINEAR_CROSS_ENTROPY_LOSS_GRAD == (int)EMU_OP_FLCE_GRAD,
               "port operator ids must be the runtime's");
_Static_assert(PORT_MAX_TENSORS <= EMU_MAX_OPERANDS, "the runtime executor holds at most EMU_MAX_OPERANDS");

void portSetError(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    emu_set_error("%s", buf);
}

/* ---- CANN tensor accessors ------------------------------------------------------------------ */

enum { DIMS_VIEW, DIMS_STRIDES, DIMS_STORAGE };

/* Reads under the lock, so the tensor cannot be destroyed half-way through. */
static aclnnStatus copy_dims(const char *api, const aclTensor *t, int which, int64_t **out, uint64_t *num)
{
    if (!t || !out || !num) {
        emu_set_error("%s: null pointer argument", api);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_tensors, t)) {
        emu_unlock();
        emu_set_error("%s: %p is not a live aclTensor", api, (const void *)t);
        return ACLNN_ERR_PARAM_INVALID;
    }
    uint64_t n = which == DIMS_STORAGE ? t->storage_ndim : t->view_ndim;
    const int64_t *src = which == DIMS_VIEW ? t->view_dims : which == DIMS_STRIDES ? t->strides : t->storage_dims;
    int64_t *dst = malloc((n ? n : 1) * sizeof *dst); /* never malloc(0): NULL means failure */
    if (dst && n)
        memcpy(dst, src, n * sizeof *dst);
    emu_unlock();
    if (!dst) {
        emu_set_error("%s: out of memory", api);
        return ACLNN_ERR_INNER;
    }
    *out = dst;
    *num = n;
    return ACLNN_SUCCESS;
}

/* Reads one scalar field of a live tensor into *dst (size bytes). */
static aclnnStatus read_field(const char *api, const aclTensor *t, void *dst, const void *(*field)(const aclTensor *),
                              size_t size)
{
    if (!t || !dst) {
        emu_set_error("%s: null pointer argument", api);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_tensors, t)) {
        emu_unlock();
        emu_set_error("%s: %p is not a live aclTensor", api, (const void *)t);
        return ACLNN_ERR_PARAM_INVALID;
    }
    memcpy(dst, field(t), size);
    emu_unlock();
    return ACLNN_SUCCESS;
}

static const void *f_offset(const aclTensor *t) { return &t->offset; }
static const void *f_format(const aclTensor *t) { return &t->format; }
static const void *f_dtype(const aclTensor *t) { return &t->dtype; }
static const void *f_data(const aclTensor *t) { return &t->data; }

EMU_EXPORT aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum)
{
    return copy_dims("aclGetViewShape", tensor, DIMS_VIEW, viewDims, viewDimsNum);
}

EMU_EXPORT aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue, uint64_t *stridesNum)
{
    return copy_dims("aclGetViewStrides", tensor, DIMS_STRIDES, stridesValue, stridesNum);
}

EMU_EXPORT aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims, uint64_t *storageDimsNum)
{
    return copy_dims("aclGetStorageShape", tensor, DIMS_STORAGE, storageDims, storageDimsNum);
}

EMU_EXPORT aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset)
{
    return read_field("aclGetViewOffset", tensor, offset, f_offset, sizeof *offset);
}

EMU_EXPORT aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format)
{
    return read_field("aclGetFormat", tensor, format, f_format, sizeof *format);
}

EMU_EXPORT aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType)
{
    return read_field("aclGetDataType", tensor, dataType, f_dtype, sizeof *dataType);
}

EMU_EXPORT aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr)
{
    return read_field("aclGetRawTensorAddr", tensor, addr, f_data, sizeof *addr);
}

/* ---- executors -------------------------------------------------------------------------------- */

/* The runtime's executor with the port's plan behind it. `base` comes first: executor.c frees the
 * whole block through the aclOpExecutor pointer, so the plan must live inside it, not beside it. */
typedef struct {
    struct aclOpExecutor base;
    portKernel kernel;
    _Alignas(16) unsigned char plan[PORT_PLAN_MAX];
} port_executor;

static const char *const operand_names[PORT_MAX_TENSORS] = {
    "operand 0", "operand 1", "operand 2", "operand 3", "operand 4",  "operand 5",
    "operand 6", "operand 7", "operand 8", "operand 9", "operand 10", "operand 11"};

static aclnnStatus run_port_kernel(aclOpExecutor *ex, char *workspace)
{
    port_executor *pe = (port_executor *)ex; /* base is the first member */
    return pe->kernel(pe->plan, workspace, pe->base.workspace_size);
}

aclnnStatus portCreateExecutor(const char *api, portOpKind op, const aclTensor *const *tensors, int ntensors,
                               const void *plan, size_t planSize, portKernel kernel, uint64_t workspaceSize,
                               uint64_t *workspaceSizeOut, aclOpExecutor **executor)
{
    if (!workspaceSizeOut || !executor || !kernel || (planSize && !plan) || (ntensors && !tensors)) {
        emu_set_error("%s: null pointer passed to the executor interface", api);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    *workspaceSizeOut = 0;
    *executor = NULL;
    if (ntensors < 0 || ntensors > PORT_MAX_TENSORS || planSize > PORT_PLAN_MAX) {
        emu_set_error("%s: an executor holds at most %d tensors and %d bytes of plan", api, PORT_MAX_TENSORS,
                      PORT_PLAN_MAX);
        return ACLNN_ERR_INNER;
    }
    port_executor *pe = calloc(1, sizeof *pe);
    if (!pe) {
        emu_set_error("%s: cannot allocate the executor", api);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    for (int k = 0; k < ntensors; k++) {
        pe->base.names[k] = operand_names[k];
        aclnnStatus st = emu_snapshot(api, operand_names[k], tensors[k], &pe->base.t[k]);
        if (st != ACLNN_SUCCESS) {
            free(pe);
            return st;
        }
    }
    pe->base.n = ntensors;
    pe->base.op = (emu_op)op;
    pe->base.api = api;
    pe->base.workspace_size = workspaceSize;
    pe->base.run = run_port_kernel;
    pe->kernel = kernel;
    if (planSize)
        memcpy(pe->plan, plan, planSize);
    emu_lock();
    int rc = emu_ptrset_add(&emu_executors, &pe->base);
    emu_unlock();
    if (rc != 0) {
        free(pe);
        emu_set_error("%s: cannot register the executor", api);
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    }
    *workspaceSizeOut = workspaceSize;
    *executor = &pe->base;
    return ACLNN_SUCCESS;
}

aclnnStatus portRunExecutor(const char *api, portOpKind op, void *workspace, uint64_t workspaceSize,
                            aclOpExecutor *executor, aclrtStream stream)
{
    return emu_launch(api, (emu_op)op, workspace, workspaceSize, executor, stream);
}
