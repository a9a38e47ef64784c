/* Element conversions (float16 / bfloat16 <-> float32, round-to-nearest-even, by bit
 * manipulation so the result does not depend on the compiler's _Float16 support) and strided
 * element access. */
#include <math.h>
#include <string.h>

#include "emu_internal.h"

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float emu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {
        if (m == 0)
            return bits_f32(sign);
        int sh = 0; /* subnormal: m * 2^-24, normalise so bit 10 is set */
        while (!(m & 0x400u)) {
            m <<= 1;
            sh++;
        }
        return bits_f32(sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3FFu) << 13));
    }
    if (e == 31)
        return bits_f32(sign | 0x7F800000u | (m << 13)); /* inf, NaN (payload kept) */
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t emu_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
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

float emu_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t emu_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN */
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

int emu_is_float_type(aclDataType dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16; }

float emu_round_to(aclDataType dt, float v)
{
    switch (dt) {
    case ACL_FLOAT16: return emu_f16_to_f32(emu_f32_to_f16(v));
    case ACL_BF16: return emu_bf16_to_f32(emu_f32_to_bf16(v));
    default: return v;
    }
}

/* ---- strided access (callers have bounds-checked the view against its storage) ------------- */

void emu_gather_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, float *dst)
{
    const char *b = v->data;
    switch (v->dtype) {
    case ACL_FLOAT:
        for (int64_t i = 0; i < n; i++)
            memcpy(&dst[i], b + (start + i * stride) * 4, 4);
        break;
    case ACL_FLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + (start + i * stride) * 2, 2);
            dst[i] = emu_f16_to_f32(h);
        }
        break;
    case ACL_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + (start + i * stride) * 2, 2);
            dst[i] = emu_bf16_to_f32(h);
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN; /* unreachable: phase one admits float operands only */
    }
}

void emu_scatter_f32(const emu_view *v, int64_t start, int64_t stride, int64_t n, const float *src)
{
    char *b = v->data;
    switch (v->dtype) {
    case ACL_FLOAT:
        for (int64_t i = 0; i < n; i++)
            memcpy(b + (start + i * stride) * 4, &src[i], 4);
        break;
    case ACL_FLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = emu_f32_to_f16(src[i]);
            memcpy(b + (start + i * stride) * 2, &h, 2);
        }
        break;
    case ACL_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = emu_f32_to_bf16(src[i]);
            memcpy(b + (start + i * stride) * 2, &h, 2);
        }
        break;
    default:
        break;
    }
}

float emu_load_f32(const emu_view *v, int64_t index)
{
    float f;
    emu_gather_f32(v, index, 0, 1, &f);
    return f;
}

void emu_store_f32(const emu_view *v, int64_t index, float value) { emu_scatter_f32(v, index, 0, 1, &value); }

/* double -> float rounding to odd: exact when the double is a float, else the float toward
 * zero with its last bit set. Rounding that to a 16-bit type (RNE) then equals rounding the
 * double directly (float has more than two extra bits), avoiding double rounding. */
static float round_to_odd_f32(double d)
{
    float f = (float)d;
    if (isnan(d) || isinf(f) || (double)f == d)
        return f;
    if (fabs((double)f) > fabs(d))
        f = nextafterf(f, 0.0f);
    return bits_f32(f32_bits(f) | 1u);
}

void emu_store_f64(const emu_view *v, int64_t index, double value)
{
    float f = v->dtype == ACL_FLOAT ? (float)value : round_to_odd_f32(value);
    emu_store_f32(v, index, f);
}

int64_t emu_load_i64(const emu_view *v, int64_t index)
{
    const char *p = v->data + index * (int64_t)v->elsize;
    switch (v->dtype) {
    case ACL_INT64: {
        int64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    case ACL_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case ACL_UINT8: return *(const uint8_t *)p;
    case ACL_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
    }
}

/* ---- public conversions ------------------------------------------------------------------------ */

EMU_EXPORT float aclFloat16ToFloat(aclFloat16 value) { return emu_f16_to_f32(value); }
EMU_EXPORT aclFloat16 aclFloatToFloat16(float value) { return emu_f32_to_f16(value); }

EMU_EXPORT aclError xlossEmuCast(const void *src, aclDataType srcType, void *dst, aclDataType dstType, uint64_t n)
{
    if ((!src || !dst) && n) {
        emu_set_error("xlossEmuCast: NULL buffer");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (!emu_is_float_type(srcType) || !emu_is_float_type(dstType)) {
        emu_set_error("xlossEmuCast: only FLOAT, FLOAT16 and BF16 are supported");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (n > (uint64_t)INT64_MAX / 4) {
        emu_set_error("xlossEmuCast: n too large");
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_view s = {.present = 1, .dtype = srcType, .elsize = emu_dtype_size(srcType), .data = (char *)src};
    emu_view d = {.present = 1, .dtype = dstType, .elsize = emu_dtype_size(dstType), .data = dst};
    float buf[256];
    for (uint64_t i = 0; i < n; i += 256) {
        int64_t k = (int64_t)(n - i < 256 ? n - i : 256);
        emu_gather_f32(&s, (int64_t)i, 1, k, buf);
        emu_scatter_f32(&d, (int64_t)i, 1, k, buf);
    }
    return ACL_SUCCESS;
}
