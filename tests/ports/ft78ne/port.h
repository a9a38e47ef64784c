/* A port author's FT78NE/MT7004 loss library: the internal interface shared by its operators.
 *
 * The port runs on the host, single-threaded: an _s call walks the cores of core_mask in order
 * and gives each a contiguous slice of the work, as the DSP would run one slice per core; a _p
 * call runs on one core, on buffers that must lie in that core's private memory, which the
 * private-memory shim (libxloss_ft78ne_private.so, linked in) provides and checks. Every entry
 * point checks its arguments before writing any output and reports a failure through the error
 * pair of ft78ne_emu.h (the only way xloss can see the failure of a void function).
 *
 * Build switches (tests/ports/ft78ne/build.py): PORT_OMIT_NLL leaves nlllossgrad out; each
 * BUG_<NAME> seeds one bug (see README.md). */
#ifndef PORT_H
#define PORT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* built with -fvisibility=hidden: only the vendor ABI and the error pair are exported */
#define FT78NE_API __attribute__((visibility("default")))
#include "ft78ne.h"
#include "ft78ne_emu.h"
#include "ft78ne_private_shim.h"
#include "pairwise.h"

/* Clears this thread's error (every entry point starts with it). */
void port_begin(void);
/* Records a failure of `fn` on this thread; returns `code`. */
int port_fail(int code, const char *fn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Number of cores in an _s call's core_mask (bits 0..7), or 0 after recording
 * FT78NE_ERR_CORE_MASK when the mask selects no core or names one outside 0..7. */
int port_cores(const char *fn, int core_mask);

/* 0 when reduction is 0/1/2, else records FT78NE_ERR_INVALID_ARGUMENT. */
int port_check_reduction(const char *fn, int reduction);

/* A buffer of a _p call: its name, address and the bytes the call accesses (0: none). */
typedef struct {
    const char *name;
    const void *ptr;
    size_t bytes;
} port_buf;

/* _p calls: 0 when every buffer with a nonzero extent lies in the calling core's private memory
 * (ft78ne_shim_private_check), else records the shim's verdict (FT78NE_ERR_NULL_POINTER,
 * FT78NE_ERR_CAPACITY or FT78NE_ERR_NOT_PRIVATE) naming the buffer. */
int port_check_private(const char *fn, const port_buf *bufs, int n);

/* IEEE binary16 <-> float (float -> half rounds to nearest even). */
float port_h2f(half h);
half port_f2h(float f);

/* Element i of a buffer of float (is_half = 0) or half (is_half = 1), as float; and the store. */
static inline float port_ld(const void *p, int is_half, size_t i) {
    return is_half ? port_h2f(((const half *)p)[i]) : ((const float *)p)[i];
}
static inline void port_st(void *p, int is_half, size_t i, float v) {
    if (is_half)
        ((half *)p)[i] = port_f2h(v);
    else
        ((float *)p)[i] = v;
}

#endif
