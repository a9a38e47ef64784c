/* sigmoidfocalloss and sigmoidfocallossgrad, in float32 (SPEC kernel 1, the reference's stable form).
 *
 * p = sigmoid(x) and s = 1 - p both from e = exp(-|x|) (no cancellation); ce = softplus(x) - x*y
 * as a sum of non-negative parts; q = 1 - p_t; the factor q^(gamma-1) that blows up for gamma < 1
 * is never formed: q^(gamma-1) * p*s = q^gamma * r with r = p*s/q in [0, 1] (1 where q == 0). */
#include "emu.h"

#include <stdlib.h>

typedef struct {
    float at, ce, qg, p, s, q;
} focal_parts;

/* q^gamma: small integer gammas (2 is the default) by exact-order products, else powf; 0^0 == 1. */
EMU_INLINE float focal_pow(float q, float gamma) {
    if (gamma == 2.0f)
        return q * q;
    if (gamma == 0.0f)
        return 1.0f;
    if (gamma == 1.0f)
        return q;
    if (gamma == 3.0f)
        return q * q * q;
    return powf(q, gamma);
}

EMU_INLINE focal_parts focal_eval(float x, float y, float alpha, float gamma) {
    focal_parts f;
    float e = expf(-fabsf(x));
    float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
    f.p = x >= 0.0f ? big : small;
    f.s = x >= 0.0f ? small : big;
    f.q = f.p * (1.0f - y) + f.s * y;
    f.ce = (x > 0.0f ? x * (1.0f - y) : -x * y) + log1pf(e);
    f.at = alpha >= 0.0f ? alpha * y + (1.0f - alpha) * (1.0f - y) : 1.0f;
    f.qg = focal_pow(f.q, gamma);
    return f;
}

EMU_INLINE float focal_loss1(const focal_parts *f) { return f->at * f->ce * f->qg; }

EMU_INLINE float focal_grad1(const focal_parts *f, float y, float gamma) {
    float r = f->q > 0.0f ? (f->p * f->s) / f->q : 1.0f;
    float p_minus_y = f->p * (1.0f - y) - f->s * y;
    return f->at * (p_minus_y * f->qg + gamma * f->qg * r * (1.0f - 2.0f * y) * f->ce);
}

static int check_scalars(const char *fn, int input_size, int reduction, float alpha, float gamma) {
    if (input_size < 0)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: input_size must be >= 0, got %d", fn, input_size);
    if (!emu_reduction_valid(reduction))
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", fn,
                        reduction);
    if (!isfinite(alpha) || alpha > 1.0f)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                        "%s: alpha must be in [0, 1] (negative disables the class weighting), got %g", fn,
                        (double)alpha);
    if (!isfinite(gamma) || gamma < 0.0f)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: gamma must be finite and >= 0, got %g", fn, (double)gamma);
    return FT78NE_OK;
}

/* ---- forward ------------------------------------------------------------------------------ */
typedef struct {
    size_t n;
    int reduction;
    float alpha, gamma;
    const void *x, *y;
    void *loss;
    float *partial;    /* _s mean/sum: one sum per block, combined in block order after the team */
    emu_kahan running; /* _p mean/sum: the same block sums, folded in the same order */
} fwd_job;

EMU_INLINE void fwd_body(fwd_job *j, size_t lo, size_t hi, emu_dtype dt) {
    for (size_t blk = lo; blk < hi; blk++) {
        size_t a = blk * EMU_BLOCK, b = a + EMU_BLOCK < j->n ? a + EMU_BLOCK : j->n;
        emu_kahan k = {0.0f, 0.0f};
        for (size_t i = a; i < b; i++) {
            float y = emu_ld(j->y, i, dt);
            focal_parts f = focal_eval(emu_ld(j->x, i, dt), y, j->alpha, j->gamma);
            float l = focal_loss1(&f);
            if (j->reduction == FT78NE_REDUCTION_NONE)
                emu_st(j->loss, i, l, dt);
            else
                emu_kahan_add(&k, l);
        }
        if (j->reduction != FT78NE_REDUCTION_NONE) {
            if (j->partial)
                j->partial[blk] = k.sum;
            else
                emu_kahan_add(&j->running, k.sum);
        }
    }
}
static void fwd_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    fwd_body(ctx, lo, hi, EMU_FLOAT);
}
static void fwd_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    fwd_body(ctx, lo, hi, EMU_HALF);
}

static void focal_fwd_run(emu_call *c, int input_size, int reduction, float alpha, float gamma, const void *x,
                          const void *y, void *loss) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (check_scalars(fn, input_size, reduction, alpha, gamma))
        return;
    size_t n = (size_t)input_size, es = emu_size(dt), nb = n * es, blocks = (n + EMU_BLOCK - 1) / EMU_BLOCK;
    int none = reduction == FT78NE_REDUCTION_NONE;
    emu_buf bufs[] = {
        {"input_x", x, nb, es, EMU_IN},
        {"input_y", y, nb, es, EMU_IN},
        /* mean/sum: written even for n == 0, after every input is read (still never over an input) */
        {"loss", loss, none ? nb : es, es, none ? EMU_OUT_INPLACE : EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, 3))
        return;
    fwd_job j = {n, reduction, alpha, gamma, x, y, loss, NULL, {0.0f, 0.0f}};
    if (!none && !c->is_private && blocks) {
        j.partial = malloc(blocks * sizeof(float));
        if (!j.partial) {
            emu_fail(FT78NE_ERR_NO_MEMORY, "%s: no host memory for %zu block sums", fn, blocks);
            return;
        }
    }
    emu_dispatch(c, blocks, dt == EMU_HALF ? fwd_task_h : fwd_task_f, &j);
    if (!none) {
        if (j.partial)
            for (size_t b = 0; b < blocks; b++)
                emu_kahan_add(&j.running, j.partial[b]);
        free(j.partial);
        float total = j.running.sum;
        /* mean of nothing is nan (0/0), as in PyTorch */
        emu_st(loss, 0, reduction == FT78NE_REDUCTION_MEAN ? total / (float)n : total, dt);
    }
}

static void focal_fwd(const char *fn, emu_dtype dt, int is_private, int core_mask, int input_size, int reduction,
                      float alpha, float gamma, const void *x, const void *y, void *loss) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        focal_fwd_run(&c, input_size, reduction, alpha, gamma, x, y, loss);
    emu_end(&c);
}

/* ---- gradient ----------------------------------------------------------------------------- */
typedef struct {
    size_t n;
    int reduction;
    float alpha, gamma;
    double scale; /* mean: g / n in double (a tiny g must not underflow) */
    const void *x, *y, *dl;
    void *dx;
} grad_job;

EMU_INLINE void grad_body(const grad_job *j, size_t lo, size_t hi, emu_dtype dt) {
    size_t a = lo * EMU_BLOCK, b = hi * EMU_BLOCK < j->n ? hi * EMU_BLOCK : j->n;
    for (size_t i = a; i < b; i++) {
        float y = emu_ld(j->y, i, dt);
        focal_parts f = focal_eval(emu_ld(j->x, i, dt), y, j->alpha, j->gamma);
        double g = j->reduction == FT78NE_REDUCTION_NONE ? emu_ld(j->dl, i, dt) : j->scale;
        emu_st(j->dx, i, (float)(focal_grad1(&f, y, j->gamma) * g), dt); /* exact in double for none/sum */
    }
}
static void grad_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    grad_body(ctx, lo, hi, EMU_FLOAT);
}
static void grad_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    grad_body(ctx, lo, hi, EMU_HALF);
}

static void focal_grad_run(emu_call *c, int input_size, int reduction, float alpha, float gamma, const void *x,
                           const void *y, const void *dl, void *dx) {
    emu_dtype dt = c->dt;
    if (check_scalars(c->fn, input_size, reduction, alpha, gamma))
        return;
    size_t n = (size_t)input_size, es = emu_size(dt), nb = n * es;
    emu_buf bufs[] = {
        {"input_x", x, nb, es, EMU_IN},
        {"input_y", y, nb, es, EMU_IN},
        {"dloss", dl,
         n == 0                               ? 0
         : reduction == FT78NE_REDUCTION_NONE ? nb
                                              : es,
         es, EMU_IN},
        {"dx", dx, nb, es, EMU_OUT_INPLACE},
    };
    if (emu_check_buffers(c, bufs, 4))
        return;
    grad_job j = {n, reduction, alpha, gamma, 0.0, x, y, dl, dx};
    if (reduction != FT78NE_REDUCTION_NONE && n) {
        double g = emu_ld(dl, 0, dt);
        j.scale = reduction == FT78NE_REDUCTION_MEAN ? g / (double)n : g;
    }
    emu_dispatch(c, (n + EMU_BLOCK - 1) / EMU_BLOCK, dt == EMU_HALF ? grad_task_h : grad_task_f, &j);
}

static void focal_grad(const char *fn, emu_dtype dt, int is_private, int core_mask, int input_size, int reduction,
                       float alpha, float gamma, const void *x, const void *y, const void *dl, void *dx) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        focal_grad_run(&c, input_size, reduction, alpha, gamma, x, y, dl, dx);
    emu_end(&c);
}

/* ---- entry points --------------------------------------------------------------------------- */
FT78NE_API void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss, int core_mask) {
    focal_fwd(__func__, EMU_FLOAT, 0, core_mask, input_size, reduction, alpha, gamma, input_x, input_y, loss);
}
FT78NE_API void hp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss, int core_mask) {
    focal_fwd(__func__, EMU_HALF, 0, core_mask, input_size, reduction, alpha, gamma, input_x, input_y, loss);
}
FT78NE_API void fp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                      float *input_y, float *loss) {
    focal_fwd(__func__, EMU_FLOAT, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, loss);
}
FT78NE_API void hp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                      half *input_y, half *loss) {
    focal_fwd(__func__, EMU_HALF, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, loss);
}
FT78NE_API void fp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                          float *input_y, float *dloss, float *dx, int core_mask) {
    focal_grad(__func__, EMU_FLOAT, 0, core_mask, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx);
}
FT78NE_API void hp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx, int core_mask) {
    focal_grad(__func__, EMU_HALF, 0, core_mask, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx);
}
FT78NE_API void fp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                                          float *input_y, float *dloss, float *dx) {
    focal_grad(__func__, EMU_FLOAT, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx);
}
FT78NE_API void hp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                                          half *input_y, half *dloss, half *dx) {
    focal_grad(__func__, EMU_HALF, 1, 0, input_size, reduction, alpha, gamma, input_x, input_y, dloss, dx);
}
