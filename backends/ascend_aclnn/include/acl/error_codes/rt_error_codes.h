/* Runtime status codes (aclError values passed through from the runtime), the subset the xloss
 * emulator reports. As in CANN's acl/error_codes/rt_error_codes.h (runtime repository,
 * include/external/acl/error_codes/rt_error_codes.h): plain #defines, usable in `case` labels and
 * in #if, from C and C++; same guard and values. */
#ifndef __INC_EXTERNEL_RT_ERROR_CODES_H__
#define __INC_EXTERNEL_RT_ERROR_CODES_H__

#include <stddef.h>

#define ACL_RT_SUCCESS 0
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_STREAM_CONTEXT 107003
#define ACL_ERROR_RT_ADDR_UNALIGNED 107008
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_MEMORY_FREE 207002
#define ACL_ERROR_RT_NO_DEVICE 207004
#define ACL_ERROR_RT_INTERNAL_ERROR 507000

#endif /* __INC_EXTERNEL_RT_ERROR_CODES_H__ */
