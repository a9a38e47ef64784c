"""The FT78NE/MT7004 C ABI as cffi sees it: declarations, status codes, library loading.

The declarations are read from ``include/ft78ne.h`` (vendor ABI), ``include/ft78ne_emu.h``
(emulator-only helpers) and the vocabulary-parallel operators' headers.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ...clib import CLibrary, library_paths
from ...errors import XLossValueError
from ..prototypes import prototypes

ENV_VAR = "XLOSS_FT78NE_LIB"
MEMORY_ENV_VAR = "XLOSS_FT78NE_MEMORY"  # default of the memory option ("shared" or "private")
EMULATOR = Path(__file__).resolve().with_name("libxloss_ft78ne.so")
#: The private-memory arenas and helpers without any operator (listed after a library that has none)
PRIVATE_SHIM = Path(__file__).resolve().with_name("libxloss_ft78ne_private.so")

#: The operators, each with fp_/hp_ x _s/_p entry points.
OPS = ("binarycrossentropygrad", "sigmoidfocalloss", "sigmoidfocallossgrad", "nlllossgrad",
       "fusedlinearcrossentropylossgrad")
#: The manual publishes these two pages: their symbols are called with the manual's layout.
VENDOR_OPS = ("binarycrossentropygrad", "nlllossgrad")
#: Ours (no vendor page). A library's symbols of these names are called only when it exports
#: EXT_MARKER returning EXT_ABI (ft78ne.h, "OURS"): a vendor function of the same name could
#: have another layout, and calling it with ours would corrupt memory.
OURS_OPS = ("sigmoidfocalloss", "sigmoidfocallossgrad", "fusedlinearcrossentropylossgrad", "fusedlinearonlinemaxsum",
            "fusedcrossentropylosswithmaxsum")
#: Ours too: the vocabulary-parallel forward (include/fusedlinearonlinemaxsum.h,
#: include/fusedcrossentropylosswithmaxsum.h), declared in their own headers, not in ft78ne.h.
VOCAB_PARALLEL_OPS = ("fusedlinearonlinemaxsum", "fusedcrossentropylosswithmaxsum")
#: The manual's forward pages (issue #30): nllloss and binarycrossentropy, each in its own header
#: (include/nllloss.h, include/binarycrossentropy.h), as the manual's `#include <op.h>` says.
LOSS_FORWARD_OPS = ("nllloss", "binarycrossentropy")
EXT_MARKER = "xloss_ft78ne_ext_abi"
EXT_ABI = 1

NUM_CORES = 8
CORE_MASK_ALL = 0xFF
INT_MAX = 2**31 - 1


def c_int(what: str, value: int) -> int:
    """``value`` as a C ``int`` argument named ``what``; XLossValueError if it does not fit."""
    if value > INT_MAX:
        raise XLossValueError(f"{what}={value} does not fit the C int of the FT78NE/MT7004 signature "
                              f"(at most {INT_MAX})")
    return int(value)

INCLUDE = EMULATOR.with_name("include")
# the prototypes, read from the installed headers; cffi needs the half typedef before them
VENDOR_CDEF = "typedef uint16_t half;\n" + prototypes([INCLUDE / "ft78ne.h"], "FT78NE_API")
EMU_CDEF = prototypes([INCLUDE / "ft78ne_emu.h"], "FT78NE_API")
VOCAB_PARALLEL_CDEF = prototypes([INCLUDE / f"{op}.h" for op in VOCAB_PARALLEL_OPS], "FT78NE_API")
LOSS_FORWARD_CDEF = prototypes([INCLUDE / f"{op}.h" for op in LOSS_FORWARD_OPS], "FT78NE_API")

CDEF = VENDOR_CDEF + VOCAB_PARALLEL_CDEF + EMU_CDEF + LOSS_FORWARD_CDEF

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
_cache_lock = threading.RLock()  # also guards every backend's lazy loading (backend.py: abi.state_lock())


def state_lock():
    """The lock of lazy library loading (replaced in a forked child: see _after_fork_in_child)."""
    return _cache_lock


def _after_fork_in_child() -> None:
    global _cache_lock
    _cache_lock = threading.RLock()  # a parent thread loading a library when it forked never releases it here


os.register_at_fork(after_in_child=_after_fork_in_child)


def resolve(lib=None) -> list[str]:
    """The library paths in use: ``lib`` (path or list), else ``$XLOSS_FT78NE_LIB``, else the emulator."""
    return library_paths(lib, ENV_VAR, EMULATOR)


def load(paths: list[str]) -> CLibrary:
    """One :class:`CLibrary` per distinct set of paths (dlopen once; the handle lives for the process)."""
    key = tuple(str(Path(p).resolve()) for p in paths)
    with state_lock():
        lib = _cache.get(key)
        if lib is None:
            lib = _cache[key] = CLibrary(CDEF, list(key))
        return lib


def is_emulator(paths: list[str]) -> bool:
    try:
        return len(paths) == 1 and EMULATOR.exists() and Path(paths[0]).resolve() == EMULATOR
    except OSError:
        return False


# -- reduction codes: one table per operator ---------------------------------------------------------
REDUCTIONS = ("none", "sum", "mean")
#: binarycrossentropygrad's page: 0 none, 1 mean, 2 sum; our operators use the same.
BCE_CODES = ("none", "mean", "sum")
#: nlllossgrad: its loss_grad text and the nllloss page say 0 None, 1 Sum, 2 Mean (the default);
#: its parameter list says 0 Sum, 1 Mean, 2 None (option nll_reduction_codes="sum,mean,none").
NLL_CODES = ("none", "sum", "mean")
#: nlllossgrad's page can be read two ways: (what the reading is, its names in code order)
NLL_READINGS = (("the page's loss_grad text and the nllloss page (0 none, 1 sum, 2 mean)", NLL_CODES),
                ("the page's parameter list (0 sum, 1 mean, 2 none)", ("sum", "mean", "none")))
#: backend option -> (operators it sets, default names in code order)
CODE_OPTIONS = {"nll_reduction_codes": (("nlllossgrad",), NLL_CODES),
                "bce_reduction_codes": (("binarycrossentropygrad",), BCE_CODES)}


def parse_codes(option: str, value) -> tuple[str, str, str]:
    """``"sum,mean,none"`` (or a sequence of the names) -> the names in code order (code 0 first).
    ValueError naming the option unless it is a permutation of none, sum, mean."""
    names = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(str(n).strip().lower() for n in names)
    if sorted(names) != sorted(REDUCTIONS):
        raise ValueError(f"{option} must name none, sum and mean once each, in code order (code 0 first), "
                         f"e.g. {option}={','.join(CODE_OPTIONS[option][1])}; got {value!r}")
    return names


def code_table(**options) -> dict[str, dict[str, int]]:
    """Operator -> {reduction name: code}, from the defaults and any ``*_reduction_codes`` options."""
    table = {op: {r: i for i, r in enumerate(BCE_CODES)} for op in OPS}
    # the forward pages (issue #30): binarycrossentropy's 0 none, 1 mean, 2 sum; nllloss's 0 none, 1 sum,
    # 2 mean (the page agrees with itself: no option)
    table["binarycrossentropy"] = {r: i for i, r in enumerate(BCE_CODES)}
    table["nllloss"] = {r: i for i, r in enumerate(NLL_CODES)}
    for option, (ops, default) in CODE_OPTIONS.items():
        names = default if options.get(option) is None else parse_codes(option, options[option])
        for op in ops:
            table[op] = {r: i for i, r in enumerate(names)}
    return table


# -- binary cross entropy with logits (issue #30): the manual's two per-element pages ---------------------
SCE_LOGITS = "sigmoidcrossentropywithlogits"
SCE_LOGITS_GRAD = "sigmoidcrossentropywithlogitsgrad"
OPS += (SCE_LOGITS, SCE_LOGITS_GRAD)
VENDOR_OPS += (SCE_LOGITS, SCE_LOGITS_GRAD)


# -- softmax cross entropy (issue #30): the manual's two pages, each in its own header -----------------------
SOFTMAX_CE = "softmax_cross_entropy_with_logits"
SPARSE_SOFTMAX_CE = "sparse_softmax_cross_entropy_with_logits"
SOFTMAX_CE_OPS = (SOFTMAX_CE, SPARSE_SOFTMAX_CE)
SOFTMAX_CE_CDEF = prototypes([INCLUDE / f"{op}.h" for op in SOFTMAX_CE_OPS], "FT78NE_API")
CDEF += SOFTMAX_CE_CDEF
VENDOR_OPS += SOFTMAX_CE_OPS  # the manual's pages: called in any library that exports them


# -- the int8 forms of sigmoidcrossentropywithlogits (issue #30): FT78NE only, in the page's own header ---------------
# The page gives no scale, rounding or saturation for them: the emulator's conversion is xloss's choice (the header).
SCE_LOGITS_I8 = "i8_" + SCE_LOGITS  # + "_s" / "_p"
SCE_I8_CDEF = prototypes([INCLUDE / f"{SCE_LOGITS}.h"], "FT78NE_API")
CDEF += SCE_I8_CDEF


# -- the int8 form of nllloss (issue #30): FT78NE only, _s only (the page shows no _p), in the page's own header ------
# Declared in nllloss.h, so LOSS_FORWARD_CDEF carries it; its integer rules are xloss's choice (the header).
NLLLOSS_I8_S = "i8_nllloss_s"
