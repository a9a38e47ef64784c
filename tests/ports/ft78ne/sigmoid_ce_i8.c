/* The int8 forms of sigmoidcrossentropywithlogits (FT78NE), as a port author writes them from the manual's page,
 * which gives int8_t logits, labels and loss and no rule for them. This author reads the integers as they are,
 * evaluates the page's formula in float and rounds half away from zero (roundf), saturating to [-128, 127]: not
 * the emulator's rounding (to nearest even), which xloss's check must accept too. An _s call gives each core of
 * core_mask a contiguous slice.
 *
 * Seeded bugs (build.py's SCE_I8_VARIANTS): BUG_SCE_I8_WRAP (the result converted to int8_t without saturating:
 * the loss 128 of x = -128, y = 1 wraps to -128), BUG_SCE_I8_ABS_INT8 (|x| taken in int8_t arithmetic: |-128|
 * wraps to -128, e^128 overflows, and the loss of x = -128, y = 0, about 0, saturates to 127). */
#include "port.h"
#include "sigmoidcrossentropywithlogits.h"

static int8_t sce_i8_loss(int8_t x, int8_t y) {
    float xf = (float)x, yf = (float)y;
    float lin = x > 0 ? xf * (1.0f - yf) : -xf * yf;
#ifdef BUG_SCE_I8_ABS_INT8
    int8_t ax = (int8_t)(x < 0 ? -x : x); /* BUG: -(-128) does not fit int8_t */
    float v = lin + log1pf(expf(-(float)ax));
#else
    float v = lin + log1pf(expf(-fabsf(xf)));
#endif
    float r = roundf(v);
#ifdef BUG_SCE_I8_WRAP
    return (int8_t)(int)r; /* BUG: no saturation: 128 wraps to -128 */
#else
    return (int8_t)(r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r);
#endif
}

static void sce_i8(const char *fn, int is_private, const int8_t *x, const int8_t *y, int8_t *out, int n,
                   int core_mask) {
    port_begin();
    int k = is_private ? 1 : port_cores(fn, core_mask);
    if (!k)
        return;
    if (n < 0) {
        port_fail(FT78NE_ERR_INVALID_ARGUMENT, fn, "length %d < 0", n);
        return;
    }
    if (n > 0 && (!x || !y || !out)) {
        port_fail(FT78NE_ERR_NULL_POINTER, fn, "NULL buffer (input0, input1 or output)");
        return;
    }
    if (is_private) {
        port_buf bufs[] = {{"input0", x, (size_t)n}, {"input1", y, (size_t)n}, {"output", out, (size_t)n}};
        if (port_check_private(fn, bufs, 3))
            return;
    }
    int base = n / k;
    for (int c = 0; c < k; c++) { /* core c's slice; the last slice also takes the remainder */
        int lo = c * base, hi = c == k - 1 ? n : lo + base;
        for (int i = lo; i < hi; i++)
            out[i] = sce_i8_loss(x[i], y[i]);
    }
}

FT78NE_API void i8_sigmoidcrossentropywithlogits_s(int8_t *input0, int8_t *input1, int8_t *output, int length,
                                                   int core_mask) {
    sce_i8(__func__, 0, input0, input1, output, length, core_mask);
}
FT78NE_API void i8_sigmoidcrossentropywithlogits_p(int8_t *input0, int8_t *input1, int8_t *output, int length) {
    sce_i8(__func__, 1, input0, input1, output, length, 0);
}
