/*
 * The private-memory shim for port authors: libxloss_ft78ne_private.so (soname
 * libxloss_ft78ne_private.so; xloss.backends.ft78ne_shim.private_shim_path()).
 *
 * It is the emulator's private-memory code without any vendor operator: eight per-core arenas
 * and the ft78ne_emu.h helpers xloss uses for memory="private" (set_core, private_alloc/free/
 * base/capacity/in_use, the error trio). A port that links against it
 *
 *     gcc -shared ... my_dsp.c -L<dir> -lxloss_ft78ne_private -Wl,-rpath,<dir> -o libmy_dsp.so
 *
 * and is listed before it (xloss check --lib ./libmy_dsp.so:<dir>/libxloss_ft78ne_private.so
 * --option memory=private) gets its fp_<op>_p / hp_<op>_p functions driven exactly as the
 * emulator's: xloss allocates each tile's buffers in a core's arena, sets the calling thread's
 * core, and calls the _p function, which must refuse any buffer that is not in that core's
 * private memory -- check each one with ft78ne_shim_private_check.
 *
 * Call only these ft78ne_shim_* functions from the port: the ft78ne_emu_* names are also defined
 * by the emulator, and a process that has loaded it (xloss loads libraries RTLD_GLOBAL) would bind
 * the port's references to the emulator's arenas instead of the shim's.
 */
#ifndef FT78NE_PRIVATE_SHIM_H
#define FT78NE_PRIVATE_SHIM_H

#include <stddef.h>

#ifndef FT78NE_API
#define FT78NE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The core this thread runs as (set by the caller with ft78ne_emu_set_core; default 0). */
FT78NE_API int ft78ne_shim_core(void);

/* 0 when [ptr, ptr + bytes) lies wholly inside the private memory of the core this thread runs
 * as, or bytes == 0. Otherwise FT78NE_ERR_NULL_POINTER (ptr NULL), FT78NE_ERR_CAPACITY (bytes
 * larger than the private memory) or FT78NE_ERR_NOT_PRIVATE, with a message for
 * ft78ne_shim_last_error_message. The test is the arena's extent, not its allocations: fixed
 * offsets from ft78ne_emu_private_base are private memory too (as the manual's L2 addresses). */
FT78NE_API int ft78ne_shim_private_check(const void *ptr, size_t bytes);
FT78NE_API const char *ft78ne_shim_last_error_message(void);

/* Scratch in this core's private memory (64-byte aligned; NULL when it does not fit), for a _p
 * function that needs working memory; free it before returning. */
FT78NE_API void *ft78ne_shim_private_alloc(size_t bytes);
FT78NE_API int ft78ne_shim_private_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* FT78NE_PRIVATE_SHIM_H */
