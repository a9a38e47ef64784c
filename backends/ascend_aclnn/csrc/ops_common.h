/* The emulator's operator library (libxloss_aclnn.so): what its five operators share.
 *
 * The operators are built against the runtime library's exported API only, like any operator
 * library: phase one describes each operand (xlossEmuDescribeTensor), validates, and hands the
 * runtime a plan (emu_plan) and a kernel (xlossEmuCreateExecutor); phase two is
 * xlossEmuRunExecutor, which calls the kernel with the plan. The runtime checks the very
 * descriptors the kernel will use (view inside the storage, storage inside live device memory),
 * so a kernel indexes only memory the runtime has validated and pinned. */
#ifndef XLOSS_EMU_OPS_COMMON_H_
#define XLOSS_EMU_OPS_COMMON_H_

#include <math.h>
#include <string.h>

#include "emu_common.h"

#define EMU_MAX_OPERANDS 12
#define EMU_REDUCE_BLOCK 4096 /* elements per partial sum of a reduction (one per "core") */

/* The int64_t reduction of the aclnn loss operators, PyTorch's codes (CANN's pages: 0 none, 1 mean,
 * 2 sum). CANN's headers name none, so these names are the emulator's; xloss.kernels.REDUCTION_CODES
 * holds the same (tests/backends/ascend/test_abi.py checks). */
#define EMU_REDUCTION_NONE 0
#define EMU_REDUCTION_MEAN 1
#define EMU_REDUCTION_SUM 2

/* the runtime keeps the message; the operators set it through the exported call */
#define emu_set_error xlossEmuSetErrMsg

/* One operand as the kernels see it: the runtime's descriptor plus derived facts. */
typedef struct {
    int present;
    aclDataType dtype;
    aclFormat format;
    int ndim;
    int64_t dims[EMU_MAX_DIMS];
    int64_t strides[EMU_MAX_DIMS];
    int64_t offset;
    int64_t numel;         /* elements in the view */
    int64_t storage_numel; /* elements in the storage */
    size_t elsize;
    char *data;            /* storage base */
} emu_view;

/* What phase one hands phase two (copied into the executor). */
typedef struct emu_plan emu_plan;
typedef aclnnStatus (*emu_kernel)(const emu_plan *p, char *workspace, uint64_t workspace_size);

struct emu_plan {
    const char *api; /* the phase-one function (messages) */
    const char *op;  /* the phase-two function (keys the executor) */
    int n;
    emu_view t[EMU_MAX_OPERANDS];
    const char *names[EMU_MAX_OPERANDS];
    double gamma, alpha;
    double smoothing;               /* CrossEntropyLoss(Grad)'s labelSmoothing */
    int64_t reduction;
    int64_t ignore_index;
    int64_t vocab_start, vocab_end; /* FusedLinearOnlineMaxSum's shard: targets in [start, end) */
    uint64_t workspace_size;
    emu_kernel run;
};

/* Start of every phase one: outputs cleared so a failed call never leaves stale values. */
void emu_phase_one_start(emu_plan *p, const char *api, const char *op, uint64_t *workspaceSize,
                         aclOpExecutor **executor);
/* Describe operand `name` into slot k (NULL tensor: absent); refuses private formats. */
aclnnStatus emu_operand(emu_plan *p, int k, const char *name, const aclTensor *t);
/* Phase one's last step: the runtime checks the operands' memory and makes the executor. */
aclnnStatus emu_make_executor(const emu_plan *p, uint64_t *workspaceSize, aclOpExecutor **executor);
/* Phase two of every operator. */
aclnnStatus emu_launch(const char *op, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                       aclrtStream stream);

/* ---- element access (views were bounds-checked by the runtime at executor creation) --------- */
/* Read n elements (element stride `stride`, starting at element index `start`) as float. */
void emu_gather_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, float *dst);
/* Write n floats, rounding to the view's dtype (round-to-nearest-even). */
void emu_scatter_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, const float *src);
float emu_load_f32(const emu_view *v, int64_t index);
void emu_store_f32(const emu_view *v, int64_t index, float value);
void emu_store_f64(const emu_view *v, int64_t index, double value); /* one rounding to the dtype */
int64_t emu_load_i64(const emu_view *v, int64_t index);            /* INT64, INT32, UINT8, BOOL */
float emu_round_to(aclDataType dt, float value);                     /* value rounded through dt */

/* a . b in 8 float32 partial sums combined in a fixed tree: the one logit product of the FLCE backward's
 * recompute and the vocabulary-parallel forward, so both see the same logits bit for bit */
static inline float emu_dot_f32(const float *a, const float *b, int64_t n)
{
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            s[j] += a[k + j] * b[k + j];
    float t = 0.0f;
    for (; k < n; k++)
        t += a[k] * b[k];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

static inline int64_t emu_at1(const emu_view *v, int64_t i) { return v->offset + i * v->strides[0]; }
static inline int64_t emu_at2(const emu_view *v, int64_t i, int64_t j)
{
    return v->offset + i * v->strides[0] + j * v->strides[1];
}

/* ---- shapes ---------------------------------------------------------------------------------- */
int emu_same_shape(const emu_view *a, const emu_view *b);
/* 1 if a's shape broadcasts to b's (right-aligned, each dim 1 or equal, a->ndim <= b->ndim). */
int emu_broadcasts_to(const emu_view *a, const emu_view *b);
int emu_one_element(const emu_view *v); /* shape () or (1) */
const char *emu_shape_str(const emu_view *v, char *buf, size_t n);

/* Elementwise driver over the shape of `shape_of`: operands broadcast to it (NULL or absent
 * operands give NULL buffers). fn receives chunks of n values and the flat index of the first. */
typedef void (*emu_ew_fn)(void *ctx, int64_t flat, int64_t n, float *const *in, float *const *out);
void emu_elementwise(const emu_view *shape_of, const emu_view *const *in, int nin, const emu_view *const *out, int nout,
                     emu_ew_fn fn, void *ctx);

/* A reduced elementwise loss (mean or sum) over the shape of `shape_of`: fn adds each element's value to
 * (*partial)[flat / EMU_REDUCE_BLOCK] (float64 partial sums, one per block, in the workspace: *partial is set to
 * it and zeroed here); *total gets the blocks' sum in order, divided by the element count for a mean (NaN when
 * empty, as torch). ACLNN_ERR_INNER, nothing written, if the workspace is below emu_reduce_workspace's size. */
aclnnStatus emu_elementwise_sum(const emu_view *shape_of, const emu_view *const *in, int nin, int64_t reduction,
                                emu_ew_fn fn, void *ctx, double **partial, char *ws, uint64_t ws_size, double *total);
/* The workspace emu_elementwise_sum needs for `numel` elements. */
uint64_t emu_reduce_workspace(int64_t numel);

/* 1 if the byte ranges the two views span overlap (a conservative test: interleaved views that
 * share no element still count). Empty views overlap nothing. */
int emu_views_overlap(const emu_view *a, const emu_view *b);

/* ---- phase-one checks ------------------------------------------------------------------------ */

/* Return ACLNN_ERR_PARAM_NULLPTR if a required pointer is NULL. */
#define EMU_REQUIRE(api, ptr, name)                                   \
    do {                                                              \
        if (!(ptr)) {                                                 \
            emu_set_error("%s: %s is a null pointer", (api), (name)); \
            return ACLNN_ERR_PARAM_NULLPTR;                           \
        }                                                             \
    } while (0)

#define EMU_CHECK(expr)           \
    do {                          \
        aclnnStatus st_ = (expr); \
        if (st_ != ACLNN_SUCCESS) \
            return st_;           \
    } while (0)

static inline aclnnStatus emu_need_float(const emu_plan *ex, int k)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_is_float_type(v->dtype)) {
        emu_set_error("%s: %s has dtype %s; expected FLOAT, FLOAT16 or BF16", ex->api, ex->names[k],
                      emu_dtype_name(v->dtype));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_dtype(const emu_plan *ex, int k, aclDataType dt)
{
    const emu_view *v = &ex->t[k];
    if (v->present && v->dtype != dt) {
        emu_set_error("%s: %s has dtype %s; expected %s", ex->api, ex->names[k], emu_dtype_name(v->dtype),
                      emu_dtype_name(dt));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_ndim(const emu_plan *ex, int k, int ndim)
{
    const emu_view *v = &ex->t[k];
    if (v->present && v->ndim != ndim) {
        char b[160];
        emu_set_error("%s: %s must be %d-D; got shape %s", ex->api, ex->names[k], ndim, emu_shape_str(v, b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_broadcast(const emu_plan *ex, int k, int to)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_broadcasts_to(v, &ex->t[to])) {
        char a[160], b[160];
        emu_set_error("%s: %s of shape %s does not broadcast to %s %s", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a), ex->names[to], emu_shape_str(&ex->t[to], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_same_shape(const emu_plan *ex, int k, int as)
{
    const emu_view *v = &ex->t[k];
    if (v->present && !emu_same_shape(v, &ex->t[as])) {
        char a[160], b[160];
        emu_set_error("%s: %s has shape %s; expected %s's shape %s", ex->api, ex->names[k],
                      emu_shape_str(v, a, sizeof a), ex->names[as], emu_shape_str(&ex->t[as], b, sizeof b));
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* An output must not overlap an operand whose device data the kernel validates and then indexes
 * with (NLL's target, FLCE's targetMask and maskedTarget): writing the output would change the
 * indices under the kernel's feet. */
static inline aclnnStatus emu_need_no_overlap(const emu_plan *ex, int out, int index_operand)
{
    if (ex->t[out].present && ex->t[index_operand].present && emu_views_overlap(&ex->t[out], &ex->t[index_operand])) {
        emu_set_error("%s: %s overlaps %s in device memory; an output may not alias the indices the kernel reads",
                      ex->api, ex->names[out], ex->names[index_operand]);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

static inline aclnnStatus emu_need_reduction(const emu_plan *ex, int64_t reduction)
{
    if (reduction != EMU_REDUCTION_NONE && reduction != EMU_REDUCTION_MEAN && reduction != EMU_REDUCTION_SUM) {
        emu_set_error("%s: reduction %lld is not 0 (none), 1 (mean) or 2 (sum)", ex->api, (long long)reduction);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

/* A workspace of `rows_of` floats per class for `classes` classes (a kernel's row buffers), in *bytes. Ours: a class count whose workspace does not fit an int64 byte count (a
 * stride-0 view may claim 2^62 classes over one element) is refused with `code`; computed unchecked, the
 * size would wrap to a few bytes and phase two would fill a row of `classes` floats into them. */
static inline aclnnStatus emu_need_row_workspace(const emu_plan *ex, int k, int64_t classes, uint64_t rows_of,
                                                 aclnnStatus code, uint64_t *bytes)
{
    uint64_t n;
    if (classes < 0 || __builtin_mul_overflow((uint64_t)classes, rows_of * sizeof(float), &n) ||
        n > (uint64_t)INT64_MAX - (EMU_ALIGN - 1)) {
        emu_set_error("%s: %s has %lld classes; a workspace of %llu rows of them is too large to address", ex->api,
                      ex->names[k], (long long)classes, (unsigned long long)rows_of);
        return code;
    }
    *bytes = n;
    return ACLNN_SUCCESS;
}

#endif
