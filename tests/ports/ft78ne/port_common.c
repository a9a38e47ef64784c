/* Errors, core masks and half conversions of the port. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "port.h"

/* The vendor functions return void: the port keeps a per-thread last error, which xloss reads
 * through ft78ne_emu_last_error / _message (README of the shim, "For port authors"). */
static _Thread_local int last_error;
static _Thread_local char last_message[256];

FT78NE_API int ft78ne_emu_last_error(void) { return last_error; }
/* the focal and FLCE entry points follow xloss's own layouts (ft78ne.h, "OURS"): say so */
FT78NE_API int xloss_ft78ne_ext_abi(void) { return XLOSS_FT78NE_EXT_ABI; }
FT78NE_API const char *ft78ne_emu_last_error_message(void) { return last_message; }

void port_begin(void) {
    last_error = FT78NE_OK;
    last_message[0] = '\0';
}

int port_fail(int code, const char *fn, const char *fmt, ...) {
    int n = snprintf(last_message, sizeof last_message, "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof last_message)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
    va_end(ap);
    last_error = code;
    return code;
}

int port_cores(const char *fn, int core_mask) {
    if (core_mask <= 0 || core_mask > FT78NE_CORE_MASK_ALL) {
        port_fail(FT78NE_ERR_CORE_MASK, fn, "core_mask 0x%x must select cores 0..7 (0x01..0xff)", (unsigned)core_mask);
        return 0;
    }
    return __builtin_popcount((unsigned)core_mask);
}

int port_check_reduction(const char *fn, int reduction) {
    if (reduction < FT78NE_REDUCTION_NONE || reduction > FT78NE_REDUCTION_SUM)
        return port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "reduction %d is not 0 (none), 1 (mean) or 2 (sum)",
                         reduction);
    return 0;
}

int port_check_private(const char *fn, const port_buf *bufs, int n) {
    for (int i = 0; i < n; i++) {
        int rc = ft78ne_shim_private_check(bufs[i].ptr, bufs[i].bytes);
        if (rc)
            return port_fail(rc, fn, "%s: %s", bufs[i].name, ft78ne_shim_last_error_message());
    }
    return 0;
}

float port_h2f(half h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: man * 2^-24, normalised for float */
        uint32_t e = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float -> half is IEEE conversion in one of the DSP converter's two rounding modes; the
 * convention (and xloss) require round-to-nearest-even. */
enum { NEAREST_EVEN, TOWARD_ZERO };
#ifdef BUG_HALF_TRUNCATE
#define HALF_ROUNDING TOWARD_ZERO /* BUG: the truncating mode (overflow then saturates at 65504, not inf) */
#else
#define HALF_ROUNDING NEAREST_EVEN
#endif

/* Keeps the bits of `man` above `shift`, rounded on the dropped ones. */
static uint32_t round_shift(uint32_t man, int shift) {
    uint32_t kept = man >> shift;
    uint32_t dropped = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (HALF_ROUNDING == NEAREST_EVEN && (dropped > halfway || (dropped == halfway && (kept & 1u))))
        kept++; /* a carry out of the mantissa correctly bumps the exponent (up to inf) */
    return kept;
}

half port_f2h(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    uint32_t sign = (b >> 16) & 0x8000u, mag = b & 0x7fffffffu;
    if (mag >= 0x7f800000u) /* inf, or NaN made quiet */
        return (half)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    int e = (int)(mag >> 23) - 127;
    if (e > 15) /* beyond the largest finite half */
        return (half)(sign | (HALF_ROUNDING == TOWARD_ZERO ? 0x7bffu : 0x7c00u));
    if (e >= -14) /* normal half: exponent and 10 mantissa bits in one word, rounded together */
        return (half)(sign | round_shift((((uint32_t)(e + 15)) << 23) | (mag & 0x7fffffu), 13));
    if (e < -25) /* below half the smallest subnormal: 0 in both modes */
        return (half)sign;
    /* subnormal half: the 24-bit significand times 2^(e-23), counted in units of 2^-24 */
    return (half)(sign | round_shift((mag & 0x7fffffu) | 0x800000u, -e - 1));
}
