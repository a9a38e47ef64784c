/* aclnnNLLLossBackward from C, the CANN way: the documented program flow (init, device, stream,
 * device memory, tensors, two-phase call, synchronize, copy back, release), then the ABI's
 * contract: CANN's tensor accessors, status codes for bad calls, executor reuse rules, the
 * workspace check, and no leaks over many cycles. It builds as C or C++ against xloss's headers and
 * links the emulator (examples/ascend_build_example.py). Against a CANN installation it builds
 * unchanged as C++ only (g++ -x c++): CANN's aclnn/acl_meta.h and aclnn_base.h are C++ headers
 * (<cstdint>, constexpr), so a C compiler rejects them.
 *
 * Exit status 0 when every check holds; each failed check prints a line starting "FAIL".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnn/opdev/op_errno.h" /* ACLNN_* status codes live here in CANN, not in aclnn_base.h */
#include "aclnnop/aclnn_fused_linear_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_nll_loss_backward.h"

/* Emulator-only leak counter, looked up weakly so the program also links against CANN. */
extern int64_t xlossEmuLiveAllocations(int32_t kind) __attribute__((weak));

static int failures = 0;

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) {                    \
            printf("FAIL: " __VA_ARGS__); \
            printf("\n");                 \
            failures++;                   \
        }                                 \
    } while (0)

#define CHECK_RET(expr)                                                                      \
    do {                                                                                     \
        int ret_ = (int)(expr);                                                              \
        if (ret_ != 0) {                                                                     \
            const char *m_ = aclGetRecentErrMsg();                                           \
            printf("FAIL: %s returned %d%s%s\n", #expr, ret_, m_ ? ": " : "", m_ ? m_ : ""); \
            failures++;                                                                      \
            return ret_;                                                                     \
        }                                                                                    \
    } while (0)

static int64_t shape_size(const int64_t *shape, size_t n)
{
    int64_t s = 1;
    for (size_t i = 0; i < n; i++)
        s *= shape[i];
    return s;
}

/* aclrtMalloc + H2D copy + aclCreateTensor with contiguous strides (the vendor samples' helper). */
static int create_tensor(const void *host, size_t elsize, const int64_t *shape, size_t ndim, aclDataType dt, void **dev,
                         aclTensor **tensor)
{
    size_t bytes = (size_t)shape_size(shape, ndim) * elsize;
    CHECK_RET(aclrtMalloc(dev, bytes ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST));
    if (host && bytes)
        CHECK_RET(aclrtMemcpy(*dev, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    int64_t strides[8];
    for (size_t i = 0; i < ndim; i++)
        strides[i] = 1;
    for (size_t i = ndim; i-- > 1;)
        strides[i - 1] = shape[i] * strides[i];
    *tensor = aclCreateTensor(shape, ndim, dt, strides, 0, ACL_FORMAT_ND, shape, ndim, *dev);
    return *tensor ? 0 : -1;
}

/* The NLL operands of the vendor's sample: self (2, 3), target (2), weight (3). */
typedef struct {
    void *dev[6];
    aclTensor *grad, *self, *target, *weight, *total, *out;
} nll_case;

static int nll_setup(nll_case *c, int64_t reduction)
{
    const int64_t grad_shape[1] = {reduction == 0 ? 2 : 1}, self_shape[2] = {2, 3}, target_shape[1] = {2},
                  weight_shape[1] = {3}, total_shape[1] = {1};
    const float grad[2] = {3.1f, 6.5f}, self[6] = {0, 1, 2, 3, 4, 5}, weight[3] = {1.1f, 1.2f, 1.3f}, total[1] = {2.4f};
    const int32_t target[2] = {0, 2};
    memset(c, 0, sizeof *c);
    if (create_tensor(grad, 4, grad_shape, 1, ACL_FLOAT, &c->dev[0], &c->grad) ||
        create_tensor(self, 4, self_shape, 2, ACL_FLOAT, &c->dev[1], &c->self) ||
        create_tensor(target, 4, target_shape, 1, ACL_INT32, &c->dev[2], &c->target) ||
        create_tensor(weight, 4, weight_shape, 1, ACL_FLOAT, &c->dev[3], &c->weight) ||
        create_tensor(total, 4, total_shape, 1, ACL_FLOAT, &c->dev[4], &c->total) ||
        create_tensor(NULL, 4, self_shape, 2, ACL_FLOAT, &c->dev[5], &c->out))
        return -1;
    return 0;
}

static void nll_teardown(nll_case *c)
{
    aclTensor *ts[6] = {c->grad, c->self, c->target, c->weight, c->total, c->out};
    for (int i = 0; i < 6; i++) {
        if (ts[i])
            CHECK(aclDestroyTensor(ts[i]) == ACLNN_SUCCESS, "aclDestroyTensor");
        if (c->dev[i])
            CHECK(aclrtFree(c->dev[i]) == ACL_SUCCESS, "aclrtFree");
    }
}

static int nll_read_out(nll_case *c, float out[6])
{
    CHECK_RET(aclrtMemcpy(out, 6 * sizeof(float), c->dev[5], 6 * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
    return 0;
}

/* 1. The documented flow, reduction none, and mean with a total weight. */
static int documented_flow(aclrtStream stream, int verbose)
{
    for (int64_t reduction = 0; reduction <= 1; reduction++) {
        nll_case c;
        if (nll_setup(&c, reduction) != 0) {
            nll_teardown(&c);
            return -1;
        }
        uint64_t ws_size = 0;
        aclOpExecutor *executor = NULL;
        CHECK_RET(aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.weight, reduction, -100, c.total,
                                                       c.out, &ws_size, &executor));
        void *ws = NULL;
        if (ws_size > 0)
            CHECK_RET(aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST));
        CHECK_RET(aclnnNLLLossBackward(ws, ws_size, executor, stream));
        CHECK_RET(aclrtSynchronizeStream(stream));
        float out[6];
        nll_read_out(&c, out);
        /* none: out[i, t_i] = -w[t_i] * g_i; mean: -w[t_i] * g / totalWeight */
        float e0 = reduction == 0 ? -1.1f * 3.1f : -1.1f * (3.1f / 2.4f);
        float e5 = reduction == 0 ? -1.3f * 6.5f : -1.3f * (3.1f / 2.4f);
        const float expect[6] = {e0, 0, 0, 0, 0, e5};
        for (int i = 0; i < 6; i++)
            CHECK(fabsf(out[i] - expect[i]) <= 1e-5f * (1 + fabsf(expect[i])),
                  "reduction %lld out[%d] = %g, expected %g", (long long)reduction, i, out[i], expect[i]);
        if (verbose)
            printf("reduction=%lld result: [%g, %g, %g; %g, %g, %g]\n", (long long)reduction, out[0], out[1], out[2],
                   out[3], out[4], out[5]);
        if (ws)
            CHECK(aclrtFree(ws) == ACL_SUCCESS, "free workspace");
        nll_teardown(&c);
    }
    return 0;
}

/* 1b. CANN's tensor accessors read back what aclCreateTensor was given (a strided view here). */
static void accessors(void)
{
    float host[12] = {0};
    void *dev = NULL;
    if (aclrtMalloc(&dev, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) {
        CHECK(0, "accessor setup");
        return;
    }
    const int64_t dims[2] = {2, 3}, strides[2] = {1, 4}, storage[1] = {12};
    aclTensor *t = aclCreateTensor(dims, 2, ACL_FLOAT16, strides, 1, ACL_FORMAT_ND, storage, 1, dev);
    int64_t *got = NULL, offset = -1;
    uint64_t n = 0;
    aclDataType dt = ACL_DT_UNDEFINED;
    aclFormat fmt = ACL_FORMAT_UNDEFINED;
    void *addr = NULL;
    CHECK(t != NULL, "aclCreateTensor (a transposed view at offset 1)");
    CHECK(aclGetViewShape(t, &got, &n) == ACLNN_SUCCESS && n == 2 && got[0] == 2 && got[1] == 3, "aclGetViewShape");
    free(got); /* the accessors allocate the arrays they return */
    got = NULL;
    CHECK(aclGetViewStrides(t, &got, &n) == ACLNN_SUCCESS && n == 2 && got[0] == 1 && got[1] == 4, "aclGetViewStrides");
    free(got);
    got = NULL;
    CHECK(aclGetStorageShape(t, &got, &n) == ACLNN_SUCCESS && n == 1 && got[0] == 12, "aclGetStorageShape");
    free(got);
    CHECK(aclGetViewOffset(t, &offset) == ACLNN_SUCCESS && offset == 1, "aclGetViewOffset");
    CHECK(aclGetDataType(t, &dt) == ACLNN_SUCCESS && dt == ACL_FLOAT16, "aclGetDataType");
    CHECK(aclGetFormat(t, &fmt) == ACLNN_SUCCESS && fmt == ACL_FORMAT_ND, "aclGetFormat");
    CHECK(aclGetRawTensorAddr(t, &addr) == ACLNN_SUCCESS && addr == dev, "aclGetRawTensorAddr");
    CHECK(aclGetViewOffset(NULL, &offset) == ACLNN_ERR_PARAM_NULLPTR, "aclGetViewOffset(NULL)");
    CHECK(aclDestroyTensor(t) == ACLNN_SUCCESS, "aclDestroyTensor");
    CHECK(aclrtFree(dev) == ACL_SUCCESS, "aclrtFree");
}

/* 2. Parameter checks of phase one. */
static void bad_calls(void)
{
    nll_case c;
    if (nll_setup(&c, 0) != 0) {
        nll_teardown(&c);
        CHECK(0, "setup for the bad calls");
        return;
    }
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st =
        aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, NULL, c.weight, 0, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_ERR_PARAM_NULLPTR, "null target gave %d, expected 161001", st);
    st = aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.weight, 0, -100, NULL, c.out, &ws, &ex);
    CHECK(st == ACLNN_ERR_PARAM_NULLPTR, "null totalWeight gave %d, expected 161001", st);
    /* a target of FLOAT dtype */
    st = aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.weight, c.weight, 0, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_ERR_PARAM_INVALID, "FLOAT target gave %d, expected 161002", st);
    /* weight of the wrong length: use the (2) gradOutput as weight */
    st = aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.grad, 0, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_ERR_PARAM_INVALID, "weight of shape (2) gave %d, expected 161002", st);
    st = aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.weight, 3, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_ERR_PARAM_INVALID, "reduction 3 gave %d, expected 161002", st);
    const char *msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "reduction"), "aclGetRecentErrMsg after a bad reduction: %s", msg ? msg : "(null)");
    CHECK(ex == NULL, "a failed phase one handed out an executor");
    nll_teardown(&c);
}

/* 3. Executors: single use, repeatable, destroyed. */
static void executors(aclrtStream stream)
{
    nll_case c;
    if (nll_setup(&c, 0) != 0) {
        nll_teardown(&c);
        CHECK(0, "setup for the executor checks");
        return;
    }
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st =
        aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.weight, 0, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_SUCCESS && ws == 0, "phase one: %d", st);
    CHECK(aclnnNLLLossBackward(NULL, 0, ex, stream) == ACLNN_SUCCESS, "first run");
    st = aclnnNLLLossBackward(NULL, 0, ex, stream);
    CHECK(st != ACLNN_SUCCESS, "a second run of a single-use executor succeeded");
    printf("second run of a single-use executor: %d\n", st);

    st = aclnnNLLLossBackwardGetWorkspaceSize(c.grad, c.self, c.target, c.weight, 0, -100, c.total, c.out, &ws, &ex);
    CHECK(st == ACLNN_SUCCESS, "phase one (repeatable)");
    CHECK(aclSetAclOpExecutorRepeatable(ex) == ACLNN_SUCCESS, "aclSetAclOpExecutorRepeatable");
    for (int i = 0; i < 100; i++) {
        float zero[6] = {0};
        aclrtMemcpy(c.dev[5], sizeof zero, zero, sizeof zero, ACL_MEMCPY_HOST_TO_DEVICE);
        st = aclnnNLLLossBackward(NULL, 0, ex, stream);
        float out[6];
        nll_read_out(&c, out);
        CHECK(st == ACLNN_SUCCESS && fabsf(out[0] + 1.1f * 3.1f) < 1e-5f, "repeatable run %d: %d", i, st);
    }
    CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "aclDestroyAclOpExecutor");
    CHECK(aclDestroyAclOpExecutor(ex) != ACLNN_SUCCESS, "destroying an executor twice succeeded");
    CHECK(aclDestroyAclOpExecutor(NULL) == ACLNN_ERR_INNER_NULLPTR, "destroying NULL");
    nll_teardown(&c);
}

/* 4. The FLCE operator: label smoothing must be 0, and a too-small workspace is refused. The
 * high-performance (softmax) mode needs a vocabulary shard of at least 128: three live columns,
 * the rest zero softmax over zero weight rows. */
static void flce_checks(aclrtStream stream)
{
    enum { BT = 2, H = 2, V = 128 };
    const int64_t s_bt[1] = {BT}, s_in[2] = {BT, H}, s_w[2] = {V, H}, s_mask[1] = {1}, s_sm[2] = {BT, V};
    static const float live[BT][3] = {{0.2f, 0.3f, 0.5f}, {0.1f, 0.1f, 0.8f}};
    float grad[BT] = {1.0f, -0.5f}, softmax[BT * V] = {0};
    uint16_t input[BT * H], weight[V * H];
    for (int i = 0; i < BT; i++)
        for (int v = 0; v < 3; v++)
            softmax[i * V + v] = live[i][v];
    for (int i = 0; i < BT * H; i++)
        input[i] = aclFloatToFloat16(0.25f * (float)(i + 1));
    for (int i = 0; i < V * H; i++)
        weight[i] = aclFloatToFloat16(i < 3 * H ? 0.5f - 0.125f * (float)i : 0.0f);
    uint8_t mask[1] = {0x2}; /* token 1's target is in another shard (bit 1, LSB first) */
    int32_t masked_target[BT] = {2, 0};
    void *dev[8] = {0};
    aclTensor *t[8] = {0};
    if (create_tensor(grad, 4, s_bt, 1, ACL_FLOAT, &dev[0], &t[0]) ||
        create_tensor(input, 2, s_in, 2, ACL_FLOAT16, &dev[1], &t[1]) ||
        create_tensor(weight, 2, s_w, 2, ACL_FLOAT16, &dev[2], &t[2]) ||
        create_tensor(mask, 1, s_mask, 1, ACL_UINT8, &dev[3], &t[3]) ||
        create_tensor(masked_target, 4, s_bt, 1, ACL_INT32, &dev[4], &t[4]) ||
        create_tensor(softmax, 4, s_sm, 2, ACL_FLOAT, &dev[5], &t[5]) ||
        create_tensor(NULL, 2, s_in, 2, ACL_FLOAT16, &dev[6], &t[6]) ||
        create_tensor(NULL, 2, s_w, 2, ACL_FLOAT16, &dev[7], &t[7])) {
        CHECK(0, "FLCE setup");
    } else {
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        aclnnStatus st = aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], 0.1f, NULL,
                                                                              NULL, t[5], t[6], t[7], &ws, &ex);
        CHECK(st == ACLNN_ERR_PARAM_INVALID, "labelSmoothing 0.1 gave %d, expected 161002", st);
        st = aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], 0.0f, NULL, NULL, NULL,
                                                                  t[6], t[7], &ws, &ex);
        CHECK(st == ACLNN_ERR_PARAM_NULLPTR, "recompute mode without its row tensors gave %d, expected 161001", st);
        st = aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], 0.0f, NULL, NULL, t[5],
                                                                  t[6], t[7], &ws, &ex);
        CHECK(st == ACLNN_SUCCESS && ws > 0, "FLCE phase one: %d, workspace %llu", st, (unsigned long long)ws);
        void *wsp = NULL;
        if (st == ACLNN_SUCCESS && aclrtMalloc(&wsp, ws, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS) {
            CHECK(aclSetAclOpExecutorRepeatable(ex) == ACLNN_SUCCESS, "repeatable");
            st = aclnnFusedLinearCrossEntropyLossGrad(wsp, ws - 1, ex, stream);
            CHECK(st == ACLNN_ERR_PARAM_INVALID, "a workspace one byte short gave %d, expected 161002", st);
            st = aclnnFusedLinearCrossEntropyLossGrad(wsp, ws, ex, stream);
            CHECK(st == ACLNN_SUCCESS, "FLCE run with the full workspace: %d", st);
            CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS, "synchronize");
            uint16_t ig[BT * H];
            aclrtMemcpy(ig, sizeof ig, dev[6], sizeof ig, ACL_MEMCPY_DEVICE_TO_HOST);
            /* row 0: G = softmax * grad with 1 subtracted at column 2; input_grad = G @ weight */
            float g0[3] = {0.2f, 0.3f, 0.5f - 1.0f}, e00 = 0.0f;
            for (int v = 0; v < 3; v++)
                e00 += g0[v] * aclFloat16ToFloat(weight[v * H]);
            CHECK(fabsf(aclFloat16ToFloat(ig[0]) - e00) < 2e-3f, "input_grad[0, 0] = %g, expected %g",
                  aclFloat16ToFloat(ig[0]), e00);
            CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS, "destroy FLCE executor");
            CHECK(aclrtFree(wsp) == ACL_SUCCESS, "free FLCE workspace");
        }
    }
    for (int i = 0; i < 8; i++) {
        if (t[i])
            aclDestroyTensor(t[i]);
        if (dev[i])
            aclrtFree(dev[i]);
    }
}

int main(void)
{
    int32_t device = 0;
    aclrtStream stream = NULL;
    CHECK_RET(aclInit(NULL));
    CHECK_RET(aclrtSetDevice(device));
    CHECK_RET(aclrtCreateStream(&stream));
    int64_t live0 = xlossEmuLiveAllocations ? xlossEmuLiveAllocations(4) : 0;

    if (documented_flow(stream, 1) == 0) {
        accessors();
        bad_calls();
        executors(stream);
        flce_checks(stream);
        /* 5. many full cycles: nothing may accumulate */
        for (int i = 0; i < 200; i++)
            documented_flow(stream, 0);
    }
    if (xlossEmuLiveAllocations) {
        int64_t live = xlossEmuLiveAllocations(4);
        CHECK(live == live0, "live objects: %lld before, %lld after", (long long)live0, (long long)live);
        printf("live emulator objects after the checks: %lld\n", (long long)(live - live0));
    }

    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(device) == ACL_SUCCESS, "aclrtResetDevice");
    CHECK(aclFinalize() == ACL_SUCCESS, "aclFinalize");
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
