/* Shared pieces of the test port: operand descriptors read through the CANN accessors, element
 * access with the port's own 16-bit conversions, and a broadcast walker.
 *
 * The port is what an engineer porting xloss's kernels would write against the emulator's runtime
 * library (libxloss_aclrt.so): the operators (aclnnXxxGetWorkspaceSize + aclnnXxx) validate with
 * CANN's public accessors (aclnn/acl_meta.h), describe their operands in a flat plan, and hand it
 * to the runtime's executor interface (xloss_aclnn_emu.h) with the descriptors of the views the
 * kernel will use. Seeded bugs are compiled in with -DBUG_<NAME>; each lives in exactly one
 * place, marked "BUG:". */
#ifndef XLOSS_TEST_PORT_H_
#define XLOSS_TEST_PORT_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#include "aclnn/opdev/op_errno.h"
#include "xloss_aclnn_emu.h"

#define PORT_MAX_DIMS 8

/* One operand as the kernels see it; element indices count from `base`. */
typedef struct {
    int present;
    aclDataType dtype;
    int ndim;
    int64_t dims[PORT_MAX_DIMS];
    int64_t strides[PORT_MAX_DIMS];
    int64_t offset;
    int64_t numel;
    int64_t storage_numel; /* aclGetStorageShape's element count */
    char *base;            /* device storage base (aclGetRawTensorAddr) */
} port_tensor;

/* Rounding of a float32 result to a 16-bit output: AscendC Cast's CAST_RINT and CAST_TRUNC. */
typedef enum { PORT_ROUND_RINT, PORT_ROUND_TRUNC } port_round;

/* The rounding the elementwise operators (focal, BCE) use for their outputs. */
#ifdef BUG_HALF_OUTPUT_TRUNC
/* BUG: the elementwise kernels cast their float32 results to FLOAT16/BF16 with CAST_TRUNC. */
#define ELEMENTWISE_OUT_ROUND PORT_ROUND_TRUNC
#else
#define ELEMENTWISE_OUT_ROUND PORT_ROUND_RINT
#endif

#define PORT_NOT_NULL(api, ptr, name)                                     \
    do {                                                                  \
        if (!(ptr)) {                                                     \
            xlossEmuSetErrMsg("%s: %s is a null pointer", (api), (name)); \
            return ACLNN_ERR_PARAM_NULLPTR;                               \
        }                                                                 \
    } while (0)

#define PORT_TRY(expr)            \
    do {                          \
        aclnnStatus st_ = (expr); \
        if (st_ != ACLNN_SUCCESS) \
            return st_;           \
    } while (0)

/* Start of every phase one: a failed call leaves no stale workspace size or executor behind. */
static inline void port_phase_one_start(uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (workspaceSize)
        *workspaceSize = 0;
    if (executor)
        *executor = NULL;
}

/* ---- operands (phase one) ---------------------------------------------------------------- */
aclnnStatus port_describe(const char *api, const char *name, const aclTensor *t, port_tensor *d);
const char *port_dtype_name(aclDataType dt);
const char *port_shape(const port_tensor *t, char *buf, size_t n);
int port_is_float(aclDataType dt); /* FLOAT, FLOAT16, BF16: what the kernels compute from */
aclnnStatus port_need_float(const char *api, const char *name, const port_tensor *t);
aclnnStatus port_need_dtype(const char *api, const char *name, const port_tensor *t, aclDataType dt);
aclnnStatus port_need_broadcast(const char *api, const char *name, const port_tensor *t, const port_tensor *to);
aclnnStatus port_need_same_shape(const char *api, const char *name, const port_tensor *t, const port_tensor *as);
aclnnStatus port_need_reduction(const char *api, int64_t reduction);
int port_one_element(const port_tensor *t); /* shape () or (1,) */
/* out of an elementwise loss: self's shape for reduction 0, one element (() or (1,)) otherwise */
aclnnStatus port_need_loss_out(const char *api, const port_tensor *out, const port_tensor *self, int64_t reduction);
/* the workspace of a reduction's float partial sums, one per tile of `tile` elements (none for reduction 0) */
uint64_t port_tile_workspace(int64_t numel, int64_t tile, int64_t reduction);
uint64_t port_align32(uint64_t bytes);
/* Phase one's last step: the runtime checks the views of the present operands (as the kernel will
 * index them) and makes an executor running kernel(plan) under opName's phase two. */
aclnnStatus port_create_executor(const char *opName, const port_tensor *operands, const char *const *names, int n,
                                 const void *plan, size_t planSize, xlossEmuKernel kernel, uint64_t workspaceSize,
                                 uint64_t *workspaceSizeOut, aclOpExecutor **executor);

/* ---- elements (phase two) ---------------------------------------------------------------------- */
float port_half_to_float(uint16_t h);
uint16_t port_float_to_half(float f, port_round mode);
float port_bf16_to_float(uint16_t h);
uint16_t port_float_to_bf16(float f, port_round mode);
float port_load(const port_tensor *t, int64_t at);
void port_store(const port_tensor *t, int64_t at, float v, port_round mode);
float port_round_to(aclDataType dt, float v); /* v rounded (RINT) through dt */
int64_t port_load_int(const port_tensor *t, int64_t at); /* INT64, INT32, UINT8, BOOL */
int64_t port_element_at(const port_tensor *t, int64_t k); /* element index of the k-th (row-major) */

/* ---- focal loss math (both focal ABIs) ----------------------------------------------------------- */

/* The per-element quantities of the loss, all finite for |x| up to 1e4: 1 - p is sigmoid(-x)
 * (no cancellation), ce is a sum of non-negative parts. */
typedef struct {
    float p, s, q, ce;
} focal_parts;

static inline focal_parts focal_split(float x, float y)
{
    focal_parts f;
    float e = expf(-fabsf(x)); /* in (0, 1]: cannot overflow */
    float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
    f.p = x >= 0.0f ? big : small;
    f.s = x >= 0.0f ? small : big;
    f.q = f.p * (1.0f - y) + f.s * y;
    f.ce = (x > 0.0f ? x * (1.0f - y) : -x * y) + log1pf(e);
    return f;
}

/* d(q^gamma)/dx * ce, the gamma term of the gradient; q^(gamma-1) blows up as q -> 0 for gamma < 1,
 * so that branch uses q^gamma * (p(1-p)/q), whose limit at q = 0 is 1. */
static inline float focal_gamma_term(focal_parts f, float y, float gamma, float qg)
{
    if (gamma >= 1.0f)
        return gamma * powf(f.q, gamma - 1.0f) * (f.p * f.s) * (1.0f - 2.0f * y) * f.ce;
    if (gamma > 0.0f) {
        float r = f.q > 0.0f ? fminf(1.0f, (f.p * f.s) / f.q) : 1.0f;
        return gamma * qg * r * (1.0f - 2.0f * y) * f.ce;
    }
    return 0.0f;
}

/* Walks `shape` in row-major order; at[k] is operand k's element index, broadcast dims stepping 0. */
#define PORT_WALK_MAX 6
typedef struct {
    int ndim, n;
    int64_t dims[PORT_MAX_DIMS], idx[PORT_MAX_DIMS];
    int64_t step[PORT_WALK_MAX][PORT_MAX_DIMS];
    int64_t at[PORT_WALK_MAX];
} port_walk;
void port_walk_init(port_walk *w, const port_tensor *shape, const port_tensor *const *ops, int n);
void port_walk_next(port_walk *w);

#include "pairwise.h"

#endif
