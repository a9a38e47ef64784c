/* The int8 form of nllloss (the manual's page: i8_nllloss_s, FT78NE only). The page gives int8_t log_probs and
 * weight, int32_t loss and total_weight, and no rule for the integers: the rules below are xloss's choice, marked
 * as such in the header (include/nllloss.h). loss_i = -log_probs[i][y_i] * weight[y_i], exact in int32 (at most
 * 128 * 128); sums are exact in int64 (any int batch_size fits), then saturated to [INT32_MIN, INT32_MAX]; the
 * mean is the int64 sum divided by the int64 weight sum, truncated toward zero (C's integer division), then
 * saturated; a mean over a zero weight sum writes 0. The checks and codes are the fp_ form's (loss_forward.c). */
#include <stdint.h>
#include <stdlib.h>

#include "emu.h"
#include "nllloss.h"

typedef struct {
    size_t n, classes;
    int none;
    const int8_t *x, *w;
    const int *labels;
    int32_t *loss;
    int64_t *sum, *weight; /* one per block: the cores fill them, folded after the team */
} nll_i8_job;

static void nll_i8_task(void *ctx, size_t lo, size_t hi, int rank) {
    (void)rank;
    nll_i8_job *j = ctx;
    for (size_t blk = lo; blk < hi; blk++) {
        size_t a = blk * EMU_BLOCK, b = a + EMU_BLOCK < j->n ? a + EMU_BLOCK : j->n;
        int64_t s = 0, sw = 0;
        for (size_t r = a; r < b; r++) {
            size_t t = (size_t)j->labels[r];
            int32_t wt = j->w[t], l = -((int32_t)j->x[r * j->classes + t] * wt);
            if (j->none)
                j->loss[r] = l;
            s += l;
            sw += wt;
        }
        j->sum[blk] = s;
        j->weight[blk] = sw;
    }
}

EMU_INLINE int32_t saturate_i32(int64_t v) {
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
}

static void nll_i8_run(emu_call *c, const int8_t *x, const int *labels, const int8_t *w, int32_t *loss,
                       int32_t *total_weight, int batch, int class_num, int reduction) {
    const char *fn = c->fn;
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
    size_t n = (size_t)batch, k = (size_t)class_num, x_bytes;
    if (emu_extent(c, "log_probs (batch_size x class_num)", n, k, 1, &x_bytes))
        return;
    int none = reduction == FT78NE_NLL_REDUCTION_NONE;
    emu_buf bufs[] = {
        {"log_probs", x, x_bytes, 1, EMU_IN},
        {"labels", labels, n * sizeof(int), sizeof(int), EMU_IN},
        {"weight", w, n ? k : 0, 1, EMU_IN},
        {"loss", loss, (none ? n : 1) * sizeof(int32_t), sizeof(int32_t), EMU_OUT},
        {"total_weight", total_weight, sizeof(int32_t), sizeof(int32_t), EMU_OUT},
    };
    if (emu_check_buffers(c, bufs, 5))
        return;
    if (emu_check_labels(fn, labels, n, (uint64_t)class_num))
        return;
    size_t blocks = (n + EMU_BLOCK - 1) / EMU_BLOCK;
    int64_t *sums = blocks ? calloc(2 * blocks, sizeof(int64_t)) : NULL;
    if (blocks && !sums) {
        emu_fail(FT78NE_ERR_NO_MEMORY, "%s: no host memory for %zu block sums", fn, blocks);
        return;
    }
    nll_i8_job j = {n, k, none, x, w, labels, loss, sums, sums + blocks};
    emu_dispatch(c, blocks, nll_i8_task, &j);
    int64_t total = 0, weights = 0;
    for (size_t b = 0; b < blocks; b++) {
        total += sums[b];
        weights += sums[blocks + b];
    }
    free(sums);
    if (reduction == FT78NE_NLL_REDUCTION_MEAN) /* xloss's choice: toward zero, 0 over a zero weight sum */
        loss[0] = weights ? saturate_i32(total / weights) : 0;
    else if (!none)
        loss[0] = saturate_i32(total);
    total_weight[0] = saturate_i32(weights);
}

FT78NE_API void i8_nllloss_s(const int8_t *log_probs, const int *labels, const int8_t *weight, int32_t *loss,
                             int32_t *total_weight, int batch_size, int class_num, int reduction_type, int core_mask) {
    emu_call c;
    if (!emu_begin(&c, __func__, EMU_INT8, 0, core_mask))
        nll_i8_run(&c, log_probs, labels, weight, loss, total_weight, batch_size, class_num, reduction_type);
    emu_end(&c);
}
