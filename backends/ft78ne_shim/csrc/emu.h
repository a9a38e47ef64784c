/* Internal interface of the FT78NE/MT7004 emulator (not installed for users). */
#ifndef FT78NE_EMU_INTERNAL_H
#define FT78NE_EMU_INTERNAL_H

#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The library is built with -fvisibility=hidden: only the ABI and the helpers are exported. */
#define FT78NE_API __attribute__((visibility("default")))
#include "ft78ne.h"
#include "ft78ne_emu.h"

#define EMU_INLINE static inline __attribute__((always_inline))

/* EMU_INT8: the FT78NE's i8_ forms (int8_t buffers; no emu_ld/emu_st: their operators convert themselves) */
typedef enum { EMU_FLOAT = 0, EMU_HALF = 1, EMU_INT8 = 2 } emu_dtype;

/* A byte range of host memory. */
typedef struct {
    const void *ptr;
    size_t bytes;
} emu_span;

/* What a call does with a buffer: reads it, or writes it. An EMU_OUT_INPLACE output (element-wise
 * operators: element i is read and then written by the same core) may be exactly the same range as
 * an input; any other overlap of an output with another buffer is refused. */
typedef enum { EMU_IN = 0, EMU_OUT = 1, EMU_OUT_INPLACE = 2 } emu_role;

/* A buffer the call reads or writes: name, address, extent in bytes (0: not accessed), the
 * alignment its element type needs, and its role. */
typedef struct {
    const char *name;
    const void *ptr;
    size_t bytes;
    size_t align;
    emu_role role;
} emu_buf;

#define EMU_MAX_BUFS 16 /* the most buffers one vendor call takes (FLCE: 10) */

/* One call in flight: what the checks and the dispatcher need to know. */
typedef struct {
    const char *fn;       /* vendor function name, for messages */
    emu_dtype dt;         /* element type of the half-or-float buffers */
    int is_private;       /* _p form */
    int core_mask;        /* _s form */
    int core;             /* _p form: the core it runs on */
    int pinned;           /* _p form: holds the core's arena (emu_arena_pin) until emu_end */
    const emu_buf *bufs;  /* the call's buffers, once checked (private scratch must avoid them) */
    int nbufs;
} emu_call;

/* ---- errors (per thread; arena.c) ---- */
int emu_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void emu_clear(void);

/* ---- call checks, in the order every entry point runs them (emu_state.c) ----
 * emu_begin: clears the error; checks the chip supports the dtype; _s: the core mask;
 *            _p: records the calling thread's core. Returns 0 or the error code.
 * Every entry point that called emu_begin calls emu_end, on every path. */
int emu_begin(emu_call *c, const char *fn, emu_dtype dt, int is_private, int core_mask);
void emu_end(emu_call *c);
/* In order, over the buffers with a nonzero extent: NULL (FT78NE_ERR_NULL_POINTER); misaligned
 * (FT78NE_ERR_INVALID_ARGUMENT); _p: larger than (FT78NE_ERR_CAPACITY) or not inside
 * (FT78NE_ERR_NOT_PRIVATE) the core's private memory, which stays pinned until emu_end; an output
 * overlapping another buffer (FT78NE_ERR_INVALID_ARGUMENT). `bufs` must outlive the call. */
int emu_check_buffers(emu_call *c, const emu_buf *bufs, int n);
/* a*b*c in size_t, or FT78NE_ERR_INVALID_ARGUMENT naming `what` on overflow. */
int emu_extent(const emu_call *c, const char *what, size_t a, size_t b, size_t c_, size_t *out);
/* every one of `n` labels in [0, classes), checked before any write, or FT78NE_ERR_INDEX naming the first not. */
int emu_check_labels(const char *fn, const int *labels, size_t n, uint64_t classes);

/* ---- private memory ---- */
/* Scratch in the calling core's private memory, outside the call's buffers (they need not be
 * allocated: programs may use fixed offsets). NULL + FT78NE_ERR_CAPACITY if it does not fit. */
void *emu_private_scratch(const emu_call *c, size_t bytes);
void emu_private_release(int core, void *p);

/* arena.c internals */
int emu_thread_core(void);
int emu_arena_pin(int core, uintptr_t *base, size_t *cap); /* materialise + mark busy */
void emu_arena_unpin(int core);
int emu_in_arena(uintptr_t base, size_t cap, const void *ptr, size_t bytes); /* 0, CAPACITY or NOT_PRIVATE */
void *emu_arena_scratch(int core, size_t bytes, const emu_span *avoid, int navoid, size_t *cap, size_t *gap,
                        const char **why);
void emu_arena_release(int core, void *p);

/* ---- running the work ----
 * A task processes units [lo, hi) of its rank. _s: one thread per selected core (cores with an
 * empty share are not started); _p: the calling thread is the core. Results never depend on
 * the split: every output element is produced by exactly one rank, in a fixed order. */
typedef void (*emu_task)(void *ctx, size_t lo, size_t hi, int rank);
void emu_dispatch(const emu_call *c, size_t units, emu_task task, void *ctx);
int emu_max_ranks(const emu_call *c); /* how many ranks emu_dispatch may use (for scratch) */

/* ---- float <-> IEEE binary16: the one implementation both emulators share (ours) ---- */
#include "../../common/include/xloss_half.h"

/* The reduction codes the operators take (ft78ne.h): the manual's binarycrossentropygrad codes, which
 * our operators share, and nlllossgrad's own order. */
EMU_INLINE int emu_reduction_valid(int r) {
    return r == FT78NE_REDUCTION_NONE || r == FT78NE_REDUCTION_MEAN || r == FT78NE_REDUCTION_SUM;
}
EMU_INLINE int emu_nll_reduction_valid(int r) {
    return r == FT78NE_NLL_REDUCTION_NONE || r == FT78NE_NLL_REDUCTION_SUM || r == FT78NE_NLL_REDUCTION_MEAN;
}

/* Element access for the half-or-float buffers; `dt` is a constant after inlining. */
EMU_INLINE float emu_ld(const void *p, size_t i, emu_dtype dt) {
    return dt == EMU_HALF ? xloss_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
EMU_INLINE void emu_st(void *p, size_t i, float v, emu_dtype dt) {
    if (dt == EMU_HALF)
        ((uint16_t *)p)[i] = xloss_f32_to_f16(v);
    else
        ((float *)p)[i] = v;
}
/* x[i] . w[r] (rows of h elements) in 8 float32 partial sums combined in a fixed tree: the same order in
 * every call, pass and core, and shorter error chains than one running sum. The one logit product of the
 * FLCE backward and the vocabulary-parallel forward, so both see the same logits bit for bit. */
EMU_INLINE float emu_dot_rows(const void *x, const void *w, size_t i, size_t r, size_t h, emu_dtype dt) {
    float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    size_t k = 0, xi = i * h, wi = r * h;
    for (; k + 8 <= h; k += 8)
        for (int l = 0; l < 8; l++)
            s[l] += emu_ld(x, xi + k + (size_t)l, dt) * emu_ld(w, wi + k + (size_t)l, dt);
    for (int l = 0; k < h; k++, l++)
        s[l] += emu_ld(x, xi + k, dt) * emu_ld(w, wi + k, dt);
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

EMU_INLINE size_t emu_size(emu_dtype dt) { return dt == EMU_HALF ? 2u : dt == EMU_INT8 ? 1u : 4u; }

/* Reductions are summed in blocks of this many elements (Kahan, float32), then the block sums
 * in order: the same value whatever the core mask or the tiling by a caller. */
#define EMU_BLOCK 1024u

typedef struct {
    float sum, comp;
} emu_kahan;
EMU_INLINE void emu_kahan_add(emu_kahan *k, float v) {
    float y = v - k->comp;
    float t = k->sum + y;
    /* once the sum is inf or nan the compensation is meaningless (and would turn inf into nan) */
    k->comp = isfinite(t) ? (t - k->sum) - y : 0.0f;
    k->sum = t;
}

#endif
