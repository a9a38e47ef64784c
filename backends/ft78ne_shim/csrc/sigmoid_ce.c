/* sigmoidcrossentropywithlogits and sigmoidcrossentropywithlogitsgrad (the manual's pages): per element,
 * in float32, each result rounded once to the buffer's type.
 *
 * The page's formulas evaluated without their overflow and cancellation: the loss
 * -[y ln p + (1-y) ln(1-p)] as (x > 0 ? x(1-y) : -x y) + log1p(e^-|x|), and the gradient sigmoid(x) - y
 * as (1-y) sigmoid(x) - y sigmoid(-x), each sigmoid from e^-|x| (the page's two-sided form), so that a
 * gradient near 0 keeps its relative precision. */
#include "emu.h"

typedef struct {
    size_t n;
    const void *x, *y;
    void *out;
    int grad;
} sce_job;

EMU_INLINE float sce_value(float x, float y, int grad) {
    float e = expf(-fabsf(x));
    if (!grad)
        return (x > 0.0f ? x * (1.0f - y) : -x * y) + log1pf(e);
    float big = 1.0f / (1.0f + e), small = e * big; /* sigmoid(|x|), sigmoid(-|x|) */
    float p = x >= 0.0f ? big : small, s = x >= 0.0f ? small : big;
    return (1.0f - y) * p - y * s;
}

EMU_INLINE void sce_body(const sce_job *j, size_t lo, size_t hi, emu_dtype dt) {
    size_t a = lo * EMU_BLOCK, b = hi * EMU_BLOCK < j->n ? hi * EMU_BLOCK : j->n;
    for (size_t i = a; i < b; i++)
        emu_st(j->out, i, sce_value(emu_ld(j->x, i, dt), emu_ld(j->y, i, dt), j->grad), dt);
}
static void sce_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    sce_body(ctx, lo, hi, EMU_FLOAT);
}
static void sce_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    sce_body(ctx, lo, hi, EMU_HALF);
}

static void sce(const char *fn, emu_dtype dt, int is_private, int core_mask, int grad, const void *x, const void *y,
                void *out, int length) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask)) {
        if (length < 0) {
            emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: length must be >= 0, got %d", fn, length);
        } else {
            size_t n = (size_t)length, es = emu_size(dt), nb = n * es;
            /* the page names the gradient's inputs Input0/Input1 and the loss's input0/input1 */
            emu_buf bufs[] = {
                {grad ? "Input0" : "input0", x, nb, es, EMU_IN},
                {grad ? "Input1" : "input1", y, nb, es, EMU_IN},
                {"output", out, nb, es, EMU_OUT_INPLACE},
            };
            if (!emu_check_buffers(&c, bufs, (int)(sizeof bufs / sizeof *bufs))) {
                sce_job j = {n, x, y, out, grad};
                emu_dispatch(&c, (n + EMU_BLOCK - 1) / EMU_BLOCK, dt == EMU_HALF ? sce_task_h : sce_task_f, &j);
            }
        }
    }
    emu_end(&c);
}

FT78NE_API void fp_sigmoidcrossentropywithlogits_s(float *input0, float *input1, float *output, int length,
                                                   int core_mask) {
    sce(__func__, EMU_FLOAT, 0, core_mask, 0, input0, input1, output, length);
}
FT78NE_API void hp_sigmoidcrossentropywithlogits_s(half *input0, half *input1, half *output, int length,
                                                   int core_mask) {
    sce(__func__, EMU_HALF, 0, core_mask, 0, input0, input1, output, length);
}
FT78NE_API void fp_sigmoidcrossentropywithlogits_p(float *input0, float *input1, float *output, int length) {
    sce(__func__, EMU_FLOAT, 1, 0, 0, input0, input1, output, length);
}
FT78NE_API void hp_sigmoidcrossentropywithlogits_p(half *input0, half *input1, half *output, int length) {
    sce(__func__, EMU_HALF, 1, 0, 0, input0, input1, output, length);
}
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_s(float *Input0, float *Input1, float *output, int length,
                                                       int core_mask) {
    sce(__func__, EMU_FLOAT, 0, core_mask, 1, Input0, Input1, output, length);
}
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_s(half *Input0, half *Input1, half *output, int length,
                                                       int core_mask) {
    sce(__func__, EMU_HALF, 0, core_mask, 1, Input0, Input1, output, length);
}
FT78NE_API void fp_sigmoidcrossentropywithlogitsgrad_p(float *Input0, float *Input1, float *output, int length) {
    sce(__func__, EMU_FLOAT, 1, 0, 1, Input0, Input1, output, length);
}
FT78NE_API void hp_sigmoidcrossentropywithlogitsgrad_p(half *Input0, half *Input1, half *output, int length) {
    sce(__func__, EMU_HALF, 1, 0, 1, Input0, Input1, output, length);
}
