/* Internal interfaces of the xloss host emulator of the CANN aclnn ABI.
 *
 * One global mutex (emu_lock) guards every piece of process-wide state: the runtime flags,
 * the device-memory table, and the registries of live tensors, executors and streams.
 * Kernels run outside the lock on private snapshots; the device memory they touch is pinned
 * for the duration of the run so that a concurrent aclrtFree cannot pull it away.
 */
#ifndef XLOSS_EMU_INTERNAL_H_
#define XLOSS_EMU_INTERNAL_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "xloss_aclnn_emu.h"

#define EMU_EXPORT ACL_FUNC_VISIBILITY
#define EMU_MAX_DIMS 8          /* the aclnn kernels take at most 8-D tensors */
#define EMU_CREATE_MAX_DIMS 64  /* aclCreateTensor refuses more (bounds its bookkeeping) */
#define EMU_ALIGN 32            /* device memory alignment, bytes */
#define EMU_MAX_OPERANDS 12
#define EMU_REDUCE_BLOCK 4096   /* elements per partial sum of a reduction (one per "core") */

/* ---- errors (thread-local message read by aclGetRecentErrMsg) -------------------------- */
void emu_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *emu_dtype_name(aclDataType dt);
size_t emu_dtype_size(aclDataType dt); /* 0 when the emulator has no byte size for it */

/* ---- the global lock and registries ----------------------------------------------------- */
void emu_lock(void);
void emu_unlock(void);

typedef struct {
    void **slots;
    size_t cap;
    size_t len;
} emu_ptrset;

int emu_ptrset_add(emu_ptrset *s, void *p); /* 0 ok, -1 out of memory */
int emu_ptrset_has(const emu_ptrset *s, const void *p);
int emu_ptrset_remove(emu_ptrset *s, const void *p); /* 1 removed, 0 absent */

extern emu_ptrset emu_tensors;   /* live aclTensor objects */
extern emu_ptrset emu_executors; /* live aclOpExecutor objects */
extern emu_ptrset emu_streams;   /* live streams */

/* ---- runtime state ------------------------------------------------------------------------ */
int emu_runtime_ready_locked(void); /* aclInit done and a device set for the calling thread */

/* ---- device memory ------------------------------------------------------------------------ */
typedef struct emu_alloc emu_alloc;

/* The live allocation holding [p, p + n) (n may be 0: p must lie inside or at the end), or NULL. */
emu_alloc *emu_find_alloc_locked(const void *p, uint64_t n);
void emu_pin_locked(emu_alloc *a);
void emu_unpin_locked(emu_alloc *a);

/* ---- tensors ------------------------------------------------------------------------------- */
struct aclTensor {
    uint64_t magic;
    aclDataType dtype;
    aclFormat format;
    uint64_t view_ndim;
    uint64_t storage_ndim;
    int64_t *view_dims;
    int64_t *strides;
    int64_t *storage_dims;
    int64_t offset;
    int64_t storage_numel;
    void *data;
};

/* A kernel's private copy of one operand (the aclTensor may be destroyed after phase one). */
typedef struct {
    int present;
    aclDataType dtype;
    aclFormat format;
    int ndim;
    int64_t dims[EMU_MAX_DIMS];
    int64_t strides[EMU_MAX_DIMS];
    int64_t offset;
    int64_t numel;         /* elements in the view */
    size_t elsize;
    char *data;            /* storage base */
    uint64_t span_bytes;   /* bytes from data that the view can touch (0 for an empty view) */
} emu_view;

/* Phase-one snapshot of an operand. NULL tensor -> present = 0, ACLNN_SUCCESS. Checks that the
 * tensor is live, at most 8-D, and (if it has elements) 32-byte aligned in live device memory. */
aclnnStatus emu_snapshot(const char *api, const char *name, const aclTensor *t, emu_view *v);

/* ---- executors ----------------------------------------------------------------------------- */
typedef enum {
    EMU_OP_FOCAL_FORWARD = 1,
    EMU_OP_FOCAL_BACKWARD,
    EMU_OP_BCE_BACKWARD,
    EMU_OP_NLL_BACKWARD,
    EMU_OP_FLCE_GRAD
} emu_op;

struct aclOpExecutor {
    uint64_t magic;
    emu_op op;
    const char *api; /* the phase-one function that made it */
    int repeatable;
    int busy;        /* runs in progress */
    int doomed;      /* destroyed (or consumed) while busy: freed by the last run */
    uint64_t workspace_size;
    int n;
    emu_view t[EMU_MAX_OPERANDS];
    const char *names[EMU_MAX_OPERANDS];
    double gamma, alpha;
    int64_t reduction;
    int64_t ignore_index;
    aclnnStatus (*run)(struct aclOpExecutor *ex, char *workspace);
};

/* Phase one's last step: allocate the executor (operands and attributes copied from *proto),
 * register it and hand it out. */
aclnnStatus emu_make_executor(const char *api, const aclOpExecutor *proto, uint64_t *workspaceSize,
                              aclOpExecutor **executor);

/* Phase two for every kernel: checks the executor, stream, runtime and workspace, pins the
 * operands' device memory, runs, and releases a single-use executor. */
aclnnStatus emu_launch(const char *api, emu_op op, void *workspace, uint64_t workspaceSize,
                       aclOpExecutor *executor, aclrtStream stream);

/* ---- element access ------------------------------------------------------------------------ */
float emu_f16_to_f32(uint16_t h);
uint16_t emu_f32_to_f16(float f);
float emu_bf16_to_f32(uint16_t h);
uint16_t emu_f32_to_bf16(float f);
int emu_is_float_type(aclDataType dt); /* FLOAT, FLOAT16, BF16 */

/* Read n elements (element stride `stride`, starting at element index `start`) as float. */
void emu_gather_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, float *dst);
/* Write n floats, rounding to the view's dtype (round-to-nearest-even). */
void emu_scatter_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, const float *src);
float emu_load_f32(const emu_view *v, int64_t index);
void emu_store_f32(const emu_view *v, int64_t index, float value);
void emu_store_f64(const emu_view *v, int64_t index, double value); /* one rounding to the dtype */
int64_t emu_load_i64(const emu_view *v, int64_t index);            /* INT64, INT32, UINT8, BOOL */
float emu_round_to(aclDataType dt, float value);                     /* value rounded through dt */

/* Element index (relative to data) of the first element of the view: its offset. */
static inline int64_t emu_at1(const emu_view *v, int64_t i) { return v->offset + i * v->strides[0]; }
static inline int64_t emu_at2(const emu_view *v, int64_t i, int64_t j)
{
    return v->offset + i * v->strides[0] + j * v->strides[1];
}

/* ---- shape helpers -------------------------------------------------------------------------- */
int emu_same_shape(const emu_view *a, const emu_view *b);
/* 1 if a's shape broadcasts to b's (right-aligned, each dim 1 or equal, a->ndim <= b->ndim). */
int emu_broadcasts_to(const emu_view *a, const emu_view *b);
int emu_one_element(const emu_view *v); /* shape () or (1) */
const char *emu_shape_str(const emu_view *v, char *buf, size_t n);

/* Elementwise driver over the shape of `shape_of`: operands broadcast to it (NULL or absent
 * operands give NULL buffers). fn receives chunks of n values and the flat index of the first. */
typedef void (*emu_ew_fn)(void *ctx, int64_t flat, int64_t n, float *const *in, float *const *out);
void emu_elementwise(const emu_view *shape_of, const emu_view *const *in, int nin, const emu_view *const *out,
                     int nout, emu_ew_fn fn, void *ctx);

/* ---- overflow-checked arithmetic ------------------------------------------------------------ */
static inline int emu_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r); }
static inline int emu_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline uint64_t emu_round_up(uint64_t n) { return (n + (EMU_ALIGN - 1)) & ~(uint64_t)(EMU_ALIGN - 1); }

#endif
