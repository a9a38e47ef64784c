/*
 * Emulator-only helpers of the FT78NE/MT7004 host emulator (libxloss_ft78ne.so). NOT part of
 * the vendor ABI: a program written for the DSP never calls them. They exist so that a host
 * program (and xloss's adapter) can
 *   - read the error of the last vendor call on this thread (the vendor functions return void),
 *   - choose which chip is emulated and which core a _p call runs on (per thread),
 *   - allocate buffers in a core's private memory, and size that memory.
 *
 * A port author's library may provide the same symbols to let xloss test more of it: the
 * error pair enables error reporting, set_core + private_alloc/free (+ private_capacity)
 * enable memory="private". The private-memory shim libxloss_ft78ne_private.so provides all of
 * them except the chip pair, and no vendor operator: a port links against it and checks its _p
 * buffers with ft78ne_shim_private_check (ft78ne_private_shim.h; backends/ft78ne_shim/README.md).
 */
#ifndef FT78NE_EMU_H
#define FT78NE_EMU_H

#include <stddef.h>

#ifndef FT78NE_API
#define FT78NE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes of the last call (ft78ne_emu_last_error). */
#define FT78NE_OK 0
#define FT78NE_ERR_NULL_POINTER 1     /* a buffer that is read or written is NULL */
/* FT78NE_ERR_INVALID_ARGUMENT: size < 0, reduction not 0/1/2, alpha/gamma out of range, too large, a misaligned
 * buffer, an output overlapping another buffer */
#define FT78NE_ERR_INVALID_ARGUMENT 2
#define FT78NE_ERR_CORE_MASK 3        /* core_mask is 0 or names a core outside 0..7 */
#define FT78NE_ERR_NOT_PRIVATE 4      /* a _p buffer is not inside the calling core's private memory */
#define FT78NE_ERR_CAPACITY 5         /* a _p call (or an allocation) needs more private memory than there is */
#define FT78NE_ERR_UNSUPPORTED 6      /* hp_ on FT78NE (fp32 only) */
#define FT78NE_ERR_INDEX 7            /* a class index (target, masked_target) out of range */
#define FT78NE_ERR_NO_MEMORY 8        /* host memory for shared-memory scratch could not be allocated */

/* Emulated chips (ft78ne_emu_set_chip). */
#define FT78NE_EMU_CHIP_FT78NE 0
#define FT78NE_EMU_CHIP_MT7004 1

#define FT78NE_EMU_DEFAULT_PRIVATE_BYTES (768u * 1024u)
#define FT78NE_EMU_PRIVATE_ALIGN 64u

/* Last error of this thread: cleared by every vendor call that succeeds. The message is
 * valid until the next call on the same thread. */
FT78NE_API int ft78ne_emu_last_error(void);
FT78NE_API const char *ft78ne_emu_last_error_message(void);
FT78NE_API void ft78ne_emu_clear_error(void);

/* The chip this thread's calls emulate (default: $FT78NE_EMU_CHIP = "ft78ne"/"mt7004", else
 * FT78NE). Returns 0, or FT78NE_ERR_INVALID_ARGUMENT for an unknown chip. */
FT78NE_API int ft78ne_emu_set_chip(int chip);
FT78NE_API int ft78ne_emu_chip(void);

/* The core this thread's _p calls run on (default 0). Returns 0 or FT78NE_ERR_INVALID_ARGUMENT. */
FT78NE_API int ft78ne_emu_set_core(int core);
FT78NE_API int ft78ne_emu_core(void);
FT78NE_API int ft78ne_emu_num_cores(void);

/* Private memory: one arena per core, each ft78ne_emu_private_capacity() bytes (default 768 KiB;
 * $FT78NE_EMU_PRIVATE_BYTES at load time, or set_private_capacity while no arena holds an
 * allocation or runs a _p call: 64 B .. 1 GiB, rounded up to 64 B). Allocations are 64-byte aligned and rounded
 * up to 64 bytes; alloc returns NULL (FT78NE_ERR_CAPACITY) when no gap is large enough. */
FT78NE_API size_t ft78ne_emu_private_capacity(void);
FT78NE_API int ft78ne_emu_set_private_capacity(size_t bytes);
FT78NE_API void *ft78ne_emu_private_alloc(int core, size_t bytes);
FT78NE_API int ft78ne_emu_private_free(int core, void *ptr);
FT78NE_API void *ft78ne_emu_private_base(int core);
FT78NE_API size_t ft78ne_emu_private_in_use(int core);

#ifdef __cplusplus
}
#endif

#endif /* FT78NE_EMU_H */
