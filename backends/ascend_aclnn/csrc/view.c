/* The operators' plumbing: describing operands, making and running executors through the runtime's
 * executor interface, strided element access, shape helpers and the elementwise driver. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_common.h"

/* Formats without a private (fractal / C0-blocked) layout: the kernels treat them as ND. */
static int plain_format(aclFormat f)
{
    return f == ACL_FORMAT_ND || f == ACL_FORMAT_NCHW || f == ACL_FORMAT_NHWC || f == ACL_FORMAT_NCDHW ||
           f == ACL_FORMAT_NDHWC || f == ACL_FORMAT_HWCN || f == ACL_FORMAT_NC || f == ACL_FORMAT_NCL;
}

void emu_phase_one_start(emu_plan *p, const char *api, const char *op, uint64_t *workspaceSize,
                         aclOpExecutor **executor)
{
    memset(p, 0, sizeof *p);
    p->api = api;
    p->op = op;
    if (workspaceSize)
        *workspaceSize = 0;
    if (executor)
        *executor = NULL;
}

aclnnStatus emu_operand(emu_plan *p, int k, const char *name, const aclTensor *t)
{
    p->names[k] = name;
    if (k + 1 > p->n)
        p->n = k + 1;
    emu_view *v = &p->t[k];
    memset(v, 0, sizeof *v);
    if (!t)
        return ACLNN_SUCCESS; /* an absent optional operand */
    xlossEmuTensorDesc d;
    aclnnStatus st = xlossEmuDescribeTensor(t, name, &d);
    if (st != ACLNN_SUCCESS) {
        /* keep the runtime's reason, say which call it was */
        const char *why = aclGetRecentErrMsg();
        char buf[512];
        snprintf(buf, sizeof buf, "%s", why ? why : "cannot describe the tensor");
        emu_set_error("%s: %s", p->api, buf);
        return st;
    }
    if (!plain_format(d.format)) {
        emu_set_error("%s: %s has format %d; only ND-like formats (ND, NCHW, NHWC, NCDHW, NDHWC, HWCN, NC, NCL) are "
                      "supported",
                      p->api, name, (int)d.format);
        return ACLNN_ERR_PARAM_INVALID;
    }
    v->present = 1;
    v->dtype = d.dataType;
    v->format = d.format;
    v->ndim = (int)d.viewDimsNum; /* <= EMU_MAX_DIMS: the runtime refuses more */
    memcpy(v->dims, d.viewDims, sizeof v->dims);
    memcpy(v->strides, d.strides, sizeof v->strides);
    v->offset = d.offset;
    v->numel = d.numel;
    v->storage_numel = d.storageNumel;
    v->elsize = emu_dtype_size(d.dataType);
    v->data = d.data;
    return ACLNN_SUCCESS;
}

static aclnnStatus run_plan(const void *plan, void *workspace, uint64_t workspace_size)
{
    const emu_plan *p = plan;
    return p->run(p, workspace, workspace_size);
}

aclnnStatus emu_make_executor(const emu_plan *p, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    xlossEmuTensorDesc descs[EMU_MAX_OPERANDS];
    uint64_t n = 0;
    for (int k = 0; k < p->n; k++) {
        const emu_view *v = &p->t[k];
        if (!v->present)
            continue;
        xlossEmuTensorDesc *d = &descs[n++];
        memset(d, 0, sizeof *d);
        d->dataType = v->dtype;
        d->format = v->format;
        d->viewDimsNum = (uint64_t)v->ndim;
        memcpy(d->viewDims, v->dims, sizeof d->viewDims);
        memcpy(d->strides, v->strides, sizeof d->strides);
        d->offset = v->offset;
        d->numel = v->numel;
        d->storageNumel = v->storage_numel;
        d->data = v->data;
        d->name = p->names[k];
    }
    return xlossEmuCreateExecutor(p->op, descs, n, p, sizeof *p, run_plan, p->workspace_size, workspaceSize, executor);
}

aclnnStatus emu_launch(const char *op, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                       aclrtStream stream)
{
    return xlossEmuRunExecutor(op, workspace, workspaceSize, executor, stream);
}

/* ---- strided access ------------------------------------------------------------------------- */

void emu_gather_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, float *dst)
{
    const char *b = v->data;
    switch (v->dtype) {
    case ACL_FLOAT:
        for (int64_t i = 0; i < n; i++)
            memcpy(&dst[i], b + (start + i * stride) * 4, 4);
        break;
    case ACL_FLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + (start + i * stride) * 2, 2);
            dst[i] = xloss_f16_to_f32(h);
        }
        break;
    case ACL_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + (start + i * stride) * 2, 2);
            dst[i] = xloss_bf16_to_f32(h);
        }
        break;
    case ACL_INT32: /* DrivingSDK's one-hot focal target */
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, b + (start + i * stride) * 4, 4);
            dst[i] = (float)v;
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN; /* unreachable: phase one admits float (and INT32 target) operands only */
    }
}

void emu_scatter_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, const float *src)
{
    char *b = v->data;
    switch (v->dtype) {
    case ACL_FLOAT:
        for (int64_t i = 0; i < n; i++)
            memcpy(b + (start + i * stride) * 4, &src[i], 4);
        break;
    case ACL_FLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = xloss_f32_to_f16(src[i]);
            memcpy(b + (start + i * stride) * 2, &h, 2);
        }
        break;
    case ACL_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = xloss_f32_to_bf16(src[i]);
            memcpy(b + (start + i * stride) * 2, &h, 2);
        }
        break;
    default:
        break;
    }
}

float emu_load_f32(const emu_view *v, int64_t index)
{
    float f;
    emu_gather_f32(v, index, 0, 1, &f);
    return f;
}

void emu_store_f32(const emu_view *v, int64_t index, float value) { emu_scatter_f32(v, index, 0, 1, &value); }

float emu_round_to(aclDataType dt, float v)
{
    switch (dt) {
    case ACL_FLOAT16:
        return xloss_f16_to_f32(xloss_f32_to_f16(v));
    case ACL_BF16:
        return xloss_bf16_to_f32(xloss_f32_to_bf16(v));
    default:
        return v;
    }
}

/* double -> float rounding to odd: exact when the double is a float, else the float toward
 * zero with its last bit set. Rounding that to a 16-bit type (RNE) then equals rounding the
 * double directly (float has more than two extra bits), avoiding double rounding. */
static float round_to_odd_f32(double d)
{
    float f = (float)d;
    if (isnan(d) || isinf(f) || (double)f == d)
        return f;
    if (fabs((double)f) > fabs(d))
        f = nextafterf(f, 0.0f);
    return xloss_bits_f32(xloss_f32_bits(f) | 1u);
}

void emu_store_f64(const emu_view *v, int64_t index, double value)
{
    float f = v->dtype == ACL_FLOAT ? (float)value : round_to_odd_f32(value);
    emu_store_f32(v, index, f);
}

int64_t emu_load_i64(const emu_view *v, int64_t index)
{
    const char *p = v->data + index * (int64_t)v->elsize;
    switch (v->dtype) {
    case ACL_INT64: {
        int64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    case ACL_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case ACL_UINT8:
        return *(const uint8_t *)p;
    case ACL_BOOL:
        return *(const uint8_t *)p != 0;
    default:
        return 0;
    }
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

/* [lo, hi) byte range a non-empty view spans inside its storage */
static void view_extent(const emu_view *v, uintptr_t *lo, uintptr_t *hi)
{
    int64_t last = v->offset;
    for (int i = 0; i < v->ndim; i++)
        last += (v->dims[i] - 1) * v->strides[i]; /* bounded by the storage: the runtime checked it */
    *lo = (uintptr_t)v->data + (uintptr_t)v->offset * v->elsize;
    *hi = (uintptr_t)v->data + (uintptr_t)(last + 1) * v->elsize;
}

int emu_views_overlap(const emu_view *a, const emu_view *b)
{
    if (!a->numel || !b->numel)
        return 0;
    uintptr_t alo, ahi, blo, bhi;
    view_extent(a, &alo, &ahi);
    view_extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
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

void emu_elementwise(const emu_view *shape_of, const emu_view *const *in, int nin, const emu_view *const *out, int nout,
                     emu_ew_fn fn, void *ctx)
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

uint64_t emu_reduce_workspace(int64_t numel)
{
    /* in uint64: a view of up to INT64_MAX elements (stride 0 over one) must not overflow numel + block - 1 */
    return emu_round_up(((uint64_t)numel + EMU_REDUCE_BLOCK - 1) / EMU_REDUCE_BLOCK * sizeof(double));
}

aclnnStatus emu_elementwise_sum(const emu_view *shape_of, const emu_view *const *in, int nin, int64_t reduction,
                                emu_ew_fn fn, void *ctx, double **partial, char *ws, uint64_t ws_size, double *total)
{
    int64_t blocks = (shape_of->numel + EMU_REDUCE_BLOCK - 1) / EMU_REDUCE_BLOCK;
    if ((uint64_t)blocks * sizeof(double) > ws_size)
        return ACLNN_ERR_INNER; /* phase one sized it; never write past it */
    *partial = (double *)ws;
    for (int64_t b = 0; b < blocks; b++)
        (*partial)[b] = 0.0;
    emu_elementwise(shape_of, in, nin, NULL, 0, fn, ctx);
    double sum = 0.0;
    for (int64_t b = 0; b < blocks; b++)
        sum += (*partial)[b];
    if (reduction == EMU_REDUCTION_MEAN)
        sum = shape_of->numel ? sum / (double)shape_of->numel : NAN; /* mean of nothing is NaN, as torch */
    *total = sum;
    return ACLNN_SUCCESS;
}
