/* The runtime subset: init/finalize, the (single) emulated device, streams, device memory,
 * error messages, the object registries and the emulator-only helpers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_DEVICE_COUNT 1
#define EMU_STREAM_MAGIC 0x53545245414d3031ULL /* "STREAM01" */

/* ---- the lock ----------------------------------------------------------------------------- */

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

void emu_lock(void) { pthread_mutex_lock(&g_mutex); }
void emu_unlock(void) { pthread_mutex_unlock(&g_mutex); }

/* fork(): only the forking thread lives on in the child, so the mutex held by another thread at
 * that moment would stay locked there for good. Held across fork (as the FT78NE arena's is), it
 * leaves the child with a free lock and every registry in a consistent state. */
static void fork_prepare(void) { pthread_mutex_lock(&g_mutex); }
static void fork_release(void) { pthread_mutex_unlock(&g_mutex); }
__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

/* ---- error messages ------------------------------------------------------------------------ */

static _Thread_local char tls_msg[1024];
static _Thread_local int tls_has_msg;

static void set_error_v(const char *fmt, va_list ap)
{
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    tls_has_msg = 1;
}

void emu_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error_v(fmt, ap);
    va_end(ap);
}

/* The operator libraries' way to set the message (they cannot see emu_set_error). */
EMU_EXPORT void xlossEmuSetErrMsg(const char *fmt, ...)
{
    if (!fmt)
        return;
    va_list ap;
    va_start(ap, fmt);
    set_error_v(fmt, ap);
    va_end(ap);
}

/* The message is consumed by the read (a later call returns NULL until the next error); the
 * buffer itself stays valid for the thread until the next error overwrites it. */
EMU_EXPORT const char *aclGetRecentErrMsg(void)
{
    if (!tls_has_msg)
        return NULL;
    tls_has_msg = 0;
    return tls_msg;
}

EMU_EXPORT size_t aclDataTypeSize(aclDataType dataType) { return emu_dtype_size(dataType); }

/* ---- pointer sets (open addressing, linear probing, backward-shift deletion) ---------------- */

emu_ptrset emu_tensors, emu_executors, emu_streams;

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int ptrset_grow(emu_ptrset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    void **slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < s->cap; i++) {
        void *p = s->slots[i];
        if (!p)
            continue;
        size_t j = ptr_hash(p) & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = p;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

int emu_ptrset_add(emu_ptrset *s, void *p)
{
    if ((s->len + 1) * 2 > s->cap && ptrset_grow(s) != 0)
        return -1;
    size_t j = ptr_hash(p) & (s->cap - 1);
    while (s->slots[j]) {
        if (s->slots[j] == p)
            return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->slots[j] = p;
    s->len++;
    return 0;
}

static size_t ptrset_find(const emu_ptrset *s, const void *p)
{
    if (!s->cap || !p)
        return (size_t)-1;
    size_t j = ptr_hash(p) & (s->cap - 1);
    while (s->slots[j]) {
        if (s->slots[j] == p)
            return j;
        j = (j + 1) & (s->cap - 1);
    }
    return (size_t)-1;
}

int emu_ptrset_has(const emu_ptrset *s, const void *p) { return ptrset_find(s, p) != (size_t)-1; }

int emu_ptrset_remove(emu_ptrset *s, const void *p)
{
    size_t i = ptrset_find(s, p);
    if (i == (size_t)-1)
        return 0;
    size_t mask = s->cap - 1;
    s->slots[i] = NULL;
    for (size_t j = (i + 1) & mask; s->slots[j]; j = (j + 1) & mask) {
        size_t home = ptr_hash(s->slots[j]) & mask;
        /* move slots[j] into the hole at i unless its home lies cyclically in (i, j] */
        int stays = (i < j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            s->slots[i] = s->slots[j];
            s->slots[j] = NULL;
            i = j;
        }
    }
    s->len--;
    return 1;
}

/* ---- retired objects -------------------------------------------------------------------------- */

static void *g_quarantine[EMU_QUARANTINE];
static size_t g_quarantine_next;

void emu_retire_locked(void *object)
{
    void *oldest = g_quarantine[g_quarantine_next];
    g_quarantine[g_quarantine_next] = object;
    g_quarantine_next = (g_quarantine_next + 1) % EMU_QUARANTINE;
    free(oldest);
}

/* Device memory, likewise: a freed block's address stays out of reuse while the last
 * EMU_MEM_QUARANTINE blocks (at most EMU_MEM_QUARANTINE_BYTES) wait, so aclrtFree of a stale
 * pointer, and a stale tensor over freed memory, are reported instead of hitting a newer block. */
#define EMU_MEM_QUARANTINE 256
#define EMU_MEM_QUARANTINE_BYTES ((size_t)16 << 20)

static struct {
    char *base;
    size_t size;
} g_mem_q[EMU_MEM_QUARANTINE];
static size_t g_mem_q_head, g_mem_q_len, g_mem_q_bytes;

static void mem_evict_locked(void)
{
    free(g_mem_q[g_mem_q_head].base);
    g_mem_q_bytes -= g_mem_q[g_mem_q_head].size;
    g_mem_q_head = (g_mem_q_head + 1) % EMU_MEM_QUARANTINE;
    g_mem_q_len--;
}

static void mem_retire_locked(char *base, size_t size)
{
    if (size > EMU_MEM_QUARANTINE_BYTES) {
        free(base);
        return;
    }
    while (g_mem_q_len == EMU_MEM_QUARANTINE || g_mem_q_bytes + size > EMU_MEM_QUARANTINE_BYTES)
        mem_evict_locked();
    size_t at = (g_mem_q_head + g_mem_q_len) % EMU_MEM_QUARANTINE;
    g_mem_q[at].base = base;
    g_mem_q[at].size = size;
    g_mem_q_len++;
    g_mem_q_bytes += size;
}

static void flush_quarantine_locked(void)
{
    for (size_t i = 0; i < EMU_QUARANTINE; i++) {
        free(g_quarantine[i]);
        g_quarantine[i] = NULL;
    }
    g_quarantine_next = 0;
    while (g_mem_q_len)
        mem_evict_locked();
}

/* ---- runtime state --------------------------------------------------------------------------- */

static int g_initialized;
static int64_t g_device_refs;   /* aclrtSetDevice minus aclrtResetDevice, process-wide */
static uint64_t g_device_gen = 1; /* bumped when the device context goes away */
static _Thread_local int32_t tls_device = -1;
static _Thread_local uint64_t tls_gen;

static int thread_has_device_locked(void) { return tls_device >= 0 && tls_gen == g_device_gen && g_device_refs > 0; }

int emu_runtime_ready_locked(void) { return g_initialized && thread_has_device_locked(); }

/* Runtime calls that need a device context in the calling thread. */
static aclError need_context_locked(const char *api)
{
    if (!g_initialized) {
        emu_set_error("%s: aclInit has not been called", api);
        return ACL_ERROR_UNINITIALIZE;
    }
    if (!thread_has_device_locked()) {
        emu_set_error("%s: no device context in this thread (call aclrtSetDevice first)", api);
        return ACL_ERROR_RT_CONTEXT_NULL;
    }
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclInit(const char *configPath)
{
    if (configPath && configPath[0]) {
        FILE *f = fopen(configPath, "r"); /* the emulator has no settings; the file must still exist */
        if (!f) {
            emu_set_error("aclInit: cannot open config file %s", configPath);
            return ACL_ERROR_INVALID_FILE;
        }
        fclose(f);
    }
    emu_lock();
    if (g_initialized) {
        emu_unlock();
        emu_set_error("aclInit: already initialized in this process");
        return ACL_ERROR_REPEAT_INITIALIZE;
    }
    g_initialized = 1;
    emu_unlock();
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclFinalize(void)
{
    emu_lock();
    if (!g_initialized) {
        emu_unlock();
        emu_set_error("aclFinalize: not initialized (or already finalized)");
        return ACL_ERROR_REPEAT_FINALIZE;
    }
    g_initialized = 0;
    g_device_refs = 0;
    g_device_gen++;
    emu_release_executors_locked(); /* aclFinalize releases aclnn's resources too (aclnnFinalize's page) */
    flush_quarantine_locked(); /* a program that finalizes leaves nothing allocated behind */
    emu_unlock();
    return ACL_SUCCESS;
}

/* aclnnInit/aclnnFinalize (aclnn/aclnn_base.h): the operator library's own init. The emulator's
 * operators need none, so both succeed whenever called (configPath is not read). */
EMU_EXPORT aclnnStatus aclnnInit(const char *configPath)
{
    (void)configPath;
    return ACLNN_SUCCESS;
}

EMU_EXPORT aclnnStatus aclnnFinalize(void) { return ACLNN_SUCCESS; }

EMU_EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    if (!count) {
        emu_set_error("aclrtGetDeviceCount: count is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    *count = EMU_DEVICE_COUNT;
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclrtSetDevice(int32_t deviceId)
{
    emu_lock();
    aclError st = ACL_SUCCESS;
    if (!g_initialized) {
        emu_set_error("aclrtSetDevice: aclInit has not been called");
        st = ACL_ERROR_UNINITIALIZE;
    } else if (deviceId < 0 || deviceId >= EMU_DEVICE_COUNT) {
        emu_set_error("aclrtSetDevice: device %d does not exist (the emulator has %d)", (int)deviceId,
                      EMU_DEVICE_COUNT);
        st = ACL_ERROR_RT_INVALID_DEVICEID;
    } else {
        g_device_refs++;
        tls_device = deviceId;
        tls_gen = g_device_gen;
    }
    emu_unlock();
    return st;
}

EMU_EXPORT aclError aclrtResetDevice(int32_t deviceId)
{
    emu_lock();
    aclError st = ACL_SUCCESS;
    if (!g_initialized) {
        emu_set_error("aclrtResetDevice: aclInit has not been called");
        st = ACL_ERROR_UNINITIALIZE;
    } else if (deviceId < 0 || deviceId >= EMU_DEVICE_COUNT) {
        emu_set_error("aclrtResetDevice: device %d does not exist", (int)deviceId);
        st = ACL_ERROR_RT_INVALID_DEVICEID;
    } else if (g_device_refs <= 0) {
        emu_set_error("aclrtResetDevice: device %d was not set", (int)deviceId);
        st = ACL_ERROR_RT_CONTEXT_NULL;
    } else if (--g_device_refs == 0) {
        g_device_gen++; /* the default context goes away for every thread */
    }
    emu_unlock();
    return st;
}

EMU_EXPORT aclError aclrtGetDevice(int32_t *deviceId)
{
    if (!deviceId) {
        emu_set_error("aclrtGetDevice: deviceId is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_lock();
    aclError st = need_context_locked("aclrtGetDevice");
    if (st == ACL_SUCCESS)
        *deviceId = tls_device;
    emu_unlock();
    return st;
}

/* ---- streams: all work runs synchronously inside phase two, so a stream is a handle only ---- */

typedef struct {
    uint64_t magic;
} emu_stream;

EMU_EXPORT aclError aclrtCreateStream(aclrtStream *stream)
{
    if (!stream) {
        emu_set_error("aclrtCreateStream: stream is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_lock();
    aclError st = need_context_locked("aclrtCreateStream");
    if (st == ACL_SUCCESS) {
        emu_stream *s = malloc(sizeof *s);
        if (!s || emu_ptrset_add(&emu_streams, s) != 0) {
            free(s);
            emu_set_error("aclrtCreateStream: out of memory");
            st = ACL_ERROR_RT_MEMORY_ALLOCATION;
        } else {
            s->magic = EMU_STREAM_MAGIC;
            *stream = s;
        }
    }
    emu_unlock();
    return st;
}

EMU_EXPORT aclError aclrtDestroyStream(aclrtStream stream)
{
    emu_lock();
    aclError st = ACL_SUCCESS;
    if (!stream || !emu_ptrset_remove(&emu_streams, stream)) {
        emu_set_error("aclrtDestroyStream: %p is not a live stream", stream);
        st = ACL_ERROR_INVALID_PARAM;
    } else {
        ((emu_stream *)stream)->magic = 0;
        emu_retire_locked(stream);
    }
    emu_unlock();
    return st;
}

EMU_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream)
{
    emu_lock();
    aclError st = need_context_locked("aclrtSynchronizeStream");
    if (st == ACL_SUCCESS && stream && !emu_ptrset_has(&emu_streams, stream)) {
        emu_set_error("aclrtSynchronizeStream: %p is not a live stream", stream);
        st = ACL_ERROR_INVALID_PARAM;
    }
    emu_unlock();
    return st;
}

/* ---- device memory ------------------------------------------------------------------------ */

struct emu_alloc {
    char *base;
    size_t size;  /* bytes the caller asked for: the bound every access is checked against */
    size_t pins;  /* kernel runs / copies in progress */
    int freed;    /* aclrtFree'd while pinned: released by the last unpin */
};

static emu_alloc **g_allocs; /* sorted by base */
static size_t g_nallocs, g_cap_allocs;

/* index of the last allocation whose base <= p, or (size_t)-1 */
static size_t alloc_floor(const void *p)
{
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)g_allocs[mid]->base <= (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : (size_t)-1;
}

emu_alloc *emu_find_alloc_locked(const void *p, uint64_t n)
{
    size_t i = alloc_floor(p);
    if (i == (size_t)-1)
        return NULL;
    emu_alloc *a = g_allocs[i];
    uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)a->base);
    if (off > a->size || n > a->size - off)
        return NULL;
    if (n == 0 && off == a->size && a->size != 0)
        return NULL; /* one past the end is not inside */
    return a;
}

/* How many of the n bytes from p (inside block a) lie inside it. */
static size_t emu_alloc_bytes_from(const emu_alloc *a, const void *p, size_t n)
{
    uint64_t left = a->size - (uint64_t)((uintptr_t)p - (uintptr_t)a->base);
    return n < left ? n : (size_t)left;
}

void emu_pin_locked(emu_alloc *a) { a->pins++; }

void emu_unpin_locked(emu_alloc *a)
{
    if (--a->pins == 0 && a->freed) {
        mem_retire_locked(a->base, (size_t)emu_round_up(a->size));
        free(a);
    }
}

EMU_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    if (!devPtr) {
        emu_set_error("aclrtMalloc: devPtr is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (size == 0) {
        emu_set_error("aclrtMalloc: size is 0");
        return ACL_ERROR_INVALID_PARAM;
    }
    (void)policy; /* any value: CANN's aclMallocMemInner maps an unknown policy to the default flags */
    emu_lock();
    aclError st = need_context_locked("aclrtMalloc");
    emu_unlock();
    if (st != ACL_SUCCESS)
        return st;

    uint64_t rounded = emu_round_up(size);
    void *p = NULL;
    emu_alloc *a = malloc(sizeof *a);
    if (rounded < size || !a || posix_memalign(&p, EMU_ALIGN, (size_t)rounded) != 0) {
        free(a);
        emu_set_error("aclrtMalloc: cannot allocate %zu bytes", size);
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    /* fresh device memory holds garbage; all-ones bytes read back as NaN in every float type,
     * so an output a kernel forgot to write is visible */
    memset(p, 0xFF, (size_t)rounded);
    a->base = p;
    a->size = size;
    a->pins = 0;
    a->freed = 0;

    emu_lock();
    if (g_nallocs == g_cap_allocs) {
        size_t cap = g_cap_allocs ? g_cap_allocs * 2 : 64;
        emu_alloc **grown = realloc(g_allocs, cap * sizeof *grown);
        if (!grown) {
            emu_unlock();
            free(p);
            free(a);
            emu_set_error("aclrtMalloc: out of memory");
            return ACL_ERROR_RT_MEMORY_ALLOCATION;
        }
        g_allocs = grown;
        g_cap_allocs = cap;
    }
    size_t at = alloc_floor(p) + 1; /* (size_t)-1 + 1 == 0 */
    memmove(g_allocs + at + 1, g_allocs + at, (g_nallocs - at) * sizeof *g_allocs);
    g_allocs[at] = a;
    g_nallocs++;
    emu_unlock();
    *devPtr = p;
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclrtFree(void *devPtr)
{
    if (!devPtr) {
        emu_set_error("aclrtFree: devPtr is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_lock();
    if (!g_initialized) {
        emu_unlock();
        emu_set_error("aclrtFree: aclInit has not been called");
        return ACL_ERROR_UNINITIALIZE;
    }
    size_t i = alloc_floor(devPtr);
    if (i == (size_t)-1 || g_allocs[i]->base != (char *)devPtr) {
        emu_unlock();
        emu_set_error("aclrtFree: %p is not the start of a live aclrtMalloc block", devPtr);
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_alloc *a = g_allocs[i];
    memmove(g_allocs + i, g_allocs + i + 1, (g_nallocs - i - 1) * sizeof *g_allocs);
    g_nallocs--;
    if (a->pins) {
        a->freed = 1; /* a kernel or copy still uses it: the last unpin frees it */
    } else {
        mem_retire_locked(a->base, (size_t)emu_round_up(a->size));
        free(a);
    }
    emu_unlock();
    return ACL_SUCCESS;
}

static const char *kind_name(aclrtMemcpyKind k)
{
    switch (k) {
    case ACL_MEMCPY_HOST_TO_HOST:
        return "HOST_TO_HOST";
    case ACL_MEMCPY_HOST_TO_DEVICE:
        return "HOST_TO_DEVICE";
    case ACL_MEMCPY_DEVICE_TO_HOST:
        return "DEVICE_TO_HOST";
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
        return "DEVICE_TO_DEVICE";
    case ACL_MEMCPY_DEFAULT:
        return "DEFAULT";
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE:
        return "HOST_TO_BUF_TO_DEVICE";
    default:
        return "?";
    }
}

/* Checks one side of a copy. Device sides must lie in one live block, except a device source of
 * a copy to the host (tail_ok), which need only start in one: CANN's runtime does not check the
 * range against the allocation, and its own FLCE sample reads past a block. Host sides must not
 * start inside device memory. On success *pin is the block to pin (or NULL for host). */
static aclError memcpy_side_locked(const char *what, const void *p, size_t count, int device, int tail_ok,
                                   aclrtMemcpyKind kind, emu_alloc **pin)
{
    *pin = NULL;
    emu_alloc *a = emu_find_alloc_locked(p, device && !tail_ok ? count : 0);
    if (device && !a) {
        emu_set_error("aclrtMemcpy(%s): %s %p..+%zu is not inside one live device allocation", kind_name(kind), what, p,
                      count);
        return ACL_ERROR_INVALID_PARAM;
    }
    if (!device && a) {
        emu_set_error("aclrtMemcpy(%s): %s %p is device memory", kind_name(kind), what, p);
        return ACL_ERROR_INVALID_PARAM;
    }
    *pin = device ? a : NULL;
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    if (!dst || !src) {
        emu_set_error("aclrtMemcpy: %s is NULL", dst ? "src" : "dst");
        return ACL_ERROR_INVALID_PARAM;
    }
    if ((unsigned)kind > ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) { /* CANN's MemcpyKindTranslate: 0-5 */
        emu_set_error("aclrtMemcpy: kind %d is not supported (HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, "
                      "DEVICE_TO_DEVICE, DEFAULT or HOST_TO_BUF_TO_DEVICE)",
                      (int)kind);
        return ACL_ERROR_INVALID_PARAM;
    }
    if (count > destMax) {
        emu_set_error("aclrtMemcpy: count %zu exceeds destMax %zu", count, destMax);
        return ACL_ERROR_INVALID_PARAM;
    }
    int dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE ||
                  kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE;
    int src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    emu_alloc *pd = NULL, *ps = NULL;
    emu_lock();
    aclError st = need_context_locked("aclrtMemcpy");
    if (st == ACL_SUCCESS && kind == ACL_MEMCPY_DEFAULT) { /* the direction follows the addresses */
        dst_dev = emu_find_alloc_locked(dst, 0) != NULL;
        src_dev = emu_find_alloc_locked(src, 0) != NULL;
    }
    if (st == ACL_SUCCESS && count)
        st = memcpy_side_locked("dst", dst, count, dst_dev, 0, kind, &pd);
    if (st == ACL_SUCCESS && count)
        st = memcpy_side_locked("src", src, count, src_dev, !dst_dev, kind, &ps);
    if (st != ACL_SUCCESS || count == 0) {
        emu_unlock();
        return st;
    }
    /* a device source read past its block: the bytes beyond read as never-written device memory */
    size_t inside = ps ? emu_alloc_bytes_from(ps, src, count) : count;
    if (pd)
        emu_pin_locked(pd);
    if (ps)
        emu_pin_locked(ps);
    emu_unlock();
    memmove(dst, src, inside);
    memset((char *)dst + inside, 0xFF, count - inside);
    emu_lock();
    if (pd)
        emu_unpin_locked(pd);
    if (ps)
        emu_unpin_locked(ps);
    emu_unlock();
    return ACL_SUCCESS;
}

EMU_EXPORT aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    if (!devPtr) {
        emu_set_error("aclrtMemset: devPtr is NULL");
        return ACL_ERROR_INVALID_PARAM;
    }
    if (count > maxCount) {
        emu_set_error("aclrtMemset: count %zu exceeds maxCount %zu", count, maxCount);
        return ACL_ERROR_INVALID_PARAM;
    }
    emu_lock();
    aclError st = need_context_locked("aclrtMemset");
    emu_alloc *a = NULL;
    if (st == ACL_SUCCESS && count) {
        a = emu_find_alloc_locked(devPtr, count);
        if (!a) {
            emu_set_error("aclrtMemset: %p..+%zu is not inside one live device allocation", devPtr, count);
            st = ACL_ERROR_INVALID_PARAM;
        } else {
            emu_pin_locked(a);
        }
    }
    emu_unlock();
    if (st != ACL_SUCCESS || !a)
        return st;
    memset(devPtr, value & 0xFF, count);
    emu_lock();
    emu_unpin_locked(a);
    emu_unlock();
    return ACL_SUCCESS;
}

/* ---- emulator-only helpers ------------------------------------------------------------------ */

EMU_EXPORT int64_t xlossEmuLiveAllocations(int32_t kind)
{
    emu_lock();
    int64_t mem = (int64_t)g_nallocs, ten = (int64_t)emu_tensors.len, exe = (int64_t)emu_executors.len,
            str = (int64_t)emu_streams.len;
    emu_unlock();
    switch (kind) {
    case XLOSS_EMU_LIVE_DEVICE_MEMORY:
        return mem;
    case XLOSS_EMU_LIVE_TENSORS:
        return ten;
    case XLOSS_EMU_LIVE_EXECUTORS:
        return exe;
    case XLOSS_EMU_LIVE_STREAMS:
        return str;
    case XLOSS_EMU_LIVE_ALL:
        return mem + ten + exe + str;
    default:
        return -1;
    }
}

EMU_EXPORT const char *xlossEmuVersion(void) { return "xloss aclnn host emulator 0.2.0"; }
