"""Argument checks and small helpers shared by the torch wrappers.

Errors are :class:`xloss.XLossError` subclasses naming the argument, raised before any
kernel runs (the kernel functions validate again; these checks exist so that messages use
the torch-level argument names and so that no autograd state is built for a bad call).
"""

from __future__ import annotations

import functools

import torch
import torch.autograd.forward_ad as fwAD

from ..errors import XLossIndexError, XLossTypeError, XLossValueError
from ..kernels import REDUCTIONS

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX_DTYPES = (torch.int64, torch.int32, torch.uint8)


def shape_str(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def tensor(obj, name: str, backend=None) -> torch.Tensor:
    if not isinstance(obj, torch.Tensor):
        raise XLossTypeError(f"{name} must be a torch.Tensor; got {type(obj).__name__}")
    if obj.layout != torch.strided:
        raise XLossTypeError(f"{name} has layout {obj.layout}; xloss takes dense (strided) tensors "
                             f"(e.g. call {name}.to_dense())")
    if obj.device.type != "cpu":
        device_runs(obj, name, backend)
    return obj


def _backend_devices(b) -> tuple:
    return tuple(getattr(b, "devices", ("cpu",)))


def device_runs(t: torch.Tensor, name: str, backend=None) -> None:
    """Refuse a tensor on a device that no backend (the named one, or any registered one for
    ``backend=None``) declares in ``Backend.devices``, naming the device and what runs where.
    Only reached off the CPU, so the registry is consulted on error paths and for device backends."""
    from ..backend import Backend
    from ..registry import backend as get_backend
    from ..registry import backend_names

    dev = t.device.type
    if isinstance(backend, (str, Backend)):
        b = backend if isinstance(backend, Backend) else get_backend(backend)
        if dev not in _backend_devices(b):
            raise XLossValueError(f"{name} is on {t.device}; backend {b.name!r} runs on "
                                   f"{', '.join(_backend_devices(b))}: move the tensors there (.cpu()) or "
                                   f"pick a backend for {dev}")
        return
    runs = {}
    for n in backend_names():
        try:
            runs[n] = _backend_devices(get_backend(n))
        except Exception:  # a backend that cannot load runs nowhere here
            continue
    if not any(dev in d for d in runs.values()):
        listing = ", ".join(f"{n} ({'/'.join(d)})" for n, d in sorted(runs.items()))
        raise XLossValueError(f"{name} is on {t.device}; no registered xloss backend runs on {dev} "
                               f"(backends: {listing or 'none'}); move the tensors to the CPU or install a "
                               f"backend that declares {dev!r} in Backend.devices")


def same_device(t: torch.Tensor, name: str, ref: torch.Tensor, ref_name: str) -> torch.Tensor:
    if t is not None and t.device != ref.device:
        raise XLossValueError(f"{name} is on {t.device}; it must be on {ref_name}'s device ({ref.device})")
    return t


def float_tensor(obj, name: str, backend=None) -> torch.Tensor:
    t = tensor(obj, name, backend)
    if t.dtype not in FLOAT_DTYPES:
        raise XLossTypeError(f"{name} must be float16, bfloat16, float32 or float64; got {t.dtype}")
    return t


def autocast_float32(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` as float32 where CPU autocast is on and ``t`` is a 16-bit float CPU tensor, else ``t``: the
    float32 policy torch's own losses follow under autocast (``binary_cross_entropy(_with_logits)``,
    ``nll_loss``, ``cross_entropy`` return float32 there). The cast is differentiable, so the gradient
    comes back in ``t``'s dtype, rounded once."""
    if (t is not None and t.dtype in (torch.float16, torch.bfloat16) and t.device.type == "cpu"
            and torch.is_autocast_enabled("cpu")):
        return t.float()
    return t


def index_tensor(obj, name: str, backend=None) -> torch.Tensor:
    t = tensor(obj, name, backend)
    if t.dtype not in INDEX_DTYPES:
        raise XLossTypeError(f"{name} must hold class indices (int64, int32 or uint8); got {t.dtype}")
    return t


def same_dtype(t: torch.Tensor, name: str, dtype: torch.dtype, other: str) -> torch.Tensor:
    if t.dtype != dtype:
        raise XLossTypeError(f"{name} has dtype {t.dtype}; it must match {other} ({dtype})")
    return t


def reduction(value) -> str:
    if not isinstance(value, str) or value not in REDUCTIONS:
        raise XLossValueError(f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}; got {value!r}")
    return value


def integer(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise XLossTypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    return value


def int64(value, name: str) -> int:
    """An int that fits int64 (a class index or ignore_index crosses into int64 tensors and kernels)."""
    value = integer(value, name)
    if not -(2**63) <= value < 2**63:
        raise XLossValueError(f"{name} must fit in int64 ([-2**63, 2**63)); got {value}")
    return value


def reduction_torchvision(value) -> str:
    """As :func:`reduction`, with torchvision's wording (its tests match ``ValueError("Invalid ...")``)."""
    if not isinstance(value, str) or value not in REDUCTIONS:
        raise XLossValueError(f"Invalid value for arg 'reduction': {value!r}; supported reduction modes: "
                              f"{', '.join(map(repr, REDUCTIONS))}")
    return value


def no_grad_required(t, name: str, why: str) -> None:
    if t is not None and t.requires_grad:
        raise XLossValueError(f"{name} requires grad, but {why}; pass {name}.detach()")
    if has_tangent(t):
        raise XLossValueError(f"{name} carries a forward-mode tangent, but {why}; pass a tensor without one "
                              f"(torch.autograd.forward_ad.unpack_dual({name}).primal)")


def check_class_indices(target: torch.Tensor, classes: int, ignore_index: int, name: str = "target") -> None:
    """Every entry in [0, classes) or equal to ignore_index, else an error naming the first bad row."""
    t = target.reshape(-1).to(torch.int64)
    bad = (t != ignore_index) & ((t < 0) | (t >= classes))
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        where = f"{name}[{row}]" if target.ndim else name
        raise XLossIndexError(f"{where} = {int(t[row])} is out of range: class indices must lie in "
                              f"[0, {classes}) or equal ignore_index={ignore_index}")


def scalar_value(g: torch.Tensor) -> float | None:
    """The one value of an upstream gradient that is a scalar or an expanded scalar (every
    stride 0, as ``loss.sum().backward()`` hands down), else None."""
    if g.numel() == 1:
        return g.reshape(()).item()
    if g.numel() and all(s == 0 for s in g.stride()):
        return g[(0,) * g.ndim].item()
    return None


def scaled(t: torch.Tensor, g: float) -> torch.Tensor:
    """``t * g`` without a pass over memory when g is 1 (the usual ``loss.backward()``)."""
    return t if g == 1.0 else t * g


def functorch_active() -> bool:
    return torch._C._functorch.peek_interpreter_stack() is not None


def has_tangent(t) -> bool:
    """Whether ``t`` carries a forward-mode tangent (``torch.autograd.forward_ad`` or ``torch.func.jvp``,
    which both make dual tensors): such a call must go through the autograd.Function, whose ``jvp``
    gives the tangent (a bare op would drop it)."""
    return t is not None and fwAD._current_level >= 0 and fwAD.unpack_dual(t).tangent is not None


def wants_derivative(*tensors) -> bool:
    """Whether a call must build autograd state: a tensor requires grad (grad mode on) or carries a tangent."""
    grad_on = torch.is_grad_enabled()
    return any(t is not None and ((grad_on and t.requires_grad) or has_tangent(t)) for t in tensors)


def reduce_tangent(per_element: torch.Tensor, reduction: str, like: torch.Tensor) -> torch.Tensor:
    """The loss's tangent from the elementwise product of its derivative and the input's tangent
    (the derivative already holds ``mean``'s division): summed for a scalar reduction, in the
    loss's dtype and shape."""
    if reduction != "none":
        per_element = per_element.sum(dtype=torch.float64 if per_element.dtype == torch.float64 else torch.float32)
    return per_element.to(like.dtype).reshape(like.shape)


class _SecondOrderGuard(torch.autograd.Function):
    """Identity on a kernel-made gradient whose own derivative raises (used under torch.func,
    which always builds the graph of a gradient: only differentiating it again is refused).
    Its forward is a torch op, so vmap (jacrev's batched backward) goes through it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_input, inputs, what):
        return grad_input.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.what = inputs[2]

    @staticmethod
    def backward(ctx, grad):
        raise XLossValueError(_second_order_message(ctx.what))

    @staticmethod
    def jvp(ctx, *tangents):  # forward over reverse (hvp, jacfwd(jacrev)): a second order too
        raise XLossValueError(_second_order_message(ctx.what))


def _second_order_message(what: str) -> str:
    return (f"{what} does not support second-order gradients (backward with create_graph=True, "
            "double backward, torch.func.grad of grad): its gradient comes from an xloss kernel; use "
            "the torch implementation for that part of the model")


def first_order_result(what: str, grad_input: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``grad_input`` as the backward's result. Under a torch.func transform it goes through a
    guard whose derivative raises, so ``grad(grad(f))`` fails clearly instead of treating the
    kernel's gradient as a constant."""
    if functorch_active():
        return _SecondOrderGuard.apply(grad_input, inputs, what)
    return grad_input


def with_eager_twin(fn_cls):
    """Class decorator for an autograd.Function written with ``setup_context`` (what torch.func
    needs): adds ``fn_cls.call(*args)``, which outside torch.func transforms applies a ctx-style
    twin instead. torch's ``apply`` binds a setup_context-style forward's signature with
    ``inspect.signature`` on every call (tens of microseconds, as much as a small loss costs).

    Forward mode: the class's ``jvp_rule`` becomes the ``jvp`` of a subclass (which also saves what
    ``jvp_saved(inputs, output)`` names, where the class has one) that ``call`` applies
    under torch.func transforms and when an argument carries a ``forward_ad`` tangent: Dynamo refuses
    to trace a Function that defines ``jvp``, so the class torch.compile sees in eager use has none."""

    class Twin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            out = fn_cls.forward(*args)
            fn_cls.setup_context(ctx, args, out)
            return out

        backward = staticmethod(fn_cls.backward)

    Twin.__name__ = Twin.__qualname__ = fn_cls.__name__ + "Eager"
    extra = {"jvp": staticmethod(fn_cls.jvp_rule)}
    if hasattr(fn_cls, "jvp_saved"):  # tensors only the jvp needs: saved in forward mode only

        def setup_context(ctx, inputs, output):
            fn_cls.setup_context(ctx, inputs, output)
            ctx.save_for_forward(*fn_cls.jvp_saved(inputs, output))

        extra["setup_context"] = staticmethod(setup_context)
    forward_mode = type(fn_cls.__name__ + "ForwardMode", (fn_cls,), extra)

    def call(*args):
        if torch._C._are_functorch_transforms_active():  # a jvp level may be anywhere in the stack
            return forward_mode.apply(*args)
        if fwAD._current_level >= 0 and any(isinstance(a, torch.Tensor) and has_tangent(a) for a in args):
            return forward_mode.apply(*args)
        return Twin.apply(*args)

    fn_cls.call = staticmethod(call)
    return fn_cls


def first_order_only(what: str):
    """Decorator for an autograd ``backward`` whose result is not itself differentiable (it comes
    from a kernel, not from torch operations). With ``create_graph=True`` (grad mode on inside
    backward) it raises instead of handing back a gradient that a second backward would treat as
    a constant, which silently gives wrong second-order gradients."""

    def wrap(backward):
        @functools.wraps(backward)
        def checked(ctx, *grads):
            # torch.func.grad runs every backward with grad mode on, to first order too: there the
            # guard of first_order_result raises only if the gradient is differentiated again.
            if torch.is_grad_enabled() and not functorch_active():
                raise XLossValueError(_second_order_message(what))
            return backward(ctx, *grads)

        return checked

    return wrap
