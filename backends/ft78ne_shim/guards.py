"""Checked mode of the FT78NE/MT7004 adapter: every buffer a library receives sits between
poisoned guard regions, and every input is compared with its copy after the call.

Shared memory (``_s``): each array the adapter would pass is copied into a guarded host scratch
allocation (``GUARD`` poisoned bytes each side) and the inner pointer is passed. Private memory
(``_p``): each arena allocation carries ``GUARD`` bytes each side (the tile planner counts them),
and before every call the bytes between the call's extent and the end of the back guard are
poisoned too, so a write past the call's own extent inside a larger tile buffer is seen as well.

After the call: a changed guard byte raises :class:`~xloss.errors.OutOfBoundsWrite`, a changed input
byte :class:`~xloss.errors.InputModified`, naming the function, the ABI argument, the byte offset
relative to the buffer's start (negative: before it) and the number of bytes changed. Shared
results are copied back to the adapter's arrays only after every check passed; private results
are copied out by the adapter after the call, so a violation leaves every caller output untouched.

The extents are the ABI's (README, "Choices the manual leaves open"), from the call's own size
and reduction arguments, with the backend's reduction code table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import abi_log
from ...errors import InputModified, OutOfBoundsWrite

GUARD = 64  # private blocks: bytes each side (a multiple of the arena granule: inner pointers stay aligned)
HOST_FRONT = 4096  # shared scratch: a page before the buffer, and after it at least a page or the
#                    buffer's own size, so an overrun of a whole row lands in the guard, not the heap
_PATTERN = ((np.arange(GUARD * 64) * 151 + 0xA7) % 251 + 3).astype(np.uint8)  # varied, never 0x00/0xff runs

#: ABI argument names, in order, per operator (the ``_s`` form; ``_p`` drops the last one, FLCE's
#: ``_p`` has ``accumulate`` there)
ARGS = {
    "binarycrossentropygrad": ("input_size", "reduction", "input_x", "input_y", "weight", "dloss", "dx",
                               "weight_defined", "core_mask"),
    "sigmoidfocalloss": ("input_size", "reduction", "alpha", "gamma", "input_x", "input_y", "loss", "core_mask"),
    "sigmoidfocallossgrad": ("input_size", "reduction", "alpha", "gamma", "input_x", "input_y", "dloss", "dx",
                             "core_mask"),
    "nlllossgrad": ("logits", "loss_grad", "labels", "weight", "total_weight", "logits_grad", "batch", "class_num",
                    "reduction_type", "core_mask"),
    "fusedlinearcrossentropylossgrad": ("bt", "hidden", "vocab", "grad", "input", "weight", "target_mask",
                                        "masked_target", "logits_max", "sum_exp_logits", "softmax", "input_grad",
                                        "weight_grad", "softmax_defined", "core_mask"),
    "fusedlinearonlinemaxsum": ("bt", "hidden", "vocab", "input", "weight", "target", "vocab_start_index",
                                "vocab_end_index", "logits_max_local", "sum_exp_logits_local",
                                "predicted_logits_local", "target_mask", "masked_target", "vocab_parallel_logits",
                                "logits_defined", "core_mask"),
    "fusedcrossentropylosswithmaxsum": ("bt", "vocab", "logits_max", "sum_exp_logits", "predicted_logits",
                                        "vocab_parallel_logits", "loss", "softmax", "softmax_defined", "core_mask"),
    # the forward pages (issue #30)
    "nllloss": ("log_probs", "labels", "weight", "loss", "total_weight", "batch_size", "class_num", "reduction_type",
                "core_mask"),
    "binarycrossentropy": ("input_size", "reduction", "input_x", "input_y", "weight", "loss", "tmp_loss",
                           "weight_defined", "core_mask"),
}
OUTPUTS = frozenset({"dx", "loss", "logits_grad", "input_grad", "weight_grad"})
#: operators whose outputs are not (only) those of OUTPUTS: a name can be an input of one and an
#: output of another (vocab_parallel_logits, softmax)
OP_OUTPUTS = {
    "fusedlinearonlinemaxsum": frozenset({"logits_max_local", "sum_exp_logits_local", "predicted_logits_local",
                                          "target_mask", "masked_target", "vocab_parallel_logits"}),
    "fusedcrossentropylosswithmaxsum": frozenset({"loss", "softmax"}),
    "nllloss": frozenset({"loss", "total_weight"}),
    "binarycrossentropy": frozenset({"loss", "tmp_loss"}),
}


def outputs(op: str) -> frozenset:
    """The ABI arguments ``op`` writes."""
    return OP_OUTPUTS.get(op, OUTPUTS)


def poison(view: np.ndarray) -> None:
    """Fill a uint8 view with the guard pattern."""
    n = view.size
    reps = -(-n // _PATTERN.size)
    view[...] = np.tile(_PATTERN, reps)[:n] if reps > 1 else _PATTERN[:n]


def _changed(view: np.ndarray):
    """(first changed index, count) of a guard view against the pattern, or None."""
    ref = np.empty_like(view)
    poison(ref)
    bad = np.flatnonzero(view != ref)
    return (int(bad[0]), int(bad.size)) if bad.size else None


def extents(op: str, es: int, v: dict, codes: dict) -> dict:
    """name -> bytes the call may access, for the pointer arguments of one call (``v``: argument
    name -> value). ``es``: the element size of the dtype; ``codes``: reduction name -> code."""
    def upstream(n, red):
        return 0 if n == 0 else (n * es if red == codes["none"] else es)

    if op in ("softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits"):
        return _softmax_ce_extents(op, es, v)
    if op in ("sigmoidcrossentropywithlogits", "sigmoidcrossentropywithlogitsgrad"):  # every buffer: length elements
        return {name: max(v["length"], 0) * es for name in ARGS[op][:3]}

    if op in ("binarycrossentropygrad", "sigmoidfocalloss", "sigmoidfocallossgrad"):
        n, red = max(v["input_size"], 0), v["reduction"]
        out = {"input_x": n * es, "input_y": n * es}
        if op == "binarycrossentropygrad":
            out.update(weight=n * es if v["weight_defined"] else 0, dloss=upstream(n, red), dx=n * es)
        elif op == "sigmoidfocalloss":
            out["loss"] = n * es if red == codes["none"] else es
        else:
            out.update(dloss=upstream(n, red), dx=n * es)
        return out
    if op == "nlllossgrad":  # the page's codes contradict each other: the adapter hands full-size inputs
        b, k = max(v["batch"], 0), max(v["class_num"], 0)
        return {"logits": b * k * es, "loss_grad": b * es, "labels": b * 4, "weight": k * es if b else 0,
                "total_weight": es if b else 0, "logits_grad": b * k * es}
    if op == "nllloss":
        b, k = max(v["batch_size"], 0), max(v["class_num"], 0)
        os = 4 if es == 1 else es  # the int8 form writes int32_t loss and total_weight
        return {"log_probs": b * k * es, "labels": b * 4, "weight": k * es if b else 0,
                "loss": b * os if v["reduction_type"] == codes["none"] else os, "total_weight": os}
    if op == "binarycrossentropy":
        n = max(v["input_size"], 0)
        return {"input_x": n * es, "input_y": n * es, "weight": n * es if v["weight_defined"] else 0,
                "loss": n * es if v["reduction"] == codes["none"] else es, "tmp_loss": n * es}
    if op == "fusedlinearonlinemaxsum":  # es: input, weight and logits only (the rest is float / int / byte)
        bt, h, vocab = (max(v[k], 0) for k in ("bt", "hidden", "vocab"))
        return {"input": bt * h * es, "weight": vocab * h * es, "target": bt * 4, "logits_max_local": bt * 4,
                "sum_exp_logits_local": bt * 4, "predicted_logits_local": bt * 4, "target_mask": bt,
                "masked_target": bt * 4, "vocab_parallel_logits": bt * vocab * es if v["logits_defined"] else 0}
    if op == "fusedcrossentropylosswithmaxsum":
        bt, vocab, sm = max(v["bt"], 0), max(v["vocab"], 0), v["softmax_defined"]
        return {"logits_max": bt * 4, "sum_exp_logits": bt * 4, "predicted_logits": bt * 4,
                "vocab_parallel_logits": bt * vocab * es if sm else 0, "loss": bt * 4,
                "softmax": bt * vocab * 4 if sm else 0}
    (bt, h, vocab), sm = (max(v[k], 0) for k in ("bt", "hidden", "vocab")), v["softmax_defined"]
    return {"grad": bt * 4, "input": bt * h * es, "weight": vocab * h * es, "target_mask": bt,
            "masked_target": bt * 4, "logits_max": 0 if sm else bt * 4, "sum_exp_logits": 0 if sm else bt * 4,
            "softmax": bt * vocab * 4 if sm else 0, "input_grad": bt * h * es, "weight_grad": vocab * h * es}


_ELEMENT = {"half": np.float16, "float": np.float32, "int": np.int32, "unsigned char": np.uint8}
_INT_ARGS = frozenset({"labels", "target", "masked_target"})


def describe_call(fname, names, args, ext, codes, written, regions, ffi) -> str:
    """``fp_nlllossgrad_s(logits=float[12], ..., reduction_type=1 (sum), core_mask=0x07)``: every scalar,
    each buffer's element count (and the values of an input of at most 4 elements)."""
    by_code = {v: k for k, v in codes.items()}
    bodies = {r.name: r.raw[r.front:r.front + r.extent] for r in regions}
    parts = []
    for name, a in zip(names, args):
        if isinstance(a, HostArg) or isinstance(a, ffi.CData):
            if not isinstance(a, HostArg) and a == ffi.NULL:
                parts.append(f"{name}=NULL")
                continue
            if isinstance(a, HostArg):
                ctype, dt = a.ctype, a.arr.dtype
            else:  # a private-memory block: its type is the call's
                ctype = "int" if name in _INT_ARGS else "unsigned char" if name == "target_mask" else \
                    ("half" if fname.startswith("hp") else "float")
                dt = np.dtype(_ELEMENT[ctype])
            n = ext.get(name, 0) // dt.itemsize
            text = f"{name}={ctype}[{n}]" + (" (private)" if not isinstance(a, HostArg) else "")
            body = bodies.get(name)
            if name not in written and 0 < n <= 4 and body is not None and body.size >= n * dt.itemsize:
                values = body[:n * dt.itemsize].view(dt)
                text += " {" + ", ".join(repr(v.item()) for v in values) + "}"
            parts.append(text)
        elif name in ("reduction", "reduction_type"):
            parts.append(f"{name}={a} ({by_code.get(a, 'no such code')})")
        elif name == "core_mask":
            parts.append(f"{name}={a:#04x}")
        else:
            parts.append(f"{name}={a!r}")
    return f"{fname}({', '.join(parts)})"


@dataclass
class HostArg:
    """An array the adapter passes to a shared-memory call (checked mode stages it)."""

    arr: np.ndarray
    ctype: str


@dataclass
class _Region:
    """A buffer as the library sees it: ``raw`` spans front guard + body + back guard."""

    name: str
    raw: np.ndarray  # uint8 view
    extent: int  # bytes the call may access (the body's first ``extent`` bytes)
    is_input: bool
    front: int = GUARD  # bytes of front guard
    snapshot: np.ndarray | None = None

    def arm(self):
        poison(self.raw[:self.front])
        poison(self.raw[self.front + self.extent:])
        if self.is_input:
            self.snapshot = self.raw[self.front:self.front + self.extent].copy()

    def verify_guards(self, backend_name: str, fname: str):
        front = _changed(self.raw[:self.front])
        back = _changed(self.raw[self.front + self.extent:])
        if front or back:
            offset = front[0] - self.front if front else self.extent + back[0]
            count = (front[1] if front else 0) + (back[1] if back else 0)
            raise OutOfBoundsWrite(
                f"backend {backend_name!r}: {fname} wrote {count} byte(s) outside `{self.name}` (first at byte offset "
                f"{offset} from its start; it is {self.extent} bytes long)", buffer=self.name, offset=offset,
                nbytes=count)

    def verify_input(self, backend_name: str, fname: str):
        if self.is_input and self.extent:
            diff = np.flatnonzero(self.raw[self.front:self.front + self.extent] != self.snapshot)
            if diff.size:
                raise InputModified(
                    f"backend {backend_name!r}: {fname} wrote into input `{self.name}`: {diff.size} byte(s) changed, "
                    f"first at byte offset {int(diff[0])}", buffer=self.name, offset=int(diff[0]),
                    nbytes=int(diff.size))


def checked_call(backend, fname: str, fn, args, ffi, es: int, codes: dict, private: dict | None) -> None:
    """Call ``fn(*args)`` with every pointer argument guarded; raise on a violation.

    Shared memory: ``HostArg`` arguments are staged into guarded scratch and copied back (outputs)
    after the checks. Private memory (``private``: inner address -> guarded view): the blocks
    are re-armed at this call's extents."""
    op = fname[3:-2]
    names, written = ARGS[op], outputs(op)
    values = {n: a for n, a in zip(names, args) if not isinstance(a, HostArg) and not isinstance(a, ffi.CData)}
    ext = extents(op, es, values, codes)
    regions, call_args, copy_back = [], list(args), []
    for i, (name, a) in enumerate(zip(names, args)):
        if isinstance(a, HostArg):
            nbytes = ext.get(name, 0)
            size = HOST_FRONT + nbytes + max(HOST_FRONT, -(-nbytes // 64) * 64)
            raw = np.empty(size + 64, np.uint8)
            start = (-raw.ctypes.data) % 64
            raw = raw[start:start + size]
            src = np.ascontiguousarray(a.arr).reshape(-1).view(np.uint8)
            body = raw[HOST_FRONT:HOST_FRONT + nbytes]
            poison(body)
            if name not in written:  # outputs stay poisoned: an element the library never writes shows
                body[:min(nbytes, src.size)] = src[:nbytes]
            regions.append(_Region(name, raw, nbytes, name not in written, HOST_FRONT))
            call_args[i] = ffi.cast(a.ctype + " *", ffi.from_buffer(raw)) + HOST_FRONT // ffi.sizeof(a.ctype)
            if name in written:
                copy_back.append((a.arr, body))
        elif isinstance(a, ffi.CData) and private is not None and a != ffi.NULL:
            addr = int(ffi.cast("uintptr_t", a))
            raw = private.get(addr)
            if raw is not None:
                nbytes = min(ext.get(name, 0), raw.size - 2 * GUARD)
                regions.append(_Region(name, raw, nbytes, name not in written))
    for r in regions:
        r.arm()
    abi_log.record(lambda: describe_call(fname, names, args, ext, codes, written, regions, ffi))
    fn(*call_args)
    for r in regions:  # guards first: an overrun that reached a neighbour is reported where it began
        r.verify_guards(backend.name, fname)
    for r in regions:
        r.verify_input(backend.name, fname)
    backend._raise_for_status(fname)
    for arr, body in copy_back:
        flat = arr.reshape(-1).view(np.uint8)
        flat[...] = body[:flat.size]


# -- binary cross entropy with logits (issue #30): the manual's per-element pages, no reduction --------------
ARGS.update({
    "sigmoidcrossentropywithlogits": ("input0", "input1", "output", "length", "core_mask"),
    "sigmoidcrossentropywithlogitsgrad": ("Input0", "Input1", "output", "length", "core_mask"),
})
OP_OUTPUTS.update({op: frozenset({"output"}) for op in ("sigmoidcrossentropywithlogits",
                                                       "sigmoidcrossentropywithlogitsgrad")})


# -- softmax cross entropy (issue #30): the manual's dense and sparse pages, one row per sample -------------
ARGS.update({
    "softmax_cross_entropy_with_logits": ("logits", "labels", "probs", "grads", "output", "sum_data", "batch_size",
                                          "num_of_classes", "need_grads", "core_mask"),
    "sparse_softmax_cross_entropy_with_logits": ("input", "losses", "sum_data", "inner_size", "outter_size",
                                                 "axis_size", "labels", "is_grad", "output", "batch_size",
                                                 "number_of_classes", "partial_losses", "core_mask"),
})
OP_OUTPUTS.update({
    "softmax_cross_entropy_with_logits": frozenset({"probs", "grads", "output", "sum_data"}),
    "sparse_softmax_cross_entropy_with_logits": frozenset({"losses", "sum_data", "output", "partial_losses"}),
})


def _softmax_ce_extents(op: str, es: int, v: dict) -> dict:
    """The pages' extents: row buffers batch_size elements, matrices batch_size x classes (the gradient's only
    when asked for); the workspaces batch_size elements (include/*softmax_cross_entropy_with_logits.h)."""
    n = max(v["batch_size"], 0)
    if op == "softmax_cross_entropy_with_logits":
        nk = n * max(v["num_of_classes"], 0) * es
        return {"logits": nk, "labels": nk, "probs": nk, "grads": nk if v["need_grads"] else 0, "output": n * es,
                "sum_data": n * es}
    nk = n * max(v["number_of_classes"], 0) * es
    return {"input": nk, "losses": n * es, "sum_data": n * es, "labels": n * 4,
            "output": nk if v["is_grad"] else 0, "partial_losses": n * es}

