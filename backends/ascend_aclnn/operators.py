"""The aclnn operators the adapter drives, which focal-loss ABI a library exports, and what the
backend declares from the symbols it finds.

Focal loss has two ABIs that must never be confused:

* ``xloss`` — xloss's own operators ``aclnnXlossSigmoidFocalLoss`` / ``aclnnXlossSigmoidFocalLossBackward``
  (9 and 10 arguments: soft targets, optional broadcast weight, reduction, upstream gradient, any
  float dtype). No vendor publishes them.
* ``drivingsdk`` — Ascend DrivingSDK's (mx_driving) ``aclnnSigmoidFocalLoss`` /
  ``aclnnSigmoidFocalLossGrad``: ``(logit, target INT32 one-hot, weight full shape, gamma, alpha,
  out)``, float32, no reduction, no upstream gradient. The adapter expresses what it can on top
  (reductions summed on the host, the upstream gradient applied by the adapter, binary targets
  as one-hot INT32, the weight materialised in full) and nothing more.

The ABI is told by symbol names alone: ours where present; DrivingSDK's only when its pair is
there and the library does not also export ``aclnnSigmoidFocalLossBackward`` (the name xloss's
own forward operator was paired with before it was renamed: such a library's
``aclnnSigmoidFocalLoss`` has xloss's old 9-argument layout, so neither is used).
"""

from __future__ import annotations

from ...backend import KernelCaps

XLOSS_FOCAL_FORWARD = "aclnnXlossSigmoidFocalLoss"
XLOSS_FOCAL_BACKWARD = "aclnnXlossSigmoidFocalLossBackward"
DS_FOCAL_FORWARD = "aclnnSigmoidFocalLoss"
DS_FOCAL_GRAD = "aclnnSigmoidFocalLossGrad"
LEGACY_FOCAL_BACKWARD = "aclnnSigmoidFocalLossBackward"  # xloss < issue 13: forward had DrivingSDK's name
BCE_BACKWARD = "aclnnBinaryCrossEntropyBackward"
NLL_BACKWARD = "aclnnNLLLossBackward"
FLCE_GRAD = "aclnnFusedLinearCrossEntropyLossGrad"

OPERATORS = (XLOSS_FOCAL_FORWARD, XLOSS_FOCAL_BACKWARD, DS_FOCAL_FORWARD, DS_FOCAL_GRAD, BCE_BACKWARD,
             NLL_BACKWARD, FLCE_GRAD)

FLOATS = ("float32", "float16", "bfloat16")
HALVES = ("float16", "bfloat16")

#: focal ABI -> (forward operator, gradient operator)
FOCAL_ABIS = {"xloss": (XLOSS_FOCAL_FORWARD, XLOSS_FOCAL_BACKWARD), "drivingsdk": (DS_FOCAL_FORWARD, DS_FOCAL_GRAD)}


def focal_abi(has) -> str | None:
    """``"xloss"``, ``"drivingsdk"`` or None, from ``has(operator)`` (both functions exported)."""
    if has(XLOSS_FOCAL_FORWARD) or has(XLOSS_FOCAL_BACKWARD):
        return "xloss"
    if (has(DS_FOCAL_FORWARD) or has(DS_FOCAL_GRAD)) and not has(LEGACY_FOCAL_BACKWARD):
        return "drivingsdk"
    return None


def declare(has) -> tuple[dict, str | None]:
    """The capabilities a library with these operators gets, and its focal ABI."""
    caps = {}
    abi = focal_abi(has)
    if abi is not None:
        fwd, bwd = FOCAL_ABIS[abi]
        modes = [m for m, ops in (("forward", (fwd,)), ("grad", (bwd,)), ("forward+grad", (fwd, bwd)))
                 if all(has(op) for op in ops)]
        if abi == "xloss":
            caps["focal_loss"] = KernelCaps.declare("focal_loss", dtypes=FLOATS, mode=modes,
                                                    notes="forward+grad runs both operators in one device session")
        else:
            # the INT32 one-hot target cannot carry a soft y: declared binary only, so a soft request is
            # refused before the call (naming y) and xloss check draws y from {0, 1}
            caps["focal_loss"] = KernelCaps.declare(
                "focal_loss", dtypes=("float32",), mode=modes, targets=("binary",),
                notes="DrivingSDK's aclnnSigmoidFocalLoss/Grad ABI: binary targets only (passed as INT32 one-hot; "
                      "soft targets are refused), weight materialised in full, reductions and the upstream "
                      "gradient applied by the adapter")
    if has(BCE_BACKWARD):
        caps["bce_grad"] = KernelCaps.declare(
            "bce_grad", dtypes=FLOATS, eps_mode="clamp", fixed={"eps": 1e-12},
            notes="aclnnBinaryCrossEntropyBackward hard-wires max(x(1-x), 1e-12)")
    if has(NLL_BACKWARD):
        caps["nll_loss_grad"] = KernelCaps.declare("nll_loss_grad", dtypes=FLOATS)
    if has(FLCE_GRAD):
        caps["fused_linear_cross_entropy_grad"] = KernelCaps.declare(
            "fused_linear_cross_entropy_grad", dtypes=HALVES, label_smoothing=False,
            notes="aclnnFusedLinearCrossEntropyLossGrad takes float16 or bfloat16 input and weight only "
                  "(no float32 path) and label_smoothing=0 only")
    return caps, abi
