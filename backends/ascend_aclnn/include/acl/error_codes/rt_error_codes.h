/* Runtime status codes (aclError values passed through from the runtime), the subset the
 * xloss emulator reports. Values are CANN's (include/acl/error_codes/rt_error_codes.h). */
#ifndef XLOSS_ACL_ERROR_CODES_RT_ERROR_CODES_H_
#define XLOSS_ACL_ERROR_CODES_RT_ERROR_CODES_H_

#include <stdint.h>

static const int32_t ACL_RT_SUCCESS = 0;
static const int32_t ACL_ERROR_RT_PARAM_INVALID = 107000;
static const int32_t ACL_ERROR_RT_INVALID_DEVICEID = 107001;
static const int32_t ACL_ERROR_RT_CONTEXT_NULL = 107002;
static const int32_t ACL_ERROR_RT_STREAM_CONTEXT = 107003;
static const int32_t ACL_ERROR_RT_ADDR_UNALIGNED = 107008;
static const int32_t ACL_ERROR_RT_INVALID_HANDLE = 107017;
static const int32_t ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000;
static const int32_t ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;
static const int32_t ACL_ERROR_RT_MEMORY_FREE = 207002;
static const int32_t ACL_ERROR_RT_NO_DEVICE = 207004;
static const int32_t ACL_ERROR_RT_INTERNAL_ERROR = 507000;

#endif
