"""Small Python backends that break the contract the way real ports do, for the check tests.

Each wraps the reference backend (a correct result) and adds one bug. They declare float32
only (bfloat16 where the bug is about 16-bit rounding) so a check run stays fast.
"""

import numpy as np

from xloss import reference as ref
from xloss.backend import Backend, KernelCaps
from xloss.backends.numpy_reference import ReferenceBackend
from xloss.errors import OutOfBoundsWrite

REF = ReferenceBackend()


class Wrapper(Backend):
    kernels = ("focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad")
    dtypes = ("float32",)

    def __init__(self, name="misbehaving", **options):
        super().__init__(name=name, options=options)

    def capabilities(self):
        return {k: KernelCaps.declare(k, dtypes=self.dtypes) for k in self.kernels}

    def focal_loss(self, a):
        REF.focal_loss(a)

    def bce_grad(self, a):
        REF.bce_grad(a)

    def nll_loss_grad(self, a):
        REF.nll_loss_grad(a)

    def fused_linear_cross_entropy_grad(self, a):
        REF.fused_linear_cross_entropy_grad(a)


class ClampsLogitsInPlace(Wrapper):
    """Clamps the caller's logits in place (then computes from the clamped values)."""

    kernels = ("focal_loss",)

    def focal_loss(self, a):
        np.clip(a.x, -10.0, 10.0, out=a.x)
        REF.focal_loss(a)


class ScalesSelfInPlace(Wrapper):
    """Writes into NLL's `self` (an input) although the result stays right."""

    kernels = ("nll_loss_grad",)

    def nll_loss_grad(self, a):
        REF.nll_loss_grad(a)
        if a.self.size:
            a.self.reshape(-1)[-1] = 0.0


class GuardTripped(Wrapper):
    """What a C adapter's checked mode raises when a port writes one float past `dx`; unchecked
    (``checked()`` not called) it stays silent, as an unguarded heap would."""

    kernels = ("bce_grad",)

    def __init__(self, name="guard", checked=False, **options):
        super().__init__(name=name, **options)
        self.is_checked = checked

    def checked(self):
        return GuardTripped(checked=True)

    def bce_grad(self, a):
        REF.bce_grad(a)
        if self.is_checked and a.x.size >= 3:
            raise OutOfBoundsWrite("4 bytes after dx changed", buffer="dx", offset=4 * a.x.size, nbytes=4)


class OffByOneElement(Wrapper):
    """Gets element 2 of every BCE gradient wrong (a bug visible on one element)."""

    kernels = ("bce_grad",)

    def bce_grad(self, a):
        REF.bce_grad(a)
        if a.out.ndim and a.out.size > 2:
            a.out.reshape(-1)[2] += 1.0


class Racy(Wrapper):
    """Large outputs differ from run to run in one element (an unsynchronised +=)."""

    kernels = ("nll_loss_grad",)

    def __init__(self, name="racy", **options):
        super().__init__(name=name, **options)
        self.calls = 0

    def nll_loss_grad(self, a):
        REF.nll_loss_grad(a)
        self.calls += 1
        if a.out.size > 100000 and self.calls % 2 == 0:
            a.out.reshape(-1)[12345] += 0.5


class MaskDependent(Wrapper):
    """Indexes its slice by physical core id: wrong results unless every core is in the mask."""

    kernels = ("bce_grad",)

    def __init__(self, name="masked", core_mask=0xFF, **options):
        super().__init__(name=name, core_mask=core_mask, **options)
        self.core_mask = core_mask

    def configurations(self):
        return [(f"core_mask={m:#04x}", MaskDependent(core_mask=m)) for m in (0x01, 0x55, 0xFF)]

    def bce_grad(self, a):
        REF.bce_grad(a)
        if self.core_mask != 0xFF and a.out.size > 8:
            a.out.reshape(-1)[-1] = 0.0


class TruncatesToBF16(Wrapper):
    """Rounds its float32 results to bfloat16 by truncation (dropping the low 16 bits)."""

    kernels = ("bce_grad",)
    dtypes = ("bfloat16",)

    def bce_grad(self, a):
        exact = ref.bce_grad(a.x, a.y, a.grad, weight=a.weight, reduction=a.reduction, eps=a.eps,
                             eps_mode=a.eps_mode).astype(np.float32)
        bits = np.ascontiguousarray(exact).view(np.uint32) & np.uint32(0xFFFF0000)
        a.out[...] = bits.view(np.float32).astype(a.out.dtype)


class FlceLogitsInBF16(Wrapper):
    """Forms the FLCE logits in bfloat16 instead of float32 (recompute mode)."""

    kernels = ("fused_linear_cross_entropy_grad",)
    dtypes = ("bfloat16",)

    def fused_linear_cross_entropy_grad(self, a):
        if a.softmax is not None:
            return REF.fused_linear_cross_entropy_grad(a)
        import ml_dtypes

        logits = (a.input.astype(np.float32) @ a.weight.astype(np.float32).T).astype(ml_dtypes.bfloat16)
        p = np.exp(logits.astype(np.float64) - a.logits_max.astype(np.float64)[:, None]) \
            / a.sum_exp_logits.astype(np.float64)[:, None]
        bt = a.input.shape[0]
        rows = np.nonzero(~ref.mask_as_bool(a.target_mask, bt))[0]
        p[rows, np.asarray(a.masked_target)[rows].astype(np.int64)] -= 1.0
        g = p * np.asarray(a.grad, dtype=np.float64)[:, None]
        a.input_grad_out[...] = (g @ a.weight.astype(np.float64)).astype(a.input_grad_out.dtype)
        a.weight_grad_out[...] = (g.T @ a.input.astype(np.float64)).astype(a.weight_grad_out.dtype)


class ClampsLargeInputs(Wrapper):
    """Writes into `x` only past 2**20 elements (a tiled path that reuses its input as scratch)."""

    kernels = ("bce_grad",)

    def bce_grad(self, a):
        REF.bce_grad(a)
        if a.x.size > 2**20:
            a.x[2**20 + 7] = 0.5


class NllSignOfClassZero(Wrapper):
    """Flips the sign of the gradient of rows whose target is class 0 (a bug visible on one row)."""

    kernels = ("nll_loss_grad",)

    def nll_loss_grad(self, a):
        REF.nll_loss_grad(a)
        if a.out.ndim == 2:
            rows = np.asarray(a.target).astype(np.int64) == 0
            a.out[rows, 0] *= -1


class BinaryTargetsOnly(Wrapper):
    """A correct focal loss whose ABI takes binary targets only (as DrivingSDK's INT32 one-hot):
    declared ``targets: binary``; it raises if ever handed a soft target."""

    kernels = ("focal_loss",)

    def capabilities(self):
        return {"focal_loss": KernelCaps.declare("focal_loss", dtypes=self.dtypes, targets=("binary",))}

    def focal_loss(self, a):
        if not np.all((a.y == 0) | (a.y == 1)):
            raise AssertionError("handed a soft target")
        REF.focal_loss(a)
