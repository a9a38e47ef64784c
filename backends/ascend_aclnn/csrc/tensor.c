/* aclTensor objects, the phase-one operand snapshot, shape helpers and the elementwise driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_TENSOR_MAGIC 0x54454e534f523031ULL /* "TENSOR01" */

static int format_known(aclFormat f)
{
    switch (f) {
    case ACL_FORMAT_NCHW: case ACL_FORMAT_NHWC: case ACL_FORMAT_ND: case ACL_FORMAT_NC1HWC0:
    case ACL_FORMAT_FRACTAL_Z: case ACL_FORMAT_NC1HWC0_C04: case ACL_FORMAT_HWCN: case ACL_FORMAT_NDHWC:
    case ACL_FORMAT_FRACTAL_NZ: case ACL_FORMAT_NCDHW: case ACL_FORMAT_NDC1HWC0: case ACL_FRACTAL_Z_3D:
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
    if (viewDimsNum && (!viewDims || !stride))
        return create_fail(viewDims ? "stride is NULL" : "viewDims is NULL");
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
    if (offset < 0)
        return create_fail("offset is negative");

    uint64_t storage_numel = 1, view_numel = 1, last = (uint64_t)offset;
    for (uint64_t i = 0; i < storageDimsNum; i++) {
        if (storageDims[i] < 0 || emu_mul_u64(storage_numel, (uint64_t)storageDims[i], &storage_numel))
            return create_fail("storageDims negative or too large");
    }
    uint64_t storage_bytes;
    if (storage_numel > (uint64_t)INT64_MAX || emu_mul_u64(storage_numel, elsize, &storage_bytes) ||
        storage_bytes > (uint64_t)INT64_MAX)
        return create_fail("storage too large");
    for (uint64_t i = 0; i < viewDimsNum; i++) {
        if (viewDims[i] < 0)
            return create_fail("viewDims has a negative dimension");
        if (stride[i] < 0)
            return create_fail("negative strides are not supported");
        if (emu_mul_u64(view_numel, (uint64_t)viewDims[i], &view_numel))
            return create_fail("view too large");
    }
    if (view_numel) {
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
    if (!tensor) {
        emu_set_error("aclDestroyTensor: tensor is NULL");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    emu_lock();
    int removed = emu_ptrset_remove(&emu_tensors, tensor);
    emu_unlock();
    if (!removed) {
        emu_set_error("aclDestroyTensor: %p is not a live aclTensor (destroyed twice?)", (const void *)tensor);
        return ACLNN_ERR_PARAM_INVALID;
    }
    aclTensor *t = (aclTensor *)tensor;
    t->magic = 0;
    free(t);
    return ACLNN_SUCCESS;
}

aclnnStatus emu_snapshot(const char *api, const char *name, const aclTensor *t, emu_view *v)
{
    memset(v, 0, sizeof *v);
    if (!t)
        return ACLNN_SUCCESS;
    emu_lock();
    if (!emu_ptrset_has(&emu_tensors, t)) {
        emu_unlock();
        emu_set_error("%s: %s (%p) is not a live aclTensor", api, name, (const void *)t);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (t->view_ndim > EMU_MAX_DIMS) {
        int nd = (int)t->view_ndim;
        emu_unlock();
        emu_set_error("%s: %s has %d dimensions; at most %d are supported", api, name, nd, EMU_MAX_DIMS);
        return ACLNN_ERR_PARAM_INVALID;
    }
    v->present = 1;
    v->dtype = t->dtype;
    v->format = t->format;
    v->ndim = (int)t->view_ndim;
    v->offset = t->offset;
    v->elsize = emu_dtype_size(t->dtype);
    v->data = t->data;
    v->numel = 1;
    for (int i = 0; i < v->ndim; i++) {
        v->dims[i] = t->view_dims[i];
        v->strides[i] = t->strides[i];
        v->numel *= v->dims[i]; /* cannot overflow: checked at creation */
    }
    v->span_bytes = v->numel ? (uint64_t)t->storage_numel * v->elsize : 0;
    emu_unlock();

    if (!v->numel)
        return ACLNN_SUCCESS; /* an empty view touches no memory */
    if ((uintptr_t)v->data % EMU_ALIGN) {
        emu_set_error("%s: %s data %p is not %d-byte aligned device memory", api, name, (void *)v->data, EMU_ALIGN);
        return ACLNN_ERR_PARAM_INVALID;
    }
    emu_lock();
    emu_alloc *a = emu_find_alloc_locked(v->data, v->span_bytes);
    emu_unlock();
    if (!a) {
        emu_set_error("%s: %s storage (%p, %llu bytes) does not lie in live device memory (aclrtMalloc)", api, name,
                      (void *)v->data, (unsigned long long)v->span_bytes);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* ---- shapes ------------------------------------------------------------------------------------ */

int emu_same_shape(const emu_view *a, const emu_view *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

int emu_broadcasts_to(const emu_view *a, const emu_view *b)
{
    if (a->ndim > b->ndim)
        return 0;
    for (int i = 1; i <= a->ndim; i++) {
        int64_t da = a->dims[a->ndim - i], db = b->dims[b->ndim - i];
        if (da != 1 && da != db)
            return 0;
    }
    return 1;
}

int emu_one_element(const emu_view *v) { return v->ndim == 0 || (v->ndim == 1 && v->dims[0] == 1); }

const char *emu_shape_str(const emu_view *v, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)v->dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, v->ndim == 1 ? ",)" : ")");
    return buf;
}

/* ---- elementwise driver --------------------------------------------------------------------- */

#define EMU_CHUNK 256

void emu_elementwise(const emu_view *shape_of, const emu_view *const *in, int nin, const emu_view *const *out,
                     int nout, emu_ew_fn fn, void *ctx)
{
    if (shape_of->numel == 0)
        return;
    int nd = shape_of->ndim ? shape_of->ndim : 1;
    int64_t dims[EMU_MAX_DIMS];
    if (shape_of->ndim)
        memcpy(dims, shape_of->dims, sizeof(int64_t) * (size_t)nd);
    else
        dims[0] = 1;

    int nops = nin + nout;
    const emu_view *ops[EMU_MAX_OPERANDS];
    int64_t st[EMU_MAX_OPERANDS][EMU_MAX_DIMS];
    for (int k = 0; k < nops; k++) {
        const emu_view *v = k < nin ? in[k] : out[k - nin];
        ops[k] = (v && v->present) ? v : NULL;
        for (int d = 0; d < nd; d++) {
            int od = d - (nd - (ops[k] ? ops[k]->ndim : 0));
            st[k][d] = (!ops[k] || od < 0 || ops[k]->dims[od] == 1) ? 0 : ops[k]->strides[od];
        }
    }

    static _Thread_local float bufs[EMU_MAX_OPERANDS][EMU_CHUNK];
    float *inp[EMU_MAX_OPERANDS], *outp[EMU_MAX_OPERANDS];
    for (int k = 0; k < nin; k++)
        inp[k] = ops[k] ? bufs[k] : NULL;
    for (int k = 0; k < nout; k++)
        outp[k] = ops[nin + k] ? bufs[nin + k] : NULL;

    int64_t inner = dims[nd - 1], outer = shape_of->numel / inner;
    int64_t idx[EMU_MAX_DIMS] = {0};
    for (int64_t o = 0; o < outer; o++) {
        int64_t base[EMU_MAX_OPERANDS];
        for (int k = 0; k < nops; k++) {
            if (!ops[k])
                continue;
            base[k] = ops[k]->offset;
            for (int d = 0; d < nd - 1; d++)
                base[k] += idx[d] * st[k][d];
        }
        for (int64_t j0 = 0; j0 < inner; j0 += EMU_CHUNK) {
            int64_t n = inner - j0 < EMU_CHUNK ? inner - j0 : EMU_CHUNK;
            for (int k = 0; k < nin; k++)
                if (ops[k])
                    emu_gather_f32(ops[k], base[k] + j0 * st[k][nd - 1], st[k][nd - 1], n, bufs[k]);
            fn(ctx, o * inner + j0, n, inp, outp);
            for (int k = nin; k < nops; k++)
                if (ops[k])
                    emu_scatter_f32(ops[k], base[k] + j0 * st[k][nd - 1], st[k][nd - 1], n, bufs[k]);
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < dims[d])
                break;
            idx[d] = 0;
        }
    }
}
