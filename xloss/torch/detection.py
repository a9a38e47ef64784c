"""torchvision detection: RetinaNet and FCOS compute their classification loss with xloss's focal loss.

    >>> patch = xloss.torch.apply_to_detection()        # before or after building the model
    >>> losses = retinanet(images, targets)              # classification loss from xloss
    >>> patch.remove()                                   # or: with xloss.torch.apply_to_detection(): ...

torchvision's detection modules bind ``sigmoid_focal_loss`` by name when imported
(``from ...ops import sigmoid_focal_loss``), so patching ``torchvision.ops`` alone would not
reach them: every module in :data:`MODULES` that holds torchvision's function gets a drop-in
with its signature ``(inputs, targets, alpha=0.25, gamma=2, reduction="none")`` running
:func:`xloss.torch.sigmoid_focal_loss`. The models' own code, targets and reductions are
unchanged, so their losses equal the stock ones within float rounding.
"""

from __future__ import annotations

import importlib
import threading

from ..errors import XLossValueError
from .focal import sigmoid_focal_loss

#: Where torchvision keeps (or has imported) its sigmoid_focal_loss.
MODULES = (
    "torchvision.ops.focal_loss",
    "torchvision.ops",
    "torchvision.models.detection.retinanet",
    "torchvision.models.detection.fcos",
)
ATTR = "sigmoid_focal_loss"

_lock = threading.Lock()


def drop_in(backend=None):
    """A function with torchvision's ``sigmoid_focal_loss`` signature running on ``backend``."""

    def xloss_sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2, reduction: str = "none"):
        return sigmoid_focal_loss(inputs, targets, alpha, gamma, reduction, backend=backend)

    xloss_sigmoid_focal_loss.__doc__ = sigmoid_focal_loss.__doc__
    xloss_sigmoid_focal_loss._xloss_drop_in = True
    return xloss_sigmoid_focal_loss


class DetectionPatch:
    """What :func:`apply_to_detection` replaced; ``remove()`` (or leaving the ``with``) restores it."""

    def __init__(self, replaced: dict):
        self.replaced = replaced  # module name -> the original function

    @property
    def modules(self) -> list[str]:
        return sorted(self.replaced)

    def remove(self) -> None:
        with _lock:
            for name, original in self.replaced.items():
                setattr(importlib.import_module(name), ATTR, original)
            self.replaced = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def __repr__(self):
        return f"<xloss detection patch of {', '.join(self.modules) or 'nothing (removed)'}>"


def apply_to_detection(*, backend=None, modules=MODULES) -> DetectionPatch:
    """Replace torchvision's ``sigmoid_focal_loss`` in ``modules`` (those importable) with xloss's.

    Raises if torchvision cannot be imported or no module holds the function. Patching a
    module that already holds an xloss drop-in replaces that one (the original stays the one
    ``remove()`` of the first patch restores).
    """
    try:
        importlib.import_module("torchvision")
    except Exception as exc:  # ImportError, or a wheel built for another torch/CUDA
        raise XLossValueError(f"apply_to_detection patches torchvision, which cannot be imported here: "
                              f"{type(exc).__name__}: {exc}") from exc
    fn = drop_in(backend)
    replaced = {}
    with _lock:
        for name in modules:
            try:
                module = importlib.import_module(name)
            except ImportError:  # an older torchvision without FCOS, say
                continue
            current = getattr(module, ATTR, None)
            if current is None:
                continue
            if not getattr(current, "_xloss_drop_in", False):
                replaced[name] = current
            setattr(module, ATTR, fn)
    if not replaced and not any(getattr(importlib.import_module(n), ATTR, None) is fn for n in modules
                                if _importable(n)):
        raise XLossValueError(f"none of {', '.join(modules)} holds {ATTR}: is this torchvision's layout?")
    return DetectionPatch(replaced)


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
