"""The FT78NE/MT7004 C ABI as cffi sees it: declarations, status codes, library loading.

The declarations mirror ``include/ft78ne.h`` (vendor ABI) and ``include/ft78ne_emu.h``
(emulator-only helpers); ``tests/backends/ft78ne`` checks they stay in step.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ...clib import CLibrary, library_paths

ENV_VAR = "XLOSS_FT78NE_LIB"
MEMORY_ENV_VAR = "XLOSS_FT78NE_MEMORY"  # default of the memory option ("shared" or "private")
EMULATOR = Path(__file__).resolve().with_name("libxloss_ft78ne.so")

#: The vendor operators, each with fp_/hp_ x _s/_p entry points.
OPS = ("binarycrossentropygrad", "sigmoidfocalloss", "sigmoidfocallossgrad", "nlllossgrad",
       "fusedlinearcrossentropylossgrad")

NUM_CORES = 8
CORE_MASK_ALL = 0xFF
INT_MAX = 2**31 - 1

VENDOR_CDEF = """
typedef uint16_t half;
void fp_binarycrossentropygrad_s(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                 float *dloss, float *dx, int weight_defined, int core_mask);
void hp_binarycrossentropygrad_s(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                 half *dloss, half *dx, int weight_defined, int core_mask);
void fp_binarycrossentropygrad_p(int input_size, int reduction, float *input_x, float *input_y, float *weight,
                                 float *dloss, float *dx, int weight_defined);
void hp_binarycrossentropygrad_p(int input_size, int reduction, half *input_x, half *input_y, half *weight,
                                 half *dloss, half *dx, int weight_defined);
void fp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, float *input_x, float *input_y,
                           float *loss, int core_mask);
void hp_sigmoidfocalloss_s(int input_size, int reduction, float alpha, float gamma, half *input_x, half *input_y,
                           half *loss, int core_mask);
void fp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, float *input_x, float *input_y,
                           float *loss);
void hp_sigmoidfocalloss_p(int input_size, int reduction, float alpha, float gamma, half *input_x, half *input_y,
                           half *loss);
void fp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, float *input_x,
                               float *input_y, float *dloss, float *dx, int core_mask);
void hp_sigmoidfocallossgrad_s(int input_size, int reduction, float alpha, float gamma, half *input_x,
                               half *input_y, half *dloss, half *dx, int core_mask);
void fp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, float *input_x,
                               float *input_y, float *dloss, float *dx);
void hp_sigmoidfocallossgrad_p(int input_size, int reduction, float alpha, float gamma, half *input_x,
                               half *input_y, half *dloss, half *dx);
void fp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, float *dloss, int *target,
                      float *weight, float *total_weight, float *dx, int weight_defined, int core_mask);
void hp_nlllossgrad_s(int batch, int classes, int reduction, int ignore_index, half *dloss, int *target,
                      half *weight, float *total_weight, half *dx, int weight_defined, int core_mask);
void fp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, float *dloss, int *target,
                      float *weight, float *total_weight, float *dx, int weight_defined);
void hp_nlllossgrad_p(int batch, int classes, int reduction, int ignore_index, half *dloss, int *target,
                      half *weight, float *total_weight, half *dx, int weight_defined);
void fp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, float *input, float *weight,
                                          unsigned char *target_mask, int *masked_target, float *logits_max,
                                          float *sum_exp_logits, float *softmax, float *input_grad,
                                          float *weight_grad, int softmax_defined, int core_mask);
void hp_fusedlinearcrossentropylossgrad_s(int bt, int hidden, int vocab, float *grad, half *input, half *weight,
                                          unsigned char *target_mask, int *masked_target, float *logits_max,
                                          float *sum_exp_logits, float *softmax, half *input_grad,
                                          half *weight_grad, int softmax_defined, int core_mask);
void fp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, float *input, float *weight,
                                          unsigned char *target_mask, int *masked_target, float *logits_max,
                                          float *sum_exp_logits, float *softmax, float *input_grad,
                                          float *weight_grad, int softmax_defined, int accumulate);
void hp_fusedlinearcrossentropylossgrad_p(int bt, int hidden, int vocab, float *grad, half *input, half *weight,
                                          unsigned char *target_mask, int *masked_target, float *logits_max,
                                          float *sum_exp_logits, float *softmax, half *input_grad,
                                          half *weight_grad, int softmax_defined, int accumulate);
"""

EMU_CDEF = """
int ft78ne_emu_last_error(void);
const char *ft78ne_emu_last_error_message(void);
void ft78ne_emu_clear_error(void);
int ft78ne_emu_set_chip(int chip);
int ft78ne_emu_chip(void);
int ft78ne_emu_set_core(int core);
int ft78ne_emu_core(void);
int ft78ne_emu_num_cores(void);
size_t ft78ne_emu_private_capacity(void);
int ft78ne_emu_set_private_capacity(size_t bytes);
void *ft78ne_emu_private_alloc(int core, size_t bytes);
int ft78ne_emu_private_free(int core, void *ptr);
void *ft78ne_emu_private_base(int core);
size_t ft78ne_emu_private_in_use(int core);
"""

CDEF = VENDOR_CDEF + EMU_CDEF

#: Status codes of ft78ne_emu_last_error (include/ft78ne_emu.h).
STATUS = {
    0: "FT78NE_OK",
    1: "FT78NE_ERR_NULL_POINTER",
    2: "FT78NE_ERR_INVALID_ARGUMENT",
    3: "FT78NE_ERR_CORE_MASK",
    4: "FT78NE_ERR_NOT_PRIVATE",
    5: "FT78NE_ERR_CAPACITY",
    6: "FT78NE_ERR_UNSUPPORTED",
    7: "FT78NE_ERR_INDEX",
    8: "FT78NE_ERR_NO_MEMORY",
}
ERR_CAPACITY = 5

CHIPS = {"ft78ne": 0, "mt7004": 1}

#: What a library must export for each adapter feature (beyond the vendor entry points).
ERROR_HELPERS = ("ft78ne_emu_last_error", "ft78ne_emu_last_error_message")
CHIP_HELPER = "ft78ne_emu_set_chip"
PRIVATE_HELPERS = ("ft78ne_emu_set_core", "ft78ne_emu_private_alloc", "ft78ne_emu_private_free")
CAPACITY_HELPER = "ft78ne_emu_private_capacity"

_cache: dict[tuple, CLibrary] = {}
_cache_lock = threading.Lock()


def resolve(lib=None) -> list[str]:
    """The library paths in use: ``lib`` (path or list), else ``$XLOSS_FT78NE_LIB``, else the emulator."""
    return library_paths(lib, ENV_VAR, EMULATOR)


def load(paths: list[str]) -> CLibrary:
    """One :class:`CLibrary` per distinct set of paths (dlopen once; the handle lives for the process)."""
    key = tuple(str(Path(p).resolve()) for p in paths)
    with _cache_lock:
        lib = _cache.get(key)
        if lib is None:
            lib = _cache[key] = CLibrary(CDEF, list(key))
        return lib


def is_emulator(paths: list[str]) -> bool:
    try:
        return len(paths) == 1 and EMULATOR.exists() and Path(paths[0]).resolve() == EMULATOR
    except OSError:
        return False
