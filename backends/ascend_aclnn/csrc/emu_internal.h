/* Internal interfaces of the emulator's runtime library (libxloss_aclrt.so).
 *
 * One global mutex (emu_lock) guards every piece of process-wide state: the runtime flags,
 * the device-memory table, and the registries of live tensors, executors and streams.
 * Kernels run outside the lock; the device memory they touch is pinned for the duration of the
 * run so that a concurrent aclrtFree cannot pull it away.
 *
 * The operators (libxloss_aclnn.so) do not see this header: they use the exported API only
 * (acl/acl.h, aclnn/acl_meta.h, xloss_aclnn_emu.h), as any operator library would.
 */
#ifndef XLOSS_EMU_INTERNAL_H_
#define XLOSS_EMU_INTERNAL_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "emu_common.h"

#define EMU_CREATE_MAX_DIMS 64 /* aclCreateTensor refuses more (bounds its bookkeeping) */

/* ---- errors (thread-local message read by aclGetRecentErrMsg) -------------------------- */
void emu_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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

/* Frees an object that has left its registry, after a delay: the last EMU_QUARANTINE retired
 * objects stay allocated, so a stale handle cannot alias a new object at the same address (it
 * stays "not live": 161002) until that many more objects have been destroyed. */
#define EMU_QUARANTINE 256
void emu_retire_locked(void *object);

extern emu_ptrset emu_tensors;   /* live aclTensor objects */
extern emu_ptrset emu_executors; /* live aclOpExecutor objects */
void emu_release_executors_locked(void); /* aclFinalize: every executor leaves (and is freed) */
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
    int64_t view_numel;
    int64_t storage_numel;
    void *data;
};

/* ---- executors ----------------------------------------------------------------------------- */

/* The device memory one operand's kernel accesses: pinned while a run is in progress. */
typedef struct {
    char *data;
    uint64_t span_bytes; /* storage bytes (0: the view is empty and touches no memory) */
    char name[XLOSS_EMU_MAX_NAME + 1];
} emu_operand_mem;

struct aclOpExecutor {
    uint64_t magic;
    char op[XLOSS_EMU_MAX_NAME + 1]; /* the phase-two function it belongs to */
    int repeatable;
    int busy;   /* runs in progress */
    int doomed; /* destroyed (or consumed) while busy: freed by the last run */
    uint64_t workspace_size;
    int n;
    emu_operand_mem mem[XLOSS_EMU_MAX_OPERANDS];
    xlossEmuKernel kernel;
    uint64_t plan_size;
    max_align_t plan[]; /* planSize bytes, suitably aligned for any plan struct */
};

#endif
