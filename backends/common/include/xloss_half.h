/* xloss_half.h (ours: xloss's, no vendor's) — IEEE 754 binary16 ("half", fp16) and bfloat16 (bf16)
 * to and from binary32, for both C emulators (backends/ascend_aclnn/csrc, backends/ft78ne_shim/csrc).
 *
 * By bit manipulation, so results do not depend on the compiler's _Float16/__bf16 support, the
 * FPU's rounding mode or flush-to-zero:
 *   - to float32: exact for every one of the 65536 bit patterns; a NaN keeps its sign and payload
 *     (bits only: a signalling NaN is not quieted, as no arithmetic is done);
 *   - from float32: round to nearest, ties to even, with subnormal results, overflow to infinity
 *     (fp16: |x| >= 65520), and a NaN returned quiet (quiet bit set) with its sign and the top
 *     payload bits that fit (fp16: 9 below the quiet bit, bf16: 6), as F16C/AArch64 conversions do.
 * tests/backends/common/test_half.py checks all of it against NumPy and ml_dtypes.
 *
 * Header only, every function static inline: each library gets its own hidden copy. Sources include
 * it by its path relative to their own folder, so any compile command finds it without -I. */
#ifndef XLOSS_HALF_H
#define XLOSS_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define XLOSS_HALF_INLINE static inline __attribute__((always_inline, unused))
#else
#define XLOSS_HALF_INLINE static inline
#endif

XLOSS_HALF_INLINE uint32_t xloss_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

XLOSS_HALF_INLINE float xloss_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 field layout: sign 0x8000, exponent 0x7C00 (bias 15), mantissa 0x03FF */
#define XLOSS_F16_SIGN 0x8000u
#define XLOSS_F16_INF 0x7C00u
#define XLOSS_F16_QUIET 0x0200u
/* binary32 thresholds, as bit patterns of |x| */
#define XLOSS_F32_INF 0x7F800000u
#define XLOSS_F32_F16_OVERFLOW 0x477FF000u /* 65520: halfway between 65504 (fp16 max) and 2^16 */
#define XLOSS_F32_F16_MIN_NORMAL 0x38800000u /* 2^-14 */
#define XLOSS_F32_F16_HALF_MIN_SUB 0x33000000u /* 2^-25: half the smallest fp16 subnormal */

XLOSS_HALF_INLINE float xloss_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & XLOSS_F16_SIGN) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0) /* zero or subnormal: man * 2^-24, exact in float32 (a normal number there) */
        return xloss_bits_f32(xloss_f32_bits((float)man * 0x1p-24f) | sign);
    if (exp == 31) /* inf, NaN (payload kept) */
        return xloss_bits_f32(sign | XLOSS_F32_INF | (man << 13));
    return xloss_bits_f32(sign | ((exp + (127u - 15u)) << 23) | (man << 13));
}

XLOSS_HALF_INLINE uint16_t xloss_f32_to_f16(float f)
{
    uint32_t x = xloss_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & XLOSS_F16_SIGN);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > XLOSS_F32_INF) /* NaN: quiet, sign and top payload bits kept */
        return (uint16_t)(sign | XLOSS_F16_INF | XLOSS_F16_QUIET | ((a >> 13) & 0x3FFu));
    if (a >= XLOSS_F32_F16_OVERFLOW) /* rounds past 65504, or inf */
        return (uint16_t)(sign | XLOSS_F16_INF);
    if (a >= XLOSS_F32_F16_MIN_NORMAL) { /* a normal half: rebias the exponent, round 13 bits away */
        uint32_t h = (a - ((127u - 15u) << 23)) >> 13, rem = a & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is the correct next binade */
        return (uint16_t)(sign | h);
    }
    if (a <= XLOSS_F32_F16_HALF_MIN_SUB) /* zero, or rounds to zero (2^-25 ties to even: zero) */
        return sign;
    /* a subnormal half: |x| = m * 2^(e-150) (m with its implicit bit), in units of 2^-24: m >> (126 - e) */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - (a >> 23); /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++; /* reaching 0x400 is the correct smallest normal */
    return (uint16_t)(sign | q);
}

XLOSS_HALF_INLINE float xloss_bf16_to_f32(uint16_t h) { return xloss_bits_f32((uint32_t)h << 16); }

XLOSS_HALF_INLINE uint16_t xloss_f32_to_bf16(float f)
{
    uint32_t x = xloss_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > XLOSS_F32_INF) /* NaN: quiet, sign and top payload bits kept */
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7FFFu + ((x >> 16) & 1u); /* ties to even; a carry past the largest finite value gives inf */
    return (uint16_t)(x >> 16);
}

#endif
