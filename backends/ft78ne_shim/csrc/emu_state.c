/* Emulator state: per-thread last error / chip / core, the per-core private arenas, the checks
 * every vendor entry point runs, and the thread team that plays the cores of a _s call. */
#include "emu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---- per-thread state (cffi calls come from many Python threads) ---------------------- */
static _Thread_local int t_err;
static _Thread_local char t_msg[512];
static _Thread_local int t_chip = -1; /* -1: the process default */
static _Thread_local int t_core;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_default_chip = FT78NE_EMU_CHIP_FT78NE;

#define MAX_CAPACITY ((size_t)1 << 30)
#define MAX_BLOCKS 256

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- private arenas ---------------------------------------------------------------------- */
typedef struct {
    size_t off, len;
} blk;
typedef struct {
    unsigned char *base; /* lazily allocated, `cap` bytes, 64-byte aligned */
    size_t cap;
    blk b[MAX_BLOCKS]; /* live allocations, sorted by offset */
    int n;
} arena;

static arena g_arena[FT78NE_NUM_CORES];
static size_t g_capacity = FT78NE_EMU_DEFAULT_PRIVATE_BYTES;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards g_arena and g_capacity */

static void init_once(void) {
    const char *chip = getenv("FT78NE_EMU_CHIP");
    if (chip && strcasecmp(chip, "mt7004") == 0)
        g_default_chip = FT78NE_EMU_CHIP_MT7004;
    const char *bytes = getenv("FT78NE_EMU_PRIVATE_BYTES");
    if (bytes && *bytes) {
        char *end;
        unsigned long long v = strtoull(bytes, &end, 0);
        if (*end == '\0' && v >= FT78NE_EMU_PRIVATE_ALIGN && v <= MAX_CAPACITY)
            g_capacity = round_up((size_t)v, FT78NE_EMU_PRIVATE_ALIGN);
    }
}
static void ensure_init(void) { pthread_once(&g_once, init_once); }

/* Materialise core's arena (caller holds g_mu). NULL if the host is out of memory. */
static arena *arena_locked(int core) {
    arena *a = &g_arena[core];
    if (!a->base) {
        a->base = aligned_alloc(FT78NE_EMU_PRIVATE_ALIGN, g_capacity);
        if (!a->base)
            return NULL;
        memset(a->base, 0, g_capacity); /* defined contents for programs that use fixed offsets */
        a->cap = g_capacity;
    }
    return a;
}

static size_t largest_gap(const arena *a) {
    size_t best = 0, end = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->b[i].off - end > best)
            best = a->b[i].off - end;
        end = a->b[i].off + a->b[i].len;
    }
    return a->cap - end > best ? a->cap - end : best;
}

/* First fit; returns NULL and leaves *why set when nothing fits (caller holds g_mu). */
static void *alloc_locked(arena *a, size_t bytes, const char **why) {
    if (bytes > a->cap) {
        *why = "larger than the whole private memory";
        return NULL;
    }
    size_t len = round_up(bytes ? bytes : 1, FT78NE_EMU_PRIVATE_ALIGN);
    if (a->n == MAX_BLOCKS) {
        *why = "too many live allocations (256)";
        return NULL;
    }
    size_t end = 0;
    int at = a->n;
    for (int i = 0; i < a->n; i++) {
        if (a->b[i].off - end >= len) {
            at = i;
            break;
        }
        end = a->b[i].off + a->b[i].len;
    }
    if (at == a->n && a->cap - end < len) {
        *why = "no free gap large enough";
        return NULL;
    }
    memmove(&a->b[at + 1], &a->b[at], (size_t)(a->n - at) * sizeof(blk));
    a->b[at].off = end;
    a->b[at].len = len;
    a->n++;
    return a->base + end;
}

static int free_locked(arena *a, const void *p) {
    for (int i = 0; i < a->n; i++) {
        if (a->base + a->b[i].off == (const unsigned char *)p) {
            memmove(&a->b[i], &a->b[i + 1], (size_t)(a->n - i - 1) * sizeof(blk));
            a->n--;
            return 0;
        }
    }
    return -1;
}

/* ---- errors ----------------------------------------------------------------------------- */
int emu_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_msg, sizeof t_msg, fmt, ap);
    va_end(ap);
    t_err = code;
    return code;
}

void emu_clear(void) {
    t_err = FT78NE_OK;
    t_msg[0] = '\0';
}

FT78NE_API int ft78ne_emu_last_error(void) { return t_err; }
FT78NE_API const char *ft78ne_emu_last_error_message(void) { return t_msg; }
FT78NE_API void ft78ne_emu_clear_error(void) { emu_clear(); }

/* ---- chip and core ----------------------------------------------------------------------- */
static int current_chip(void) {
    ensure_init();
    return t_chip < 0 ? g_default_chip : t_chip;
}

FT78NE_API int ft78ne_emu_set_chip(int chip) {
    emu_clear();
    if (chip != FT78NE_EMU_CHIP_FT78NE && chip != FT78NE_EMU_CHIP_MT7004)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "ft78ne_emu_set_chip: chip must be %d (FT78NE) or %d (MT7004), got %d",
                        FT78NE_EMU_CHIP_FT78NE, FT78NE_EMU_CHIP_MT7004, chip);
    t_chip = chip;
    return FT78NE_OK;
}
FT78NE_API int ft78ne_emu_chip(void) { return current_chip(); }

FT78NE_API int ft78ne_emu_set_core(int core) {
    emu_clear();
    if (core < 0 || core >= FT78NE_NUM_CORES)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "ft78ne_emu_set_core: core must be in 0..%d, got %d",
                        FT78NE_NUM_CORES - 1, core);
    t_core = core;
    return FT78NE_OK;
}
FT78NE_API int ft78ne_emu_core(void) { return t_core; }
FT78NE_API int ft78ne_emu_num_cores(void) { return FT78NE_NUM_CORES; }

/* ---- private memory helpers ---------------------------------------------------------------- */
static int bad_core(const char *fn, int core) {
    if (core >= 0 && core < FT78NE_NUM_CORES)
        return 0;
    return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: core must be in 0..%d, got %d", fn, FT78NE_NUM_CORES - 1, core);
}

FT78NE_API size_t ft78ne_emu_private_capacity(void) {
    ensure_init();
    pthread_mutex_lock(&g_mu);
    size_t cap = g_capacity;
    pthread_mutex_unlock(&g_mu);
    return cap;
}

FT78NE_API int ft78ne_emu_set_private_capacity(size_t bytes) {
    ensure_init();
    emu_clear();
    if (bytes < FT78NE_EMU_PRIVATE_ALIGN || bytes > MAX_CAPACITY)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                        "ft78ne_emu_set_private_capacity: capacity must be in [%u, %zu] bytes, got %zu",
                        FT78NE_EMU_PRIVATE_ALIGN, MAX_CAPACITY, bytes);
    pthread_mutex_lock(&g_mu);
    for (int c = 0; c < FT78NE_NUM_CORES; c++) {
        if (g_arena[c].n) {
            int n = g_arena[c].n;
            pthread_mutex_unlock(&g_mu);
            return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                            "ft78ne_emu_set_private_capacity: core %d's private memory holds %d allocation(s); "
                            "free them first", c, n);
        }
    }
    for (int c = 0; c < FT78NE_NUM_CORES; c++) {
        free(g_arena[c].base);
        g_arena[c].base = NULL;
        g_arena[c].cap = 0;
    }
    g_capacity = round_up(bytes, FT78NE_EMU_PRIVATE_ALIGN);
    pthread_mutex_unlock(&g_mu);
    return FT78NE_OK;
}

FT78NE_API void *ft78ne_emu_private_alloc(int core, size_t bytes) {
    ensure_init();
    emu_clear();
    if (bad_core("ft78ne_emu_private_alloc", core))
        return NULL;
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(core);
    const char *why = "host out of memory for the arena";
    void *p = a ? alloc_locked(a, bytes, &why) : NULL;
    size_t cap = a ? a->cap : g_capacity, gap = a ? largest_gap(a) : 0;
    pthread_mutex_unlock(&g_mu);
    if (!p)
        emu_fail(a ? FT78NE_ERR_CAPACITY : FT78NE_ERR_NO_MEMORY,
                 "ft78ne_emu_private_alloc: %zu bytes do not fit in core %d's private memory (%s; capacity %zu bytes, "
                 "largest free gap %zu bytes)", bytes, core, why, cap, gap);
    return p;
}

FT78NE_API int ft78ne_emu_private_free(int core, void *ptr) {
    emu_clear();
    if (bad_core("ft78ne_emu_private_free", core))
        return FT78NE_ERR_INVALID_ARGUMENT;
    if (!ptr)
        return FT78NE_OK; /* like free(NULL) */
    pthread_mutex_lock(&g_mu);
    int rc = free_locked(&g_arena[core], ptr);
    pthread_mutex_unlock(&g_mu);
    if (rc)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                        "ft78ne_emu_private_free: %p is not a live allocation in core %d's private memory", ptr, core);
    return FT78NE_OK;
}

FT78NE_API void *ft78ne_emu_private_base(int core) {
    ensure_init();
    emu_clear();
    if (bad_core("ft78ne_emu_private_base", core))
        return NULL;
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(core);
    pthread_mutex_unlock(&g_mu);
    if (!a)
        emu_fail(FT78NE_ERR_NO_MEMORY, "ft78ne_emu_private_base: host out of memory for core %d's arena", core);
    return a ? a->base : NULL;
}

FT78NE_API size_t ft78ne_emu_private_in_use(int core) {
    if (core < 0 || core >= FT78NE_NUM_CORES)
        return 0;
    size_t used = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_arena[core].n; i++)
        used += g_arena[core].b[i].len;
    pthread_mutex_unlock(&g_mu);
    return used;
}

void *emu_private_scratch(const emu_call *c, size_t bytes) {
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(c->core);
    const char *why = "host out of memory for the arena";
    void *p = a ? alloc_locked(a, bytes, &why) : NULL;
    size_t cap = a ? a->cap : 0, gap = a ? largest_gap(a) : 0;
    pthread_mutex_unlock(&g_mu);
    if (!p)
        emu_fail(FT78NE_ERR_CAPACITY,
                 "%s: needs %zu bytes of private scratch on core %d, but its private memory (%zu bytes) has at most "
                 "%zu contiguous bytes free (%s)", c->fn, bytes, c->core, cap, gap, why);
    return p;
}

void emu_private_release(int core, void *p) {
    pthread_mutex_lock(&g_mu);
    free_locked(&g_arena[core], p);
    pthread_mutex_unlock(&g_mu);
}

/* ---- checks ------------------------------------------------------------------------------ */
int emu_begin(emu_call *c, const char *fn, emu_dtype dt, int is_private, int core_mask) {
    ensure_init();
    emu_clear();
    c->fn = fn;
    c->dt = dt;
    c->is_private = is_private;
    c->core_mask = core_mask;
    c->core = t_core;
    if (dt == EMU_HALF && current_chip() != FT78NE_EMU_CHIP_MT7004)
        return emu_fail(FT78NE_ERR_UNSUPPORTED,
                        "%s: FT78NE supports fp32 only (fp_ functions); half precision needs MT7004", fn);
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

int emu_extent(const emu_call *c, const char *what, size_t a, size_t b, size_t c_, size_t *out) {
    size_t ab;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c_, out))
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: %s is too large to address", c->fn, what);
    return FT78NE_OK;
}

int emu_check_buffers(const emu_call *c, const emu_buf *bufs, int n) {
    for (int i = 0; i < n; i++)
        if (bufs[i].bytes && !bufs[i].ptr)
            return emu_fail(FT78NE_ERR_NULL_POINTER, "%s: %s is NULL but %zu bytes of it are accessed", c->fn,
                            bufs[i].name, bufs[i].bytes);
    if (!c->is_private)
        return FT78NE_OK;
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(c->core);
    uintptr_t base = a ? (uintptr_t)a->base : 0;
    size_t cap = a ? a->cap : 0;
    pthread_mutex_unlock(&g_mu);
    if (!a)
        return emu_fail(FT78NE_ERR_NO_MEMORY, "%s: host out of memory for core %d's private memory", c->fn, c->core);
    for (int i = 0; i < n; i++) {
        const emu_buf *b = &bufs[i];
        if (!b->bytes)
            continue;
        if (b->bytes > cap)
            return emu_fail(FT78NE_ERR_CAPACITY,
                            "%s: %s needs %zu bytes, more than core %d's private memory holds (%zu bytes)", c->fn,
                            b->name, b->bytes, c->core, cap);
        uintptr_t p = (uintptr_t)b->ptr;
        if (p < base || p - base > cap - b->bytes)
            return emu_fail(FT78NE_ERR_NOT_PRIVATE,
                            "%s: %s [%p, +%zu bytes) is not inside core %d's private memory [%p, +%zu bytes)", c->fn,
                            b->name, b->ptr, b->bytes, c->core, (void *)base, cap);
    }
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
