/* aclnn base (CANN's aclnn/aclnn_base.h, opbase include/nnopbase/aclnn/aclnn_base.h): the tensor
 * and executor API of acl_meta.h plus aclnnInit/aclnnFinalize. Every aclnnop/ header includes it. */
#ifndef OP_API_OP_API_COMMON_INC_EXTERNAL_ACLNN_BASE_H
#define OP_API_OP_API_COMMON_INC_EXTERNAL_ACLNN_BASE_H

#include <stdint.h>
#include <stdlib.h>

#include "acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialise / release the operator library. configPath may be NULL. In the emulator, aclnnInit
 * works before or after aclInit and may be called again (each call succeeds); aclnnFinalize
 * releases nothing the program still holds. */
ACL_FUNC_VISIBILITY aclnnStatus aclnnInit(const char *configPath);
ACL_FUNC_VISIBILITY aclnnStatus aclnnFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* OP_API_OP_API_COMMON_INC_EXTERNAL_ACLNN_BASE_H */
