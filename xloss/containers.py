"""Crossing between the caller's containers (NumPy arrays, torch CPU tensors) and NumPy.

Torch tensors cross without a copy: a CPU tensor's memory is viewed as a NumPy array (bf16
through an int16 view as ``ml_dtypes.bfloat16``), and results go back with
``torch.from_numpy``. torch is never imported unless the caller passed a tensor.
"""

from __future__ import annotations

import sys

import numpy as np

from .dtypes import BFLOAT16
from .errors import XLossTypeError, XLossValueError

NUMPY = "numpy"
TORCH = "torch"


def is_tensor(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def kind_of(obj) -> str:
    return TORCH if is_tensor(obj) else NUMPY


def _tensor_view(t, name: str) -> np.ndarray:
    import torch

    if t.device.type != "cpu":
        raise XLossValueError(f"{name} is a torch tensor on {t.device}; xloss takes CPU tensors")
    if t.is_nested:
        raise XLossTypeError(f"{name} is a nested tensor; xloss takes dense (strided) tensors: "
                             "pad it (torch.nested.to_padded_tensor) or pass its components one by one")
    if t.layout != torch.strided or t.is_quantized:
        raise XLossTypeError(f"{name} has layout {t.layout}{' (quantized)' if t.is_quantized else ''}; "
                             "xloss takes dense (strided) tensors (e.g. call .to_dense())")
    t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BFLOAT16)
    try:
        return t.numpy()
    except TypeError as exc:
        raise XLossTypeError(f"{name} has torch dtype {t.dtype}, which has no NumPy equivalent") from exc


def to_numpy(obj, name: str) -> np.ndarray:
    """An input ``obj`` as a NumPy array sharing its memory where it can (tensors always do).

    A tensor that requires grad is refused while grad mode is on: these functions are not
    differentiable, and silently detaching would surface as a wrong or missing gradient much
    later. Arrays of non-native byte order are converted to native order (a copy).
    """
    if is_tensor(obj):
        import torch

        if obj.requires_grad and torch.is_grad_enabled():
            raise XLossValueError(
                f"{name} requires grad and grad mode is on, but the plain xloss functions are not "
                f"differentiable; use xloss.torch (autograd functions and modules), or pass {name}.detach() "
                "or call under torch.no_grad()")
        return _tensor_view(obj, name)
    try:
        arr = np.asarray(obj)
    except Exception as exc:
        raise XLossTypeError(f"{name} must be an array, a torch tensor or a number; got {type(obj).__name__}") from exc
    if arr.dtype.kind == "O":
        raise XLossTypeError(f"{name} must be a numeric array, a torch tensor or a number; got an object array "
                             f"(from {type(obj).__name__})")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def output_view(obj, name: str) -> np.ndarray:
    """A caller's ``out=`` buffer as a NumPy view, refusing tensors autograd forbids writing into
    (as torch's own ``out=`` and in-place rules do). After the write call :func:`mark_written`."""
    if is_tensor(obj):
        import torch

        if torch.is_grad_enabled() and obj.requires_grad:
            what = "a leaf tensor that requires grad" if obj.is_leaf else "a tensor that requires grad"
            raise XLossValueError(f"{name} is {what}; out= arguments do not support automatic "
                                  "differentiation (as in torch): pass a tensor that does not require grad")
        if obj.is_inference() and not torch.is_inference_mode_enabled():
            raise XLossValueError(f"{name} is an inference tensor; writing into it outside "
                                  "torch.inference_mode() is not allowed (as in torch)")
        return _tensor_view(obj, name)
    if isinstance(obj, np.ndarray):
        return obj
    raise XLossTypeError(f"{name} must be a NumPy array or a torch tensor to write into; got {type(obj).__name__}")


def mark_written(*outs) -> None:
    """Tell autograd that these caller tensors were modified in place (a version bump), so a
    backward that saved one of them raises instead of using the overwritten values."""
    tensors = [o for o in outs if is_tensor(o)]
    if tensors:
        import torch

        torch.autograd.graph.increment_version(tensors)


def from_numpy(arr: np.ndarray, kind: str):
    """Hand a result back in the caller's container (no copy)."""
    if kind == NUMPY:
        return arr
    import torch

    if arr.dtype == BFLOAT16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
