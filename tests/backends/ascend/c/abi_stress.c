/* Stress and fuzz of the emulator's ABI, meant to be compiled together with the emulator
 * sources under AddressSanitizer and UBSan (tests/backends/ascend/test_c.py):
 *
 *  1. random tensor descriptors (dims, strides, offsets, dtypes, formats, data pointers; many
 *     invalid) through aclCreateTensor and every operator's phase one; whatever is accepted
 *     runs over random device bytes (NaN, huge values, out-of-range targets). Statuses must
 *     be one of the documented codes; the sanitizers see every access.
 *  2. threads running repeatable executors while others allocate and free device memory and
 *     one frees the memory a running executor uses (the pin keeps it valid; later runs fail).
 *  3. every object released: the live counters return to zero.
 *  Every tensor made (and, in the threads, every shared tensor, concurrently) is read back through
 *  CANN's accessors and xlossEmuDescribeTensor.
 *
 * Usage: abi_stress [iterations] ; exit status 0 when all checks hold.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_binary_cross_entropy.h"
#include "aclnnop/aclnn_binary_cross_entropy_backward.h"
#include "aclnnop/aclnn_binary_cross_entropy_with_logits.h"
#include "aclnnop/aclnn_binary_cross_entropy_with_logits_backward.h"
#include "aclnnop/aclnn_cross_entropy_loss.h"
#include "aclnnop/aclnn_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_fused_linear_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_nll_loss.h"
#include "aclnnop/aclnn_nll_loss2d.h"
#include "aclnnop/aclnn_nll_loss_backward.h"
#include "aclnnop/aclnn_softmax_cross_entropy_with_logits.h"
#include "aclnnop/aclnn_xloss_sigmoid_focal_loss.h"
#include "aclnnop/aclnn_xloss_sigmoid_focal_loss_backward.h"
#include "xloss_aclnn_emu.h"

static int failures;
static int accepted, ran_ok; /* fuzz statistics: phase ones accepted, runs that succeeded */
#define FAIL(...)                     \
    do {                              \
        printf("FAIL: " __VA_ARGS__); \
        printf("\n");                 \
        failures++;                   \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static int known_status(aclnnStatus st)
{
    return st == ACLNN_SUCCESS || st == ACLNN_ERR_PARAM_NULLPTR || st == ACLNN_ERR_PARAM_INVALID ||
           st == ACLNN_ERR_RUNTIME_ERROR || st == ACLNN_ERR_INNER_TILING_ERROR; /* the last: cross entropy's pages */
}

/* Reads a live tensor back through every accessor; the arrays are the caller's to free. */
static void read_back(const aclTensor *t, const char *where)
{
    int64_t *a = NULL, off = 0;
    uint64_t n = 0;
    aclDataType dt;
    aclFormat fmt;
    void *addr = NULL;
    xlossEmuTensorDesc d;
    if (aclGetViewShape(t, &a, &n) != ACLNN_SUCCESS || !a)
        FAIL("%s: aclGetViewShape", where);
    free(a);
    a = NULL;
    if (aclGetViewStrides(t, &a, &n) != ACLNN_SUCCESS || !a)
        FAIL("%s: aclGetViewStrides", where);
    free(a);
    a = NULL;
    if (aclGetStorageShape(t, &a, &n) != ACLNN_SUCCESS || !a)
        FAIL("%s: aclGetStorageShape", where);
    free(a);
    if (aclGetViewOffset(t, &off) || aclGetDataType(t, &dt) || aclGetFormat(t, &fmt) || aclGetRawTensorAddr(t, &addr))
        FAIL("%s: a scalar accessor", where);
    aclnnStatus st = xlossEmuDescribeTensor(t, "t", &d);
    if (st != ACLNN_SUCCESS && st != ACLNN_ERR_PARAM_INVALID) /* more than 8 dims: 161002 */
        FAIL("%s: xlossEmuDescribeTensor %d", where, st);
}

/* ---- 1. fuzz ------------------------------------------------------------------------------ */

#define NBUF 4
static void *bufs[NBUF];
static size_t buf_size[NBUF];

static const aclDataType dtypes[] = {ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_INT64,  ACL_INT32,      ACL_UINT8,
                                     ACL_BOOL,  ACL_DOUBLE,  ACL_INT8, ACL_STRING, (aclDataType)99};
static const aclFormat formats[] = {ACL_FORMAT_ND, ACL_FORMAT_NCHW, ACL_FORMAT_ND, ACL_FORMAT_FRACTAL_NZ,
                                    (aclFormat)99};

static void *zeros_buf; /* all-zero device bytes: valid class indices and masks for clean calls */
static int clean;        /* this fuzz call builds well-formed descriptors (only layouts vary) */

/* A random tensor shaped like `hint` with random strides and offset; outside clean calls also
 * garbage (bad dims, strides, dtypes, formats, data pointers). */
static aclTensor *random_tensor(const int64_t *hint, int hint_nd, aclDataType prefer)
{
    int64_t dims[10], strides[10], storage[1];
    int dirty = !clean;
    int nd = (!dirty || rnd() % 8) ? hint_nd : (int)pick(0, 9);
    for (int i = 0; i < nd; i++) {
        dims[i] = (!dirty || (rnd() % 6 && i < hint_nd)) ? hint[i] : pick(rnd() % 20 ? 0 : -2, 6);
        strides[i] = pick(dirty && rnd() % 30 == 0 ? -3 : 0, 9);
    }
    if (rnd() % 2) { /* contiguous-ish, with row gaps */
        int64_t acc = 1;
        for (int i = nd - 1; i >= 0; i--) {
            strides[i] = acc;
            acc *= dims[i] > 0 ? dims[i] : 1;
            acc += rnd() % 3 == 0 ? pick(0, 2) : 0;
        }
    }
    int64_t offset = rnd() % 3 ? 0 : pick(dirty && rnd() % 20 == 0 ? -2 : 0, 12);
    aclDataType dt = (!dirty || rnd() % 3) ? prefer : dtypes[rnd() % (sizeof dtypes / sizeof *dtypes)];
    aclFormat fmt = !dirty ? ACL_FORMAT_ND : formats[rnd() % (sizeof formats / sizeof *formats)];
    int integral = dt == ACL_INT64 || dt == ACL_INT32 || dt == ACL_UINT8 || dt == ACL_BOOL;
    int b = (int)(rnd() % NBUF);
    void *base = (clean && integral && rnd() % 4) ? zeros_buf : bufs[b];
    size_t bytes = base == zeros_buf ? 4096 : buf_size[b];
    size_t el = aclDataTypeSize(dt) ? aclDataTypeSize(dt) : 1;
    storage[0] = (!dirty || rnd() % 4) ? (int64_t)(bytes / el) : pick(0, 4096);
    char host[64];
    void *data = base;
    if (dirty) {
        switch (rnd() % 12) {
        case 0:
            data = NULL;
            break;
        case 1:
            data = (char *)base + 4;
            break; /* misaligned */
        case 2:
            data = host;
            break;             /* not device memory */
        default:
            break;
        }
    }
    aclTensor *t = aclCreateTensor(dims, (uint64_t)nd, dt, strides, offset, fmt, storage, 1, data);
    if (t)
        read_back(t, "fuzz tensor");
    aclGetRecentErrMsg();
    return t;
}

static void fuzz_one(aclrtStream stream)
{
    clean = (int)(rnd() % 2);
    const int64_t bt = pick(0, 5), h = pick(0, 4), v = pick(1, 6), n = pick(0, 5), c = pick(1, 5);
    const int64_t s2[2] = {n, c}, s1n[1] = {n}, s1c[1] = {c}, s_bt[1] = {bt}, s_in[2] = {bt, h}, s_w[2] = {v, h},
                  s_sm[2] = {bt, v}, s_m[1] = {(bt + 7) / 8}, one[1] = {1}, s4[4] = {n, c, 2, 3}, s3[3] = {n, 2, 3};
    aclTensor *t[11] = {0};
    int op = (int)(rnd() % 13); /* 0-4: the first operators; 5-12: issue 30's */
    static const char *const ce_reductions[] = {"none", "mean", "sum", NULL, "batchmean", ""};
    char *ce_red = (char *)ce_reductions[rnd() % 6];
    aclDataType idt = (aclDataType[]){ACL_INT64, ACL_INT32, ACL_UINT8}[rnd() % 3];
    aclDataType fdt = (aclDataType[]){ACL_FLOAT, ACL_FLOAT16, ACL_BF16}[rnd() % 3];
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st;
    int64_t red = rnd() % 10 ? pick(0, 2) : pick(-1, 3);
    switch (op) {
    case 0:
    case 1:
    case 2: /* focal forward / backward, BCE backward over a (n, c) shape */
        for (int i = 0; i < 5; i++)
            t[i] = (clean || rnd() % 15) ? random_tensor(s2, 2, fdt) : NULL;
        if (op == 0)
            st = aclnnXlossSigmoidFocalLossGetWorkspaceSize(t[0], t[1], t[2], rnd() % 4 ? 2.0 : -1.0, 0.25, red, t[3],
                                                            &ws, &ex);
        else if (op == 1)
            st = aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize(t[4], t[0], t[1], t[2], 0.5, -1.0, red, t[3], &ws,
                                                                    &ex);
        else
            st = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(t[4], t[0], t[1], t[2], red, t[3], &ws, &ex);
        break;
    case 3: /* NLL backward */
        t[0] = random_tensor(red == 0 ? s1n : one, 1, fdt);
        t[1] = random_tensor(s2, 2, fdt);
        t[2] = random_tensor(s1n, 1, (aclDataType[]){ACL_INT64, ACL_INT32, ACL_UINT8}[rnd() % 3]);
        t[3] = random_tensor(s1c, 1, fdt);
        t[4] = random_tensor(one, 1, fdt);
        t[5] = random_tensor(s2, 2, fdt);
        st = aclnnNLLLossBackwardGetWorkspaceSize(t[0], t[1], t[2], t[3], red, pick(-101, 3), t[4], t[5], &ws, &ex);
        break;
    case 5: /* NLL forward: (N, C) or (C) self */
    case 6: /* NLL2d: (N, C, H, W) self */
        if (op == 5) {
            int batched = (int)(rnd() % 4 != 0);
            t[0] = batched ? random_tensor(s2, 2, fdt) : random_tensor(s1c, 1, fdt);
        } else
            t[0] = random_tensor(s4, 4, fdt);
        t[1] = op == 5 ? random_tensor(s1n, 1, idt) : random_tensor(s3, 3, idt);
        t[2] = random_tensor(s1c, 1, fdt);
        t[3] =
            red == 0 ? (op == 5 ? random_tensor(s1n, 1, fdt) : random_tensor(s3, 3, fdt)) : random_tensor(one, 0, fdt);
        t[4] = random_tensor(one, 1, fdt);
        st = (op == 5 ? aclnnNLLLossGetWorkspaceSize
                      : aclnnNLLLoss2dGetWorkspaceSize)(t[0], t[1], t[2], red, pick(-101, 3), t[3], t[4], &ws, &ex);
        break;
    case 7: /* BCE forward */
        for (int i = 0; i < 3; i++)
            t[i] = (clean || rnd() % 15) ? random_tensor(s2, 2, fdt) : NULL;
        t[3] = red == 0 ? random_tensor(s2, 2, fdt) : random_tensor(one, 0, fdt);
        st = aclnnBinaryCrossEntropyGetWorkspaceSize(t[0], t[1], t[2], red, t[3], &ws, &ex);
        break;
    case 8: /* BCE with logits, forward and backward: weight and pos_weight broadcast over the rows */
    case 9:
        t[0] = random_tensor(s2, 2, fdt);
        t[1] = random_tensor(s2, 2, fdt);
        t[2] = rnd() % 3 ? random_tensor(s1c, 1, fdt) : NULL;
        t[3] = rnd() % 3 ? random_tensor(s1c, 1, fdt) : NULL;
        t[5] = random_tensor(one, 0, fdt);
        if (op == 8) {
            t[4] = red == 0 ? random_tensor(s2, 2, fdt) : random_tensor(one, 0, fdt);
            st = aclnnBinaryCrossEntropyWithLogitsGetWorkspaceSize(t[0], t[1], t[2], t[3], red, t[4], &ws, &ex);
        } else {
            t[4] = random_tensor(s2, 2, fdt);
            st = aclnnBinaryCrossEntropyWithLogitsBackwardGetWorkspaceSize(t[5], t[0], t[1], t[2], t[3], red, t[4], &ws,
                                                                           &ex);
        }
        break;
    case 10: { /* cross entropy forward: the loss shapes follow the reduction string */
        int per_row = ce_red && strcmp(ce_red, "none") == 0;
        t[0] = random_tensor(s2, 2, ACL_FLOAT);
        t[1] = random_tensor(s1n, 1, rnd() % 2 ? ACL_INT64 : ACL_INT32);
        t[2] = rnd() % 2 ? random_tensor(s1c, 1, ACL_FLOAT) : NULL;
        t[3] = per_row ? random_tensor(s1n, 1, ACL_FLOAT) : random_tensor(one, 0, ACL_FLOAT);
        t[4] = random_tensor(s2, 2, ACL_FLOAT);
        t[5] = per_row ? random_tensor(s1n, 1, ACL_FLOAT) : random_tensor(one, 0, ACL_FLOAT);
        t[6] = random_tensor(s1n, 1, ACL_FLOAT);
        st = aclnnCrossEntropyLossGetWorkspaceSize(t[0], t[1], t[2], ce_red, pick(-101, 3), rnd() % 3 ? 0.0 : 0.2, 0.0,
                                                   false, t[3], t[4], t[5], t[6], &ws, &ex);
        break;
    }
    case 11: { /* cross entropy grad */
        int per_row = ce_red && strcmp(ce_red, "none") == 0;
        t[0] = per_row ? random_tensor(s1n, 1, ACL_FLOAT) : random_tensor(one, 0, ACL_FLOAT);
        t[1] = random_tensor(s2, 2, ACL_FLOAT);
        t[2] = random_tensor(s1n, 1, ACL_INT64);
        t[3] = rnd() % 2 ? random_tensor(s1c, 1, ACL_FLOAT) : NULL;
        t[4] = random_tensor(s2, 2, ACL_FLOAT);
        st = aclnnCrossEntropyLossGradGetWorkspaceSize(t[0], t[1], t[2], t[3], NULL, NULL, ce_red, pick(-101, 3),
                                                       rnd() % 3 ? 0.0 : 0.2, 0.0, t[4], &ws, &ex);
        break;
    }
    case 12: /* softmax cross entropy, dense labels */
        t[0] = random_tensor(s2, 2, fdt);
        t[1] = random_tensor(s2, 2, fdt);
        t[2] = random_tensor(s1n, 1, fdt);
        t[3] = random_tensor(s2, 2, fdt);
        st = aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize(t[0], t[1], t[2], t[3], &ws, &ex);
        break;
    default: { /* FLCE */
        aclDataType hdt = rnd() % 2 ? ACL_FLOAT16 : ACL_BF16;
        int packed = (int)(rnd() % 2);
        t[0] = random_tensor(s_bt, 1, ACL_FLOAT);
        t[1] = random_tensor(s_in, 2, hdt);
        t[2] = random_tensor(s_w, 2, hdt);
        t[3] = random_tensor(packed ? s_m : s_bt, 1, packed ? ACL_UINT8 : ACL_BOOL);
        t[4] = random_tensor(s_bt, 1, rnd() % 2 ? ACL_INT64 : ACL_INT32);
        int soft = (int)(rnd() % 2);
        if (soft)
            t[7] = random_tensor(s_sm, 2, ACL_FLOAT);
        else {
            t[5] = random_tensor(s_bt, 1, ACL_FLOAT);
            t[6] = random_tensor(s_bt, 1, ACL_FLOAT);
        }
        t[8] = random_tensor(s_in, 2, hdt);
        t[9] = random_tensor(s_w, 2, hdt);
        st = aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
            t[0], t[1], t[2], t[3], t[4], rnd() % 10 ? 0.0f : 0.5f, t[5], t[6], t[7], t[8], t[9], &ws, &ex);
    }
    }
    if (!known_status(st))
        FAIL("op %d phase one returned %d", op, st);
    if (st == ACLNN_SUCCESS) {
        accepted++;
        void *wsp = NULL;
        if (ws && aclrtMalloc(&wsp, ws, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS)
            FAIL("workspace malloc of %llu", (unsigned long long)ws);
        int repeat = (int)(rnd() % 3 == 0);
        if (repeat)
            aclSetAclOpExecutorRepeatable(ex);
        aclnnStatus (*run[])(void *, uint64_t, aclOpExecutor *,
                             aclrtStream) = {aclnnXlossSigmoidFocalLoss,
                                             aclnnXlossSigmoidFocalLossBackward,
                                             aclnnBinaryCrossEntropyBackward,
                                             aclnnNLLLossBackward,
                                             aclnnFusedLinearCrossEntropyLossGrad,
                                             aclnnNLLLoss,
                                             aclnnNLLLoss2d,
                                             aclnnBinaryCrossEntropy,
                                             aclnnBinaryCrossEntropyWithLogits,
                                             aclnnBinaryCrossEntropyWithLogitsBackward,
                                             aclnnCrossEntropyLoss,
                                             aclnnCrossEntropyLossGrad,
                                             aclnnSoftmaxCrossEntropyWithLogits};
        for (int k = 0; k < 1 + repeat; k++) {
            aclnnStatus r = run[op](wsp, ws, ex, stream);
            if (!known_status(r))
                FAIL("op %d phase two returned %d", op, r);
            ran_ok += r == ACLNN_SUCCESS;
        }
        if (repeat && aclDestroyAclOpExecutor(ex) != ACLNN_SUCCESS)
            FAIL("destroy repeatable executor");
        if (wsp)
            aclrtFree(wsp);
    }
    for (int i = 0; i < 11; i++)
        if (t[i])
            aclDestroyTensor(t[i]);
    aclGetRecentErrMsg();
}

/* ---- 2. threads ---------------------------------------------------------------------------- */

typedef struct {
    int id, iters;
    void *shared; /* freed by thread 0 while the others may run over it */
    const aclTensor *shared_tensor; /* read by every thread concurrently */
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    if (aclrtSetDevice(0) != ACL_SUCCESS) {
        FAIL("thread %d: set device", a->id);
        return NULL;
    }
    aclrtStream stream = NULL;
    aclrtCreateStream(&stream);
    const int64_t shape[1] = {256};
    for (int it = 0; it < a->iters; it++) {
        void *x = NULL, *o = NULL;
        aclrtMalloc(&x, 1024, ACL_MEM_MALLOC_HUGE_FIRST);
        aclrtMalloc(&o, 1024, ACL_MEM_MALLOC_HUGE_FIRST);
        float host[256];
        for (int i = 0; i < 256; i++)
            host[i] = (float)(i % 7) / 7.0f;
        aclrtMemcpy(x, 1024, host, 1024, ACL_MEMCPY_HOST_TO_DEVICE);
        int64_t stride[1] = {1};
        aclTensor *tx = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, x);
        aclTensor *ts = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, a->shared);
        aclTensor *to = aclCreateTensor(shape, 1, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 1, o);
        read_back(a->shared_tensor, "shared tensor"); /* the same tensor from every thread at once */
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        /* the shared block may already be freed: then phase one refuses (161002) */
        aclnnStatus st =
            aclnnXlossSigmoidFocalLossBackwardGetWorkspaceSize(tx, tx, ts ? ts : tx, NULL, 2.0, 0.25, 0, to, &ws, &ex);
        if (st == ACLNN_SUCCESS) {
            aclSetAclOpExecutorRepeatable(ex);
            for (int k = 0; k < 5; k++) {
                aclnnStatus r = aclnnXlossSigmoidFocalLossBackward(NULL, 0, ex, stream);
                if (r != ACLNN_SUCCESS && r != ACLNN_ERR_RUNTIME_ERROR)
                    FAIL("thread %d run: %d", a->id, r);
            }
            aclDestroyAclOpExecutor(ex);
        } else if (st != ACLNN_ERR_PARAM_INVALID) {
            FAIL("thread %d phase one: %d", a->id, st);
        }
        if (a->id == 0 && it == a->iters / 2 && aclrtFree(a->shared) != ACL_SUCCESS)
            FAIL("free shared");
        aclDestroyTensor(tx);
        if (ts)
            aclDestroyTensor(ts);
        aclDestroyTensor(to);
        aclrtFree(x);
        aclrtFree(o);
        aclGetRecentErrMsg();
    }
    aclrtDestroyStream(stream);
    aclrtResetDevice(0);
    return NULL;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 3000;
    if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
        printf("FAIL: init\n");
        return 1;
    }
    aclrtStream stream = NULL;
    aclrtCreateStream(&stream);
    for (int b = 0; b < NBUF; b++) {
        buf_size[b] = (size_t)pick(1024, 4096);
        aclrtMalloc(&bufs[b], buf_size[b], ACL_MEM_MALLOC_HUGE_FIRST);
        unsigned char *junk = malloc(buf_size[b]);
        for (size_t i = 0; i < buf_size[b]; i++)
            junk[i] = (unsigned char)(rnd() % 4 ? rnd() : (i % 4 == 3 ? 0x7F : 0xFF)); /* NaN/inf-heavy */
        aclrtMemcpy(bufs[b], buf_size[b], junk, buf_size[b], ACL_MEMCPY_HOST_TO_DEVICE);
        free(junk);
    }
    aclrtMalloc(&zeros_buf, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMemset(zeros_buf, 4096, 0, 4096);
    for (int i = 0; i < iters; i++)
        fuzz_one(stream);
    aclrtFree(zeros_buf);
    for (int b = 0; b < NBUF; b++)
        aclrtFree(bufs[b]);

    void *shared = NULL;
    aclrtMalloc(&shared, 1024, ACL_MEM_MALLOC_HUGE_FIRST);
    void *tbuf = NULL;
    aclrtMalloc(&tbuf, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    const int64_t tdims[2] = {2, 3}, tstrides[2] = {1, 2}, tstorage[1] = {16};
    aclTensor *shared_tensor = aclCreateTensor(tdims, 2, ACL_FLOAT, tstrides, 1, ACL_FORMAT_ND, tstorage, 1, tbuf);
    pthread_t th[4];
    worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg){i, 60, shared, shared_tensor};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    aclDestroyTensor(shared_tensor);
    aclrtFree(tbuf);

    aclrtDestroyStream(stream);
    int64_t live = xlossEmuLiveAllocations(XLOSS_EMU_LIVE_ALL);
    if (live != 0)
        FAIL("%lld live objects at the end", (long long)live);
    aclrtResetDevice(0);
    aclFinalize();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("stress passed: %d fuzz calls, %d accepted by phase one, %d runs\n", iters, accepted, ran_ok);
    return 0;
}
