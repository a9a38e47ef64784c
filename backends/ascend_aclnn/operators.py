"""The aclnn operators the adapter drives, which focal-loss ABI a library exports, and what the
backend declares from the symbols it finds: one :class:`Declaration` per kernel (:data:`TABLE`, and
:data:`FOCAL` per focal ABI), each declared when the library exports its operators.

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

from ...declaration import Declaration

XLOSS_FOCAL_FORWARD = "aclnnXlossSigmoidFocalLoss"
XLOSS_FOCAL_BACKWARD = "aclnnXlossSigmoidFocalLossBackward"
DS_FOCAL_FORWARD = "aclnnSigmoidFocalLoss"
DS_FOCAL_GRAD = "aclnnSigmoidFocalLossGrad"
LEGACY_FOCAL_BACKWARD = "aclnnSigmoidFocalLossBackward"  # xloss < issue 13: forward had DrivingSDK's name
BCE_BACKWARD = "aclnnBinaryCrossEntropyBackward"
NLL_BACKWARD = "aclnnNLLLossBackward"
FLCE_GRAD = "aclnnFusedLinearCrossEntropyLossGrad"
ONLINE_MAX_SUM = "aclnnFusedLinearOnlineMaxSum"
LOSS_WITH_MAX_SUM = "aclnnFusedCrossEntropyLossWithMaxSum"

# NLL and BCE forward (issue #30)
NLL_FORWARD = "aclnnNLLLoss"
NLL_FORWARD_2D = "aclnnNLLLoss2d"
BCE_FORWARD = "aclnnBinaryCrossEntropy"

OPERATORS = (XLOSS_FOCAL_FORWARD, XLOSS_FOCAL_BACKWARD, DS_FOCAL_FORWARD, DS_FOCAL_GRAD, BCE_BACKWARD,
             NLL_BACKWARD, FLCE_GRAD, ONLINE_MAX_SUM, LOSS_WITH_MAX_SUM,
             NLL_FORWARD, NLL_FORWARD_2D, BCE_FORWARD)
# -- cross entropy (xloss/kernels/cross_entropy)
CROSS_ENTROPY = "aclnnCrossEntropyLoss"
CROSS_ENTROPY_GRAD = "aclnnCrossEntropyLossGrad"
OPERATORS += (CROSS_ENTROPY, CROSS_ENTROPY_GRAD)

FLOATS = ("float32", "float16", "bfloat16")
HALVES = ("float16", "bfloat16")

#: focal ABI -> (forward operator, gradient operator)
FOCAL_ABIS = {"xloss": (XLOSS_FOCAL_FORWARD, XLOSS_FOCAL_BACKWARD), "drivingsdk": (DS_FOCAL_FORWARD, DS_FOCAL_GRAD)}


def _focal_modes(abi: str) -> dict:
    fwd, bwd = FOCAL_ABIS[abi]
    return {"forward": (fwd,), "grad": (bwd,), "forward+grad": (fwd, bwd)}


#: focal ABI -> its declaration
FOCAL = {
    "xloss": Declaration("focal_loss", FLOATS, modes=_focal_modes("xloss"),
                         notes="forward+grad runs both operators in one device session"),
    # the INT32 one-hot target cannot carry a soft y: declared binary only, so a soft request is
    # refused before the call (naming y) and xloss check draws y from {0, 1}. DrivingSDK's kernel
    # (kernels/sigmoid_focal_loss/op_kernel/arch35) computes 1 - p, log p and log(1 - p) naively in
    # float32: about e^|x| ulps are lost, beyond xloss's tolerance for |x| > 4 (measured with xloss
    # check on the emulator, which reproduces that kernel), and inf/NaN beyond +16.6 / -88.7. A
    # library reproducing it passes within that range; xloss check reports the outside apart.
    "drivingsdk": Declaration(
        "focal_loss", ("float32",), modes=_focal_modes("drivingsdk"), variants={"targets": ("binary",)},
        notes="DrivingSDK's aclnnSigmoidFocalLoss/Grad ABI: binary targets only (passed as INT32 one-hot; "
              "soft targets are refused), weight materialised in full, reductions and the upstream "
              "gradient applied by the adapter",
        vendor_range={"x": (-4.0, 4.0)}),
}

#: the other kernels, one row each
TABLE = (
    Declaration("bce_grad", FLOATS, (BCE_BACKWARD,), variants={"eps_mode": "clamp"}, fixed={"eps": 1e-12},
                notes="aclnnBinaryCrossEntropyBackward hard-wires max(x(1-x), 1e-12)"),
    Declaration("nll_loss_grad", FLOATS, (NLL_BACKWARD,)),
    Declaration("fused_linear_cross_entropy_grad", HALVES, (FLCE_GRAD,), variants={"label_smoothing": False},
                notes="aclnnFusedLinearCrossEntropyLossGrad takes float16 or bfloat16 input and weight only "
                      "(no float32 path) and label_smoothing=0 only"),
    # CANN writes targetMaskOut bit-packed (UINT8, LSB first): no byte-per-token mask
    # ops-nn aclnnFusedLinearOnlineMaxSum.md: input.size(1) <= 65534
    Declaration("fused_linear_online_max_sum", HALVES, (ONLINE_MAX_SUM,), variants={"mask": "bitpacked"},
                limits={"hidden": 65534},
                notes="aclnnFusedLinearOnlineMaxSum takes float16 or bfloat16 input and weight only (FLOAT "
                      "statistics) and writes the target mask bit-packed only"),
    # the statistics are FLOAT; the request's dtype is the logits' (any of the three) or float32
    Declaration("fused_cross_entropy_loss_with_max_sum", FLOATS, (LOSS_WITH_MAX_SUM,),
                notes="aclnnFusedCrossEntropyLossWithMaxSum: float32 statistics and softmax; logits float32, "
                      "float16 or bfloat16"),
    # NLL and BCE forward (issue #30)
    Declaration("nll_loss", FLOATS, (NLL_FORWARD, NLL_FORWARD_2D),
                notes="aclnnNLLLoss for (C) and (N, C) input; aclnnNLLLoss2d for (N, C, d1, ..., dk) as "
                      "(N, C, d1, d2 * ... * dk)"),
    Declaration("binary_cross_entropy", FLOATS, (BCE_FORWARD,),
                notes="aclnnBinaryCrossEntropy: a broadcast weight is materialised to self's shape"),
)
# -- cross entropy (xloss/kernels/cross_entropy): CANN computes no z-loss yet (its pages: lseSquareScaleForZloss
# and returnZloss take no effect), and its grad takes INT64 targets only
TABLE += (
    Declaration("cross_entropy_loss", FLOATS, (CROSS_ENTROPY,), variants={"zloss": False},
                notes="aclnnCrossEntropyLoss: FLOAT class weights, float32 arithmetic, no z-loss"),
    Declaration("cross_entropy_loss_grad", FLOATS, (CROSS_ENTROPY_GRAD,),
                variants={"zloss": False, "target_dtype": "int64"},
                notes="aclnnCrossEntropyLossGrad: INT64 targets, FLOAT class weights, the upstream gradient in "
                      "the dtype, no z-loss"),
)


def focal_abi(has) -> str | None:
    """``"xloss"``, ``"drivingsdk"`` or None, from ``has(operator)`` (both functions exported)."""
    if has(XLOSS_FOCAL_FORWARD) or has(XLOSS_FOCAL_BACKWARD):
        return "xloss"
    if (has(DS_FOCAL_FORWARD) or has(DS_FOCAL_GRAD)) and not has(LEGACY_FOCAL_BACKWARD):
        return "drivingsdk"
    return None


def declare(has) -> tuple[dict, str | None]:
    """The capabilities a library with these operators gets, and its focal ABI."""
    abi = focal_abi(has)
    rows = ((FOCAL[abi],) if abi is not None else ()) + TABLE

    def exported(_dtype, *ops):  # an operator takes every dtype its row lists
        return all(has(op) for op in ops)

    caps = {}
    for row in rows:
        c = row.caps(exported)
        if c is not None:
            caps[row.kernel] = c
    return caps, abi


# -- binary cross entropy with logits (issue #30) -----------------------------------------------------
BCE_WITH_LOGITS = "aclnnBinaryCrossEntropyWithLogits"
BCE_WITH_LOGITS_BACKWARD = "aclnnBinaryCrossEntropyWithLogitsBackward"
OPERATORS += (BCE_WITH_LOGITS, BCE_WITH_LOGITS_BACKWARD)
# ops-nn loss/sigmoid_cross_entropy_with_logits_v2 and ..._grad_v2 (op_api): FLOAT, FLOAT16, BF16 (Atlas A2/A3)
TABLE += (Declaration("bce_with_logits", FLOATS,
                      modes={"forward": (BCE_WITH_LOGITS,), "grad": (BCE_WITH_LOGITS_BACKWARD,),
                             "forward+grad": (BCE_WITH_LOGITS, BCE_WITH_LOGITS_BACKWARD)},
                      notes="forward+grad runs both operators in one device session"),)

# -- dense-label cross entropy (xloss/kernels/cross_entropy, the softmax_ce row) ------------------------------
SOFTMAX_CE = "aclnnSoftmaxCrossEntropyWithLogits"
OPERATORS += (SOFTMAX_CE,)
# ops-nn activation/softmax_cross_entropy_with_logits: FLOAT, FLOAT16, BF16 on Atlas A2/A3 and Ascend 950 (the op_api's
# list; Atlas training/inference products FLOAT and FLOAT16 only). ops-nn's own kernel is arch35 (Ascend 950) only;
# the page lists A2/A3, Atlas training and inference products too: the emulator takes the A2/A3 dtypes.
TABLE += (Declaration("softmax_cross_entropy_with_logits", FLOATS, (SOFTMAX_CE,),
                      notes="aclnnSoftmaxCrossEntropyWithLogits: labels of features' shape and dtype, float32 "
                            "arithmetic"),)
