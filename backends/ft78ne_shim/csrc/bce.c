/* binarycrossentropygrad: dx = dloss * w * (x - y) / (x(1-x) + eps), eps = FT78NE_BCE_EPS. */
#include "emu.h"

typedef struct {
    size_t n;
    int reduction, has_w;
    const void *x, *y, *w, *dl;
    void *dx;
    double scale; /* mean/sum: the upstream gradient (divided by n for mean, in double: g/n of a tiny
                   * g must not underflow before it multiplies a large (x-y)/(x(1-x)+eps)) */
} bce_job;

EMU_INLINE void bce_body(const bce_job *j, size_t lo, size_t hi, emu_dtype dt) {
    size_t a = lo * EMU_BLOCK, b = hi * EMU_BLOCK < j->n ? hi * EMU_BLOCK : j->n;
    for (size_t i = a; i < b; i++) {
        float x = emu_ld(j->x, i, dt), y = emu_ld(j->y, i, dt);
        float d = (x - y) / (x * (1.0f - x) + FT78NE_BCE_EPS); /* the reference's order of operations */
        if (j->has_w)
            d *= emu_ld(j->w, i, dt);
        double g = j->reduction == FT78NE_REDUCTION_NONE ? emu_ld(j->dl, i, dt) : j->scale;
        emu_st(j->dx, i, (float)(d * g), dt); /* exact in double for none/sum */
    }
}
static void bce_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    bce_body(ctx, lo, hi, EMU_FLOAT);
}
static void bce_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    bce_body(ctx, lo, hi, EMU_HALF);
}

static void bce_run(emu_call *c, int input_size, int reduction, const void *x, const void *y, const void *w,
                    const void *dl, void *dx, int weight_defined) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (input_size < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: input_size must be >= 0, got %d", fn, input_size);
        return;
    }
    if (!emu_reduction_valid(reduction)) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", fn,
                 reduction);
        return;
    }
    size_t n = (size_t)input_size, es = emu_size(dt), nb = n * es;
    emu_buf bufs[] = {
        {"input_x", x, nb, es, EMU_IN},
        {"input_y", y, nb, es, EMU_IN},
        {"weight", w, weight_defined ? nb : 0, es, EMU_IN},
        {"dloss", dl,
         n == 0                               ? 0
         : reduction == FT78NE_REDUCTION_NONE ? nb
                                              : es,
         es, EMU_IN},
        {"dx", dx, nb, es, EMU_OUT_INPLACE},
    };
    if (emu_check_buffers(c, bufs, (int)(sizeof bufs / sizeof *bufs)))
        return;
    bce_job j = {n, reduction, weight_defined != 0, x, y, w, dl, dx, 0.0};
    if (reduction != FT78NE_REDUCTION_NONE && n) {
        double g = emu_ld(dl, 0, dt);
        j.scale = reduction == FT78NE_REDUCTION_MEAN ? g / (double)n : g;
    }
    emu_dispatch(c, (n + EMU_BLOCK - 1) / EMU_BLOCK, dt == EMU_HALF ? bce_task_h : bce_task_f, &j);
}

static void bce(const char *fn, emu_dtype dt, int is_private, int core_mask, int input_size, int reduction,
                const void *x, const void *y, const void *w, const void *dl, void *dx, int weight_defined) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        bce_run(&c, input_size, reduction, x, y, w, dl, dx, weight_defined);
    emu_end(&c);
}

FT78NE_API void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined, int core_mask) {
    bce(__func__, EMU_FLOAT, 0, core_mask, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined);
}
FT78NE_API void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined, int core_mask) {
    bce(__func__, EMU_HALF, 0, core_mask, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined);
}
FT78NE_API void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y,
                                            float *weight, float *dloss, float *dx, int weight_defined) {
    bce(__func__, EMU_FLOAT, 1, 0, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined);
}
FT78NE_API void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                            half *dloss, half *dx, int weight_defined) {
    bce(__func__, EMU_HALF, 1, 0, input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined);
}
