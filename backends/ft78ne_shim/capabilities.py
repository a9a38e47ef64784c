"""What a ``ft78ne``/``mt7004`` backend declares: the requests the loaded library's entry points
can express, per kernel, and the symbol names behind each.

A kernel is declared for a dtype when the library exports its ``<fp|hp>_<op><_s|_p>`` entry points
(ours only when the library declares our layouts, ``abi.EXT_MARKER``); a request the chip could
express but the library does not export is *not implemented* (:func:`require_symbols`), not merely
undeclared. One :class:`Declaration` per kernel (:data:`TABLE`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...declaration import Declaration
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


#: one row per kernel (sizes are C ints: at most INT_MAX elements)
TABLE = (
    # private memory tiles a mean: each tile's scale g*m/n crosses the ABI in the data's dtype
    Declaration("focal_loss", modes={"forward": ("sigmoidfocalloss",), "grad": ("sigmoidfocallossgrad",),
                                     "forward+grad": ("sigmoidfocalloss", "sigmoidfocallossgrad")},
                variants={"weight": False}, private_flags=("upstream_in_dtype",),
                notes="no per-element weight in the DSP signature"),
    Declaration("bce_grad", ops=("binarycrossentropygrad",), variants={"eps_mode": "add"}, fixed={"eps": BCE_EPS},
                private_flags=("upstream_in_dtype",), notes="the manual's x(1-x) + eps"),
    Declaration("nll_loss_grad", ops=("nlllossgrad",),
                notes="(N, C, d...) input is copied to the page's [batch, class_num] rows (class axis last) and "
                      "the gradient moved back"),
    # tiles add into 16-bit outputs (accumulate=1)
    Declaration("fused_linear_cross_entropy_grad", ops=("fusedlinearcrossentropylossgrad",),
                variants={"label_smoothing": False}, private_flags=("partials_in_dtype",),
                notes="no label smoothing in the DSP signature"),
    # int64 targets too: clipped to C ints without changing the mask or masked target (vocab_parallel.py)
    Declaration("fused_linear_online_max_sum", ops=("fusedlinearonlinemaxsum",), variants={"mask": "bool"},
                notes="one target-mask byte per token (mask='bool' only); C int targets (int64 ones clipped to "
                      "[-1, INT_MAX], which keeps the mask, and the masked target widened back)"),
    Declaration("fused_cross_entropy_loss_with_max_sum", ops=("fusedcrossentropylosswithmaxsum",),
                notes="float32 statistics; the logits float32, or float16 on MT7004"),
    # NLL and BCE forward (issue #30): the manual's nllloss and binarycrossentropy pages
    Declaration("nll_loss", ops=("nllloss",),
                notes="no ignore_index in the signature: ignored rows are left out of the call; (N, C, d...) input "
                      "is copied to rows (class axis last) first; the page's int8 form (FT78NE) is no dtype of "
                      "this row: nllloss_i8.py calls it, truncating the mean toward zero and saturating to int32 "
                      "(xloss's choice: the page gives no rule)"),
    Declaration("binary_cross_entropy", ops=("binarycrossentropy",),
                notes="one weight per element: a broadcast weight is materialised; tmp_loss is the adapter's"),
)
DECLARATIONS = {d.kernel: d for d in TABLE}


def symbol(dtype: str, op: str, suffix: str) -> str:
    """The entry point of ``op`` for ``dtype`` (float32 or float16) and memory ``suffix`` (_s or _p)."""
    return f"{PREFIX[dtype]}_{op}{suffix}"


def declare(lib, ext: bool, chip: str, memory: str, core_mask: int, suffix: str) -> dict:
    """Kernel -> KernelCaps for what ``lib`` exports (``ext``: it declares our layouts)."""
    def has(dtype, *ops):  # ours only where the library declares our layouts (abi.OURS_OPS)
        return all(lib.has(symbol(dtype, op, suffix)) and (op in abi.VENDOR_OPS or ext) for op in ops)

    memory_note = f"{memory} memory, core_mask {core_mask:#04x}"
    caps = {}
    for row in TABLE:
        c = row.caps(has, CHIP_DTYPES[chip], max_elements=abi.INT_MAX, private=memory == "private", note=memory_note)
        if c is not None:
            caps[row.kernel] = c
    return caps


def require_symbols(lib, ext: bool, paths: list[str], suffix: str, req) -> None:
    """BackendUnavailableError naming the first entry point of ``req`` that ``lib`` lacks (or
    exports without declaring our layout)."""
    for op in DECLARATIONS[req.kernel].operators(req.variant):
        name = symbol(req.dtype, op, suffix)
        if not lib.has(name):
            raise BackendUnavailableError(f"{':'.join(paths)} does not export {name}")
        if op in abi.OURS_OPS and not ext:
            raise BackendUnavailableError(
                f"{':'.join(paths)} exports {name} but not {abi.EXT_MARKER}() returning {abi.EXT_ABI}: "
                f"{op} is xloss's own layout (no vendor page), called only in libraries that declare it")


# -- binary cross entropy with logits (issue #30) -------------------------------------------------------------
# The manual's sigmoidcrossentropywithlogits[grad]: the per-element loss and sigmoid(x) - y, nothing more.
# Reductions and the upstream gradient are the adapter's (float16 through fp_ on float32 copies where the
# library has it: one rounding); no weight or pos_weight can be expressed (they enter inside the formula).
TABLE += (Declaration("bce_with_logits",
                      modes={"forward": (abi.SCE_LOGITS,), "grad": (abi.SCE_LOGITS_GRAD,),
                             "forward+grad": (abi.SCE_LOGITS, abi.SCE_LOGITS_GRAD)},
                      variants={"weight": False, "pos_weight": False},
                      notes="sigmoidcrossentropywithlogits[grad]: per-element loss and sigmoid(x) - y; no weight or "
                            "pos_weight in the DSP signature; reductions and the upstream gradient applied by the "
                            "adapter; the page's int8 forms (FT78NE) are no dtype of this row: sigmoid_ce_i8.py calls "
                            "them, rounding to nearest even and saturating (xloss's choice: the page gives no rule)"),)
DECLARATIONS = {d.kernel: d for d in TABLE}


# -- softmax cross entropy (issue #30) ----------------------------------------------------------------------
# The manual's softmax_cross_entropy_with_logits is the dense row itself (loss per row and softmax - labels).
# Its sparse_softmax_cross_entropy_with_logits computes -log softmax[label] per row from logits, nothing more:
# no class weight, label smoothing or z-loss can be expressed; ignore_index rows and the sum/mean over the kept
# rows are the adapter's, and so are the log-probabilities (x - max - the page's loss for the argmax label).
# The backward row takes log-probabilities, not logits: the page has no form for it.
TABLE += (
    Declaration("softmax_cross_entropy_with_logits", ops=(abi.SOFTMAX_CE,),
                notes="softmax_cross_entropy_with_logits: output (loss per row) and grads (softmax - labels); probs "
                      "and sum_data are the adapter's scratch"),
    Declaration("cross_entropy_loss", ops=(abi.SPARSE_SOFTMAX_CE,),
                variants={"weight": False, "label_smoothing": False, "zloss": False},
                notes="sparse_softmax_cross_entropy_with_logits: -log softmax[label] per row; no weight, label "
                      "smoothing or z-loss in the DSP signature; ignored rows, reductions and log_prob (x - max - "
                      "the loss of a call labelled with each row's argmax) applied by the adapter"),
)
DECLARATIONS = {d.kernel: d for d in TABLE}


# -- cross entropy gradient (issue #30): the sparse page with is_grad = 1 on the log-probabilities -----------------
# Its output is softmax(input) - onehot(label); the softmax of log-probabilities is their exponential up to the
# re-normalisation the adapter undoes (softmax_ce_grad.py). Nothing of weight, smoothing or z-loss can be expressed;
# ignored rows, the upstream gradient and the mean's divisor are the adapter's, each element rounded once, so a
# float16 request runs through the fp_ form on exact float32 copies: float16 is declared where the library has both.
@dataclass(frozen=True)
class _HalfThroughFloat(Declaration):
    """A row whose float16 requests the adapter runs through the float32 entry points."""

    def caps(self, has, dtypes=None, **kw):
        return super().caps(lambda d, *ops: has(d, *ops) and (d != "float16" or has("float32", *ops)), dtypes, **kw)


TABLE += (_HalfThroughFloat(
    "cross_entropy_loss_grad", ops=(abi.SPARSE_SOFTMAX_CE,),
    variants={"weight": False, "label_smoothing": False, "zloss": False},
    notes="sparse_softmax_cross_entropy_with_logits with is_grad=1 on the log-probabilities (its re-normalisation "
          "undone from its own output); no weight, label smoothing or z-loss in the DSP signature; ignored rows, "
          "the upstream gradient and the mean's divisor applied by the adapter; float16 through the fp_ form"),)
DECLARATIONS = {d.kernel: d for d in TABLE}
