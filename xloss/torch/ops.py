"""The xloss kernels as ``torch.library`` custom ops (namespace ``xloss``).

Each op body runs opaquely: ``torch.compile`` records one call in its graph and never traces
into the validation, NumPy or Numba code behind it; checks that need the data (class
indices in range, probabilities in [0, 1]) run inside the body, so they cost no graph break.
Each op has a fake (meta) implementation giving the output shapes and dtypes for tracing.

The ops carry no autograd formula of their own: the autograd.Functions in ``focal``, ``bce``
and ``nll`` (with ``setup_context``, so ``torch.func.grad`` works) call a forward op and, in
backward, a backward op. That split keeps the second-order guard of
:func:`xloss.torch._checks.first_order_result` in Python, where eager, functorch and
compiled backward all see it.

``backend`` crosses as a string: a registered backend name, None (the default choice) or the
key under which :func:`backend_key` filed a :class:`~xloss.Backend` instance (an object
cannot be an op argument).

Devices: the bodies run on CPU tensors. A backend for another device (e.g. CUDA through
Triton) declares ``devices`` on its Backend class and registers its kernels for that device
with :func:`register_device_kernel`; until one does, the torch wrappers refuse such tensors
with a message naming the device (:func:`xloss.torch._checks.device_of`).
"""

from __future__ import annotations

import torch
from torch.library import custom_op

from .. import api
from ..backend import Backend
from ..errors import XLossTypeError, XLossValueError
from . import _checks as checks
from . import flce_passes as passes

# -- Backend instances as op arguments ------------------------------------------------------

_instances: dict[str, Backend] = {}  # key -> instance; held for the process (backends are few and shared)


def backend_key(backend) -> str | None:
    """What crosses into an op for ``backend``: the name, None, or a key filed for an instance.

    A backend the registry made without options is its name's shared instance, so it crosses
    as the name (which also keeps torch.compile's graph free of object lookups)."""
    if backend is None or isinstance(backend, str):
        return backend
    if isinstance(backend, Backend):
        made_by = getattr(backend, "_xloss_made_by", None)
        if made_by is not None and not made_by[1]:
            return made_by[0]
        if torch.compiler.is_compiling():  # filing the instance would be a side effect replayed too late
            raise XLossValueError(f"under torch.compile pass backend={backend.name!r} by name (or "
                                  "xloss.backend(name, **options) without options); other Backend objects "
                                  "work in eager mode")
        key = f"<xloss instance {backend.name} {id(backend):#x}>"  # not a valid registry name
        _instances.setdefault(key, backend)  # one dict operation: atomic under the GIL
        return key
    raise XLossTypeError(f"backend must be a name, a Backend or None, got {type(backend).__name__}")


def backend_of(key: str | None):
    """Inverse of :func:`backend_key` (inside the op bodies)."""
    return None if key is None else _instances.get(key, key)


#: The class-index check of an op body (a family's torch ops use it: :mod:`xloss.kernels.nll.torch_ops`).
check_class_indices = checks.check_class_indices


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def scalar_or(grad: torch.Tensor):
    """A float for an upstream gradient that is one value (0-d or expanded), else the tensor."""
    g = checks.scalar_value(grad)
    return grad if g is None else g


# -- sigmoid focal loss ---------------------------------------------------------------------

@custom_op("xloss::sigmoid_focal_loss", mutates_args=())
def sigmoid_focal_loss(inputs: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None, alpha: float,
                       gamma: float, reduction: str, backend: str | None) -> torch.Tensor:
    """Loss only (no gradient needed)."""
    return api.focal_loss(inputs, targets, alpha=alpha, gamma=gamma, weight=weight, reduction=reduction,
                          backend=backend_of(backend))


@sigmoid_focal_loss.register_fake
def _(inputs, targets, weight, alpha, gamma, reduction, backend):
    return inputs.new_empty(inputs.shape if reduction == "none" else ())


@custom_op("xloss::sigmoid_focal_loss_with_grad", mutates_args=())
def sigmoid_focal_loss_with_grad(inputs: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None,
                                 alpha: float, gamma: float, reduction: str,
                                 backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, dx)`` from one pass, dx for upstream gradient 1 (the backward scales it)."""
    return api.focal_loss_with_grad(inputs, targets, 1.0, alpha=alpha, gamma=gamma, weight=weight,
                                    reduction=reduction, backend=backend_of(backend))


@sigmoid_focal_loss_with_grad.register_fake
def _(inputs, targets, weight, alpha, gamma, reduction, backend):
    return inputs.new_empty(inputs.shape if reduction == "none" else ()), torch.empty_like(inputs)


# -- binary cross entropy -------------------------------------------------------------------

def _check_probabilities(x: torch.Tensor) -> None:
    if x.numel() and not bool(((x >= 0) & (x <= 1)).all()):
        raise XLossValueError("input must hold probabilities in [0, 1] (every element); "
                              "use binary_cross_entropy_with_logits for logits")


def _reduce(values: torch.Tensor, reduction: str, dtype: torch.dtype) -> torch.Tensor:
    if reduction == "none":
        return values.to(dtype)
    total = values.sum(dtype=torch.float64)
    if reduction == "mean":
        total = total / values.numel() if values.numel() else torch.tensor(float("nan"), dtype=torch.float64)
    return total.to(dtype)


@custom_op("xloss::binary_cross_entropy", mutates_args=())
def binary_cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                         reduction: str) -> torch.Tensor:
    """PyTorch's formula (each log clamped at -100) in float32 or wider; checks the [0, 1] domain."""
    _check_probabilities(input)
    cdt = compute_dtype(input.dtype)
    x, y = input.to(cdt), target.to(cdt)
    loss = -(y * torch.log(x).clamp_min(-100.0) + (1.0 - y) * torch.log1p(-x).clamp_min(-100.0))
    if weight is not None:
        loss = loss * weight.to(cdt)
    return _reduce(loss, reduction, input.dtype)


@binary_cross_entropy.register_fake
def _(input, target, weight, reduction):
    return input.new_empty(input.shape if reduction == "none" else ())


@custom_op("xloss::binary_cross_entropy_backward", mutates_args=())
def binary_cross_entropy_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                                  weight: torch.Tensor | None, reduction: str, eps: float, eps_mode: str,
                                  backend: str | None) -> torch.Tensor:
    return api.bce_grad(input, target, scalar_or(grad), weight=weight, reduction=reduction, eps=eps,
                        eps_mode=eps_mode, backend=backend_of(backend))


@binary_cross_entropy_backward.register_fake
def _(grad, input, target, weight, reduction, eps, eps_mode, backend):
    return torch.empty_like(input)


# -- fused linear cross entropy ------------------------------------------------------------
# The settings cross flattened (flce_passes.Params, then the wanted gradients): op arguments
# are primitive values. The bodies are in flce_passes.


@custom_op("xloss::fused_linear_cross_entropy", mutates_args=())
def fused_linear_cross_entropy(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, target: torch.Tensor,
                               class_weight: torch.Tensor | None, reduction: str, ignore_index: int,
                               label_smoothing: float, softcap: float, z_scale: float, chunk: int, block: int,
                               start: int, vocab: int, group: str | None, native: bool, accum: str | None,
                               accuracy: bool, token_scaling: bool, want_dx: bool, want_dw: bool, want_db: bool,
                               backend: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor]:
    """``(loss, z_loss, accuracy, row_max, sum_exp, dx, dw, db, target_mask, masked_target)``
    (:func:`xloss.torch.flce_passes.forward`)."""
    p = passes.Params(reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block, start, vocab, group,
                      native, accum, accuracy, token_scaling)
    return passes.forward(x, w, b, target, class_weight, p, (want_dx, want_dw, want_db), backend_of(backend))


@fused_linear_cross_entropy.register_fake
def _(x, w, b, target, class_weight, reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block,
      start, vocab, group, native, accum, accuracy, token_scaling, want_dx, want_dw, want_db, backend):
    bt = x.shape[0]
    shape = (bt,) if reduction == "none" else ()
    ldt, cdt = passes.loss_dtype(x.dtype), compute_dtype(x.dtype)
    pre = reduction != "none" and (want_dx or want_dw or want_db)
    grads = [x.new_empty(shape if pre and wanted else (0,)) for shape, wanted in
             ((x.shape, want_dx), (w.shape, want_dw), ((w.shape[0],), want_db))]
    return (x.new_empty(shape, dtype=ldt), x.new_empty(shape if z_scale else (0,), dtype=ldt),
            x.new_empty(shape if accuracy else (0,), dtype=torch.float32),
            x.new_empty((bt,), dtype=cdt), x.new_empty((bt,), dtype=cdt), *grads,
            target.new_empty((0,) if native else (bt,), dtype=torch.bool),
            target.new_empty((0,) if native else (bt,), dtype=torch.int64))


@custom_op("xloss::fused_linear_cross_entropy_backward", mutates_args=())
def fused_linear_cross_entropy_backward(grad: torch.Tensor, x: torch.Tensor | None, w: torch.Tensor | None,
                                        b: torch.Tensor | None, target: torch.Tensor,
                                        class_weight: torch.Tensor | None, row_max: torch.Tensor | None,
                                        sum_exp: torch.Tensor | None, target_mask: torch.Tensor | None,
                                        masked_target: torch.Tensor | None, dx: torch.Tensor | None,
                                        dw: torch.Tensor | None, db: torch.Tensor | None,
                                        reduction: str, ignore_index: int, label_smoothing: float, softcap: float,
                                        z_scale: float, chunk: int, block: int, start: int, vocab: int,
                                        group: str | None, native: bool, accum: str | None, accuracy: bool,
                                        token_scaling: bool, want_dx: bool,
                                        want_dw: bool, want_db: bool, backend: str | None
                                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dw, db)``, empty where not wanted (:func:`xloss.torch.flce_passes.backward`). The
    forward's row statistics (and target mask and masked target) are given where the backward
    recomputes, its gradients where it scales them (scalar reductions)."""
    p = passes.Params(reduction, ignore_index, label_smoothing, softcap, z_scale, chunk, block, start, vocab, group,
                      native, accum, accuracy, token_scaling)
    return passes.backward(grad, x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target,
                           dx, dw, db, p, (want_dx, want_dw, want_db), backend_of(backend))


@fused_linear_cross_entropy_backward.register_fake
def _(grad, x, w, b, target, class_weight, row_max, sum_exp, target_mask, masked_target, dx, dw, db, reduction, *rest):
    want = rest[-4:-1]
    # the saved operands give the shapes where they were saved, the precomputed gradients otherwise;
    # every gradient has the operands' dtype
    if x is not None and w is not None:
        full, like = (x.shape, w.shape, (w.shape[0],)), x
    else:
        full, like = (dx.shape, dw.shape, db.shape), dx
    return tuple(like.new_empty(shape if wanted else (0,)) for shape, wanted in zip(full, want))


# -- the vocabulary-parallel forward (CANN's Megatron flow) ------------------------------------
# One shard's statistics before the caller's all-reduce, and the per-token loss after it. An output
# that was not asked for comes back empty (0,): an op returns tensors only.


@custom_op("xloss::fused_linear_online_max_sum", mutates_args=())
def fused_linear_online_max_sum(input: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, vocab_start: int,
                                vocab_end: int | None, return_logits: bool, mask_format: str, backend: str | None
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                           torch.Tensor]:
    """``(logits_max_local, sum_exp_logits_local, predicted_logits_local, target_mask, masked_target,
    vocab_parallel_logits)`` of :func:`xloss.fused_linear_online_max_sum`; the logits (0,) unless asked."""
    r = api.fused_linear_online_max_sum(input, weight, target, vocab_start, vocab_end, return_logits=return_logits,
                                        mask_format=mask_format, backend=backend_of(backend))
    return tuple(r[:5]) + (input.new_empty(0) if r.vocab_parallel_logits is None else r.vocab_parallel_logits,)


@fused_linear_online_max_sum.register_fake
def _(input, weight, target, vocab_start, vocab_end, return_logits, mask_format, backend):
    bt, cdt = input.shape[0], compute_dtype(input.dtype)
    mask = (input.new_empty(((bt + 7) // 8,), dtype=torch.uint8) if mask_format == "bitpacked"
            else input.new_empty((bt,), dtype=torch.bool))
    return (*(input.new_empty((bt,), dtype=cdt) for _ in range(3)), mask, target.new_empty((bt,)),
            input.new_empty((bt, weight.shape[0]) if return_logits else (0,)))


@custom_op("xloss::fused_cross_entropy_loss_with_max_sum", mutates_args=())
def fused_cross_entropy_loss_with_max_sum(logits_max: torch.Tensor, sum_exp_logits: torch.Tensor,
                                          predicted_logits: torch.Tensor, vocab_parallel_logits: torch.Tensor | None,
                                          label_smoothing: float, backend: str | None
                                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, softmax)`` of :func:`xloss.fused_cross_entropy_loss_with_max_sum`; softmax (0,) without logits."""
    r = api.fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits,
                                                  vocab_parallel_logits=vocab_parallel_logits,
                                                  label_smoothing=label_smoothing, backend=backend_of(backend))
    return r.loss, logits_max.new_empty(0, dtype=r.loss.dtype) if r.softmax is None else r.softmax


@fused_cross_entropy_loss_with_max_sum.register_fake
def _(logits_max, sum_exp_logits, predicted_logits, vocab_parallel_logits, label_smoothing, backend):
    # the compute dtype: of the logits when given, else of the statistics (as the validation decides)
    cdt = compute_dtype(logits_max.dtype if vocab_parallel_logits is None else vocab_parallel_logits.dtype)
    return (logits_max.new_empty(logits_max.shape, dtype=cdt),
            logits_max.new_empty((0,) if vocab_parallel_logits is None else vocab_parallel_logits.shape, dtype=cdt))


#: Every xloss op, by name (what a device backend registers kernels for): filled by :func:`register_op`.
OPS: dict = {}
_BODIES: dict = {}  # op -> the Python function it was made from
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_TENSOR_AT: dict = {}  # op -> where it takes tensors (FLCE has 5 among 23 arguments): call() looks only there


def register_op(*ops) -> None:
    """Make custom ops known to :func:`call` and :func:`register_device_kernel` (a family's torch
    module registers the ops it defines)."""
    for op in ops:
        OPS[op._name] = op
        _BODIES[op] = op._init_fn
        _TENSOR_AT[op] = tuple(i for i, a in enumerate(op._opoverload._schema.arguments) if "Tensor" in str(a.type))


register_op(sigmoid_focal_loss, sigmoid_focal_loss_with_grad, binary_cross_entropy, binary_cross_entropy_backward,
            fused_linear_cross_entropy, fused_linear_cross_entropy_backward,
            fused_linear_online_max_sum, fused_cross_entropy_loss_with_max_sum)


def call(op, *args):
    """``op(*args)``, skipping the dispatcher's Python layers for a plain eager call on CPU tensors
    (its body runs directly: about 0.1-0.3 ms less per call, which small losses notice). Traced
    (torch.compile, export), torch.func, dispatch-mode (fake tensors), tensor-subclass and
    other-device calls go through the op."""
    if (torch.compiler.is_compiling() or checks._functorch_active() or torch._C._len_torch_dispatch_stack()
            or any(args[i] is not None and (type(args[i]) not in _PLAIN or args[i].device.type != "cpu")
                   for i in _TENSOR_AT[op])):
        return op(*args)
    return _BODIES[op](*args)


def register_device_kernel(op_name: str, device_type: str, fn) -> None:
    """Where a backend for another device plugs in: ``fn`` (same signature as the op) runs
    ``xloss::<op_name>`` for tensors on ``device_type``. The backend also lists that device in
    its ``Backend.devices`` so the torch wrappers let such tensors through."""
    if op_name not in OPS:
        raise XLossValueError(f"no xloss op named {op_name!r}; ops: {', '.join(sorted(OPS))}")
    if device_type == "cpu":
        raise XLossValueError("the cpu kernels are xloss's own; a backend chooses them by name (backend=)")
    OPS[op_name].register_kernel(device_type, fn)
