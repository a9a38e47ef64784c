/* The port's operand descriptors, checks, conversions and broadcast walker. */
#include <stdio.h>
#include <stdlib.h>

#include "port.h"

#ifdef HOSTILE_CTOR_ABORT
/* HOSTILE: the library aborts as it is loaded */
__attribute__((constructor)) static void port_hostile_constructor(void) { abort(); }
#endif

static int plain_format(aclFormat f)
{
    return f == ACL_FORMAT_ND || f == ACL_FORMAT_NCHW || f == ACL_FORMAT_NHWC || f == ACL_FORMAT_NCDHW ||
           f == ACL_FORMAT_NDHWC || f == ACL_FORMAT_HWCN;
}

aclnnStatus port_describe(const char *api, const char *name, const aclTensor *t, port_tensor *d)
{
    memset(d, 0, sizeof *d);
    if (!t)
        return ACLNN_SUCCESS; /* an absent optional operand */
    int64_t *dims = NULL, *strides = NULL, *storage = NULL;
    uint64_t nd = 0, ns = 0, nstorage = 0;
    aclFormat fmt = ACL_FORMAT_ND;
    void *addr = NULL;
    aclnnStatus st = aclGetViewShape(t, &dims, &nd);
    if (st == ACLNN_SUCCESS)
        st = aclGetViewStrides(t, &strides, &ns);
    if (st == ACLNN_SUCCESS)
        st = aclGetStorageShape(t, &storage, &nstorage);
    if (st == ACLNN_SUCCESS)
        st = aclGetViewOffset(t, &d->offset);
    if (st == ACLNN_SUCCESS)
        st = aclGetDataType(t, &d->dtype);
    if (st == ACLNN_SUCCESS)
        st = aclGetFormat(t, &fmt);
    if (st == ACLNN_SUCCESS)
        st = aclGetRawTensorAddr(t, &addr);
    if (st != ACLNN_SUCCESS) {
        xlossEmuSetErrMsg("%s: %s is not a valid aclTensor", api, name);
    } else if (nd > PORT_MAX_DIMS || ns != nd) {
        xlossEmuSetErrMsg("%s: %s has %llu dimensions; at most %d are supported", api, name, (unsigned long long)nd,
                          PORT_MAX_DIMS);
        st = ACLNN_ERR_PARAM_INVALID;
    } else if (!plain_format(fmt)) {
        xlossEmuSetErrMsg("%s: %s has format %d; only ND-like formats are supported", api, name, (int)fmt);
        st = ACLNN_ERR_PARAM_INVALID;
    } else {
        d->present = 1;
        d->ndim = (int)nd;
        d->numel = 1;
        for (int i = 0; i < d->ndim; i++) {
            d->dims[i] = dims[i];
            d->strides[i] = strides[i];
            d->numel *= dims[i]; /* the runtime bounded the view at aclCreateTensor */
        }
        d->storage_numel = 1;
        for (uint64_t i = 0; i < nstorage; i++)
            d->storage_numel *= storage[i];
        d->base = addr;
    }
    free(dims);
    free(strides);
    free(storage);
    return st;
}

aclnnStatus port_create_executor(const char *opName, const port_tensor *operands, const char *const *names, int n,
                                 const void *plan, size_t planSize, xlossEmuKernel kernel, uint64_t workspaceSize,
                                 uint64_t *workspaceSizeOut, aclOpExecutor **executor)
{
    xlossEmuTensorDesc descs[XLOSS_EMU_MAX_OPERANDS];
    uint64_t k = 0;
    for (int i = 0; i < n && k < XLOSS_EMU_MAX_OPERANDS; i++) {
        const port_tensor *t = &operands[i];
        if (!t->present)
            continue;
        xlossEmuTensorDesc *d = &descs[k++];
        memset(d, 0, sizeof *d);
        d->dataType = t->dtype;
        d->format = ACL_FORMAT_ND;
        d->viewDimsNum = (uint64_t)t->ndim;
        memcpy(d->viewDims, t->dims, sizeof(int64_t) * (size_t)t->ndim);
        memcpy(d->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
        d->offset = t->offset;
        d->numel = t->numel;
        d->storageNumel = t->storage_numel;
        d->data = t->base;
        d->name = names[i];
    }
    return xlossEmuCreateExecutor(opName, descs, k, plan, planSize, kernel, workspaceSize, workspaceSizeOut, executor);
}

const char *port_dtype_name(aclDataType dt)
{
    switch (dt) {
    case ACL_FLOAT:
        return "FLOAT";
    case ACL_FLOAT16:
        return "FLOAT16";
    case ACL_BF16:
        return "BF16";
    case ACL_DOUBLE:
        return "DOUBLE";
    case ACL_INT64:
        return "INT64";
    case ACL_INT32:
        return "INT32";
    case ACL_UINT8:
        return "UINT8";
    case ACL_BOOL:
        return "BOOL";
    default:
        return "another dtype";
    }
}

const char *port_shape(const port_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, t->ndim == 1 ? ",)" : ")");
    return buf;
}

int port_is_float(aclDataType dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16; }

aclnnStatus port_need_float(const char *api, const char *name, const port_tensor *t)
{
    if (t->present && !port_is_float(t->dtype)) {
        xlossEmuSetErrMsg("%s: %s has dtype %s; expected FLOAT, FLOAT16 or BF16", api, name, port_dtype_name(t->dtype));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus port_need_dtype(const char *api, const char *name, const port_tensor *t, aclDataType dt)
{
    if (t->present && t->dtype != dt) {
        xlossEmuSetErrMsg("%s: %s has dtype %s; expected %s", api, name, port_dtype_name(t->dtype),
                          port_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus port_need_broadcast(const char *api, const char *name, const port_tensor *t, const port_tensor *to)
{
    if (!t->present)
        return ACLNN_SUCCESS;
    int ok = t->ndim <= to->ndim;
    for (int i = 1; ok && i <= t->ndim; i++) {
        int64_t a = t->dims[t->ndim - i], b = to->dims[to->ndim - i];
        ok = a == 1 || a == b;
    }
    if (!ok) {
        char s1[160], s2[160];
        xlossEmuSetErrMsg("%s: %s of shape %s does not broadcast to %s", api, name, port_shape(t, s1, sizeof s1),
                          port_shape(to, s2, sizeof s2));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus port_need_same_shape(const char *api, const char *name, const port_tensor *t, const port_tensor *as)
{
    int ok = t->ndim == as->ndim;
    for (int i = 0; ok && i < t->ndim; i++)
        ok = t->dims[i] == as->dims[i];
    if (!ok) {
        char s1[160], s2[160];
        xlossEmuSetErrMsg("%s: %s has shape %s; expected %s", api, name, port_shape(t, s1, sizeof s1),
                          port_shape(as, s2, sizeof s2));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus port_need_reduction(const char *api, int64_t reduction)
{
    if (reduction < 0 || reduction > 2) {
        xlossEmuSetErrMsg("%s: reduction %lld is not 0 (none), 1 (mean) or 2 (sum)", api, (long long)reduction);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

int port_one_element(const port_tensor *t) { return t->ndim == 0 || (t->ndim == 1 && t->dims[0] == 1); }

aclnnStatus port_need_loss_out(const char *api, const port_tensor *out, const port_tensor *self, int64_t reduction)
{
    if (reduction == 0)
        return port_need_same_shape(api, "out", out, self);
    if (!port_one_element(out)) {
        char s[160];
        xlossEmuSetErrMsg("%s: out must have shape () or (1,) for reduction %lld; got %s", api, (long long)reduction,
                          port_shape(out, s, sizeof s));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

uint64_t port_tile_workspace(int64_t numel, int64_t tile, int64_t reduction)
{
    return reduction != 0 ? port_align32((uint64_t)((numel + tile - 1) / tile) * sizeof(float)) : 0;
}

uint64_t port_align32(uint64_t bytes) { return (bytes + 31u) & ~(uint64_t)31u; }

/* ---- 16-bit conversions --------------------------------------------------------------------- */

float port_half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24); /* zero and subnormals, exactly */
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

uint16_t port_float_to_half(float f, port_round mode)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    int e = (int)(a >> 23) - 127;
    if (e > 15) /* beyond the largest binade: RINT overflows, TRUNC saturates */
        return (uint16_t)(sign | (mode == PORT_ROUND_TRUNC ? 0x7bffu : 0x7c00u));
    if (e < -25) /* below half the smallest subnormal (float32 subnormals included) */
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u; /* value = m * 2^(e-23) */
    int shift = e >= -14 ? 13 : -(e + 1);     /* bits of m that do not fit: 13, or 14..24 */
    uint32_t r = e >= -14 ? ((uint32_t)(e + 15) << 10) | ((m >> 13) & 0x3ffu) : m >> shift;
    uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (mode == PORT_ROUND_RINT && (rest > half || (rest == half && (r & 1u))))
        r++; /* a carry moves into the exponent, up to infinity: what RINT wants */
    return (uint16_t)(sign | r);
}

float port_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t port_float_to_bf16(float f, port_round mode)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* stays a quiet NaN whatever the payload */
    uint32_t r = u >> 16, rest = u & 0xffffu;
    if (mode == PORT_ROUND_RINT && (rest > 0x8000u || (rest == 0x8000u && (r & 1u))))
        r++;
    return (uint16_t)r;
}

float port_load(const port_tensor *t, int64_t at)
{
    const char *p = t->base;
    switch (t->dtype) {
    case ACL_FLOAT: {
        float v;
        memcpy(&v, p + at * 4, 4);
        return v;
    }
    case ACL_FLOAT16: {
        uint16_t h;
        memcpy(&h, p + at * 2, 2);
        return port_half_to_float(h);
    }
    case ACL_BF16: {
        uint16_t h;
        memcpy(&h, p + at * 2, 2);
        return port_bf16_to_float(h);
    }
    default:
        return NAN; /* phase one admits float operands only */
    }
}

void port_store(const port_tensor *t, int64_t at, float v, port_round mode)
{
    char *p = t->base;
    uint16_t h;
    switch (t->dtype) {
    case ACL_FLOAT:
        memcpy(p + at * 4, &v, 4);
        break;
    case ACL_FLOAT16:
        h = port_float_to_half(v, mode);
        memcpy(p + at * 2, &h, 2);
        break;
    case ACL_BF16:
        h = port_float_to_bf16(v, mode);
        memcpy(p + at * 2, &h, 2);
        break;
    default:
        break;
    }
}

float port_round_to(aclDataType dt, float v)
{
    if (dt == ACL_FLOAT16)
        return port_half_to_float(port_float_to_half(v, PORT_ROUND_RINT));
    if (dt == ACL_BF16)
        return port_bf16_to_float(port_float_to_bf16(v, PORT_ROUND_RINT));
    return v;
}

int64_t port_load_int(const port_tensor *t, int64_t at)
{
    const char *p = t->base;
    switch (t->dtype) {
    case ACL_INT64: {
        int64_t v;
        memcpy(&v, p + at * 8, 8);
        return v;
    }
    case ACL_INT32: {
        int32_t v;
        memcpy(&v, p + at * 4, 4);
        return v;
    }
    case ACL_UINT8:
        return (uint8_t)p[at];
    case ACL_BOOL:
        return p[at] != 0;
    default:
        return 0;
    }
}

int64_t port_element_at(const port_tensor *t, int64_t k)
{
    int64_t at = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        at += (k % t->dims[d]) * t->strides[d];
        k /= t->dims[d];
    }
    return at;
}

/* ---- broadcast walker ----------------------------------------------------------------------- */

void port_walk_init(port_walk *w, const port_tensor *shape, const port_tensor *const *ops, int n)
{
    memset(w, 0, sizeof *w);
    w->ndim = shape->ndim;
    w->n = n;
    memcpy(w->dims, shape->dims, sizeof w->dims);
    for (int k = 0; k < n; k++) {
        const port_tensor *t = ops[k];
        if (!t || !t->present)
            continue;
        w->at[k] = t->offset;
        for (int d = 0; d < w->ndim; d++) {
            int od = d - (w->ndim - t->ndim); /* right-aligned */
            w->step[k][d] = (od < 0 || t->dims[od] == 1) ? 0 : t->strides[od];
        }
    }
}

void port_walk_next(port_walk *w)
{
    for (int d = w->ndim - 1; d >= 0; d--) {
        w->idx[d]++;
        for (int k = 0; k < w->n; k++)
            w->at[k] += w->step[k][d];
        if (w->idx[d] < w->dims[d])
            return;
        for (int k = 0; k < w->n; k++)
            w->at[k] -= w->step[k][d] * w->dims[d];
        w->idx[d] = 0;
    }
}
