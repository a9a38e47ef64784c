/* What a port's operator code may use of the vendor runtime, beyond the public headers.
 *
 * 1. CANN's public aclTensor accessors (aclnn/acl_meta.h of CANN 8.x; aclGetRawTensorAddr since
 *    8.1). The xloss emulator does not export them, so port_rt.c provides them over the
 *    emulator's tensor objects, with CANN's prototypes and status codes. The arrays the three
 *    shape getters return are allocated by the callee: release them with free() (CANN: delete[]).
 * 2. An executor interface standing in for CANN's op framework (CREATE_EXECUTOR in phase one,
 *    CommonOpExecutorRun in phase two): the port hands the runtime a plan (a flat struct it
 *    fills in phase one) and a kernel; phase two calls kernel(plan, workspace). The executors are
 *    the runtime's own, so aclDestroyAclOpExecutor / aclSetAclOpExecutorRepeatable accept them.
 *
 * Operator sources include only this header and the public CANN headers; port_rt.c is the only
 * file that sees the emulator's internals. */
#ifndef XLOSS_TEST_PORT_RT_H_
#define XLOSS_TEST_PORT_RT_H_

#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue,
                                                  uint64_t *stridesNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset);
ACL_FUNC_VISIBILITY aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims,
                                                   uint64_t *storageDimsNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format);
ACL_FUNC_VISIBILITY aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType);
ACL_FUNC_VISIBILITY aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr);

/* Operator identities: an executor runs only under the phase-two function of its own operator. */
typedef enum {
    PORT_OP_SIGMOID_FOCAL_LOSS = 1,
    PORT_OP_SIGMOID_FOCAL_LOSS_BACKWARD,
    PORT_OP_BINARY_CROSS_ENTROPY_BACKWARD,
    PORT_OP_NLL_LOSS_BACKWARD,
    PORT_OP_FUSED_LINEAR_CROSS_ENTROPY_LOSS_GRAD
} portOpKind;

#define PORT_PLAN_MAX 4096       /* bytes of plan an executor carries */
#define PORT_MAX_TENSORS 12      /* tensors whose device memory an executor pins */

typedef aclnnStatus (*portKernel)(const void *plan, void *workspace, uint64_t workspaceSize);

/* Phase one's last step. The runtime checks each non-NULL tensor (live, its storage aligned
 * device memory: else 161002), copies planSize bytes of plan into a new single-use executor that
 * pins those tensors' memory while it runs, and sets *workspaceSizeOut and *executor. */
aclnnStatus portCreateExecutor(const char *api, portOpKind op, const aclTensor *const *tensors, int ntensors,
                               const void *plan, size_t planSize, portKernel kernel, uint64_t workspaceSize,
                               uint64_t *workspaceSizeOut, aclOpExecutor **executor);

/* Phase two: executor, stream, context and workspace checks, then kernel(plan, workspace). */
aclnnStatus portRunExecutor(const char *api, portOpKind op, void *workspace, uint64_t workspaceSize,
                            aclOpExecutor *executor, aclrtStream stream);

/* The message aclGetRecentErrMsg returns next in this thread. */
void portSetError(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif

#endif
