"""Fused linear-cross-entropy for autograd: ``cross_entropy(input @ weight.T + bias, target)`` without the
(tokens × vocabulary) logits. The arguments are checked into one :class:`.flce_passes.FlceOptions` for two
``torch.library`` custom ops, which torch.compile records without a graph break and torch.func goes through."""

from typing import NamedTuple

import torch

from ..errors import UnsupportedRequestError, XLossError, XLossTypeError, XLossValueError
from ..kernels.flce import torch_ops
from ..validation import real_number
from . import _checks as checks
from . import flce_native, ops
from .chunking import resolve_sizes
from .distributed import Collectives, group_key
from .flce_native import gemm_route
from .flce_passes import FlceOptions, settled


class FusedLinearCrossEntropyOutput(NamedTuple):
    """The result with ``return_z_loss`` or ``return_token_accuracy`` (the field names of Liger-Kernel's
    ``CrossEntropyOutput``); a field not asked for is None."""

    loss: torch.Tensor
    z_loss: torch.Tensor | None
    token_accuracy: torch.Tensor | None


@checks.with_eager_twin
class _FusedLinearCrossEntropy(torch.autograd.Function):
    """The forward op for autograd; backward: the saved gradients scaled, or the backward op. vmap: the
    generated rule (PyTorch's fallback runs it once per batch entry)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w, b, target, class_weight, o):
        return ops.call(torch_ops.fused_linear_cross_entropy, x, w, b, target, class_weight, *o)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, b, target, class_weight, o = inputs
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)
        ctx.o, ctx.loss_dtype = o, output[0].dtype
        # the operands: to recompute ("none"; 16-bit native scaled by a non-power of two), and for
        # torch.func's second-order guard
        pre = o.precomputed
        recompute = not pre or (o.native and x.dtype in flce_native.HALF)
        keep = recompute or checks.functorch_active()
        saved = (*((x, w, b) if keep else (None,) * 3), target, class_weight,  # the backward op's order
                 *(output[3:5] + output[8:] if recompute else (None,) * 4), *(output[5:8] if pre else (None,) * 3))
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)  # references only; jvp reads them

    @staticmethod
    def backward(ctx, grad, *_):
        if torch.is_grad_enabled() and not checks.functorch_active():
            raise UnsupportedRequestError(
                "fused_linear_cross_entropy does not support second-order gradients (backward with "
                "create_graph=True): use F.cross_entropy(F.linear(...)) for double backward")
        if grad is None:
            return (None,) * 6
        o, saved = ctx.o, ctx.saved_tensors
        eager = grad.device.type == "cpu" and not (torch.compiler.is_compiling() or checks.functorch_active())
        g = checks.scalar_value(grad) if (o.reduction != "none" and eager) else None
        dx = saved[9]
        if g is not None and (not o.native or dx.dtype not in flce_native.HALF or flce_native.exact_scale(dx.dtype, g)):
            grads = tuple(checks.scaled(t, g) if wanted else None for t, wanted in zip(saved[9:], o.want))
        else:
            grads = tuple(t if wanted else None for t, wanted in zip(_backward_op(grad.detach(), saved, o), o.want))
        if checks.functorch_active():
            grads = tuple(None if t is None else checks.first_order_result("fused_linear_cross_entropy", t, ref)
                          for t, ref in zip(grads, saved[:3]))
        return grads + (None, None, None)

    @staticmethod
    def jvp_rule(ctx, t_x, t_w, t_b, *_):
        """Forward mode: ``<dx, t_x> + <dw, t_w> + <db, t_b>`` with the forward's gradients; for ``"none"``
        ``<dx_i, t_x_i>`` per token from the backward op with upstream ones."""
        o, saved = ctx.o, ctx.saved_tensors
        if o.group is not None:
            raise UnsupportedRequestError("fused_linear_cross_entropy has no forward-mode derivative (jvp) with "
                                          "process_group (it would need an all-reduce); use reverse mode")
        if o.reduction == "none" and (t_w is not None or t_b is not None):
            raise UnsupportedRequestError("fused_linear_cross_entropy with reduction='none' has a forward-mode "
                                          "derivative (jvp) w.r.t. input only (weight's would need the tokens x "
                                          "vocabulary contraction): use reduction='sum'/'mean', or reverse mode")
        target, dt = saved[3], ctx.loss_dtype  # (the compute dtype)
        if o.reduction == "none" and t_x is None:
            tangent = target.new_zeros(target.shape, dtype=dt)
        elif o.reduction == "none":
            dx = _backward_op(target.new_ones(target.shape, dtype=dt), saved, o)[0]
            tangent = (dx.to(dt) * t_x.to(dt)).sum(-1)
        else:
            tangent = sum(((g.to(dt) * t.to(dt)).sum() for g, t in zip(saved[9:], (t_x, t_w, t_b)) if t is not None),
                          target.new_zeros((), dtype=dt))
        return (tangent,) + (None,) * 9


def _backward_op(grad, saved, o):
    x, w, b = (None if t is None else t.detach() for t in saved[:3])
    return ops.call(torch_ops.fused_linear_cross_entropy_backward, grad, x, w, b, *saved[3:], *o)


def fused_linear_cross_entropy(input, weight, target, bias=None, ignore_index: int = -100, reduction: str = "mean",
                               label_smoothing: float = 0.0, chunk_size=None, backend=None, *, class_weight=None,
                               vocab_chunk_size=None, process_group=None, softcap=None, lse_square_scale: float = 0.0,
                               return_z_loss: bool = False, accum_dtype=None, return_token_accuracy: bool = False,
                               use_token_scaling: bool = False):
    """``F.cross_entropy(input @ weight.T + bias, target, ...)`` in memory bounded by the chunk.

    ``input`` (..., H), ``weight`` (V, H), ``bias`` (V) of one float dtype (sums in float32 or wider),
    ``target`` (...) class indices; the other arguments as in PyTorch (``class_weight``: its ``weight=``) and
    Liger-Kernel (docs/torch-ecosystem.md, with the routes). The loss is float32 for 16-bit operands, else
    ``input``'s dtype; under ``torch.autocast("cpu")`` the operands are cast as ``F.linear`` casts them. Tokens
    go ``chunk_size`` at a time (:mod:`xloss.torch.chunking`), ``vocab_chunk_size`` weight rows per kernel call.
    ``process_group``: vocabulary parallelism; ``weight`` and ``bias`` are this rank's contiguous shard, in rank
    order (:func:`xloss.torch.shard_vocab`), every rank gets the full loss and input gradient, and any rank's
    argument error or disagreement raises the same error on every rank (under torch.compile, inside the ops).
    """
    kw = {k: v for k, v in locals().items() if k not in ("input", "weight", "target", "bias")}  # the options
    input = checks.float_tensor(input, "input")
    if torch.is_autocast_enabled("cpu"):  # as F.linear: the operands in the autocast dtype, differentiably
        cast = torch.get_autocast_dtype("cpu")
        with torch.autocast("cpu", enabled=False):
            if input.device.type == "cpu" and input.dtype not in (cast, torch.float64):
                weight = checks.float_tensor(weight, "weight")
                input, weight = input.to(cast), weight.to(cast) if weight.dtype != torch.float64 else weight
                bias = None if bias is None else checks.float_tensor(bias, "bias").to(cast)
            return fused_linear_cross_entropy(input, weight, target, bias, **kw)
    # under torch.compile the layout is settled inside the ops (their first collective), so no graph break
    in_graph = process_group is not None and torch.compiler.is_compiling()
    coll = Collectives(None if in_graph else process_group)
    try:  # with a process group, an argument error reaches every rank through the first collective
        weight, bias, target, class_weight, o = _checked(input, weight, target, bias, **kw)
    except XLossError as exc:
        coll.agree(0, [], exc)  # raises it (on every rank)
        raise
    o = o._replace(group=group_key(process_group), backend=ops.backend_key(backend))
    o = o if in_graph else settled(o, input, weight, bias, target, class_weight, coll)
    operands = (input.reshape(-1, input.shape[-1]).contiguous(), weight.contiguous(),
                None if bias is None else bias.contiguous(), target.reshape(-1).to(torch.int64), class_weight)
    out = (_FusedLinearCrossEntropy.call(*operands, o) if any(o.want)
           else ops.call(torch_ops.fused_linear_cross_entropy, *operands, *o))
    loss = out[0].reshape(target.shape) if o.reduction == "none" else out[0]
    if not (return_z_loss or return_token_accuracy):
        return loss
    # without z-loss, zeros (NaN for the mean over no tokens, as the loss)
    z_loss = (out[1].reshape(loss.shape) if o.z_scale else loss.detach() * 0.0) if return_z_loss else None
    return FusedLinearCrossEntropyOutput(loss, z_loss, out[2].reshape(loss.shape) if o.accuracy else None)


def _checked(input, weight, target, bias, *, ignore_index, reduction, label_smoothing, chunk_size, backend,
             class_weight, vocab_chunk_size, softcap, lse_square_scale, accum_dtype, return_token_accuracy,
             use_token_scaling, **_):
    """Every check of this rank's own arguments: (weight, bias, target, class_weight, unsettled options)."""
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
    if isinstance(target, torch.Tensor) and target.is_floating_point():
        raise XLossTypeError(
            f"target has dtype {target.dtype} and shape {checks.shape_str(target.shape)}: fused_linear_cross_entropy "
            "takes class indices (int64/int32/uint8 of input's shape without H); class-probability targets "
            f"(float (..., {rows})) are not supported — use F.cross_entropy(F.linear(input, weight, bias), target) "
            "for them, or pass target.argmax(-1) for one-hot targets")
    target = checks.index_tensor(target, "target")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise XLossValueError(f"target must have shape {checks.shape_str(input.shape[:-1])} (input's without H); "
                              f"got {checks.shape_str(target.shape)}")
    ignore_index, reduction = checks.int64(ignore_index, "ignore_index"), checks.reduction(reduction)
    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls < 1.0:
        raise XLossValueError(f"label_smoothing must be in [0, 1); got {ls}")
    cap = 0.0 if softcap is None else real_number(softcap, "softcap")
    if cap < 0.0:
        raise XLossValueError(f"softcap must be positive (or None/0 for off); got {cap}")
    z_scale = real_number(lse_square_scale, "lse_square_scale")
    if z_scale < 0.0:
        raise XLossValueError(f"lse_square_scale must be >= 0; got {z_scale}")
    if accum_dtype is not None and (not isinstance(accum_dtype, torch.dtype) or accum_dtype not in checks.FLOAT_DTYPES):
        raise XLossTypeError(f"accum_dtype must be None or a torch floating dtype; got {accum_dtype!r}")
    # float32 or narrower: the float32 (float64) accumulators already are at least that
    accum = "float64" if accum_dtype == torch.float64 and input.dtype != torch.float64 else None
    resolve_sizes(chunk_size, vocab_chunk_size, hidden, max(rows, 1))  # their own checks (the sizes come later)
    scaling = bool(use_token_scaling)
    extras = bool(cap or z_scale or scaling or accum)
    native = gemm_route(backend) and (input.dtype in flce_native.DTYPES or extras)
    if not native and extras:
        raise UnsupportedRequestError(
            "softcap, lse_square_scale, use_token_scaling and accum_dtype=torch.float64 run on the cpu backend's "
            f"PyTorch-GEMM path (backend='cpu' or None); backend {getattr(backend, 'name', backend)!r} computes G in "
            "its fused_linear_cross_entropy_grad kernel, which has no soft-capping or z-loss term")
    if class_weight is not None:
        class_weight = checks.float_tensor(class_weight, "class_weight")
        checks.no_grad_required(class_weight, "class_weight", "fused_linear_cross_entropy gives no gradient w.r.t. it")
        if class_weight.ndim != 1:
            raise XLossValueError(f"class_weight must have shape (V,), one per class of the (global) vocabulary; "
                                  f"got {checks.shape_str(class_weight.shape)}")
        class_weight = class_weight.to(ops.compute_dtype(input.dtype)).contiguous()
    # a gradient is wanted for what requires grad, and for what carries a forward-mode tangent
    want = (checks.wants_derivative(input), checks.wants_derivative(weight), checks.wants_derivative(bias))
    return weight, bias, target, class_weight, FlceOptions(reduction, ignore_index, ls, cap, z_scale, chunk_size or 0,
                                                           vocab_chunk_size or 0, -1, -1, None, native, accum,
                                                           bool(return_token_accuracy), scaling, *want)


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """:func:`fused_linear_cross_entropy` as a module: ``loss_fn(input, weight, target, bias=None)`` (input
    first; :class:`xloss.torch.LigerCompatFusedLinearCrossEntropyLoss` takes Liger-Kernel's order). The
    projection stays with the caller's model; the module holds the settings (``class_weight`` a buffer)."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size=None, backend=None, *, class_weight=None, vocab_chunk_size=None, process_group=None,
                 softcap=None, lse_square_scale: float = 0.0, return_z_loss: bool = False, accum_dtype=None,
                 return_token_accuracy: bool = False, use_token_scaling: bool = False):
        super().__init__()
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__", "class_weight")}
        self._options = tuple(given)  # the settings' names: attributes, read at each call
        for name, value in given.items():
            setattr(self, name, value)
        self.reduction = checks.reduction(reduction)
        self.register_buffer("class_weight", class_weight)

    def forward(self, input, weight, target, bias=None):
        return fused_linear_cross_entropy(input, weight, target, bias, class_weight=self.class_weight,
                                          **{name: getattr(self, name) for name in self._options})

    def extra_repr(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("softcap", "lse_square_scale") if getattr(self, k))
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing="
                f"{self.label_smoothing}, chunk_size={self.chunk_size}, backend={self.backend!r}{extra}")
