/* Emulator state beyond the arenas (arena.c): the per-thread chip, the checks every vendor entry
 * point runs, and the thread team that plays the cores of a _s call. */
#include "emu.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

static _Thread_local int t_chip = -1; /* -1: the process default */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_default_chip = FT78NE_EMU_CHIP_FT78NE;

static void init_once(void) {
    const char *chip = getenv("FT78NE_EMU_CHIP");
    if (chip && strcasecmp(chip, "mt7004") == 0)
        g_default_chip = FT78NE_EMU_CHIP_MT7004;
}

/* ---- chip -------------------------------------------------------------------------------- */
static int current_chip(void) {
    pthread_once(&g_once, init_once);
    return t_chip < 0 ? g_default_chip : t_chip;
}

FT78NE_API int ft78ne_emu_set_chip(int chip) {
    emu_clear();
    if (chip != FT78NE_EMU_CHIP_FT78NE && chip != FT78NE_EMU_CHIP_MT7004)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                        "ft78ne_emu_set_chip: chip must be %d (FT78NE) or %d (MT7004), got %d", FT78NE_EMU_CHIP_FT78NE,
                        FT78NE_EMU_CHIP_MT7004, chip);
    t_chip = chip;
    return FT78NE_OK;
}
FT78NE_API int ft78ne_emu_chip(void) { return current_chip(); }

/* OURS: the emulator implements xloss's extension operators (ft78ne.h, "OURS") in their layouts */
FT78NE_API int xloss_ft78ne_ext_abi(void) { return XLOSS_FT78NE_EXT_ABI; }

/* ---- scratch ------------------------------------------------------------------------------ */
void *emu_private_scratch(const emu_call *c, size_t bytes) {
    emu_span avoid[EMU_MAX_BUFS];
    int n = 0;
    for (int i = 0; i < c->nbufs && n < EMU_MAX_BUFS; i++)
        avoid[n++] = (emu_span){c->bufs[i].ptr, c->bufs[i].bytes};
    size_t cap, gap;
    const char *why;
    void *p = emu_arena_scratch(c->core, bytes, avoid, n, &cap, &gap, &why);
    if (!p)
        emu_fail(FT78NE_ERR_CAPACITY,
                 "%s: needs %zu bytes of private scratch on core %d, but its private memory (%zu bytes) has at most "
                 "%zu contiguous bytes free (%s)",
                 c->fn, bytes, c->core, cap, gap, why);
    return p;
}

void emu_private_release(int core, void *p) { emu_arena_release(core, p); }

/* ---- checks ------------------------------------------------------------------------------ */
int emu_begin(emu_call *c, const char *fn, emu_dtype dt, int is_private, int core_mask) {
    emu_clear();
    c->fn = fn;
    c->dt = dt;
    c->is_private = is_private;
    c->core_mask = core_mask;
    c->core = emu_thread_core();
    c->pinned = 0;
    c->bufs = NULL;
    c->nbufs = 0;
    if (dt == EMU_HALF && current_chip() != FT78NE_EMU_CHIP_MT7004)
        return emu_fail(FT78NE_ERR_UNSUPPORTED,
                        "%s: FT78NE supports fp32 only (fp_ functions); half precision needs MT7004", fn);
    if (dt == EMU_INT8 && current_chip() != FT78NE_EMU_CHIP_FT78NE)
        return emu_fail(FT78NE_ERR_UNSUPPORTED, "%s: MT7004 supports fp16 and fp32 only; the i8_ forms are FT78NE's",
                        fn);
    if (!is_private) {
        if (core_mask == 0)
            return emu_fail(FT78NE_ERR_CORE_MASK,
                            "%s: core_mask 0x0 selects no core (8 cores: bit i = core i, 0xff = all)", fn);
        if (core_mask < 0 || core_mask > FT78NE_CORE_MASK_ALL)
            return emu_fail(FT78NE_ERR_CORE_MASK,
                            "%s: core_mask %#x (%d) names cores outside 0..7; valid masks are 0x01..0xff", fn,
                            (unsigned)core_mask, core_mask);
    }
    return FT78NE_OK;
}

void emu_end(emu_call *c) {
    if (c->pinned) {
        emu_arena_unpin(c->core);
        c->pinned = 0;
    }
}

int emu_extent(const emu_call *c, const char *what, size_t a, size_t b, size_t c_, size_t *out) {
    size_t ab;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c_, out))
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: %s is too large to address", c->fn, what);
    return FT78NE_OK;
}

int emu_check_labels(const char *fn, const int *labels, size_t n, uint64_t classes) {
    for (size_t r = 0; r < n; r++)
        if (labels[r] < 0 || (uint64_t)labels[r] >= classes)
            return emu_fail(FT78NE_ERR_INDEX, "%s: labels[%zu] = %d is out of range: labels must lie in [0, %llu)", fn,
                            r, labels[r], (unsigned long long)classes);
    return 0;
}

/* [p, p+n) and [q, q+m) share a byte (n, m > 0; computed without forming p+n, which may wrap). */
static int overlaps(const void *p, size_t n, const void *q, size_t m) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b ? b - a < n : a - b < m;
}

int emu_check_buffers(emu_call *c, const emu_buf *bufs, int n) {
    for (int i = 0; i < n; i++)
        if (bufs[i].bytes && !bufs[i].ptr)
            return emu_fail(FT78NE_ERR_NULL_POINTER, "%s: %s is NULL but %zu bytes of it are accessed", c->fn,
                            bufs[i].name, bufs[i].bytes);
    for (int i = 0; i < n; i++) /* the DSP (and C) need naturally aligned elements */
        if (bufs[i].bytes && (uintptr_t)bufs[i].ptr % bufs[i].align)
            return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: %s (%p) is not aligned to its %zu-byte elements", c->fn,
                            bufs[i].name, bufs[i].ptr, bufs[i].align);
    if (c->is_private) {
        uintptr_t base;
        size_t cap;
        if (emu_arena_pin(c->core, &base, &cap))
            return emu_fail(FT78NE_ERR_NO_MEMORY, "%s: host out of memory for core %d's private memory", c->fn,
                            c->core);
        c->pinned = 1;
        for (int i = 0; i < n; i++) {
            const emu_buf *b = &bufs[i];
            if (!b->bytes)
                continue;
            int rc = emu_in_arena(base, cap, b->ptr, b->bytes);
            if (rc == FT78NE_ERR_CAPACITY)
                return emu_fail(rc, "%s: %s needs %zu bytes, more than core %d's private memory holds (%zu bytes)",
                                c->fn, b->name, b->bytes, c->core, cap);
            if (rc)
                return emu_fail(rc, "%s: %s [%p, +%zu bytes) is not inside core %d's private memory [%p, +%zu bytes)",
                                c->fn, b->name, b->ptr, b->bytes, c->core, (void *)base, cap);
        }
    }
    for (int i = 0; i < n; i++) { /* an output shares no byte with another buffer (save exact in-place) */
        const emu_buf *o = &bufs[i];
        if (o->role == EMU_IN || !o->bytes)
            continue;
        for (int j = 0; j < n; j++) {
            const emu_buf *b = &bufs[j];
            if (j == i || !b->bytes || !overlaps(o->ptr, o->bytes, b->ptr, b->bytes))
                continue;
            if (o->role == EMU_OUT_INPLACE && b->role == EMU_IN && o->ptr == b->ptr && o->bytes == b->bytes)
                continue;
            return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                            "%s: output %s [%p, +%zu bytes) overlaps %s %s [%p, +%zu bytes)%s", c->fn, o->name, o->ptr,
                            o->bytes, b->role == EMU_IN ? "input" : "output", b->name, b->ptr, b->bytes,
                            o->role == EMU_OUT_INPLACE && b->role == EMU_IN ? " (only an exactly equal input may be "
                                                                              "overwritten in place)"
                                                                            : "");
        }
    }
    c->bufs = bufs;
    c->nbufs = n;
    return FT78NE_OK;
}

/* ---- the cores of a call --------------------------------------------------------------------- */
int emu_max_ranks(const emu_call *c) {
    return c->is_private ? 1 : __builtin_popcount((unsigned)c->core_mask & FT78NE_CORE_MASK_ALL);
}

typedef struct {
    emu_task task;
    void *ctx;
    size_t lo, hi;
    int rank;
} job;

static void *job_main(void *p) {
    job *j = p;
    j->task(j->ctx, j->lo, j->hi, j->rank);
    return NULL;
}

void emu_dispatch(const emu_call *c, size_t units, emu_task task, void *ctx) {
    if (units == 0)
        return;
    if (c->is_private) { /* the calling thread is the core */
        task(ctx, 0, units, 0);
        return;
    }
    int k = emu_max_ranks(c);
    if ((size_t)k > units)
        k = (int)units;
    job jobs[FT78NE_NUM_CORES];
    pthread_t th[FT78NE_NUM_CORES];
    int started[FT78NE_NUM_CORES];
    for (int r = 0; r < k; r++) {
        jobs[r] = (job){task, ctx, units * (size_t)r / (size_t)k, units * (size_t)(r + 1) / (size_t)k, r};
        started[r] = pthread_create(&th[r], NULL, job_main, &jobs[r]) == 0;
    }
    for (int r = 0; r < k; r++)
        if (!started[r]) /* no thread to be had: the caller does that core's share (same result) */
            job_main(&jobs[r]);
    for (int r = 0; r < k; r++)
        if (started[r])
            pthread_join(th[r], NULL);
}
