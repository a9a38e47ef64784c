/*
 * xloss_runner (FT78NE/MT7004 convention): runs the calls `xloss check --export` recorded, on the target.
 *
 * OURS: xloss's on-target runner, no vendor publishes it. Plain C99: the vendor header and libc only.
 *
 *     xloss_runner DIR      reads DIR/cases.bin, writes DIR/out/results.bin
 *
 * Every call is streamed: read one call record, lay out each buffer between poisoned guard bytes,
 * call the port once per recorded run, write the outputs, any changed guard bytes and any changed
 * input bytes, the status and the elapsed time, free everything, read the next call. The memory in
 * use at any time is one call's buffers plus their guards (docs/on-target.md has the format).
 *
 * Shared memory (`_s`): buffers come from malloc, with the core mask the host adapter passed.
 * Private memory (`_p`): buffers are allocated in the recorded core's private memory and the
 * calling thread is made that core (XLOSS_PRIVATE_ALLOC / XLOSS_PRIVATE_FREE / XLOSS_SELECT_CORE,
 * below: the emulator's helpers by default; a board build defines its own).
 *
 * runner_config.h (written by the export) says which optional helpers the port exports and which
 * entry points the cases call, so a port that lacks an operator still links.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner_config.h"

#include "binarycrossentropy.h"
#include "ft78ne.h"
#include "fusedcrossentropylosswithmaxsum.h"
#include "fusedlinearonlinemaxsum.h"
#include "nllloss.h"
#include "softmax_cross_entropy_with_logits.h"
#include "sparse_softmax_cross_entropy_with_logits.h"

#if XLOSS_RUNNER_ERRORS || XLOSS_RUNNER_CHIP || XLOSS_RUNNER_PRIVATE
#include "ft78ne_emu.h"
#endif

#ifndef XLOSS_PRIVATE_ALLOC
#define XLOSS_PRIVATE_ALLOC(core, bytes) ft78ne_emu_private_alloc((core), (bytes))
#define XLOSS_PRIVATE_FREE(core, ptr) ft78ne_emu_private_free((core), (ptr))
#define XLOSS_SELECT_CORE(core) ft78ne_emu_set_core(core)
#endif

/* A board without clock() (or with a better timer) defines its own, in nanoseconds. */
#ifndef XLOSS_RUNNER_NOW_NS
#define XLOSS_RUNNER_NOW_NS() ((uint64_t)clock() * (1000000000u / CLOCKS_PER_SEC))
#endif

#define MAX_ARGS 20
#define MAX_NAME 64
#define CHUNK 4096
#define PATTERN_PERIOD 4096 /* the guard pattern repeats every 4096 bytes (xloss: guards.poison) */

/* runner statuses below 0 are the runner's own (the judge names them) */
#define RUNNER_NO_PRIVATE (-2)
#define RUNNER_NO_MEMORY (-3)
#define RUNNER_NOT_LINKED (-4)

enum { ARG_INT = 0, ARG_FLOAT = 1, ARG_NULL = 2, ARG_BUFFER = 3 };

typedef struct {
    int kind;
    int32_t i;
    float f;
    int output;
    size_t extent, front, back;
    long data_at; /* file offset of the recorded initial content */
    unsigned char *raw; /* front guard + body + back guard */
    void *block; /* what was allocated (raw may be aligned inside it) */
} Arg;

typedef struct {
    uint32_t index, runs;
    int32_t core;
    char name[MAX_NAME + 1];
    int nargs;
    Arg a[MAX_ARGS];
} Call;

static FILE *in_file;

static void die(const char *what) {
    fprintf(stderr, "xloss_runner: %s\n", what);
    exit(2);
}

static void read_exact(void *dst, size_t n) {
    if (fread(dst, 1, n, in_file) != n)
        die("cases.bin ends inside a record (truncated?)");
}

static uint64_t read_u(int bytes) {
    unsigned char b[8];
    uint64_t v = 0;
    int i;
    read_exact(b, (size_t)bytes);
    for (i = bytes - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static void write_u(FILE *f, uint64_t v, int bytes) {
    unsigned char b[8];
    int i;
    for (i = 0; i < bytes; i++) {
        b[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
    fwrite(b, 1, (size_t)bytes, f);
}

static unsigned char pattern(size_t i) { return (unsigned char)(((i % PATTERN_PERIOD) * 151u + 0xA7u) % 251u + 3u); }

static void poison(unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        p[i] = pattern(i);
}

static int poisoned(const unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i] != pattern(i))
            return 0;
    return 1;
}

/* the recorded initial content of a buffer, copied from cases.bin into its body */
static void load_body(const Arg *a) {
    long here = ftell(in_file);
    if (fseek(in_file, a->data_at, SEEK_SET) != 0)
        die("cannot seek in cases.bin");
    read_exact(a->raw + a->front, a->extent);
    if (fseek(in_file, here, SEEK_SET) != 0)
        die("cannot seek in cases.bin");
}

/* 1 if the body still holds its recorded initial content (compared in chunks: no second copy) */
static int body_unchanged(const Arg *a) {
    unsigned char chunk[CHUNK];
    long here = ftell(in_file);
    size_t done = 0;
    int same = 1;
    if (fseek(in_file, a->data_at, SEEK_SET) != 0)
        die("cannot seek in cases.bin");
    while (done < a->extent && same) {
        size_t n = a->extent - done < CHUNK ? a->extent - done : CHUNK;
        read_exact(chunk, n);
        same = memcmp(chunk, a->raw + a->front + done, n) == 0;
        done += n;
    }
    if (fseek(in_file, here, SEEK_SET) != 0)
        die("cannot seek in cases.bin");
    return same;
}

static int read_call(Call *c) {
    unsigned char tag[4];
    int i, len;
    if (fread(tag, 1, 4, in_file) != 4)
        return 0;
    if (memcmp(tag, "CALL", 4) != 0)
        die("cases.bin: a record does not start with CALL (not a cases file, or corrupt)");
    c->index = (uint32_t)read_u(4);
    c->runs = (uint32_t)read_u(4);
    c->core = (int32_t)(uint32_t)read_u(4);
    len = (int)read_u(1);
    if (len > MAX_NAME)
        die("cases.bin: entry point name too long");
    read_exact(c->name, (size_t)len);
    c->name[len] = '\0';
    c->nargs = (int)read_u(1);
    if (c->nargs > MAX_ARGS)
        die("cases.bin: too many arguments");
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        memset(a, 0, sizeof *a);
        a->kind = (int)read_u(1);
        if (a->kind == ARG_INT) {
            a->i = (int32_t)(uint32_t)read_u(4);
        } else if (a->kind == ARG_FLOAT) {
            uint32_t bits = (uint32_t)read_u(4);
            memcpy(&a->f, &bits, sizeof a->f);
        } else if (a->kind == ARG_BUFFER) {
            a->output = (int)read_u(1);
            a->extent = (size_t)read_u(8);
            a->front = (size_t)read_u(8);
            a->back = (size_t)read_u(8);
            a->data_at = ftell(in_file);
            if (a->data_at < 0 || fseek(in_file, (long)a->extent, SEEK_CUR) != 0)
                die("cases.bin: cannot skip a buffer's content");
        } else if (a->kind != ARG_NULL) {
            die("cases.bin: unknown argument kind");
        }
    }
    return 1;
}

/* Allocate every buffer of the call (guards included); 0 on success, else a runner status. */
static int allocate(Call *c) {
    int i;
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        size_t total;
        if (a->kind != ARG_BUFFER)
            continue;
        total = a->front + a->extent + a->back;
        if (c->core >= 0) {
#if XLOSS_RUNNER_PRIVATE
            a->block = XLOSS_PRIVATE_ALLOC(c->core, total ? total : 1);
            a->raw = (unsigned char *)a->block;
            if (a->block == NULL)
                return RUNNER_NO_PRIVATE;
#else
            return RUNNER_NOT_LINKED;
#endif
        } else {
            /* the body starts 64-byte aligned, as the host adapter's scratch does (front: a multiple of 64) */
            uintptr_t at;
            a->block = malloc(total + 64);
            if (a->block == NULL)
                return RUNNER_NO_MEMORY;
            at = (uintptr_t)a->block;
            a->raw = (unsigned char *)a->block + ((64 - at % 64) % 64);
        }
    }
    return 0;
}

static void release(Call *c) {
    int i;
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        if (a->kind != ARG_BUFFER || a->block == NULL)
            continue;
        if (c->core >= 0) {
#if XLOSS_RUNNER_PRIVATE
            XLOSS_PRIVATE_FREE(c->core, a->block);
#endif
        } else {
            free(a->block);
        }
        a->block = NULL;
        a->raw = NULL;
    }
}

static void arm(Call *c) {
    int i;
    for (i = 0; i < c->nargs; i++) {
        Arg *a = &c->a[i];
        if (a->kind != ARG_BUFFER)
            continue;
        poison(a->raw, a->front);
        load_body(a);
        poison(a->raw + a->front + a->extent, a->back);
    }
}

#define P(k) ((void *)(c->a[k].kind == ARG_BUFFER ? (void *)(c->a[k].raw + c->a[k].front) : NULL))
#define I(k) ((int)c->a[k].i)
#define F(k) (c->a[k].f)
#define IS(sym) (strcmp(c->name, #sym) == 0)

/* Call the entry point the record names with its arguments, as the host adapter did.
 * 0 if the runner knows and links it, RUNNER_NOT_LINKED otherwise. */
static int dispatch(const Call *c) {
#define BCE_S(sym, T)                                                                       \
    if (IS(sym)) {                                                                          \
        sym(I(0), I(1), (T *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), (T *)P(6), I(7), I(8)); \
        return 0;                                                                           \
    }
#define BCE_P(sym, T)                                                                 \
    if (IS(sym)) {                                                                    \
        sym(I(0), I(1), (T *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), (T *)P(6), I(7)); \
        return 0;                                                                     \
    }
#define FOCAL_S(sym, T)                                                     \
    if (IS(sym)) {                                                          \
        sym(I(0), I(1), F(2), F(3), (T *)P(4), (T *)P(5), (T *)P(6), I(7)); \
        return 0;                                                           \
    }
#define FOCAL_P(sym, T)                                               \
    if (IS(sym)) {                                                    \
        sym(I(0), I(1), F(2), F(3), (T *)P(4), (T *)P(5), (T *)P(6)); \
        return 0;                                                     \
    }
#define FOCALGRAD_S(sym, T)                                                            \
    if (IS(sym)) {                                                                     \
        sym(I(0), I(1), F(2), F(3), (T *)P(4), (T *)P(5), (T *)P(6), (T *)P(7), I(8)); \
        return 0;                                                                      \
    }
#define FOCALGRAD_P(sym, T)                                                      \
    if (IS(sym)) {                                                               \
        sym(I(0), I(1), F(2), F(3), (T *)P(4), (T *)P(5), (T *)P(6), (T *)P(7)); \
        return 0;                                                                \
    }
#define NLL_S(sym, T)                                                                                    \
    if (IS(sym)) {                                                                                       \
        sym((T *)P(0), (T *)P(1), (int *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), I(6), I(7), I(8), I(9)); \
        return 0;                                                                                        \
    }
#define NLL_P(sym, T)                                                                              \
    if (IS(sym)) {                                                                                 \
        sym((T *)P(0), (T *)P(1), (int *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), I(6), I(7), I(8)); \
        return 0;                                                                                  \
    }
#define NLLF_S(sym, T)                                                                        \
    if (IS(sym)) {                                                                            \
        sym((T *)P(0), (int *)P(1), (T *)P(2), (T *)P(3), (T *)P(4), I(5), I(6), I(7), I(8)); \
        return 0;                                                                             \
    }
#define NLLF_P(sym, T)                                                                  \
    if (IS(sym)) {                                                                      \
        sym((T *)P(0), (int *)P(1), (T *)P(2), (T *)P(3), (T *)P(4), I(5), I(6), I(7)); \
        return 0;                                                                       \
    }
#define BCEF_S(sym, T) BCE_S(sym, T)
#define BCEF_P(sym, T) BCE_P(sym, T)
#define SCE_S(sym, T)                                     \
    if (IS(sym)) {                                        \
        sym((T *)P(0), (T *)P(1), (T *)P(2), I(3), I(4)); \
        return 0;                                         \
    }
#define SCE_P(sym, T)                               \
    if (IS(sym)) {                                  \
        sym((T *)P(0), (T *)P(1), (T *)P(2), I(3)); \
        return 0;                                   \
    }
#define FLCE(sym, T)                                                                                                  \
    if (IS(sym)) {                                                                                                    \
        sym(I(0), I(1), I(2), (float *)P(3), (T *)P(4), (T *)P(5), (unsigned char *)P(6), (int *)P(7), (float *)P(8), \
            (float *)P(9), (float *)P(10), (T *)P(11), (T *)P(12), I(13), I(14));                                     \
        return 0;                                                                                                     \
    }
#define MAXSUM_S(sym, T)                                                                                   \
    if (IS(sym)) {                                                                                         \
        sym(I(0), I(1), I(2), (T *)P(3), (T *)P(4), (int *)P(5), I(6), I(7), (float *)P(8), (float *)P(9), \
            (float *)P(10), (unsigned char *)P(11), (int *)P(12), (T *)P(13), I(14), I(15));               \
        return 0;                                                                                          \
    }
#define MAXSUM_P(sym, T)                                                                                   \
    if (IS(sym)) {                                                                                         \
        sym(I(0), I(1), I(2), (T *)P(3), (T *)P(4), (int *)P(5), I(6), I(7), (float *)P(8), (float *)P(9), \
            (float *)P(10), (unsigned char *)P(11), (int *)P(12), (T *)P(13), I(14));                      \
        return 0;                                                                                          \
    }
#define LOSS_S(sym, T)                                                                                              \
    if (IS(sym)) {                                                                                                  \
        sym(I(0), I(1), (float *)P(2), (float *)P(3), (float *)P(4), (T *)P(5), (float *)P(6), (float *)P(7), I(8), \
            I(9));                                                                                                  \
        return 0;                                                                                                   \
    }
#define LOSS_P(sym, T)                                                                                               \
    if (IS(sym)) {                                                                                                   \
        sym(I(0), I(1), (float *)P(2), (float *)P(3), (float *)P(4), (T *)P(5), (float *)P(6), (float *)P(7), I(8)); \
        return 0;                                                                                                    \
    }
/* the softmax cross entropy pages (issue #30); the sparse page's sizes are uint64_t, recorded as ints */
#define SMCE_S(sym, T)                                                                                 \
    if (IS(sym)) {                                                                                     \
        sym((T *)P(0), (T *)P(1), (T *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), I(6), I(7), I(8), I(9)); \
        return 0;                                                                                      \
    }
#define SMCE_P(sym, T)                                                                           \
    if (IS(sym)) {                                                                               \
        sym((T *)P(0), (T *)P(1), (T *)P(2), (T *)P(3), (T *)P(4), (T *)P(5), I(6), I(7), I(8)); \
        return 0;                                                                                \
    }
#define U(k) ((uint64_t)c->a[k].i)
#define SSMCE_S(sym, T)                                                                                               \
    if (IS(sym)) {                                                                                                    \
        sym((T *)P(0), (T *)P(1), (T *)P(2), U(3), U(4), U(5), (int *)P(6), U(7), (T *)P(8), U(9), U(10), (T *)P(11), \
            I(12));                                                                                                   \
        return 0;                                                                                                     \
    }
#define SSMCE_P(sym, T)                                                                                                \
    if (IS(sym)) {                                                                                                     \
        sym((T *)P(0), (T *)P(1), (T *)P(2), U(3), U(4), U(5), (int *)P(6), U(7), (T *)P(8), U(9), U(10), (T *)P(11)); \
        return 0;                                                                                                      \
    }
#include "runner_calls.h"
    return RUNNER_NOT_LINKED;
}

static void write_call_result(FILE *out, const Call *c, uint32_t run, int32_t status, const char *msg, uint64_t ns) {
    size_t len = msg ? strlen(msg) : 0;
    int i;
    if (len > 1024)
        len = 1024;
    fwrite("RSLT", 1, 4, out);
    write_u(out, c->index, 4);
    write_u(out, run, 4);
    write_u(out, (uint32_t)status, 4);
    write_u(out, ns, 8);
    write_u(out, len, 2);
    if (len)
        fwrite(msg, 1, len, out);
    write_u(out, 0, 1);  /* phase: a one-phase convention */
    write_u(out, 0, 8);  /* workspace bytes: none */
    write_u(out, 0, 1);  /* workspace guard flags */
    for (i = 0; i < c->nargs; i++) {
        const Arg *a = &c->a[i];
        int flags = 0;
        const unsigned char *body;
        if (a->kind != ARG_BUFFER)
            continue;
        if (status < 0 || a->raw == NULL) { /* the call was not made: nothing to report */
            write_u(out, 8, 1);
            continue;
        }
        body = a->raw + a->front;
        flags |= poisoned(a->raw, a->front) ? 0 : 1;
        flags |= poisoned(body + a->extent, a->back) ? 0 : 2;
        if (!a->output && !body_unchanged(a))
            flags |= 4;
        write_u(out, (uint64_t)flags, 1);
        if (a->output)
            fwrite(body, 1, a->extent, out);
        if (flags & 1)
            fwrite(a->raw, 1, a->front, out);
        if (flags & 2)
            fwrite(body + a->extent, 1, a->back, out);
        if (flags & 4)
            fwrite(body, 1, a->extent, out);
    }
    fwrite("DONE", 1, 4, out);
    fflush(out); /* a crash in the next call leaves every finished record whole */
}

static void run_call(FILE *out, Call *c, int chip) {
    uint32_t run;
    int32_t status = allocate(c);
    for (run = 0; run < c->runs; run++) {
        const char *msg = NULL;
        uint64_t t0 = 0, t1 = 0;
        if (status == 0) {
            arm(c);
#if XLOSS_RUNNER_PRIVATE
            if (c->core >= 0)
                XLOSS_SELECT_CORE(c->core);
#endif
#if XLOSS_RUNNER_CHIP
            ft78ne_emu_set_chip(chip);
#endif
#if XLOSS_RUNNER_CLEAR
            ft78ne_emu_clear_error();
#endif
            t0 = XLOSS_RUNNER_NOW_NS();
            status = dispatch(c);
            t1 = XLOSS_RUNNER_NOW_NS();
#if XLOSS_RUNNER_ERRORS
            if (status == 0) {
                status = ft78ne_emu_last_error();
                msg = status ? ft78ne_emu_last_error_message() : NULL;
            }
#endif
        }
        write_call_result(out, c, run, status, msg, t1 - t0);
        if (status < 0)
            break; /* the runner could not make the call: one record says why */
    }
    release(c);
    (void)chip;
}

int main(int argc, char **argv) {
    char path[4096];
    unsigned char magic[8];
    FILE *out;
    Call *call;
    uint32_t ncalls, done = 0;
    int chip;
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
    chip = (int)read_u(4);
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
        run_call(out, call, chip);
        done++;
    }
    free(call);
    fclose(out);
    fclose(in_file);
    if (done != ncalls) {
        fprintf(stderr, "xloss_runner: cases.bin holds %lu calls, its header says %lu\n", (unsigned long)done,
                (unsigned long)ncalls);
        return 2;
    }
    fprintf(stderr, "xloss_runner: %lu calls run; results in %s\n", (unsigned long)done, path);
    return 0;
}
