/* Definitions shared by the emulator's two libraries, the runtime (libxloss_aclrt.so) and the
 * operators (libxloss_aclnn.so): data-type facts, float16/bfloat16 conversions (xloss_half.h) and
 * overflow-checked arithmetic. Everything here is static inline, so each library has its own hidden
 * copy and the operators need nothing from the runtime beyond its exported API. */
#ifndef XLOSS_EMU_COMMON_H_
#define XLOSS_EMU_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#include "aclnn/opdev/op_errno.h"
#include "xloss_aclnn_emu.h"

#define EMU_EXPORT ACL_FUNC_VISIBILITY
#define EMU_MAX_DIMS XLOSS_EMU_MAX_DIMS /* the aclnn kernels take at most 8-D tensors */
#define EMU_ALIGN 32                     /* device memory alignment, bytes */

static inline const char *emu_dtype_name(aclDataType dt)
{
    switch (dt) {
    case ACL_FLOAT:
        return "FLOAT";
    case ACL_FLOAT16:
        return "FLOAT16";
    case ACL_INT8:
        return "INT8";
    case ACL_INT32:
        return "INT32";
    case ACL_UINT8:
        return "UINT8";
    case ACL_INT16:
        return "INT16";
    case ACL_UINT16:
        return "UINT16";
    case ACL_UINT32:
        return "UINT32";
    case ACL_INT64:
        return "INT64";
    case ACL_UINT64:
        return "UINT64";
    case ACL_DOUBLE:
        return "DOUBLE";
    case ACL_BOOL:
        return "BOOL";
    case ACL_STRING:
        return "STRING";
    case ACL_COMPLEX64:
        return "COMPLEX64";
    case ACL_COMPLEX128:
        return "COMPLEX128";
    case ACL_BF16:
        return "BF16";
    case ACL_INT4:
        return "INT4";
    case ACL_UINT1:
        return "UINT1";
    case ACL_COMPLEX32:
        return "COMPLEX32";
    default:
        return "UNKNOWN";
    }
}

/* Bytes per element; 0 for types without a byte size (STRING, INT4, UINT1) and unknown values. */
static inline size_t emu_dtype_size(aclDataType dt)
{
    switch (dt) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_BOOL:
        return 1;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16:
        return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32:
    case ACL_COMPLEX32:
        return 4;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
    case ACL_COMPLEX64:
        return 8;
    case ACL_COMPLEX128:
        return 16;
    default:
        return 0;
    }
}

static inline int emu_is_float_type(aclDataType dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16; }

/* ---- overflow-checked arithmetic ------------------------------------------------------------ */
static inline int emu_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r); }
static inline int emu_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline uint64_t emu_round_up(uint64_t n) { return (n + (EMU_ALIGN - 1)) & ~(uint64_t)(EMU_ALIGN - 1); }

/* float16 / bfloat16 <-> float32: the one implementation both emulators share (ours) */
#include "../../common/include/xloss_half.h"

#endif
