/*
 * xloss_runner (Ascend aclnn convention): runs the calls `xloss check --export` recorded, on the target.
 *
 * OURS: xloss's on-target runner, no vendor publishes it. Plain C99: the CANN headers and libc only.
 *
 *     xloss_runner DIR      reads DIR/cases.bin, writes DIR/out/results.bin
 *
 * As an NPU program does and as the host adapter (backends/ascend_aclnn/runtime.py) does: aclInit,
 * aclrtSetDevice, a stream; per call, device memory from aclrtMalloc with guard bytes around each
 * buffer, the recorded content copied in with aclrtMemcpy, tensors from aclCreateTensor (shape,
 * strides, offset, storage shape as recorded), phase one (<op>GetWorkspaceSize), a guarded
 * workspace, phase two, aclrtSynchronizeStream; then the outputs, changed guards and changed
 * inputs are copied back and written, with the status, the phase it came from and the time.
 * Calls are streamed one at a time: host memory is a fixed 4 KiB chunk (docs/on-target.md).
 *
 * runner_calls.h (written by the export) has one line per operator the cases call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnn/acl_meta.h"
#include "aclnnop/aclnn_binary_cross_entropy.h"
#include "aclnnop/aclnn_binary_cross_entropy_backward.h"
#include "aclnnop/aclnn_binary_cross_entropy_with_logits.h"
#include "aclnnop/aclnn_binary_cross_entropy_with_logits_backward.h"
#include "aclnnop/aclnn_cross_entropy_loss.h"
#include "aclnnop/aclnn_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_fused_cross_entropy_loss_with_max_sum.h"
#include "aclnnop/aclnn_fused_linear_cross_entropy_loss_grad.h"
#include "aclnnop/aclnn_fused_linear_online_max_sum.h"
#include "aclnnop/aclnn_nll_loss.h"
#include "aclnnop/aclnn_nll_loss2d.h"
#include "aclnnop/aclnn_nll_loss2d_backward.h"
#include "aclnnop/aclnn_nll_loss_backward.h"
#include "aclnnop/aclnn_sigmoid_focal_loss.h"
#include "aclnnop/aclnn_sigmoid_focal_loss_grad.h"
#include "aclnnop/aclnn_softmax_cross_entropy_with_logits.h"
#include "aclnnop/aclnn_xloss_sigmoid_focal_loss.h"
#include "aclnnop/aclnn_xloss_sigmoid_focal_loss_backward.h"

#ifndef XLOSS_RUNNER_NOW_NS
#define XLOSS_RUNNER_NOW_NS() ((uint64_t)clock() * (1000000000u / CLOCKS_PER_SEC))
#endif

#define MAX_ARGS 24
#define MAX_DIMS 8
#define MAX_NAME 64
#define MAX_STRING 63 /* export_format.MAX_STRING */
#define CHUNK 4096
#define GUARD_FILL 0xA5 /* the host adapter's guard byte (runtime.py) */
#define WORKSPACE_GUARD 64

#define RUNNER_NO_MEMORY (-3)
#define RUNNER_NOT_LINKED (-4)
#define RUNNER_NO_TENSOR (-5)

enum {
    ARG_INT = 0,
    ARG_FLOAT = 1,
    ARG_NULL = 2,
    ARG_BUFFER = 3,
    ARG_INT64 = 4,
    ARG_DOUBLE = 5,
    ARG_TENSOR = 6,
    ARG_STRING = 7, /* a C string (CANN's reduction names): u8 length, then printable ASCII, no NUL */
    ARG_BOOL = 8    /* a C bool: one byte, 0 or 1 */
};

typedef struct {
    int kind;
    int32_t i;
    float f;
    int64_t l;
    double d;
    char s[MAX_STRING + 1];
    int b;
    int output;
    size_t extent, front, back;
    long data_at;
    void *base; /* device memory: front guard + body + back guard */
    /* a tensor */
    uint32_t buffer;
    int32_t dtype, fmt;
    int ndim, sndim;
    int64_t dims[MAX_DIMS], strides[MAX_DIMS], sdims[MAX_DIMS], offset;
    aclTensor *tensor;
} Arg;

typedef struct {
    uint32_t index, runs;
    char name[MAX_NAME + 1];
    int nargs;
    Arg a[MAX_ARGS];
} Call;

static FILE *in_file;
static aclrtStream stream;
static unsigned char chunk[CHUNK], chunk2[CHUNK];

static void die(const char *what)
{
    fprintf(stderr, "xloss_runner: %s\n", what);
    exit(2);
}

static void read_exact(void *dst, size_t n)
{
    if (fread(dst, 1, n, in_file) != n)
        die("cases.bin ends inside a record (truncated?)");
}

static uint64_t read_u(int bytes)
{
    unsigned char b[8];
    uint64_t v = 0;
    int i;
    read_exact(b, (size_t)bytes);
    for (i = bytes - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static void write_u(FILE *f, uint64_t v, int bytes)
{
    unsigned char b[8];
    int i;
    for (i = 0; i < bytes; i++) {
        b[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
    fwrite(b, 1, (size_t)bytes, f);
}

static unsigned char *at(void *base, size_t offset) { return (unsigned char *)base + offset; }

static void to_device(void *dst, const void *src, size_t n)
{
    if (n && aclrtMemcpy(dst, n, src, n, ACL_MEMCPY_HOST_TO_DEVICE) != 0)
        die("aclrtMemcpy to the device failed");
}

static void from_device(void *dst, const void *src, size_t n)
{
    if (n && aclrtMemcpy(dst, n, src, n, ACL_MEMCPY_DEVICE_TO_HOST) != 0)
        die("aclrtMemcpy from the device failed");
}

static void fill_guard(void *p, size_t n)
{
    size_t done;
    memset(chunk, GUARD_FILL, CHUNK);
    for (done = 0; done < n; done += CHUNK)
        to_device(at(p, done), chunk, n - done < CHUNK ? n - done : CHUNK);
}

static int guard_intact(void *p, size_t n)
{
    size_t done, i;
    for (done = 0; done < n; done += CHUNK) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        from_device(chunk, at(p, done), k);
        for (i = 0; i < k; i++)
            if (chunk[i] != GUARD_FILL)
                return 0;
    }
    return 1;
}

/* device bytes [p, p + n) to the results file */
static void copy_out(FILE *out, void *p, size_t n)
{
    size_t done;
    for (done = 0; done < n; done += CHUNK) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        from_device(chunk, at(p, done), k);
        fwrite(chunk, 1, k, out);
    }
}

static void seek(long where)
{
    if (fseek(in_file, where, SEEK_SET) != 0)
        die("cannot seek in cases.bin");
}

static void load_body(const Arg *a)
{
    long here = ftell(in_file);
    size_t done;
    seek(a->data_at);
    for (done = 0; done < a->extent; done += CHUNK) {
        size_t k = a->extent - done < CHUNK ? a->extent - done : CHUNK;
        read_exact(chunk, k);
        to_device(at(a->base, a->front + done), chunk, k);
    }
    seek(here);
}

static int body_unchanged(const Arg *a)
{
    long here = ftell(in_file);
    size_t done;
    int same = 1;
    seek(a->data_at);
    for (done = 0; done < a->extent && same; done += CHUNK) {
        size_t k = a->extent - done < CHUNK ? a->extent - done : CHUNK;
        read_exact(chunk, k);
        from_device(chunk2, at(a->base, a->front + done), k);
        same = memcmp(chunk, chunk2, k) == 0;
    }
    seek(here);
    return same;
}

static void read_dims(int64_t *dst, int n)
{
    int i;
    for (i = 0; i < n; i++)
        dst[i] = (int64_t)read_u(8);
}

static int read_call(Call *c)
{
    unsigned char tag[4];
    int i, len;
    if (fread(tag, 1, 4, in_file) != 4)
        return 0;
    if (memcmp(tag, "CALL", 4) != 0)
        die("cases.bin: a record does not start with CALL (not a cases file, or corrupt)");
    c->index = (uint32_t)read_u(4);
    c->runs = (uint32_t)read_u(4);
    (void)read_u(4); /* core: not used by this convention */
    len = (int)read_u(1);
    if (len > MAX_NAME)
        die("cases.bin: operator name too long");
    read_exact(c->name, (size_t)len);
    c->name[len] = '\0';
    c->nargs = (int)read_u(1);
    if (c->nargs > MAX_ARGS)
        die("cases.bin: too many arguments");
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        memset(a, 0, sizeof *a);
        a->kind = (int)read_u(1);
        switch (a->kind) {
        case ARG_INT:
            a->i = (int32_t)(uint32_t)read_u(4);
            break;
        case ARG_FLOAT: {
            uint32_t bits = (uint32_t)read_u(4);
            memcpy(&a->f, &bits, sizeof a->f);
            break;
        }
        case ARG_INT64:
            a->l = (int64_t)read_u(8);
            break;
        case ARG_DOUBLE: {
            uint64_t bits = read_u(8);
            memcpy(&a->d, &bits, sizeof a->d);
            break;
        }
        case ARG_NULL:
            break;
        case ARG_STRING: {
            size_t n = (size_t)read_u(1), k;
            if (n > MAX_STRING)
                die("cases.bin: a string argument longer than 63 bytes");
            read_exact(a->s, n);
            a->s[n] = '\0';
            for (k = 0; k < n; k++) /* data for the operator, never interpreted here: printable ASCII only */
                if (a->s[k] < 0x20 || a->s[k] > 0x7e)
                    die("cases.bin: a string argument with a byte that is not printable ASCII");
            break;
        }
        case ARG_BOOL:
            a->b = (int)read_u(1);
            if (a->b != 0 && a->b != 1)
                die("cases.bin: a bool argument that is neither 0 nor 1");
            break;
        case ARG_BUFFER:
            a->output = (int)read_u(1);
            a->extent = (size_t)read_u(8);
            a->front = (size_t)read_u(8);
            a->back = (size_t)read_u(8);
            a->data_at = ftell(in_file);
            if (a->data_at < 0 || fseek(in_file, (long)a->extent, SEEK_CUR) != 0)
                die("cases.bin: cannot skip a buffer's content");
            break;
        case ARG_TENSOR:
            a->buffer = (uint32_t)read_u(4);
            a->dtype = (int32_t)(uint32_t)read_u(4);
            a->fmt = (int32_t)(uint32_t)read_u(4);
            a->ndim = (int)read_u(1);
            if (a->ndim > MAX_DIMS || (int)a->buffer >= i || c->a[a->buffer].kind != ARG_BUFFER)
                die("cases.bin: a tensor with too many dimensions or no buffer before it");
            read_dims(a->dims, a->ndim);
            read_dims(a->strides, a->ndim);
            a->offset = (int64_t)read_u(8);
            a->sndim = (int)read_u(1);
            if (a->sndim > MAX_DIMS)
                die("cases.bin: a tensor storage with too many dimensions");
            read_dims(a->sdims, a->sndim);
            break;
        default:
            die("cases.bin: unknown argument kind");
        }
    }
    return 1;
}

static int allocate(Call *c)
{
    int i;
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        size_t total = a->front + a->extent + a->back;
        if (a->kind != ARG_BUFFER)
            continue;
        if (aclrtMalloc(&a->base, total ? total : 1, ACL_MEM_MALLOC_HUGE_FIRST) != 0) {
            a->base = NULL;
            return RUNNER_NO_MEMORY;
        }
    }
    return 0;
}

static void release(Call *c)
{
    int i;
    for (i = 0; i < c->nargs; i++)
        if (c->a[i].kind == ARG_BUFFER && c->a[i].base != NULL) {
            aclrtFree(c->a[i].base);
            c->a[i].base = NULL;
        }
}

/* guards and content of every buffer, then the tensors over them; 0 or a runner status */
static int arm(Call *c)
{
    int i;
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        if (a->kind == ARG_BUFFER) {
            fill_guard(a->base, a->front);
            load_body(a);
            fill_guard(at(a->base, a->front + a->extent), a->back);
        }
    }
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        const Arg *b;
        if (a->kind != ARG_TENSOR)
            continue;
        b = &c->a[a->buffer];
        a->tensor = aclCreateTensor(a->dims, (uint64_t)a->ndim, (aclDataType)a->dtype, a->strides, a->offset,
                                    (aclFormat)a->fmt, a->sdims, (uint64_t)a->sndim, at(b->base, b->front));
        if (a->tensor == NULL)
            return RUNNER_NO_TENSOR;
    }
    return 0;
}

static void destroy_tensors(Call *c)
{
    int i;
    for (i = 0; i < c->nargs; i++)
        if (c->a[i].kind == ARG_TENSOR && c->a[i].tensor != NULL) {
            aclDestroyTensor(c->a[i].tensor);
            c->a[i].tensor = NULL;
        }
}

typedef aclnnStatus (*PhaseTwo)(void *, uint64_t, aclOpExecutor *, aclrtStream);

typedef struct {
    int32_t status;
    int phase;
    uint64_t workspace;
    int wflags;
    void *wbase;
} Outcome;

/* the workspace phase one asked for (guarded), phase two, and the stream synchronised */
static void phase_two(Outcome *o, PhaseTwo fn, aclOpExecutor *exe)
{
    void *ws = NULL;
    if (o->workspace) {
        size_t total = (size_t)o->workspace + 2 * WORKSPACE_GUARD;
        if (aclrtMalloc(&o->wbase, total, ACL_MEM_MALLOC_HUGE_FIRST) != 0) {
            o->wbase = NULL;
            o->status = RUNNER_NO_MEMORY;
            return;
        }
        fill_guard(o->wbase, WORKSPACE_GUARD);
        fill_guard(at(o->wbase, WORKSPACE_GUARD + (size_t)o->workspace), WORKSPACE_GUARD);
        ws = at(o->wbase, WORKSPACE_GUARD);
    }
    o->status = fn(ws, o->workspace, exe, stream);
    o->phase = 2;
    aclrtSynchronizeStream(stream);
}

/* the k-th argument of the operator (the record lists the call's buffers first) */
#define T(k) ((aclTensor *)c->a[first + (k)].tensor)
#define L(k) (c->a[first + (k)].l)
#define D(k) (c->a[first + (k)].d)
#define F(k) (c->a[first + (k)].f)
#define S(k) (c->a[first + (k)].kind == ARG_NULL ? (char *)NULL : c->a[first + (k)].s)
#define B(k) (c->a[first + (k)].b != 0)
/* one operator: phase one with the recorded arguments, then phase two */
#define OP(op, ...)                                                         \
    if (strcmp(c->name, #op) == 0) {                                        \
        aclOpExecutor *exe = NULL;                                          \
        o->status = op##GetWorkspaceSize(__VA_ARGS__, &o->workspace, &exe); \
        o->phase = 1;                                                       \
        if (o->status == 0)                                                 \
            phase_two(o, op, exe);                                          \
        return;                                                             \
    }

static void dispatch(Call *c, Outcome *o)
{
    int first = 0;
    while (first < c->nargs && c->a[first].kind == ARG_BUFFER)
        first++;
#include "runner_calls.h"
    o->status = RUNNER_NOT_LINKED;
}

static void write_result(FILE *out, Call *c, uint32_t run, const Outcome *o, const char *msg, uint64_t ns)
{
    size_t len = msg ? strlen(msg) : 0;
    int i, wflags = 0;
    if (len > 1024)
        len = 1024;
    fwrite("RSLT", 1, 4, out);
    write_u(out, c->index, 4);
    write_u(out, run, 4);
    write_u(out, (uint32_t)o->status, 4);
    write_u(out, ns, 8);
    write_u(out, len, 2);
    if (len)
        fwrite(msg, 1, len, out);
    if (o->wbase != NULL) {
        wflags |= guard_intact(o->wbase, WORKSPACE_GUARD) ? 0 : 1;
        wflags |= guard_intact(at(o->wbase, WORKSPACE_GUARD + (size_t)o->workspace), WORKSPACE_GUARD) ? 0 : 2;
    }
    write_u(out, (uint64_t)o->phase, 1);
    write_u(out, o->status >= 0 ? o->workspace : 0, 8);
    write_u(out, o->status >= 0 ? (uint64_t)wflags : 0, 1);
    if (o->status >= 0 && (wflags & 1))
        copy_out(out, o->wbase, WORKSPACE_GUARD);
    if (o->status >= 0 && (wflags & 2))
        copy_out(out, at(o->wbase, WORKSPACE_GUARD + (size_t)o->workspace), WORKSPACE_GUARD);
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        int flags = 0;
        if (a->kind != ARG_BUFFER)
            continue;
        if (o->status < 0 || a->base == NULL) {
            write_u(out, 8, 1); /* the call was not made */
            continue;
        }
        flags |= guard_intact(a->base, a->front) ? 0 : 1;
        flags |= guard_intact(at(a->base, a->front + a->extent), a->back) ? 0 : 2;
        if (!a->output && !body_unchanged(a))
            flags |= 4;
        write_u(out, (uint64_t)flags, 1);
        if (a->output)
            copy_out(out, at(a->base, a->front), a->extent);
        if (flags & 1)
            copy_out(out, a->base, a->front);
        if (flags & 2)
            copy_out(out, at(a->base, a->front + a->extent), a->back);
        if (flags & 4)
            copy_out(out, at(a->base, a->front), a->extent);
    }
    fwrite("DONE", 1, 4, out);
    fflush(out);
}

static void run_call(FILE *out, Call *c)
{
    uint32_t run;
    int32_t ready = allocate(c);
    for (run = 0; run < c->runs; run++) {
        Outcome o;
        const char *msg = NULL;
        uint64_t t0 = 0, t1 = 0;
        memset(&o, 0, sizeof o);
        o.status = ready;
        if (o.status == 0)
            o.status = arm(c);
        if (o.status == 0) {
            t0 = XLOSS_RUNNER_NOW_NS();
            dispatch(c, &o);
            t1 = XLOSS_RUNNER_NOW_NS();
            if (o.status > 0)
                msg = aclGetRecentErrMsg();
        }
        write_result(out, c, run, &o, msg, t1 - t0);
        destroy_tensors(c);
        if (o.wbase != NULL)
            aclrtFree(o.wbase);
        if (o.status < 0)
            break;
    }
    release(c);
}

int main(int argc, char **argv)
{
    char path[4096];
    unsigned char magic[8];
    FILE *out;
    Call *call;
    uint32_t ncalls, done = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR   (DIR: an `xloss check --export` folder; results go to DIR/out/)\n",
                argc ? argv[0] : "xloss_runner");
        return 2;
    }
    if (strlen(argv[1]) > sizeof path - 32)
        die("DIR is too long");
    sprintf(path, "%s/cases.bin", argv[1]);
    in_file = fopen(path, "rb");
    if (in_file == NULL)
        die("cannot open DIR/cases.bin");
    read_exact(magic, 8);
    if (memcmp(magic, "XLRCASE1", 8) != 0)
        die("DIR/cases.bin is not an xloss cases file (version 1)");
    ncalls = (uint32_t)read_u(4);
    (void)read_u(4); /* chip: not used by this convention */
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0 || aclrtCreateStream(&stream) != 0)
        die("aclInit / aclrtSetDevice(0) / aclrtCreateStream failed");
    sprintf(path, "%s/out/results.bin", argv[1]);
    out = fopen(path, "wb");
    if (out == NULL)
        die("cannot create DIR/out/results.bin (does DIR/out/ exist?)");
    fwrite("XLRSLT01", 1, 8, out);
    fflush(out);
    call = (Call *)malloc(sizeof *call);
    if (call == NULL)
        die("out of memory");
    while (read_call(call)) {
        run_call(out, call);
        done++;
    }
    free(call);
    fclose(out);
    fclose(in_file);
    aclrtDestroyStream(stream);
    aclrtResetDevice(0);
    aclFinalize();
    if (done != ncalls) {
        fprintf(stderr, "xloss_runner: cases.bin holds %lu calls, its header says %lu\n", (unsigned long)done,
                (unsigned long)ncalls);
        return 2;
    }
    fprintf(stderr, "xloss_runner: %lu calls run; results in %s\n", (unsigned long)done, path);
    return 0;
}
