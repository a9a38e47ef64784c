/* Functions exported by the xloss host emulator's runtime library (libxloss_aclrt.so) only; NOT part
 * of the CANN ABI. Programs that must also run against vendor libraries should look them up
 * optionally (weak symbols, dlsym).
 *
 * Two groups:
 *  1. diagnostics: the live-object counter (leak checks), float conversions, the version;
 *  2. the executor interface an operator library uses when it is built against the emulator's
 *     runtime instead of CANN's op framework (the emulator's own operators, libxloss_aclnn.so, are
 *     written this way; so are the test ports). Phase one describes its operands
 *     (xlossEmuDescribeTensor, or the CANN accessors in aclnn/acl_meta.h), validates them, and
 *     hands the runtime a plan and a kernel (xlossEmuCreateExecutor); phase two is
 *     xlossEmuRunExecutor, which applies the runtime's executor, stream, context and workspace
 *     rules and calls kernel(plan, workspace, workspaceSize). Executors made this way are
 *     ordinary aclOpExecutors: aclSetAclOpExecutorRepeatable / aclDestroyAclOpExecutor accept
 *     them. */
#ifndef XLOSS_ACLNN_EMU_H_
#define XLOSS_ACLNN_EMU_H_

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#include "aclnn/opdev/op_errno.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. diagnostics -------------------------------------------------------------------------- */

typedef enum {
    XLOSS_EMU_LIVE_DEVICE_MEMORY = 0, /* aclrtMalloc blocks not yet aclrtFree'd */
    XLOSS_EMU_LIVE_TENSORS = 1,       /* aclTensor objects not yet destroyed */
    XLOSS_EMU_LIVE_EXECUTORS = 2,     /* executors neither consumed by a run nor destroyed */
    XLOSS_EMU_LIVE_STREAMS = 3,       /* streams not yet destroyed */
    XLOSS_EMU_LIVE_ALL = 4            /* the sum of the above */
} xlossEmuLiveKind;

/* Number of live objects of the given kind (-1 for an unknown kind). */
ACL_FUNC_VISIBILITY int64_t xlossEmuLiveAllocations(int32_t kind);

/* Convert n elements between FLOAT, FLOAT16 and BF16 (round-to-nearest-even), host memory. */
ACL_FUNC_VISIBILITY aclError xlossEmuCast(const void *src, aclDataType srcType, void *dst, aclDataType dstType,
                                          uint64_t n);

/* A version string identifying the emulator. */
ACL_FUNC_VISIBILITY const char *xlossEmuVersion(void);

/* ---- 2. the executor interface for operator libraries ---------------------------------------- */

#define XLOSS_EMU_MAX_DIMS 8         /* dimensions of a described operand */
#define XLOSS_EMU_MAX_OPERANDS 16    /* operands an executor pins */
#define XLOSS_EMU_MAX_PLAN (1 << 20) /* bytes of plan an executor copies */
#define XLOSS_EMU_MAX_NAME 63        /* characters of an operator or operand name kept */

/* One operand as a kernel sees it. Indices count elements from `data` (the storage base). */
typedef struct {
    aclDataType dataType;
    aclFormat format;
    uint64_t viewDimsNum;                 /* at most XLOSS_EMU_MAX_DIMS */
    int64_t viewDims[XLOSS_EMU_MAX_DIMS];
    int64_t strides[XLOSS_EMU_MAX_DIMS];
    int64_t offset;
    int64_t numel;        /* elements in the view: the product of viewDims */
    int64_t storageNumel; /* elements in the storage: the product of the storage dims */
    void *data;           /* storage base (device memory); may be NULL when the view is empty */
    const char *name;     /* operand name used in messages (may be NULL) */
} xlossEmuTensorDesc;

/* Fills *desc from a live tensor in one consistent read (desc->name = name). 161001 when tensor
 * or desc is NULL; 161002 when tensor is not a live aclTensor or has more than
 * XLOSS_EMU_MAX_DIMS dimensions. */
ACL_FUNC_VISIBILITY aclnnStatus xlossEmuDescribeTensor(const aclTensor *tensor, const char *name,
                                                       xlossEmuTensorDesc *desc);

/* A kernel: phase two of an operator. plan is the executor's copy of what phase one passed. */
typedef aclnnStatus (*xlossEmuKernel)(const void *plan, void *workspace, uint64_t workspaceSize);

/* Phase one's last step: a new single-use executor holding a copy of planSize bytes of plan,
 * the kernel, the workspace size and the operands whose device memory every run pins. Each
 * operand descriptor is checked as a kernel will use it (a known dtype, non-negative dims,
 * strides and offset, numel equal to the product of the dims, the view inside the storage and,
 * if the view has elements, the storage 32-byte aligned inside one live aclrtMalloc block):
 * 161002 otherwise. NULL opName, kernel, workspaceSizeOut or executor, operands with
 * operandNum > 0, or plan with planSize > 0: 161001. operandNum above XLOSS_EMU_MAX_OPERANDS or
 * planSize above XLOSS_EMU_MAX_PLAN: 161002. On failure *executor = NULL, *workspaceSizeOut = 0.
 * opName is the phase-two function's name; it keys the executor to its operator. */
ACL_FUNC_VISIBILITY aclnnStatus xlossEmuCreateExecutor(const char *opName, const xlossEmuTensorDesc *operands,
                                                       uint64_t operandNum, const void *plan, uint64_t planSize,
                                                       xlossEmuKernel kernel, uint64_t workspaceSize,
                                                       uint64_t *workspaceSizeOut, aclOpExecutor **executor);

/* Phase two: the executor must be live and made by opName's phase one (else 161002, the executor
 * not spent); then the runtime rules (README): context, stream, workspace size and memory, the
 * operands' memory still live. The kernel runs with the operands' memory pinned. A single-use
 * executor is released by this call whatever its outcome. */
ACL_FUNC_VISIBILITY aclnnStatus xlossEmuRunExecutor(const char *opName, void *workspace, uint64_t workspaceSize,
                                                    aclOpExecutor *executor, aclrtStream stream);

/* Sets the calling thread's message that aclGetRecentErrMsg returns next (printf format). */
ACL_FUNC_VISIBILITY void xlossEmuSetErrMsg(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif
