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

from ..backend import Backend
from ..errors import XLossTypeError, XLossValueError
from . import _checks as checks
from ._checks import check_class_indices  # noqa: F401 (for the families' ops: _checks is private)

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


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def scalar_or(grad: torch.Tensor):
    """A float for an upstream gradient that is one value (0-d or expanded), else the tensor."""
    g = checks.scalar_value(grad)
    return grad if g is None else g


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


def call(op, *args):
    """``op(*args)``, skipping the dispatcher's Python layers for a plain eager call on CPU tensors
    (its body runs directly: about 0.1-0.3 ms less per call, which small losses notice). Traced
    (torch.compile, export), torch.func, dispatch-mode (fake tensors), tensor-subclass and
    other-device calls go through the op."""
    return _BODIES[op](*args) if runs_directly(args[i] for i in _TENSOR_AT[op]) else op(*args)


def runs_directly(tensors) -> bool:
    """Whether a call on ``tensors`` (None allowed) is a plain eager call on CPU tensors: no tracing
    (torch.compile, export), torch.func, dispatch mode (fake tensors), tensor subclass or other device."""
    return not (torch.compiler.is_compiling() or checks.functorch_active() or torch._C._len_torch_dispatch_stack()
                or any(t is not None and (type(t) not in _PLAIN or t.device.type != "cpu") for t in tensors))


def register_device_kernel(op_name: str, device_type: str, fn) -> None:
    """Where a backend for another device plugs in: ``fn`` (same signature as the op) runs
    ``xloss::<op_name>`` for tensors on ``device_type``. The backend also lists that device in
    its ``Backend.devices`` so the torch wrappers let such tensors through."""
    if op_name not in OPS:
        raise XLossValueError(f"no xloss op named {op_name!r}; ops: {', '.join(sorted(OPS))}")
    if device_type == "cpu":
        raise XLossValueError("the cpu kernels are xloss's own; a backend chooses them by name (backend=)")
    OPS[op_name].register_kernel(device_type, fn)
