/* The per-thread last error and core, and the per-core private arenas.
 *
 * Built with -DFT78NE_PRIVATE_SHIM this file is the whole of the private-memory shim
 * (libxloss_ft78ne_private.so, see build.py) that a port author's library links against to be
 * tested with memory="private": the same arenas, helpers and messages as the emulator, no vendor
 * operator, plus the port-facing ft78ne_shim_* functions (include/ft78ne_private_shim.h).
 * Exported functions never call each other (a call through the PLT could reach another library's
 * definition of the same name): they share static internals.
 *
 * Locking: one mutex (g_mu) guards every arena and the capacity. An arena's memory is freed only by
 * ft78ne_emu_set_private_capacity, which refuses while any block is allocated or any _p call is
 * running on it (`busy`, taken by emu_arena_pin): a call never touches freed host memory. */
#include "emu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- per-thread state (cffi calls come from many Python threads) ---------------------- */
static _Thread_local int t_err;
static _Thread_local char t_msg[512];
static _Thread_local int t_core;

#define MAX_CAPACITY ((size_t)1 << 30)
#define MAX_BLOCKS 256

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

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

/* ---- core ------------------------------------------------------------------------------- */
static int set_core(int core) {
    emu_clear();
    if (core < 0 || core >= FT78NE_NUM_CORES)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "ft78ne_emu_set_core: core must be in 0..%d, got %d",
                        FT78NE_NUM_CORES - 1, core);
    t_core = core;
    return FT78NE_OK;
}
FT78NE_API int ft78ne_emu_set_core(int core) { return set_core(core); }
FT78NE_API int ft78ne_emu_core(void) { return t_core; }
FT78NE_API int ft78ne_emu_num_cores(void) { return FT78NE_NUM_CORES; }
int emu_thread_core(void) { return t_core; }

/* ---- private arenas ---------------------------------------------------------------------- */
typedef struct {
    size_t off, len;
} blk;
typedef struct {
    unsigned char *base; /* lazily allocated, `cap` bytes, 64-byte aligned */
    size_t cap;
    blk b[MAX_BLOCKS]; /* live allocations, sorted by offset */
    int n;
    int busy; /* _p calls running on this arena (they hold pointers into it) */
} arena;

static arena g_arena[FT78NE_NUM_CORES];
static size_t g_capacity = FT78NE_EMU_DEFAULT_PRIVATE_BYTES;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards g_arena and g_capacity */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_once(void) {
    const char *bytes = getenv("FT78NE_EMU_PRIVATE_BYTES");
    if (bytes && *bytes) {
        char *end;
        unsigned long long v = strtoull(bytes, &end, 0);
        if (*end == '\0' && bytes[0] != '-' && v >= FT78NE_EMU_PRIVATE_ALIGN && v <= MAX_CAPACITY)
            g_capacity = round_up((size_t)v, FT78NE_EMU_PRIVATE_ALIGN);
    }
}
static void ensure_init(void) { pthread_once(&g_once, init_once); }

/* fork: the child must not inherit g_mu held by a thread that does not exist there (it would wait
 * forever on its first allocation). The fork takes g_mu, so the arenas are consistent in both
 * processes, and both release it. */
static void fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void fork_release(void) { pthread_mutex_unlock(&g_mu); }
__attribute__((constructor)) static void register_fork_handlers(void) {
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

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

static int cmp_blk(const void *p, const void *q) {
    const blk *x = p, *y = q;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* First fit among the gaps between the live blocks and the `avoid` spans (byte ranges of the
 * arena that are in use without being allocated: the buffers of the call that wants scratch).
 * Returns NULL and sets *why when nothing fits (caller holds g_mu). */
static void *alloc_locked(arena *a, size_t bytes, const emu_span *avoid, int navoid, const char **why) {
    if (bytes > a->cap) {
        *why = "larger than the whole private memory";
        return NULL;
    }
    size_t len = round_up(bytes ? bytes : 1, FT78NE_EMU_PRIVATE_ALIGN);
    if (a->n == MAX_BLOCKS) {
        *why = "too many live allocations (256)";
        return NULL;
    }
    blk used[MAX_BLOCKS + EMU_MAX_BUFS];
    int k = a->n;
    memcpy(used, a->b, (size_t)a->n * sizeof(blk));
    uintptr_t lo = (uintptr_t)a->base, hi = lo + a->cap;
    for (int i = 0; i < navoid && k < MAX_BLOCKS + EMU_MAX_BUFS; i++) {
        uintptr_t p = (uintptr_t)avoid[i].ptr, e = p + avoid[i].bytes;
        if (!avoid[i].bytes || e < p || e <= lo || p >= hi)
            continue; /* empty, or not in this arena */
        size_t s = (p < lo ? 0 : p - lo) / FT78NE_EMU_PRIVATE_ALIGN * FT78NE_EMU_PRIVATE_ALIGN;
        size_t t = round_up((e > hi ? hi : e) - lo, FT78NE_EMU_PRIVATE_ALIGN);
        used[k++] = (blk){s, t - s};
    }
    if (k > a->n)
        qsort(used, (size_t)k, sizeof(blk), cmp_blk);
    size_t end = 0, at = SIZE_MAX;
    for (int i = 0; i < k && at == SIZE_MAX; i++) {
        if (used[i].off > end && used[i].off - end >= len)
            at = end;
        if (used[i].off + used[i].len > end)
            end = used[i].off + used[i].len;
    }
    if (at == SIZE_MAX) {
        if (a->cap < end || a->cap - end < len) {
            *why = navoid ? "no free gap large enough outside the call's buffers" : "no free gap large enough";
            return NULL;
        }
        at = end;
    }
    int pos = 0;
    while (pos < a->n && a->b[pos].off < at)
        pos++;
    memmove(&a->b[pos + 1], &a->b[pos], (size_t)(a->n - pos) * sizeof(blk));
    a->b[pos] = (blk){at, len};
    a->n++;
    return a->base + at;
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
        if (g_arena[c].n || g_arena[c].busy) {
            int n = g_arena[c].n, busy = g_arena[c].busy;
            pthread_mutex_unlock(&g_mu);
            return emu_fail(FT78NE_ERR_INVALID_ARGUMENT,
                            "ft78ne_emu_set_private_capacity: core %d's private memory holds %d allocation(s) and "
                            "%d running call(s); free them first",
                            c, n, busy);
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

static void *private_alloc(const char *fn, int core, size_t bytes) {
    ensure_init();
    emu_clear();
    if (bad_core(fn, core))
        return NULL;
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(core);
    const char *why = "host out of memory for the arena";
    void *p = a ? alloc_locked(a, bytes, NULL, 0, &why) : NULL;
    size_t cap = a ? a->cap : g_capacity, gap = a ? largest_gap(a) : 0;
    pthread_mutex_unlock(&g_mu);
    if (!p)
        emu_fail(a ? FT78NE_ERR_CAPACITY : FT78NE_ERR_NO_MEMORY,
                 "%s: %zu bytes do not fit in core %d's private memory (%s; capacity %zu bytes, largest free gap %zu "
                 "bytes)",
                 fn, bytes, core, why, cap, gap);
    return p;
}

static int private_free(const char *fn, int core, void *ptr) {
    emu_clear();
    if (bad_core(fn, core))
        return FT78NE_ERR_INVALID_ARGUMENT;
    if (!ptr)
        return FT78NE_OK; /* like free(NULL) */
    pthread_mutex_lock(&g_mu);
    int rc = g_arena[core].base ? free_locked(&g_arena[core], ptr) : -1;
    pthread_mutex_unlock(&g_mu);
    if (rc)
        return emu_fail(FT78NE_ERR_INVALID_ARGUMENT, "%s: %p is not a live allocation in core %d's private memory", fn,
                        ptr, core);
    return FT78NE_OK;
}

FT78NE_API void *ft78ne_emu_private_alloc(int core, size_t bytes) {
    return private_alloc("ft78ne_emu_private_alloc", core, bytes);
}
FT78NE_API int ft78ne_emu_private_free(int core, void *ptr) {
    return private_free("ft78ne_emu_private_free", core, ptr);
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

/* ---- what a _p call (the emulator's or a port's) checks ---------------------------------- */
int emu_arena_pin(int core, uintptr_t *base, size_t *cap) {
    ensure_init();
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(core);
    if (a) {
        a->busy++;
        *base = (uintptr_t)a->base;
        *cap = a->cap;
    }
    pthread_mutex_unlock(&g_mu);
    return a ? FT78NE_OK : FT78NE_ERR_NO_MEMORY;
}

void emu_arena_unpin(int core) {
    pthread_mutex_lock(&g_mu);
    g_arena[core].busy--;
    pthread_mutex_unlock(&g_mu);
}

int emu_in_arena(uintptr_t base, size_t cap, const void *ptr, size_t bytes) {
    uintptr_t p = (uintptr_t)ptr;
    if (bytes > cap)
        return FT78NE_ERR_CAPACITY;
    return p < base || p - base > cap - bytes ? FT78NE_ERR_NOT_PRIVATE : FT78NE_OK;
}

void *emu_arena_scratch(int core, size_t bytes, const emu_span *avoid, int navoid, size_t *cap, size_t *gap,
                        const char **why) {
    pthread_mutex_lock(&g_mu);
    arena *a = arena_locked(core);
    *why = "host out of memory for the arena";
    void *p = a ? alloc_locked(a, bytes, avoid, navoid, why) : NULL;
    *cap = a ? a->cap : 0;
    *gap = a ? largest_gap(a) : 0;
    pthread_mutex_unlock(&g_mu);
    return p;
}

void emu_arena_release(int core, void *p) {
    pthread_mutex_lock(&g_mu);
    free_locked(&g_arena[core], p);
    pthread_mutex_unlock(&g_mu);
}

#ifdef FT78NE_PRIVATE_SHIM
/* ---- the port-facing API of the private-memory shim (include/ft78ne_private_shim.h) ------- */
#include "ft78ne_private_shim.h"

FT78NE_API int ft78ne_shim_core(void) { return t_core; }
FT78NE_API const char *ft78ne_shim_last_error_message(void) { return t_msg; }

FT78NE_API int ft78ne_shim_private_check(const void *ptr, size_t bytes) {
    if (!bytes)
        return FT78NE_OK; /* an empty buffer is nowhere */
    int core = t_core;
    if (!ptr)
        return emu_fail(FT78NE_ERR_NULL_POINTER, "NULL buffer of %zu bytes", bytes);
    uintptr_t base;
    size_t cap;
    if (emu_arena_pin(core, &base, &cap))
        return emu_fail(FT78NE_ERR_NO_MEMORY, "host out of memory for core %d's private memory", core);
    emu_arena_unpin(core); /* only the answer is wanted: the port's call is not tracked */
    int rc = emu_in_arena(base, cap, ptr, bytes);
    if (rc == FT78NE_ERR_CAPACITY)
        return emu_fail(rc, "%zu bytes are more than core %d's private memory holds (%zu bytes)", bytes, core, cap);
    if (rc)
        return emu_fail(rc, "[%p, +%zu bytes) is not inside core %d's private memory [%p, +%zu bytes)", ptr, bytes,
                        core, (void *)base, cap);
    return FT78NE_OK;
}

FT78NE_API void *ft78ne_shim_private_alloc(size_t bytes) {
    return private_alloc("ft78ne_shim_private_alloc", t_core, bytes);
}
FT78NE_API int ft78ne_shim_private_free(void *ptr) { return private_free("ft78ne_shim_private_free", t_core, ptr); }
#endif
