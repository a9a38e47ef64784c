/* CANN's aclnnop/aclnn_util.h (opbase include/aclnnop/aclnn_util.h): the ACLNN_API export macro
 * that CANN's operator headers put on their prototypes. */
#ifndef OPBASE_COMMON_ACLNN_UTIL_H
#define OPBASE_COMMON_ACLNN_UTIL_H

#define ACLNN_API __attribute__((visibility("default")))

#endif
