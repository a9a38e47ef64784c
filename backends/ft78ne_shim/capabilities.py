"""What a ``ft78ne``/``mt7004`` backend declares: the requests the loaded library's entry points
can express, per kernel, and the symbol names behind each.

A kernel is declared for a dtype when the library exports its ``<fp|hp>_<op><_s|_p>`` entry points
(ours only when the library declares our layouts, ``abi.EXT_MARKER``); a request the chip could
express but the library does not export is *not implemented* (:func:`require`), not merely
undeclared.
"""

from __future__ import annotations

from ...backend import KernelCaps
from ...errors import BackendUnavailableError
from . import abi

BCE_EPS = 1e-12  # FT78NE_BCE_EPS: the eps of x(1-x) + eps, fixed inside the library

PREFIX = {"float32": "fp", "float16": "hp"}  # dtype -> entry-point prefix
CTYPE = {"float32": "float", "float16": "half"}  # dtype -> C element type
CHIP_DTYPES = {"ft78ne": ("float32",), "mt7004": ("float32", "float16")}
DESCRIPTION = {
    "ft78ne": "FT78NE DSP calling convention (fp32), host emulator or vendor library via cffi",
    "mt7004": "MT7004 DSP calling convention (fp16, fp32), host emulator or vendor library via cffi",
}
#: focal loss: mode -> the operators it calls
FOCAL_MODES = {
    "forward": ("sigmoidfocalloss",),
    "grad": ("sigmoidfocallossgrad",),
    "forward+grad": ("sigmoidfocalloss", "sigmoidfocallossgrad"),
}
#: the other kernels: kernel -> the operators it calls
KERNEL_OPS = {"bce_grad": ("binarycrossentropygrad",), "nll_loss_grad": ("nlllossgrad",),
              "fused_linear_cross_entropy_grad": ("fusedlinearcrossentropylossgrad",)}


def symbol(dtype: str, op: str, suffix: str) -> str:
    """The entry point of ``op`` for ``dtype`` (float32 or float16) and memory ``suffix`` (_s or _p)."""
    return f"{PREFIX[dtype]}_{op}{suffix}"


def declare(lib, ext: bool, chip: str, memory: str, core_mask: int, suffix: str) -> dict:
    """Kernel -> KernelCaps for what ``lib`` exports (``ext``: it declares our layouts)."""
    dtypes = CHIP_DTYPES[chip]
    limit = abi.INT_MAX  # sizes are C ints

    def has(dtype, *ops):  # ours only where the library declares our layouts (abi.OURS_OPS)
        return all(lib.has(symbol(dtype, op, suffix)) and (op in abi.VENDOR_OPS or ext) for op in ops)

    memory_note = f"{memory} memory, core_mask {core_mask:#04x}"
    private = memory == "private"
    caps = {}
    # focal: a dtype's modes are those whose entry points it exports; declare the largest
    # (dtypes x modes) block every declared dtype fully supports.
    per_dtype = {d: {m for m, ops in FOCAL_MODES.items() if has(d, *ops)} for d in dtypes}
    candidates = [tuple(dtypes)] + ([(d,) for d in dtypes] if len(dtypes) > 1 else [])
    best = (0, (), ())
    for subset in candidates:
        modes = set.intersection(*(per_dtype[d] for d in subset))
        if len(modes) * len(subset) > best[0]:
            best = (len(modes) * len(subset), subset, tuple(sorted(modes)))
    if best[0]:
        # private memory tiles a mean: each tile's scale g*m/n crosses the ABI in the data's dtype
        caps["focal_loss"] = KernelCaps.declare(
            "focal_loss", dtypes=best[1], mode=best[2], weight=False, max_elements=limit,
            upstream_in_dtype=private, notes=f"no per-element weight in the DSP signature; {memory_note}")
    d = [x for x in dtypes if has(x, *KERNEL_OPS["bce_grad"])]
    if d:
        caps["bce_grad"] = KernelCaps.declare(
            "bce_grad", dtypes=d, eps_mode="add", fixed={"eps": BCE_EPS}, max_elements=limit,
            upstream_in_dtype=private, notes=f"the manual's x(1-x) + eps; {memory_note}")
    d = [x for x in dtypes if has(x, *KERNEL_OPS["nll_loss_grad"])]
    if d:
        caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=d, max_elements=limit, notes=memory_note)
    d = [x for x in dtypes if has(x, *KERNEL_OPS["fused_linear_cross_entropy_grad"])]
    if d:
        caps["fused_linear_cross_entropy_grad"] = KernelCaps.declare(
            "fused_linear_cross_entropy_grad", dtypes=d, label_smoothing=False, max_elements=limit,
            partials_in_dtype=private,  # tiles add into 16-bit outputs (accumulate=1)
            notes=f"no label smoothing in the DSP signature; {memory_note}")
    return caps


def require_symbols(lib, ext: bool, paths: list[str], suffix: str, req) -> None:
    """BackendUnavailableError naming the first entry point of ``req`` that ``lib`` lacks (or
    exports without declaring our layout)."""
    ops = FOCAL_MODES[req.variant["mode"]] if req.kernel == "focal_loss" else KERNEL_OPS[req.kernel]
    for op in ops:
        name = symbol(req.dtype, op, suffix)
        if not lib.has(name):
            raise BackendUnavailableError(f"{':'.join(paths)} does not export {name}")
        if op in abi.OURS_OPS and not ext:
            raise BackendUnavailableError(
                f"{':'.join(paths)} exports {name} but not {abi.EXT_MARKER}() returning {abi.EXT_ABI}: "
                f"{op} is xloss's own layout (no vendor page), called only in libraries that declare it")
