/* aclnn tensor and executor objects (CANN's aclnn/acl_meta.h subset, opbase
 * include/nnopbase/aclnn/acl_meta.h): creation, the tensor accessors, the executor calls. As in
 * CANN, the status codes are not here but in aclnn/opdev/op_errno.h. CANN's own header is C++ only
 * (<cstdint>, constexpr); this one is usable from C and C++. */
#ifndef OP_API_OP_API_COMMON_INC_EXTERNAL_ACL_META_H
#define OP_API_OP_API_COMMON_INC_EXTERNAL_ACL_META_H

#include <stdint.h>

#include "../acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ACLNN_META
#define ACLNN_META
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef int32_t aclnnStatus;
#endif

/* A tensor view over device memory: viewDims/stride/offset count elements; tensorData is the
 * storage base (storageDims elements). Returns NULL on failure. */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                               const int64_t *stride, int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);

/* Tensor accessors (CANN's public aclnn API). A NULL argument is 161001. The three shape getters
 * allocate the array they return (one element at least, so it is never NULL on success): release
 * it with free() (CANN's C++ documentation says delete[]). In the emulator, a pointer that is not
 * a live aclTensor is 161002; CANN does not check. */
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue,
                                                  uint64_t *stridesNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset);
ACL_FUNC_VISIBILITY aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims,
                                                   uint64_t *storageDimsNum);
ACL_FUNC_VISIBILITY aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType);
ACL_FUNC_VISIBILITY aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format);
/* The device address the tensor was created with (its storage base). CANN allows the call before
 * phase one or after phase two only. */
ACL_FUNC_VISIBILITY aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr);

/* Make an executor reusable (call right after phase one); release it with aclDestroyAclOpExecutor. */
ACL_FUNC_VISIBILITY aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);

#ifdef __cplusplus
}
#endif

#endif /* OP_API_OP_API_COMMON_INC_EXTERNAL_ACL_META_H */
