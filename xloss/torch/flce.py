"""Fused linear-cross-entropy for autograd: ``cross_entropy(input @ weight.T + bias, target)``
without the (tokens × vocabulary) logits, with its gradients from an xloss backend's
``fused_linear_cross_entropy_grad`` — single process or vocabulary-parallel.

Two ways through, chosen by what autograd will need:

* ``reduction="mean"/"sum"`` with a gradient wanted: the upstream gradient is a scalar and
  the gradients are linear in it, so the forward computes them chunk by chunk (logits →
  softmax in place → backend kernel in "softmax" mode) and the backward only scales them:
  three GEMMs (logits, input grad, weight grad), as many as autograd through materialised
  logits, and no (BT, V) tensor.
* ``reduction="none"`` (or no gradient wanted): the forward finds each token's row max and
  sum of exponentials online, block by block, and keeps just those two numbers per token; the
  backward knows the per-token upstream gradients and runs the kernel in "recompute" mode —
  the Ascend kernel's own mode — at the cost of a fourth GEMM.

Other backends (and float64 with ``cpu``) get the forward statistics from the backend's
vocabulary-parallel kernels where it declares them and the call needs nothing they lack (no bias,
label smoothing or token accuracy): ``fused_linear_online_max_sum`` per shard, our all-reduce,
``fused_cross_entropy_loss_with_max_sum`` (:mod:`.flce_max_sum`, CANN's Megatron flow); otherwise
from PyTorch GEMMs here (:mod:`.flce_chunks`). The gradients are the backend's either way.

float32 and 16-bit operands with the ``cpu`` backend (or the default) take :mod:`.flce_native`:
the same two ways, with PyTorch's GEMMs called here and fused Numba row passes (16-bit: the
products on the CPU's native 16-bit GEMMs and G rounded once to the operand dtype); the loss is
float32 (as transformers and cut-cross-entropy return it), the gradients are in the operands'
dtype. That path does no GEMM work for ignored tokens, as cut-cross-entropy (see "Ignored tokens" on
:func:`fused_linear_cross_entropy`): a masked prompt or padding costs nothing, and NaN in a padding
row reaches no output. Under ``torch.autocast("cpu")`` the operands are
cast to the autocast dtype first, as ``F.linear`` would cast them.

Second-order gradients (``create_graph=True``) are not supported: the backward raises
:class:`~xloss.errors.UnsupportedRequestError` rather than return gradients that autograd
cannot differentiate again.

The work runs inside two ``torch.library`` custom ops (``torch.ops.xloss.fused_linear_cross_entropy``
and ``..._backward``, bodies in :mod:`.flce_passes`), so torch.compile records them without a
graph break and torch.func transforms go through. Liger-Kernel's options (``softcap``, z-loss,
``accum_dtype``, token accuracy) are documented on :func:`fused_linear_cross_entropy`; the module
with Liger's calling convention is :mod:`.liger_compat`.

The arithmetic, the class weights and label smoothing are in :mod:`.flce_chunks`; the chunk
sizes in :mod:`.chunking`; the collectives in :mod:`.distributed`.
"""

import weakref
import zlib
from typing import NamedTuple

import torch

from .. import registry
from ..backend import Backend
from ..errors import BackendUnavailableError, UnsupportedRequestError, XLossError, XLossTypeError, XLossValueError
from ..kernels.flce import torch_ops
from ..validation import real_number
from . import _checks as checks
from . import flce_native, ops
from .chunking import resolve_sizes
from .distributed import Collectives, group_key, view_range
from .flce_passes import Params, loss_dtype  # noqa: F401  (loss_dtype: the dtype of the returned loss)

_WHAT = "fused_linear_cross_entropy"
# where the op arguments after the five tensors hold what autograd needs: Params, then the wanted gradients
_NATIVE, _WANT = Params._fields.index("native"), slice(len(Params._fields), len(Params._fields) + 3)


class FusedLinearCrossEntropyOutput(NamedTuple):
    """What :func:`fused_linear_cross_entropy` returns when ``return_z_loss`` or
    ``return_token_accuracy`` is set (the field names of Liger-Kernel's ``CrossEntropyOutput``; a
    NamedTuple, so ``loss, z_loss, acc = out`` works too). A field not asked for is None."""

    loss: torch.Tensor
    z_loss: torch.Tensor | None
    token_accuracy: torch.Tensor | None


def _second_order_error() -> UnsupportedRequestError:
    return UnsupportedRequestError(
        "fused_linear_cross_entropy does not support second-order gradients (backward with "
        "create_graph=True): its backward is not itself differentiable. Compute this loss's "
        "gradients with create_graph=False, or use F.cross_entropy(F.linear(...)) for double backward")


@checks.with_eager_twin
class _FusedLinearCrossEntropy(torch.autograd.Function):
    """The op ``xloss::fused_linear_cross_entropy`` for autograd; backward: the saved gradients
    scaled, or ``xloss::fused_linear_cross_entropy_backward``. ``args``: the op's settings after
    the five tensors (flce_passes.Params, then want_dx, want_dw, want_db, backend).

    vmap: the generated rule runs forward and backward under vmap, where the two ops have no
    batching rule of their own and PyTorch's fallback calls them once per batch entry (with a
    performance warning): correct, a loop."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w, b, target, class_weight, args):
        return ops.call(torch_ops.fused_linear_cross_entropy, x, w, b, target, class_weight, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, b, target, class_weight, args = inputs
        loss, z_loss, acc, row_max, sum_exp, dx, dw, db, target_mask, masked_target = output
        ctx.mark_non_differentiable(z_loss, acc, row_max, sum_exp, dx, dw, db, target_mask, masked_target)
        ctx.set_materialize_grads(False)
        ctx.args, ctx.loss_dtype = args, loss.dtype
        reduction, native, want = args[0], args[_NATIVE], args[_WANT]
        precomputed = reduction != "none" and any(want)
        # the operands are needed to recompute (reduction "none"; 16-bit scaled by a non-power of two)
        # and, under torch.func, by the second-order guard
        recompute = not precomputed or (native and x.dtype in flce_native.HALF)
        keep = recompute or checks.functorch_active()
        saved = (x if keep else None, w if keep else None, b if keep else None, target, class_weight,
                 *((row_max, sum_exp, target_mask, masked_target) if recompute else (None,) * 4),
                 *((dx, dw, db) if precomputed else (None, None, None)))
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)  # references only; jvp reads them

    @staticmethod
    def backward(ctx, grad, *_):
        if torch.is_grad_enabled() and not checks.functorch_active():
            raise _second_order_error()
        if grad is None:
            return (None,) * 6
        x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target, dx, dw, db = ctx.saved_tensors
        args = ctx.args
        want = args[_WANT]
        precomputed = args[0] != "none"
        eager = grad.device.type == "cpu" and not (torch.compiler.is_compiling() or checks.functorch_active())
        g = checks.scalar_value(grad) if (precomputed and eager) else None
        if g is not None and (not args[_NATIVE] or dx.dtype not in flce_native.HALF
                              or flce_native.exact_scale(dx.dtype, g)):
            grads = tuple(checks.scaled(t, g) if wanted else None for t, wanted in zip((dx, dw, db), want))
        else:
            detach = (lambda t: None if t is None else t.detach())
            out = ops.call(torch_ops.fused_linear_cross_entropy_backward, grad.detach(), detach(x), detach(w),
                           detach(b), target, class_weight, row_max, sum_exp, target_mask, masked_target, dx, dw, db,
                           *args)
            grads = tuple(t if wanted else None for t, wanted in zip(out, want))
        if checks.functorch_active():
            grads = tuple(None if t is None else checks.first_order_result(_WHAT, t, ref)
                          for t, ref in zip(grads, (x, w, b)))
        return grads + (None, None, None)

    @staticmethod
    def jvp_rule(ctx, t_x, t_w, t_b, *_):
        """Forward mode. A scalar reduction: the loss's tangent is ``<dx, t_x> + <dw, t_w> + <db, t_b>``
        with the gradients the forward computed (upstream 1). ``"none"``: each token's loss depends on
        its own row of ``input``, so ``<dx_i, t_x_i>`` per token from the backward kernel with upstream
        ones; a tangent on ``weight`` or ``bias`` would need a per-token contraction over the vocabulary
        that no kernel computes, and is refused (as is vocabulary parallelism, where the weight's part
        would need an all-reduce)."""
        x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target, dx, dw, db = ctx.saved_tensors
        args = ctx.args
        reduction, tangents = args[0], (t_x, t_w, t_b)
        if args[Params._fields.index("group")] is not None:
            raise UnsupportedRequestError("fused_linear_cross_entropy has no forward-mode derivative (jvp) with "
                                          "process_group: the weight shard's part would need an all-reduce; use "
                                          "reverse mode (backward, torch.func.grad/vjp)")
        if reduction == "none" and (t_w is not None or t_b is not None):
            raise UnsupportedRequestError("fused_linear_cross_entropy with reduction='none' has a forward-mode "
                                          "derivative (jvp) w.r.t. input only; a tangent on weight or bias needs the "
                                          "(tokens x vocabulary) contraction the fused kernels avoid: use "
                                          "reduction='sum'/'mean', or reverse mode (torch.func.vjp/jacrev)")
        like = target.new_empty(target.shape if reduction == "none" else (), dtype=ctx.loss_dtype)
        if reduction == "none":
            if t_x is None:
                return (torch.zeros_like(like),) + (None,) * 9
            ones = torch.ones(target.shape, dtype=like.dtype)
            grads = ops.call(torch_ops.fused_linear_cross_entropy_backward, ones, x.detach(), w.detach(),
                             None if b is None else b.detach(), target, class_weight, row_max, sum_exp, target_mask,
                             masked_target, dx, dw, db, *args)
            cdt = torch.float64 if like.dtype == torch.float64 else torch.float32
            tangent = (grads[0].to(cdt) * t_x.to(cdt)).sum(-1)
        else:
            cdt = torch.float64 if like.dtype == torch.float64 else torch.float32
            tangent = torch.zeros((), dtype=cdt)
            for grad, t in zip((dx, dw, db), tangents):
                if t is not None:
                    tangent = tangent + (grad.to(cdt) * t.to(cdt)).sum()
        return (tangent.to(like.dtype),) + (None,) * 9



def _autocast_dtype(t: torch.Tensor):
    """The dtype ``F.linear`` would compute ``t``'s product in under ``torch.autocast``, or None."""
    if t.device.type != "cpu" or not torch.is_autocast_enabled("cpu") or t.dtype == torch.float64:
        return None
    dt = torch.get_autocast_dtype("cpu")
    return None if dt == t.dtype else dt


def fused_linear_cross_entropy(input, weight, target, bias=None, ignore_index: int = -100, reduction: str = "mean",
                               label_smoothing: float = 0.0, chunk_size=None, backend=None, *, class_weight=None,
                               vocab_chunk_size=None, process_group=None, softcap=None, lse_square_scale: float = 0.0,
                               return_z_loss: bool = False, accum_dtype=None, return_token_accuracy: bool = False,
                               use_token_scaling: bool = False):
    """``F.cross_entropy(input @ weight.T + bias, target, ...)`` in memory bounded by the chunk.

    ``input`` (..., H) and ``weight`` (V, H) (float16/bfloat16/float32/float64, the same dtype;
    logits, softmax and every sum in float32 or wider), ``bias`` (V) optional, ``target`` (...)
    class indices. ``reduction``, ``ignore_index`` and ``label_smoothing`` as in PyTorch;
    ``class_weight`` (K) optional per-class weights (PyTorch's ``weight=``). ``mean`` divides by
    the summed class weight of the non-ignored tokens of the whole batch. The result is a scalar,
    or ``target``'s shape for ``"none"``, in float32 for 16-bit operands and in ``input``'s dtype
    otherwise; the gradients are in the operands' dtypes. 16-bit operands with the ``cpu`` (default)
    backend run the products on the CPU's native 16-bit GEMMs (:mod:`xloss.torch.flce_native`), with
    a default chunk of 2**26 logits (:func:`xloss.torch.chunking.default_half_chunk_size`).
    Probability targets (a float ``target`` of shape (..., V)) are not supported: see the error.

    Options with Liger-Kernel's names and meaning (``cpu`` backend or the default: they run on the
    PyTorch-GEMM path; ``accuracy`` runs on every backend):

    * ``softcap``: the logits become ``softcap * tanh(logits / softcap)`` before the cross entropy
      (Gemma-2's final-logit soft-capping); None or 0: off.
    * ``lse_square_scale``: z-loss, ``lse_square_scale * logsumexp(logits)**2`` added to each
      non-ignored token's loss (not class-weighted); ``mean`` divides it by the token count.
    * ``return_z_loss`` / ``return_token_accuracy``: return a :class:`FusedLinearCrossEntropyOutput`
      ``(loss, z_loss, token_accuracy)`` instead of the loss (the loss still includes the z-loss;
      ``z_loss`` is its part, without gradient). Token accuracy: ``argmax(logits) == target`` over
      the non-ignored tokens (a target tied with the maximum counts), their mean for ``mean``/``sum``,
      per token (0 where ignored) for ``none``; float32, no gradient.
    * ``use_token_scaling``: each token's loss (z-loss included) times its target's softmax
      probability, taken as a constant (no gradient through it), after ``mean``'s division.
    * ``accum_dtype``: the dtype of the weight/bias gradient accumulators. They are float32 (float64
      for float64 operands) already, the project's floor, so only ``torch.float64`` changes anything
      (the cpu backend's path; refused elsewhere); narrower dtypes are accepted and mean float32.

    Ignored tokens: the cpu path (float32 and 16-bit operands) runs no GEMM on them (a batch of
    fewer than 256 tokens keeps them in, zeroed), so their hidden states never reach an output;
    other backends compute them with a zero upstream gradient.

    Memory: tokens are processed ``chunk_size`` at a time (at most; the chunks are evened out), so
    the transient logits are ``chunk_size × V`` float32. The default
    (:func:`xloss.torch.chunking.default_chunk_size`) is ``H`` tokens — logits about the size of the
    weight gradient — but at least 448 (below, the GEMMs lose rate), clamped to between 2**20 and
    2**26 logits per chunk. ``vocab_chunk_size``
    bounds the rows of ``weight`` per kernel call (default: about 32 MiB of kernel outputs per call).

    ``backend``: the xloss backend whose ``fused_linear_cross_entropy_grad`` computes the
    gradients (name or object; default ``cpu`` where available).

    ``process_group``: vocabulary parallelism (eager mode only). ``weight`` (and ``bias``) are then
    this rank's contiguous shard of the vocabulary, the shards lying in rank order; ``input``,
    ``target`` and ``class_weight`` (global, length K) are the same on every rank. Every rank gets
    the full loss and the full input gradient; ``weight``'s gradient is its shard's. A backend
    other than ``cpu`` runs each shard's forward through its ``fused_linear_online_max_sum`` and
    ``fused_cross_entropy_loss_with_max_sum`` kernels where it has them (:mod:`.flce_max_sum`).
    The call's first collective compares what must agree (tokens, targets' checksum, reduction,
    ignore_index, label smoothing, dtype, class weights, softcap/z-loss/accuracy/scaling settings,
    chunk size, backend) and carries any rank's argument error; a disagreement, such an error, or
    shards that are views of one weight overlapping or leaving gaps raise the same
    :class:`~xloss.XLossError` on every rank. ``process_group=None`` means no vocabulary parallelism
    (a data-parallel rank holds the whole weight); pass ``torch.distributed.group.WORLD`` for the
    default group, and take the shards with :func:`xloss.torch.shard_vocab` (whose ``None`` is
    the default group, as torch.distributed reads it).

    A ``torch.library`` custom op underneath (``torch.ops.xloss.fused_linear_cross_entropy``):
    ``torch.compile(fullgraph=True)`` and ``torch.func.grad`` trace through it; the class-index
    check runs inside the op.
    """
    kw = dict(class_weight=class_weight, vocab_chunk_size=vocab_chunk_size, process_group=process_group,
              softcap=softcap, lse_square_scale=lse_square_scale, return_z_loss=return_z_loss,
              accum_dtype=accum_dtype, return_token_accuracy=return_token_accuracy,
              use_token_scaling=use_token_scaling)
    input = checks.float_tensor(input, "input")
    cast = _autocast_dtype(input)
    if cast is not None:  # as F.linear under autocast: operands in the autocast dtype (differentiably)
        with torch.autocast("cpu", enabled=False):
            weight = checks.float_tensor(weight, "weight")
            return fused_linear_cross_entropy(
                input.to(cast), weight.to(cast) if weight.dtype != torch.float64 else weight, target,
                None if bias is None else checks.float_tensor(bias, "bias").to(cast), ignore_index, reduction,
                label_smoothing, chunk_size, backend, **kw)
    if torch.is_autocast_enabled("cpu"):  # float64, or already the autocast dtype: no casts, no autocast inside
        with torch.autocast("cpu", enabled=False):
            return fused_linear_cross_entropy(input, weight, target, bias, ignore_index, reduction, label_smoothing,
                                              chunk_size, backend, **kw)
    if process_group is not None and torch.compiler.is_compiling():
        raise UnsupportedRequestError("fused_linear_cross_entropy with process_group runs in eager mode only "
                                      "(its collectives run inside the op); call it outside torch.compile")
    coll = Collectives(process_group)
    try:  # with a process group, an argument error reaches every rank through the first collective
        c = _checked(input, weight, target, bias, ignore_index, reduction, label_smoothing, chunk_size, backend,
                     class_weight, vocab_chunk_size, softcap, lse_square_scale, accum_dtype, use_token_scaling)
    except XLossError as exc:
        if not coll.active:
            raise
        coll.agree(0, _SETTINGS_ON_ERROR, exc)
        raise  # (agree raised already)
    weight, bias, target, ignore_index, reduction, ls, cap, z_scale, accum, scaling, native, class_weight = c
    hidden, rows, bt = input.shape[-1], weight.shape[0], target.numel()
    settings = [] if not coll.active else [  # what must be equal on every rank
        ("tokens", bt), ("hidden size", hidden), ("chunk_size", 0 if chunk_size is None else chunk_size),
        ("targets (checksum)", _checksum(target)), ("reduction", reduction), ("ignore_index", ignore_index),
        ("label_smoothing", ls), ("dtype", str(input.dtype).replace("torch.", "")),
        ("class_weight (checksum)", None if class_weight is None else _checksum(class_weight)),
        ("softcap", cap), ("lse_square_scale", z_scale), ("use_token_scaling", scaling),
        ("return_token_accuracy", bool(return_token_accuracy)), ("accum_dtype", accum),
        ("backend", getattr(backend, "name", backend)), ("bias given", bias is not None)]
    start, vocab = coll.agree(rows, settings, None, view_range(weight) if coll.active else None)
    # the token chunk must be the same on every rank (each chunk is one round of collectives):
    # its default depends on the global vocabulary only; the vocabulary block is per rank.
    # From here on an error depends only on what the first collective found equal on every rank
    # (the global vocabulary, the targets, class_weight), so every rank raises it alike.
    chunk, _ = resolve_sizes(chunk_size, 1, hidden, vocab, half=native and input.dtype in flce_native.HALF)
    _, block = resolve_sizes(chunk, vocab_chunk_size, hidden, rows)
    if vocab < 1 and bt:
        raise XLossValueError("weight has no rows: the vocabulary must hold at least one class")
    if class_weight is not None and tuple(class_weight.shape) != (vocab,):
        raise XLossValueError(f"class_weight must have shape ({vocab},), one per class of the (global) "
                              f"vocabulary; got {checks.shape_str(class_weight.shape)}")

    # a gradient is wanted for what requires grad, and for what carries a forward-mode tangent (jvp uses it)
    want = (checks.wants_derivative(input), checks.wants_derivative(weight), checks.wants_derivative(bias))
    args = tuple(Params(reduction, ignore_index, ls, cap, z_scale, chunk, block, start, vocab, group_key(process_group),
                        native, accum, bool(return_token_accuracy), scaling)) + want + (ops.backend_key(backend),)
    x2 = input.reshape(-1, hidden).contiguous()
    operands = (x2, weight.contiguous(), None if bias is None else bias.contiguous(),
                target.reshape(-1).to(torch.int64), class_weight)
    if any(want):
        out = _FusedLinearCrossEntropy.call(*operands, args)
    else:
        out = ops.call(torch_ops.fused_linear_cross_entropy, *operands, *args)
    loss = out[0].reshape(target.shape) if reduction == "none" else out[0]
    if not (return_z_loss or return_token_accuracy):
        return loss
    z_loss = acc = None
    if return_z_loss:  # without z-loss, zeros (NaN for the mean over no tokens, as the loss)
        z_loss = out[1].reshape(loss.shape) if z_scale else loss.detach() * 0.0
    if return_token_accuracy:
        acc = out[2].reshape(loss.shape)
    return FusedLinearCrossEntropyOutput(loss, z_loss, acc)


# what a rank whose arguments were refused sends in the first collective: no settings to compare
_SETTINGS_ON_ERROR: list = []


def _checksum(t: torch.Tensor) -> int:
    """CRC-32 of a tensor's values (int64 or float64) and shape: equal tensors on every rank, equal sums."""
    wide = t.detach().to(torch.float64 if t.is_floating_point() else torch.int64).contiguous().cpu()
    return zlib.crc32(wide.numpy().tobytes(), zlib.crc32(repr(tuple(t.shape)).encode()))


def _checked(input, weight, target, bias, ignore_index, reduction, label_smoothing, chunk_size, backend, class_weight,
             vocab_chunk_size, softcap, lse_square_scale, accum_dtype, use_token_scaling):
    """Every check that needs only this rank's arguments; the checked values."""
    if input.ndim < 1:
        raise XLossValueError("input must have shape (..., H); got a 0-d tensor")
    hidden = input.shape[-1]
    weight = checks.same_dtype(checks.float_tensor(weight, "weight"), "weight", input.dtype, "input")
    if weight.ndim != 2 or weight.shape[1] != hidden:
        raise XLossValueError(f"weight must have shape (V, {hidden}) to match input (..., H) = "
                              f"{checks.shape_str(input.shape)}; got {checks.shape_str(weight.shape)}")
    rows = weight.shape[0]
    if bias is not None:
        bias = checks.same_dtype(checks.float_tensor(bias, "bias"), "bias", input.dtype, "input")
        if tuple(bias.shape) != (rows,):
            raise XLossValueError(f"bias must have shape ({rows},), one per row of weight; "
                                  f"got {checks.shape_str(bias.shape)}")
    _refuse_probability_targets(target, input, rows)
    target = checks.index_tensor(target, "target")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise XLossValueError(f"target must have shape {checks.shape_str(input.shape[:-1])} (input's without H); "
                              f"got {checks.shape_str(target.shape)}")
    ignore_index = checks.int64(ignore_index, "ignore_index")
    reduction = checks.reduction(reduction)
    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls < 1.0:
        raise XLossValueError(f"label_smoothing must be in [0, 1); got {ls}")
    cap = 0.0 if softcap is None else real_number(softcap, "softcap")
    if cap < 0.0:
        raise XLossValueError(f"softcap must be positive (or None/0 for off); got {cap}")
    z_scale = real_number(lse_square_scale, "lse_square_scale")
    if z_scale < 0.0:
        raise XLossValueError(f"lse_square_scale must be >= 0; got {z_scale}")
    accum = _accum_name(accum_dtype, input.dtype)
    resolve_sizes(chunk_size, vocab_chunk_size, hidden, max(rows, 1))  # their own checks (the sizes come later)
    scaling = bool(use_token_scaling)
    native = gemm_route(backend) and (input.dtype in flce_native.DTYPES
                                        or bool(cap or z_scale or scaling or accum == "float64"))
    if not native and (cap or z_scale or scaling or (accum == "float64" and input.dtype != torch.float64)):
        raise UnsupportedRequestError(
            "softcap, lse_square_scale, use_token_scaling and accum_dtype=torch.float64 run on the cpu backend's "
            "PyTorch-GEMM path "
            f"(backend='cpu' or None); backend {getattr(backend, 'name', backend)!r} computes G in its "
            "fused_linear_cross_entropy_grad kernel, which has no soft-capping or z-loss term")
    if class_weight is not None:
        class_weight = checks.float_tensor(class_weight, "class_weight")
        checks.no_grad_required(class_weight, "class_weight", "fused_linear_cross_entropy gives no gradient w.r.t. it")
        if class_weight.ndim != 1:
            raise XLossValueError(f"class_weight must have shape (V,), one per class of the (global) vocabulary; "
                                  f"got {checks.shape_str(class_weight.shape)}")
        class_weight = class_weight.to(torch.float64 if input.dtype == torch.float64 else torch.float32).contiguous()
    return weight, bias, target, ignore_index, reduction, ls, cap, z_scale, accum, scaling, native, class_weight


def _refuse_probability_targets(target, input, rows) -> None:
    """Class-probability targets (``F.cross_entropy``'s float (N, C) target) would need a (tokens ×
    vocabulary) read in every pass and a different ``mean``; the fused path takes class indices."""
    if isinstance(target, torch.Tensor) and target.is_floating_point():
        raise XLossTypeError(
            f"target has dtype {target.dtype} and shape {checks.shape_str(target.shape)}: fused_linear_cross_entropy "
            "takes class indices (int64/int32/uint8 of input's shape without H); class-probability targets "
            f"(float (..., {rows})) are not supported — use F.cross_entropy(F.linear(input, weight, bias), target) "
            "for them, or pass target.argmax(-1) for one-hot targets")


def _accum_name(accum_dtype, dtype: torch.dtype) -> str | None:
    """``accum_dtype`` as the op's string: None (the compute dtype), "float32" or "float64"."""
    if accum_dtype is None:
        return None
    if not isinstance(accum_dtype, torch.dtype) or accum_dtype not in checks.FLOAT_DTYPES:
        raise XLossTypeError(f"accum_dtype must be None or a torch floating dtype; got {accum_dtype!r}")
    if accum_dtype == torch.float64 and dtype != torch.float64:
        return "float64"
    return None  # float32 or narrower: the float32 (float64) accumulators already are at least that


def gemm_route(backend) -> bool:
    """Whether a call takes :mod:`.flce_native` (logits from PyTorch's GEMMs, with the backend's row passes
    between them): where the backend it resolves to offers row passes (``Backend.flce_row_passes``; the
    ``cpu`` backend does); otherwise the backend's FLCE kernels serve. ``None`` resolves as the registry
    does (the first of its default order that can run here, which warns if it is not the first); a named
    backend that offers row passes but cannot run here raises, saying why."""
    if isinstance(backend, Backend):
        made_by = getattr(backend, "_xloss_made_by", None)
        if made_by is None or made_by[1]:  # an instance of its own: under torch.compile, backend_key refuses it
            return not torch.compiler.is_compiling() and _offers_row_passes(backend, backend.name)
        backend = made_by[0]
    return _named_route(backend)


@torch._dynamo.assume_constant_result  # fixed per backend: torch.compile reads it once, untraced
def _named_route(name: str | None) -> bool:
    if name is not None:
        return _offers_row_passes(registry.backend(name), name)
    for candidate in registry.DEFAULT_ORDER:
        if candidate in registry.backend_names():
            b = registry.backend(candidate)
            if registry.available(b)[0]:
                return _offers_row_passes(b, candidate)
    return False


_ROUTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # backend -> (offers, available, why)


def _offers_row_passes(b: Backend, name: str) -> bool:
    known = _ROUTES.get(b)
    if known is None:  # availability is fixed for a backend object (Numba reads its settings once)
        known = _ROUTES[b] = (type(b).flce_row_passes is not Backend.flce_row_passes, *registry.available(b))
    offers, ok, why = known
    if offers and not ok:
        raise BackendUnavailableError(f"backend {name!r} is not available here: {why}")
    return offers and ok


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """:func:`fused_linear_cross_entropy` as a module: ``loss_fn(input, weight, target, bias=None)``
    (input first; :class:`xloss.torch.LigerCompatFusedLinearCrossEntropyLoss` takes Liger-Kernel's
    weight-first order).

    The projection's parameters stay with the caller's model (e.g. ``lm_head.weight``), so the
    module holds only the settings (and ``class_weight`` as a buffer).
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size=None, backend=None, *, class_weight=None, vocab_chunk_size=None, process_group=None,
                 softcap=None, lse_square_scale: float = 0.0, return_z_loss: bool = False, accum_dtype=None,
                 return_token_accuracy: bool = False, use_token_scaling: bool = False):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, checks.reduction(reduction)
        self.label_smoothing = label_smoothing
        self.chunk_size, self.vocab_chunk_size, self.backend = chunk_size, vocab_chunk_size, backend
        self.process_group = process_group
        self.softcap, self.lse_square_scale, self.accum_dtype = softcap, lse_square_scale, accum_dtype
        self.return_z_loss, self.return_token_accuracy = return_z_loss, return_token_accuracy
        self.use_token_scaling = use_token_scaling
        self.register_buffer("class_weight", class_weight)

    def forward(self, input, weight, target, bias=None):
        return fused_linear_cross_entropy(input, weight, target, bias, self.ignore_index, self.reduction,
                                          self.label_smoothing, self.chunk_size, self.backend,
                                          class_weight=self.class_weight, vocab_chunk_size=self.vocab_chunk_size,
                                          process_group=self.process_group, softcap=self.softcap,
                                          lse_square_scale=self.lse_square_scale, return_z_loss=self.return_z_loss,
                                          accum_dtype=self.accum_dtype,
                                          return_token_accuracy=self.return_token_accuracy,
                                          use_token_scaling=self.use_token_scaling)

    def extra_repr(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("softcap", self.softcap),
                                                      ("lse_square_scale", self.lse_square_scale)) if v)
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, "
                f"chunk_size={self.chunk_size}, backend={self.backend!r}{extra}")
