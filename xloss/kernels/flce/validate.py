"""Argument checking for the FLCE family's kernels (see :mod:`xloss.validation`): the caller's
arguments to :class:`~.args.FLCEArgs`, :class:`~.args.OnlineMaxSumArgs` and
:class:`~.args.LossWithMaxSumArgs`."""

from __future__ import annotations

import numpy as np

from xloss.containers import to_numpy
from xloss.dtypes import compute_dtype, float_name
from xloss.errors import XLossTypeError, XLossValueError
from xloss.memory import one_call
from xloss.validation import contiguous, float_array, integer, operand, output, real_number, shape_text

from .args import FLCEArgs, LossWithMaxSumArgs, OnlineMaxSumArgs


@one_call
def flce_args(grad, input, weight, target_mask, masked_target, *, logits_max, sum_exp_logits, softmax,
              label_smoothing, vocab_size, input_grad_out=None, weight_grad_out=None) -> FLCEArgs:
    inp, w = _linear_operands(input, weight)
    bt, hidden = inp.shape
    v = w.shape[0]
    cdt = compute_dtype(float_name(inp.dtype))
    g = operand(grad, "grad", cdt, (bt,))

    m = to_numpy(target_mask, "target_mask")
    if m.dtype == np.bool_:
        fmt = "bool"
        if m.shape != (bt,):
            raise XLossValueError(f"target_mask (bool) must have shape ({bt},), one per token; "
                                  f"got {shape_text(m.shape)}")
    elif m.dtype == np.uint8:
        fmt = "bitpacked"
        if m.shape != ((bt + 7) // 8,):
            raise XLossValueError(f"target_mask (uint8, bit-packed LSB first) must have shape ({(bt + 7) // 8},) "
                                  f"for BT={bt}; got {shape_text(m.shape)}")
    else:
        raise XLossTypeError("target_mask must be bool (one per token) or uint8 (bit-packed, LSB first); "
                             f"got {m.dtype}")
    m = contiguous(m, "target_mask")

    mt = to_numpy(masked_target, "masked_target")
    if mt.dtype.name not in ("int32", "int64"):
        raise XLossTypeError(f"masked_target must have dtype int32 or int64; got {mt.dtype}")
    if mt.shape != (bt,):
        raise XLossValueError(f"masked_target must have shape ({bt},); got {shape_text(mt.shape)}")
    mt = contiguous(mt, "masked_target")
    if mt.size and (mt.min() < 0 or mt.max() >= v):
        row = int(np.argmax((mt < 0) | (mt >= v)))
        raise XLossValueError(f"masked_target[{row}] = {int(mt[row])} is out of range: local targets must lie in "
                              f"[0, {v}) (use 0 where target_mask is set)")

    if softmax is not None:
        if logits_max is not None or sum_exp_logits is not None:
            raise XLossValueError("pass either softmax (softmax mode) or logits_max and sum_exp_logits "
                                  "(recompute mode), not both")
        mode, lm, se = "softmax", None, None
        sm = operand(softmax, "softmax", cdt, (bt, v))
    else:
        if logits_max is None or sum_exp_logits is None:
            missing = "logits_max" if logits_max is None else "sum_exp_logits"
            raise XLossValueError(f"{missing} is required in recompute mode (no softmax given): pass softmax, "
                                  "or both logits_max and sum_exp_logits")
        mode, sm = "recompute", None
        lm = operand(logits_max, "logits_max", cdt, (bt,))
        se = operand(sum_exp_logits, "sum_exp_logits", cdt, (bt,))

    ls = real_number(label_smoothing, "label_smoothing")
    if not 0.0 <= ls < 1.0:
        raise XLossValueError(f"label_smoothing must be in [0, 1); got {ls}")
    k = v if vocab_size is None else integer(vocab_size, "vocab_size")
    if k < v or (ls and k < 1):
        raise XLossValueError("vocab_size (the global vocabulary size) must be >= this shard's "
                              f"V={v} and >= 1; got {k}")

    dt = inp.dtype
    inputs = {"input": inp, "weight": w, "grad": g, "target_mask": m, "masked_target": mt, "softmax": sm,
              "logits_max": lm, "sum_exp_logits": se}
    gi = output(input_grad_out, "input_grad_out", (bt, hidden), dt, inputs)
    gw = output(weight_grad_out, "weight_grad_out", (v, hidden), dt, {**inputs, "input_grad_out": gi})
    return FLCEArgs(grad=g, input=inp, weight=w, target_mask=m, mask_format=fmt, masked_target=mt, mode=mode,
                    logits_max=lm, sum_exp_logits=se, softmax=sm, label_smoothing=ls, vocab_size=k,
                    input_grad_out=gi, weight_grad_out=gw,
                    outputs_given=input_grad_out is not None or weight_grad_out is not None)


def _linear_operands(input, weight):
    """``input`` (BT, H) and ``weight`` (V, H) of one float dtype, C-contiguous."""
    inp = contiguous(float_array(input, "input"), "input")
    if inp.ndim != 2:
        raise XLossValueError(f"input must have shape (BT, H); got {shape_text(inp.shape)}")
    w = contiguous(float_array(weight, "weight"), "weight")
    if w.ndim != 2 or w.shape[1] != inp.shape[1]:
        raise XLossValueError(f"weight must have shape (V, {inp.shape[1]}) to match input (BT, H)="
                              f"{shape_text(inp.shape)}; got {shape_text(w.shape)}")
    if w.dtype != inp.dtype:
        raise XLossTypeError(f"weight dtype {float_name(w.dtype)} must match input dtype {float_name(inp.dtype)}")
    return inp, w


MASK_FORMATS = ("bitpacked", "bool")


@one_call
def online_max_sum_args(input, weight, target, vocab_start, vocab_end=None, *, return_logits=False,
                        mask_format="bitpacked") -> OnlineMaxSumArgs:
    inp, w = _linear_operands(input, weight)
    (bt, _), v = inp.shape, w.shape[0]
    if v < 1:
        raise XLossValueError("weight must hold at least one vocabulary row (V >= 1); got V=0")
    t = to_numpy(target, "target")
    if t.dtype.name not in ("int32", "int64"):
        raise XLossTypeError(f"target must have dtype int32 or int64; got {t.dtype}")
    if t.shape != (bt,):
        raise XLossValueError(f"target must have shape ({bt},), one per token; got {shape_text(t.shape)}")
    t = contiguous(t, "target")
    start = integer(vocab_start, "vocab_start")
    end = start + v if vocab_end is None else integer(vocab_end, "vocab_end")
    if start < 0 or not start <= end <= start + v:
        raise XLossValueError(f"the shard's rows [vocab_start, vocab_end) must satisfy 0 <= vocab_start <= vocab_end "
                              f"<= vocab_start + V (V={v}); got vocab_start={start}, vocab_end={end}")
    if t.dtype == np.int32 and end > np.iinfo(np.int32).max:
        raise XLossValueError(f"vocab_end={end} does not fit target's dtype int32")
    if mask_format not in MASK_FORMATS:
        raise XLossValueError(f"mask_format must be one of {', '.join(map(repr, MASK_FORMATS))}; got {mask_format!r}")
    if not isinstance(return_logits, (bool, np.bool_)):
        raise XLossTypeError(f"return_logits must be a bool; got {return_logits!r}")
    cdt = compute_dtype(float_name(inp.dtype))
    inputs = {"input": inp, "weight": w, "target": t}
    stats = [output(None, name, (bt,), cdt, inputs) for name in ("logits_max", "sum_exp_logits", "predicted_logits")]
    mask = (output(None, "target_mask", ((bt + 7) // 8,), np.uint8, inputs) if mask_format == "bitpacked"
            else output(None, "target_mask", (bt,), np.bool_, inputs))
    masked = output(None, "masked_target", (bt,), t.dtype, inputs)
    logits = output(None, "vocab_parallel_logits", (bt, v), inp.dtype, inputs) if return_logits else None
    return OnlineMaxSumArgs(input=inp, weight=w, target=t, vocab_start=start, vocab_end=end, mask_format=mask_format,
                            logits_max_out=stats[0], sum_exp_out=stats[1], predicted_out=stats[2],
                            target_mask_out=mask, masked_target_out=masked, logits_out=logits)


@one_call
def loss_with_max_sum_args(logits_max, sum_exp_logits, predicted_logits, *, vocab_parallel_logits=None,
                           label_smoothing=0.0) -> LossWithMaxSumArgs:
    ls = real_number(label_smoothing, "label_smoothing")
    if ls != 0.0:
        raise XLossValueError(f"label_smoothing must be 0 (the vocabulary-parallel loss has no smoothing term; "
                              f"CANN's operator accepts only 0); got {ls}")
    if vocab_parallel_logits is not None:
        logits = contiguous(float_array(vocab_parallel_logits, "vocab_parallel_logits"), "vocab_parallel_logits")
        if logits.ndim != 2:
            raise XLossValueError(f"vocab_parallel_logits must have shape (BT, V); got {shape_text(logits.shape)}")
        dtype = float_name(logits.dtype)
        cdt = compute_dtype(dtype)
    else:
        logits = None
        first = float_array(logits_max, "logits_max")
        cdt = compute_dtype(float_name(first.dtype))
        dtype = float_name(cdt)
    lm = operand(logits_max, "logits_max", cdt)
    if lm.ndim != 1:
        raise XLossValueError(f"logits_max must have shape (BT,); got {shape_text(lm.shape)}")
    bt = lm.shape[0]
    if logits is not None and logits.shape[0] != bt:
        raise XLossValueError(f"vocab_parallel_logits must have shape ({bt}, V) to match logits_max ({bt},); "
                              f"got {shape_text(logits.shape)}")
    se = operand(sum_exp_logits, "sum_exp_logits", cdt, (bt,))
    pl = operand(predicted_logits, "predicted_logits", cdt, (bt,))
    inputs = {"logits_max": lm, "sum_exp_logits": se, "predicted_logits": pl, "vocab_parallel_logits": logits}
    loss = output(None, "loss", (bt,), cdt, inputs)
    softmax = None if logits is None else output(None, "softmax", logits.shape, cdt, inputs)
    return LossWithMaxSumArgs(logits_max=lm, sum_exp_logits=se, predicted_logits=pl, vocab_parallel_logits=logits,
                              dtype=dtype, label_smoothing=ls, loss_out=loss, softmax_out=softmax)
