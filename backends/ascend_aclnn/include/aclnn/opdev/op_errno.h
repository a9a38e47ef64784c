/* aclnn status codes, where CANN keeps them (opbase include/nnopbase/opdev/op_errno.h, installed as
 * aclnn/opdev/op_errno.h): a program that tests an aclnnStatus against a name includes this
 * header. Same guard and values as CANN's; the subset the emulator and xloss's tools use. */
#ifndef OP_API_OP_API_COMMON_INC_OPDEV_OP_ERRNO_H
#define OP_API_OP_API_COMMON_INC_OPDEV_OP_ERRNO_H

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000
#define ACLNN_ERR_INNER_INFERSHAPE_ERROR 561001
#define ACLNN_ERR_INNER_TILING_ERROR 561002
#define ACLNN_ERR_INNER_FIND_KERNEL_ERROR 561003
#define ACLNN_ERR_INNER_CREATE_EXECUTOR 561101
#define ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR 561102
#define ACLNN_ERR_INNER_NULLPTR 561103
#define ACLNN_ERR_INNER_WRONG_ATTR_INFO_SIZE 561104

#endif /* OP_API_OP_API_COMMON_INC_OPDEV_OP_ERRNO_H */
