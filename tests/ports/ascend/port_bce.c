/* aclnnBinaryCrossEntropyBackward: grad * weight * (x - y) / max(x(1-x), 1e-12), / n for mean.
 *
 * Seeded bugs here: BUG_BCE_EPS_ADDED, BUG_BCE_MEAN_COUNT_24BIT (above 2^24 elements), BUG_BCE_CONTIGUOUS_FAST_PATH (a stride/offset bug: only
 * strided tensors show it); BUG_HALF_OUTPUT_TRUNC, in port.h, reaches its output cast.
 *
 * Hostile ports (HOSTILE_*, tests/ports/test_hostile_ports.py): right numbers, but the operator
 * breaks the process or the two-phase contract instead; each lives in one place, marked HOSTILE:. */
#include "port.h"

#if defined(HOSTILE_ROUND_UPWARD) || defined(HOSTILE_FTZ_DAZ) || defined(HOSTILE_SIGNAL_HANDLER) ||            \
    defined(HOSTILE_LEAK) || defined(HOSTILE_HANG) || defined(HOSTILE_ASYNC_CRASH) || defined(HOSTILE_FORK) || \
    defined(HOSTILE_HELPER) || defined(HOSTILE_THREAD_LEFT)
#define HOSTILE_AFTER_KERNEL 1
#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef HOSTILE_FTZ_DAZ
#include <xmmintrin.h>
#endif
#if defined(HOSTILE_HELPER) && defined(__linux__)
#include <sys/prctl.h>
#endif

#if defined(HOSTILE_ASYNC_CRASH) || defined(HOSTILE_THREAD_LEFT)
static void *hostile_thread(void *arg)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (arg)
        *(volatile int *)0 = 1; /* a segfault on a thread, after the call has returned */
    for (;;)
        pause();
    return NULL;
}
#endif

#ifdef HOSTILE_LEAK
void *volatile hostile_last_block; /* the last block only, so that the compiler keeps the malloc */
#endif

#ifdef HOSTILE_SIGNAL_HANDLER
static void hostile_handler(int sig) { (void)sig; }
#endif

/* What the operator does at the end of phase two, after writing correct results. */
static void hostile_after_kernel(const port_tensor *x)
{
#ifdef HOSTILE_ROUND_UPWARD
    fesetround(FE_UPWARD); /* HOSTILE: the rounding mode left changed */
#endif
#ifdef HOSTILE_FTZ_DAZ
    _mm_setcsr(_mm_getcsr() | 0x8040); /* HOSTILE: flush-to-zero and denormals-are-zero left on */
#endif
#ifdef HOSTILE_SIGNAL_HANDLER
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hostile_handler;
    sigaction(SIGUSR2, &sa, NULL); /* HOSTILE: a signal handler installed for the whole process */
#endif
#ifdef HOSTILE_LEAK
    char *block = malloc((size_t)4 << 20); /* HOSTILE: 4 MiB per call, never freed */
    if (block)
        memset(block, 1, (size_t)4 << 20);
    hostile_last_block = block;
#endif
#ifdef HOSTILE_HANG
    if (x->dtype == ACL_FLOAT) { /* HOSTILE: never returns on float32, and ignores SIGTERM */
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        for (;;)
            pause();
    }
#endif
#if defined(HOSTILE_ASYNC_CRASH) || defined(HOSTILE_THREAD_LEFT)
    pthread_t th; /* HOSTILE: a thread left running (ASYNC_CRASH: it segfaults 20 ms later) */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
#ifdef HOSTILE_ASYNC_CRASH
    void *crash = (void *)1;
#else
    void *crash = NULL;
#endif
    pthread_create(&th, &attr, hostile_thread, crash);
    pthread_attr_destroy(&attr);
#endif
#ifdef HOSTILE_FORK
    static int forked; /* once per process (and so once in all: the copy inherits the flag), never a fork bomb */
    if (!forked) {
        forked = 1;
        fork(); /* HOSTILE: the caller forked; both processes carry on */
    }
#endif
#ifdef HOSTILE_HELPER
    static int helper_started;
    if (!helper_started) { /* HOSTILE: a long-lived helper process (it keeps every inherited descriptor) */
        helper_started = 1;
        if (fork() == 0) {
#ifdef __linux__
            prctl(PR_SET_NAME, "xloss-helper"); /* (the test looks for it by this name) */
#endif
            for (;;)
                pause();
        }
    }
#endif
    (void)x;
}
#endif

#define BCE_EPS 1e-12f /* the vendor's fixed clamp, as PyTorch's */

enum { B_SELF, B_TARGET, B_WEIGHT, B_GRAD, B_OUT };

typedef struct {
    port_tensor t[5];
    int64_t reduction;
} bce_plan;

#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
static int same_dims(const port_tensor *a, const port_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}
#endif

static aclnnStatus bce_kernel(const void *vplan, void *workspace, uint64_t workspaceSize)
{
    (void)workspace;
    (void)workspaceSize;
    const bce_plan *p = vplan;
    const port_tensor *x = &p->t[B_SELF];
    const port_tensor *ops[5] = {x, &p->t[B_TARGET], &p->t[B_WEIGHT], &p->t[B_GRAD], &p->t[B_OUT]};
    port_walk w;
    port_walk_init(&w, x, ops, 5);
    int64_t n = x->numel;
#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
    /* BUG: a fast path for the common call, where target and out have self's shape: the three are
     * indexed as contiguous runs from their view offsets. Right for compact tensors (all xloss check
     * passes by default); wrong for any other stride. */
    int fast = same_dims(&p->t[B_TARGET], x) && same_dims(&p->t[B_OUT], x);
#endif
    for (int64_t i = 0; i < n; i++, port_walk_next(&w)) {
#ifdef BUG_BCE_CONTIGUOUS_FAST_PATH
        if (fast) {
            w.at[B_SELF] = x->offset + i;
            w.at[B_TARGET] = p->t[B_TARGET].offset + i;
            w.at[B_OUT] = p->t[B_OUT].offset + i;
        }
#endif
        float xv = port_load(x, w.at[B_SELF]), yv = port_load(&p->t[B_TARGET], w.at[B_TARGET]);
#ifdef BUG_BCE_EPS_ADDED
        /* BUG: the epsilon is added (the FT78NE manual's form) where the op declares a clamp. */
        float denom = xv * (1.0f - xv) + BCE_EPS;
#else
        float denom = fmaxf(xv * (1.0f - xv), BCE_EPS);
#endif
        float v = (xv - yv) / denom;
        if (p->t[B_WEIGHT].present)
            v *= port_load(&p->t[B_WEIGHT], w.at[B_WEIGHT]);
        float g = port_load(&p->t[B_GRAD], w.at[B_GRAD]);
        /* mean: (g / n) * value in float, as the vector unit computes (g / n may underflow: allowed) */
#ifdef BUG_BCE_MEAN_COUNT_24BIT
        /* BUG: the tiling hands the kernel the element count in a 24-bit field: above 2^24 elements
         * the mean divides by the count modulo 2^24. */
        float scale = p->reduction == 1 ? (float)(n & 0xFFFFFF) : 1.0f;
#else
        float scale = p->reduction == 1 ? (float)n : 1.0f;
#endif
#ifdef HOSTILE_PLAN_CONSUMED
        /* HOSTILE: the kernel consumes its tiling data (the reduction is "applied" once): a repeatable
         * executor's second run gives the unscaled sum */
        if (i == n - 1)
            ((bce_plan *)vplan)->reduction = 0;
#endif
        float result = g / scale * v;
#ifdef HOSTILE_PHASE_ONE_WRITE
        /* HOSTILE: adds into out, which phase one zeroed */
        result = port_load(&p->t[B_OUT], w.at[B_OUT]) + result;
#endif
        port_store(&p->t[B_OUT], w.at[B_OUT], result, ELEMENTWISE_OUT_ROUND);
    }
#ifdef HOSTILE_AFTER_KERNEL
    hostile_after_kernel(x);
#endif
    return ACLNN_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *target, const aclTensor *weightOptional,
    int64_t reduction, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBinaryCrossEntropyBackwardGetWorkspaceSize";
    static const char *const names[5] = {"self", "target", "weightOptional", "gradOutput", "out"};
    port_phase_one_start(workspaceSize, executor);
    PORT_NOT_NULL(api, gradOutput, "gradOutput");
    PORT_NOT_NULL(api, self, "self");
    PORT_NOT_NULL(api, target, "target");
    PORT_NOT_NULL(api, out, "out");
    PORT_NOT_NULL(api, workspaceSize, "workspaceSize");
    PORT_NOT_NULL(api, executor, "executor");
    bce_plan p;
    memset(&p, 0, sizeof p);
    const aclTensor *tensors[5] = {self, target, weightOptional, gradOutput, out};
    for (int k = 0; k < 5; k++) {
        PORT_TRY(port_describe(api, names[k], tensors[k], &p.t[k]));
        PORT_TRY(port_need_float(api, names[k], &p.t[k]));
    }
    PORT_TRY(port_need_broadcast(api, "target", &p.t[B_TARGET], &p.t[B_SELF]));
    PORT_TRY(port_need_broadcast(api, "weightOptional", &p.t[B_WEIGHT], &p.t[B_SELF]));
    PORT_TRY(port_need_broadcast(api, "gradOutput", &p.t[B_GRAD], &p.t[B_SELF]));
    PORT_TRY(port_need_same_shape(api, "out", &p.t[B_OUT], &p.t[B_SELF]));
    PORT_TRY(port_need_reduction(api, reduction));
    p.reduction = reduction;
#ifdef HOSTILE_PHASE_ONE_WRITE
    /* HOSTILE: phase one zeroes out (on an NPU it runs on the host and cannot write device memory) */
    for (int64_t k = 0; k < p.t[B_OUT].numel; k++)
        port_store(&p.t[B_OUT], port_element_at(&p.t[B_OUT], k), 0.0f, PORT_ROUND_RINT);
#endif
    return port_create_executor("aclnnBinaryCrossEntropyBackward", p.t, names, 5, &p, sizeof p, bce_kernel, 0,
                                workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnBinaryCrossEntropyBackward(void *workspace, uint64_t workspaceSize,
                                                                aclOpExecutor *executor, aclrtStream stream)
{
    return xlossEmuRunExecutor("aclnnBinaryCrossEntropyBackward", workspace, workspaceSize, executor, stream);
}
