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


def to_numpy(obj, name: str) -> np.ndarray:
    """``obj`` as a NumPy array sharing its memory where it can (tensors always do)."""
    if is_tensor(obj):
        import torch

        if obj.device.type != "cpu":
            raise XLossValueError(f"{name} is a torch tensor on {obj.device}; xloss takes CPU tensors")
        t = obj.detach()
        if t.is_conj() or t.is_neg():
            t = t.resolve_conj().resolve_neg()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(BFLOAT16)
        try:
            return t.numpy()
        except TypeError as exc:
            raise XLossTypeError(f"{name} has torch dtype {t.dtype}, which has no NumPy equivalent") from exc
    try:
        return np.asarray(obj)
    except Exception as exc:
        raise XLossTypeError(f"{name} must be an array, a torch tensor or a number; got {type(obj).__name__}") from exc


def from_numpy(arr: np.ndarray, kind: str):
    """Hand a result back in the caller's container (no copy)."""
    if kind == NUMPY:
        return arr
    import torch

    if arr.dtype == BFLOAT16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
