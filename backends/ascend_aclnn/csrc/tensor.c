/* aclTensor objects: creation and destruction, CANN's public accessors, and the emulator's
 * one-read description of a tensor (xlossEmuDescribeTensor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_TENSOR_MAGIC 0x54454e534f523031ULL /* "TENSOR01" */

static int format_known(aclFormat f)
{
    switch (f) {
    case ACL_FORMAT_NCHW:
    case ACL_FORMAT_NHWC:
    case ACL_FORMAT_ND:
    case ACL_FORMAT_NC1HWC0:
    case ACL_FORMAT_FRACTAL_Z:
    case ACL_FORMAT_NC1HWC0_C04:
    case ACL_FORMAT_HWCN:
    case ACL_FORMAT_NDHWC:
    case ACL_FORMAT_FRACTAL_NZ:
    case ACL_FORMAT_NCDHW:
    case ACL_FORMAT_NDC1HWC0:
    case ACL_FRACTAL_Z_3D:
    case ACL_FORMAT_NC:
    case ACL_FORMAT_NCL:
        return 1;
    default:
        return 0;
    }
}

static aclTensor *create_fail(const char *why)
{
    emu_set_error("aclCreateTensor: %s", why);
    return NULL;
}

EMU_EXPORT aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                      const int64_t *stride, int64_t offset, aclFormat format,
                                      const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)
{
    char why[160];
    if (viewDimsNum > EMU_CREATE_MAX_DIMS || storageDimsNum > EMU_CREATE_MAX_DIMS)
        return create_fail("too many dimensions");
    if (viewDimsNum && !viewDims)
        return create_fail("viewDims is NULL");
    if (storageDimsNum && !storageDims)
        return create_fail("storageDims is NULL");
    size_t elsize = emu_dtype_size(dataType);
    if (!elsize) {
        snprintf(why, sizeof why, "data type %s (%d) has no element size", emu_dtype_name(dataType), (int)dataType);
        return create_fail(why);
    }
    if (!format_known(format)) {
        snprintf(why, sizeof why, "unknown format %d", (int)format);
        return create_fail(why);
    }
    uint64_t storage_numel = 1, view_numel = 1, last = (uint64_t)offset;
    for (uint64_t i = 0; i < storageDimsNum; i++) {
        if (storageDims[i] < 0 || emu_mul_u64(storage_numel, (uint64_t)storageDims[i], &storage_numel))
            return create_fail("storageDims negative or too large");
    }
    uint64_t storage_bytes;
    if (storage_numel > (uint64_t)INT64_MAX || emu_mul_u64(storage_numel, elsize, &storage_bytes) ||
        storage_bytes > (uint64_t)INT64_MAX)
        return create_fail("storage too large");
    int empty = 0;
    /* stride NULL: the contiguous strides of the view, as CANN's aclTensor constructor
     * (op::ToContiguousStrides) does */
    int64_t contiguous[EMU_CREATE_MAX_DIMS];
    if (!stride && viewDimsNum) {
        int64_t acc = 1;
        for (uint64_t i = viewDimsNum; i-- > 0;) {
            contiguous[i] = acc; /* the plain product of the later dims: a zero dim zeroes the earlier strides */
            if (viewDims[i] > 1 && acc > INT64_MAX / viewDims[i])
                return create_fail("view too large: its contiguous strides overflow int64");
            acc *= viewDims[i] > 0 ? viewDims[i] : 1;
            if (viewDims[i] == 0)
                acc = 0;
        }
        stride = contiguous;
    }
    /* negative strides and offsets are accepted, as CANN's aclTensor constructor does; such a view
     * is not checked against its storage here, and every operator refuses it in phase one */
    int signed_view = offset < 0;
    for (uint64_t i = 0; i < viewDimsNum; i++) {
        if (viewDims[i] < 0)
            return create_fail("viewDims has a negative dimension");
        signed_view |= stride[i] < 0;
        empty |= viewDims[i] == 0;
    }
    /* the element count is the mathematical product: any zero dim makes it 0, whatever the others */
    for (uint64_t i = 0; i < viewDimsNum && !empty; i++) {
        if (emu_mul_u64(view_numel, (uint64_t)viewDims[i], &view_numel) || view_numel > (uint64_t)INT64_MAX)
            return create_fail("view too large: its element count overflows int64");
    }
    if (empty)
        view_numel = 0;
    if (view_numel && !signed_view) {
        /* the largest element index the view reaches must lie inside the storage */
        for (uint64_t i = 0; i < viewDimsNum; i++) {
            uint64_t reach;
            if (emu_mul_u64((uint64_t)(viewDims[i] - 1), (uint64_t)stride[i], &reach) ||
                emu_add_u64(last, reach, &last))
                return create_fail("view reaches beyond any storage");
        }
        if (last >= storage_numel) {
            snprintf(why, sizeof why, "the view reaches element %llu but the storage holds %llu elements",
                     (unsigned long long)last, (unsigned long long)storage_numel);
            return create_fail(why);
        }
    }
    if (storage_numel && !tensorData)
        return create_fail("tensorData is NULL for a non-empty storage");

    size_t arrays = (size_t)(2 * viewDimsNum + storageDimsNum) * sizeof(int64_t);
    aclTensor *t = malloc(sizeof *t + arrays);
    if (!t)
        return create_fail("out of memory");
    t->magic = EMU_TENSOR_MAGIC;
    t->dtype = dataType;
    t->format = format;
    t->view_ndim = viewDimsNum;
    t->storage_ndim = storageDimsNum;
    t->view_dims = (int64_t *)(t + 1);
    t->strides = t->view_dims + viewDimsNum;
    t->storage_dims = t->strides + viewDimsNum;
    if (viewDimsNum) {
        memcpy(t->view_dims, viewDims, viewDimsNum * sizeof(int64_t));
        memcpy(t->strides, stride, viewDimsNum * sizeof(int64_t));
    }
    if (storageDimsNum)
        memcpy(t->storage_dims, storageDims, storageDimsNum * sizeof(int64_t));
    t->offset = offset;
    t->view_numel = (int64_t)view_numel;
    t->storage_numel = (int64_t)storage_numel;
    t->data = tensorData;

    emu_lock();
    int rc = emu_ptrset_add(&emu_tensors, t);
    emu_unlock();
    if (rc != 0) {
        free(t);
        return create_fail("out of memory");
    }
    return t;
}

EMU_EXPORT aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (!tensor) /* nothing to destroy: success, as CANN's aclDestroyTensor */
        return ACLNN_SUCCESS;
    emu_lock();
    int removed = emu_ptrset_remove(&emu_tensors, tensor);
    if (removed) {
        aclTensor *t = (aclTensor *)tensor;
        t->magic = 0;
        emu_retire_locked(t);
    }
    emu_unlock();
    if (!removed) {
        emu_set_error("aclDestroyTensor: %p is not a live aclTensor (destroyed twice?)", (const void *)tensor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* ---- CANN's accessors ----------------------------------------------------------------------- */

enum { DIMS_VIEW, DIMS_STRIDES, DIMS_STORAGE };

/* A live tensor under the lock, or an error status (the lock is then not held). */
static aclnnStatus lock_live(const char *api, const aclTensor *t)
{
    emu_lock();
    if (!emu_ptrset_has(&emu_tensors, t)) {
        emu_unlock();
        emu_set_error("%s: %p is not a live aclTensor", api, (const void *)t);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* Copies one of the tensor's arrays into a new malloc'd one; outputs untouched on error. */
static aclnnStatus copy_dims(const char *api, const aclTensor *t, int which, int64_t **out, uint64_t *num)
{
    if (!t || !out || !num) {
        emu_set_error("%s: %s is NULL", api, !t ? "tensor" : !out ? "the array pointer" : "the count pointer");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    aclnnStatus st = lock_live(api, t);
    if (st != ACLNN_SUCCESS)
        return st;
    uint64_t n = which == DIMS_STORAGE ? t->storage_ndim : t->view_ndim;
    const int64_t *src = which == DIMS_VIEW ? t->view_dims : which == DIMS_STRIDES ? t->strides : t->storage_dims;
    int64_t *dst = malloc((n ? n : 1) * sizeof *dst); /* never malloc(0): the caller frees a real block */
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

#define SCALAR_GETTER(fn, type, arg, field)                               \
    EMU_EXPORT aclnnStatus fn(const aclTensor *tensor, type *arg)         \
    {                                                                     \
        if (!tensor || !arg) {                                            \
            emu_set_error(#fn ": %s is NULL", !tensor ? "tensor" : #arg); \
            return ACLNN_ERR_PARAM_NULLPTR;                               \
        }                                                                 \
        aclnnStatus st = lock_live(#fn, tensor);                          \
        if (st == ACLNN_SUCCESS) {                                        \
            *arg = tensor->field;                                         \
            emu_unlock();                                                 \
        }                                                                 \
        return st;                                                        \
    }

SCALAR_GETTER(aclGetViewOffset, int64_t, offset, offset)
SCALAR_GETTER(aclGetDataType, aclDataType, dataType, dtype)
SCALAR_GETTER(aclGetFormat, aclFormat, format, format)
SCALAR_GETTER(aclGetRawTensorAddr, void *, addr, data)

/* ---- the emulator's description ------------------------------------------------------------- */

EMU_EXPORT aclnnStatus xlossEmuDescribeTensor(const aclTensor *tensor, const char *name, xlossEmuTensorDesc *desc)
{
    const char *who = name ? name : "tensor";
    if (!tensor || !desc) {
        emu_set_error("xlossEmuDescribeTensor: %s is NULL", !tensor ? who : "desc");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    if (!emu_ptrset_has(&emu_tensors, tensor)) {
        emu_unlock();
        emu_set_error("%s (%p) is not a live aclTensor", who, (const void *)tensor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (tensor->view_ndim > XLOSS_EMU_MAX_DIMS) {
        int nd = (int)tensor->view_ndim;
        emu_unlock();
        emu_set_error("%s has %d dimensions; at most %d are supported", who, nd, XLOSS_EMU_MAX_DIMS);
        return ACLNN_ERR_PARAM_INVALID;
    }
    xlossEmuTensorDesc d;
    memset(&d, 0, sizeof d);
    d.dataType = tensor->dtype;
    d.format = tensor->format;
    d.viewDimsNum = tensor->view_ndim;
    if (d.viewDimsNum) {
        memcpy(d.viewDims, tensor->view_dims, d.viewDimsNum * sizeof(int64_t));
        memcpy(d.strides, tensor->strides, d.viewDimsNum * sizeof(int64_t));
    }
    d.offset = tensor->offset;
    d.numel = tensor->view_numel;
    d.storageNumel = tensor->storage_numel;
    d.data = tensor->data;
    d.name = name;
    emu_unlock();
    *desc = d;
    return ACLNN_SUCCESS;
}
