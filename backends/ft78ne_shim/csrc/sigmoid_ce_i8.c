/* The int8 forms of sigmoidcrossentropywithlogits (the manual's page; FT78NE only). The page gives int8_t
 * logits, labels and loss and no rule for them: the conversion below is xloss's choice, marked as such in the
 * header (include/sigmoidcrossentropywithlogits.h). Each value is the integer itself; the loss is the fp_ form's
 * float32 evaluation (sce_value in sigmoid_ce.c, restated here: both are the page's formula without its overflow)
 * and is rounded to nearest even, then saturated to [-128, 127]. */
#include "emu.h"
#include "sigmoidcrossentropywithlogits.h"

typedef struct {
    size_t n;
    const int8_t *x, *y;
    int8_t *out;
} sce_i8_job;

EMU_INLINE int8_t sce_i8_value(float x, float y) {
    /* the loss is at least 0 and at most 128 * 129 + ln 2 for int8 inputs: finite, no NaN */
    float v = (x > 0.0f ? x * (1.0f - y) : -x * y) + log1pf(expf(-fabsf(x)));
    float r = nearbyintf(v); /* the default rounding mode: to nearest, ties to even */
    return (int8_t)(r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r);
}

static void sce_i8_task(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    const sce_i8_job *j = ctx;
    size_t a = lo * EMU_BLOCK, b = hi * EMU_BLOCK < j->n ? hi * EMU_BLOCK : j->n;
    for (size_t i = a; i < b; i++)
        j->out[i] = sce_i8_value((float)j->x[i], (float)j->y[i]);
}

static void sce_i8(const char *fn, int is_private, int core_mask, const int8_t *x, const int8_t *y, int8_t *out,
                   int length) {
    emu_call c;
    if (!emu_begin(&c, fn, EMU_INT8, is_private, core_mask)) {
        if (length < 0) {
            emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: length must be >= 0, got %d", fn, length);
        } else {
            size_t n = (size_t)length;
            emu_buf bufs[] = {
                {"input0", x, n, 1, EMU_IN},
                {"input1", y, n, 1, EMU_IN},
                {"output", out, n, 1, EMU_OUT_INPLACE},
            };
            if (!emu_check_buffers(&c, bufs, (int)(sizeof bufs / sizeof *bufs))) {
                sce_i8_job j = {n, x, y, out};
                emu_dispatch(&c, (n + EMU_BLOCK - 1) / EMU_BLOCK, sce_i8_task, &j);
            }
        }
    }
    emu_end(&c);
}

FT78NE_API void i8_sigmoidcrossentropywithlogits_s(int8_t *input0, int8_t *input1, int8_t *output, int length,
                                                   int core_mask) {
    sce_i8(__func__, 0, core_mask, input0, input1, output, length);
}
FT78NE_API void i8_sigmoidcrossentropywithlogits_p(int8_t *input0, int8_t *input1, int8_t *output, int length) {
    sce_i8(__func__, 1, 0, input0, input1, output, length);
}
