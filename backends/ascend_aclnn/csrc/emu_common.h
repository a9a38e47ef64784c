/* Definitions shared by the emulator's two libraries, the runtime (libxloss_aclrt.so) and the
 * operators (libxloss_aclnn.so): data-type facts, float16/bfloat16 conversions and overflow-checked
 * arithmetic. Everything here is static inline, so each library has its own hidden copy and the
 * operators need nothing from the runtime beyond its exported API. */
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
    case ACL_FLOAT: return "FLOAT";
    case ACL_FLOAT16: return "FLOAT16";
    case ACL_INT8: return "INT8";
    case ACL_INT32: return "INT32";
    case ACL_UINT8: return "UINT8";
    case ACL_INT16: return "INT16";
    case ACL_UINT16: return "UINT16";
    case ACL_UINT32: return "UINT32";
    case ACL_INT64: return "INT64";
    case ACL_UINT64: return "UINT64";
    case ACL_DOUBLE: return "DOUBLE";
    case ACL_BOOL: return "BOOL";
    case ACL_STRING: return "STRING";
    case ACL_COMPLEX64: return "COMPLEX64";
    case ACL_COMPLEX128: return "COMPLEX128";
    case ACL_BF16: return "BF16";
    case ACL_INT4: return "INT4";
    case ACL_UINT1: return "UINT1";
    case ACL_COMPLEX32: return "COMPLEX32";
    default: return "UNKNOWN";
    }
}

/* Bytes per element; 0 for types without a byte size (STRING, INT4, UINT1) and unknown values. */
static inline size_t emu_dtype_size(aclDataType dt)
{
    switch (dt) {
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: case ACL_COMPLEX32: return 4;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
    }
}

static inline int emu_is_float_type(aclDataType dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16; }

/* ---- overflow-checked arithmetic ------------------------------------------------------------ */
static inline int emu_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r); }
static inline int emu_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline uint64_t emu_round_up(uint64_t n) { return (n + (EMU_ALIGN - 1)) & ~(uint64_t)(EMU_ALIGN - 1); }

/* ---- float16 / bfloat16 <-> float32, round-to-nearest-even, by bit manipulation so the result
 * does not depend on the compiler's _Float16 support ------------------------------------------ */
static inline uint32_t emu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float emu_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float emu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {
        if (m == 0)
            return emu_bits_f32(sign);
        int sh = 0; /* subnormal: m * 2^-24, normalise so bit 10 is set */
        while (!(m & 0x400u)) {
            m <<= 1;
            sh++;
        }
        return emu_bits_f32(sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3FFu) << 13));
    }
    if (e == 31)
        return emu_bits_f32(sign | 0x7F800000u | (m << 13)); /* inf, NaN (payload kept) */
    return emu_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t emu_f32_to_f16(float f)
{
    uint32_t x = emu_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) /* inf or NaN; a NaN stays a (quiet) NaN */
        return a > 0x7F800000u ? (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)) : (uint16_t)(sign | 0x7C00u);
    if (a >= 0x477FF000u) /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) { /* below 2^-14: a half subnormal (or zero) */
        if (a < 0x33000000u) /* below 2^-25 (exactly 2^-25 ties to even: 0) */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (a - 0x38000000u) >> 13, rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++; /* a carry into the exponent is the correct next binade */
    return (uint16_t)(sign | r);
}

static inline float emu_bf16_to_f32(uint16_t h) { return emu_bits_f32((uint32_t)h << 16); }

static inline uint16_t emu_f32_to_bf16(float f)
{
    uint32_t x = emu_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN */
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
