/* nllloss and binarycrossentropy, the manual's forward pages (include/nllloss.h, include/binarycrossentropy.h).
 * Float arithmetic, as the DSP's: per block of EMU_BLOCK elements (rows) a compensated sum, the blocks'
 * sums folded in block order (the same value whatever the core mask), each result rounded once. */
#include <stdlib.h>

#include "emu.h"

#include "binarycrossentropy.h"
#include "nllloss.h"

/* Block sums: per block in _s (the cores fill them), folded after the team; _p folds as it goes. */
typedef struct {
    float *sum, *weight;      /* _s: one per block (NULL in _p) */
    emu_kahan run, run_weight; /* _p: the same block sums, folded in the same order */
} block_sums;

static int sums_alloc(const emu_call *c, block_sums *s, size_t blocks) {
    memset(s, 0, sizeof *s);
    if (c->is_private || !blocks)
        return 0;
    s->sum = calloc(blocks, sizeof(float));
    s->weight = calloc(blocks, sizeof(float));
    if (!s->sum || !s->weight) {
        free(s->sum);
        free(s->weight);
        return emu_fail(FT78NE_ERR_NO_MEMORY, "%s: no host memory for %zu block sums", c->fn, blocks);
    }
    return 0;
}

EMU_INLINE void sums_put(block_sums *s, size_t blk, float sum, float weight) {
    if (s->sum) {
        s->sum[blk] = sum;
        s->weight[blk] = weight;
    } else {
        emu_kahan_add(&s->run, sum);
        emu_kahan_add(&s->run_weight, weight);
    }
}

static void sums_fold(block_sums *s, size_t blocks) {
    if (s->sum)
        for (size_t b = 0; b < blocks; b++) {
            emu_kahan_add(&s->run, s->sum[b]);
            emu_kahan_add(&s->run_weight, s->weight[b]);
        }
    free(s->sum);
    free(s->weight);
    s->sum = s->weight = NULL;
}

/* ---- nllloss: 0 None, 1 Sum, 2 Mean (FT78NE_NLL_REDUCTION_*, the page's codes) ------------------------- */
typedef struct {
    size_t n, classes;
    int none;
    const void *x, *w;
    const int *labels;
    void *loss;
    block_sums sums;
} nllf_job;

EMU_INLINE void nllf_body(nllf_job *j, size_t lo, size_t hi, emu_dtype dt) {
    for (size_t blk = lo; blk < hi; blk++) {
        size_t a = blk * EMU_BLOCK, b = a + EMU_BLOCK < j->n ? a + EMU_BLOCK : j->n;
        emu_kahan s = {0.0f, 0.0f}, sw = {0.0f, 0.0f};
        for (size_t r = a; r < b; r++) {
            size_t t = (size_t)j->labels[r];
            float wt = emu_ld(j->w, t, dt);
            float l = -(emu_ld(j->x, r * j->classes + t, dt) * wt);
            if (j->none)
                emu_st(j->loss, r, l, dt);
            emu_kahan_add(&s, l);
            emu_kahan_add(&sw, wt);
        }
        sums_put(&j->sums, blk, s.sum, sw.sum);
    }
}
static void nllf_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    nllf_body(ctx, lo, hi, EMU_FLOAT);
}
static void nllf_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    nllf_body(ctx, lo, hi, EMU_HALF);
}

static void nllf_run(emu_call *c, const void *x, const int *labels, const void *w, void *loss, void *total_weight,
                     int batch, int class_num, int reduction) {
    const char *fn = c->fn;
    emu_dtype dt = c->dt;
    if (batch < 0 || class_num < 0) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: batch_size and class_num must be >= 0, got %d and %d", fn, batch,
                 class_num);
        return;
    }
    if (!emu_nll_reduction_valid(reduction)) {
        emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: reduction_type must be 0 (none), 1 (sum) or 2 (mean), got %d", fn,
                 reduction);
        return;
    }
    size_t n = (size_t)batch, k = (size_t)class_num, es = emu_size(dt), x_bytes;
    if (emu_extent(c, "log_probs (batch_size x class_num)", n, k, es, &x_bytes))
        return;
    int none = reduction == FT78NE_NLL_REDUCTION_NONE;
    emu_buf bufs[] = {
        {"log_probs", x, x_bytes, es, EMU_IN},           {"labels", labels, n * sizeof(int), sizeof(int), EMU_IN},
        {"weight", w, n ? k * es : 0, es, EMU_IN},       {"loss", loss, none ? n * es : es, es, EMU_OUT},
        {"total_weight", total_weight, es, es, EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, 5))
        return;
    if (emu_check_labels(fn, labels, n, (uint64_t)class_num))
        return;
    size_t blocks = (n + EMU_BLOCK - 1) / EMU_BLOCK;
    nllf_job j = {n, k, none, x, w, labels, loss, {NULL, NULL, {0.0f, 0.0f}, {0.0f, 0.0f}}};
    if (sums_alloc(c, &j.sums, blocks))
        return;
    emu_dispatch(c, blocks, dt == EMU_HALF ? nllf_task_h : nllf_task_f, &j);
    sums_fold(&j.sums, blocks);
    float total = j.sums.run.sum, weights = j.sums.run_weight.sum;
    if (!none) /* mean over a zero weight sum: inf or nan, as PyTorch */
        emu_st(loss, 0, reduction == FT78NE_NLL_REDUCTION_MEAN ? total / weights : total, dt);
    emu_st(total_weight, 0, weights, dt);
}

static void nllf(const char *fn, emu_dtype dt, int is_private, int core_mask, const void *x, const int *labels,
                 const void *w, void *loss, void *total_weight, int batch, int class_num, int reduction) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        nllf_run(&c, x, labels, w, loss, total_weight, batch, class_num, reduction);
    emu_end(&c);
}

FT78NE_API void hp_nllloss_s(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    nllf(__func__, EMU_HALF, 0, core_mask, log_probs, labels, weight, loss, total_weight, batch_size, class_num,
         reduction_type);
}
FT78NE_API void fp_nllloss_s(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    nllf(__func__, EMU_FLOAT, 0, core_mask, log_probs, labels, weight, loss, total_weight, batch_size, class_num,
         reduction_type);
}
FT78NE_API void hp_nllloss_p(const half *log_probs, const int *labels, const half *weight, half *loss,
                             half *total_weight, int batch_size, int class_num, int reduction_type) {
    nllf(__func__, EMU_HALF, 1, 0, log_probs, labels, weight, loss, total_weight, batch_size, class_num,
         reduction_type);
}
FT78NE_API void fp_nllloss_p(const float *log_probs, const int *labels, const float *weight, float *loss,
                             float *total_weight, int batch_size, int class_num, int reduction_type) {
    nllf(__func__, EMU_FLOAT, 1, 0, log_probs, labels, weight, loss, total_weight, batch_size, class_num,
         reduction_type);
}

/* ---- binarycrossentropy: 0 None, 1 Mean, 2 Sum (FT78NE_REDUCTION_*, the page's codes) ----------------- */
typedef struct {
    size_t n;
    int none;
    const void *x, *y, *w;
    void *loss, *tmp;
    block_sums sums;
} bcef_job;

EMU_INLINE float clamped_log(float v) { return v < -100.0f ? -100.0f : v; } /* NaN stays NaN */

EMU_INLINE void bcef_body(bcef_job *j, size_t lo, size_t hi, emu_dtype dt) {
    for (size_t blk = lo; blk < hi; blk++) {
        size_t a = blk * EMU_BLOCK, b = a + EMU_BLOCK < j->n ? a + EMU_BLOCK : j->n;
        emu_kahan s = {0.0f, 0.0f};
        for (size_t i = a; i < b; i++) {
            float x = emu_ld(j->x, i, dt), y = emu_ld(j->y, i, dt);
            float l = -(y * clamped_log(logf(x)) + (1.0f - y) * clamped_log(log1pf(-x)));
            if (j->w)
                l *= emu_ld(j->w, i, dt);
            emu_st(j->tmp, i, l, dt);
            if (j->none)
                emu_st(j->loss, i, l, dt);
            emu_kahan_add(&s, l);
        }
        sums_put(&j->sums, blk, s.sum, 0.0f);
    }
}
static void bcef_task_f(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    bcef_body(ctx, lo, hi, EMU_FLOAT);
}
static void bcef_task_h(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    bcef_body(ctx, lo, hi, EMU_HALF);
}

static void bcef_run(emu_call *c, int input_size, int reduction, const void *x, const void *y, const void *w,
                     void *loss, void *tmp, int weight_defined) {
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
    int none = reduction == FT78NE_REDUCTION_NONE;
    emu_buf bufs[] = {
        {"input_x", x, nb, es, EMU_IN},
        {"input_y", y, nb, es, EMU_IN},
        {"weight", w, weight_defined ? nb : 0, es, EMU_IN},
        {"loss", loss, none ? nb : es, es, EMU_OUT},
        {"tmp_loss", tmp, nb, es, EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, 5))
        return;
    size_t blocks = (n + EMU_BLOCK - 1) / EMU_BLOCK;
    bcef_job j = {n, none, x, y, weight_defined ? w : NULL, loss, tmp, {NULL, NULL, {0.0f, 0.0f}, {0.0f, 0.0f}}};
    if (sums_alloc(c, &j.sums, blocks))
        return;
    emu_dispatch(c, blocks, dt == EMU_HALF ? bcef_task_h : bcef_task_f, &j);
    sums_fold(&j.sums, blocks);
    if (!none) /* the mean of nothing is nan (0/0), as PyTorch's */
        emu_st(loss, 0, reduction == FT78NE_REDUCTION_MEAN ? j.sums.run.sum / (float)n : j.sums.run.sum, dt);
}

static void bcef(const char *fn, emu_dtype dt, int is_private, int core_mask, int input_size, int reduction,
                 const void *x, const void *y, const void *w, void *loss, void *tmp, int weight_defined) {
    emu_call c;
    if (!emu_begin(&c, fn, dt, is_private, core_mask))
        bcef_run(&c, input_size, reduction, x, y, w, loss, tmp, weight_defined);
    emu_end(&c);
}

FT78NE_API void fp_binarycrossentropy_s(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined, int core_mask) {
    bcef(__func__, EMU_FLOAT, 0, core_mask, input_size, reduction, input_x, input_y, weight, loss, tmp_loss,
         weight_defined);
}
FT78NE_API void hp_binarycrossentropy_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined, int core_mask) {
    bcef(__func__, EMU_HALF, 0, core_mask, input_size, reduction, input_x, input_y, weight, loss, tmp_loss,
         weight_defined);
}
FT78NE_API void fp_binarycrossentropy_p(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                        float *loss, float *tmp_loss, int weight_defined) {
    bcef(__func__, EMU_FLOAT, 1, 0, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined);
}
FT78NE_API void hp_binarycrossentropy_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                        half *loss, half *tmp_loss, int weight_defined) {
    bcef(__func__, EMU_HALF, 1, 0, input_size, reduction, input_x, input_y, weight, loss, tmp_loss, weight_defined);
}
