"""Cases to and from JSON, exactly, so a failing input can be replayed anywhere.

Arrays are stored as base64 of their raw little-endian bytes (exact and compact even for the
large edge cases) with a readable preview of the first values; Python floats as hex. A case
of the large ladder is stored as its rung label and seed and rebuilt on load.

A case file is data: :func:`load_cases` validates it strictly (known keys, types, dtypes,
sizes that match the bytes) and raises :class:`CaseFileError` with one line on anything else.
It never names code to import or a library to load; see ``xloss check --replay``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import dtypes as xdt
from ..backend import Backend, KernelCaps
from ..errors import XLossError, XLossValueError
from ..kernels import KERNELS
from ..memory import available_bytes
from .descriptor import Case

FORMAT = "xloss-cases/1"
PREVIEW = 8
#: Larger case files are refused (the biggest drawn or edge case is a few MiB; large cases are rebuilt).
MAX_FILE_BYTES = 1 << 27
#: Checking a case holds it, the copy the library gets, its outputs and the float64 oracle: about
#: this many times the case's own bytes (more than any kernel needs).
CASE_MEMORY_FACTOR = 6
MAX_CASES = 10000
#: Disagreeing outputs up to this many elements are saved whole, larger ones as their differences.
OUTPUT_LIMIT = 1 << 20
ARRAY_DTYPES = (*xdt.FLOAT_DTYPES, "int64", "int32", "uint8", "bool")
#: The keys of a saved case's metadata and their types (a case's own arguments: its kernel row's parameters()).
META_KEYS = {"backend": str, "library": (str, type(None)), "options": dict, "status": str, "message": str,
             "outputs": (dict, type(None)), "kernel_info": dict}


class CaseFileError(XLossValueError):
    """A case file that is not a valid xloss case file."""


def _dtype(name: str) -> np.dtype:
    return xdt.FLOAT_DTYPES.get(name) or np.dtype(name)


def encode_array(value: np.ndarray) -> dict:
    name = xdt.float_name(value.dtype) or value.dtype.name
    raw = np.ascontiguousarray(value).tobytes()  # native order: little-endian on every supported host
    preview = [float(v) if name in xdt.FLOAT_DTYPES else v.item() for v in value.reshape(-1)[:PREVIEW]]
    return {"array": base64.b64encode(raw).decode("ascii"), "dtype": name, "shape": list(value.shape),
            "preview": preview}


def _encode(value):
    if isinstance(value, np.ndarray):
        return encode_array(value)
    if isinstance(value, float):
        return {"float": value.hex()}
    return value


def case_to_json(case: Case) -> dict:
    out = {"kernel": case.kernel, "mode": case.mode, "dtype": case.dtype, "label": case.label}
    if case.ladder is not None:
        out["ladder"] = dict(case.ladder)
    else:
        out["kwargs"] = {k: _encode(v) for k, v in case.kwargs.items()}
    return out


def outputs_to_json(names, first: tuple, second: tuple) -> dict:
    """Two disagreeing ``(label, outputs)``: whole where small, else the differing elements."""
    out = {}
    for key, (label, arrays) in (("first", first), ("second", second)):
        entry = {}
        for name, a, other in zip(names, arrays, second[1] if key == "first" else first[1]):
            a, other = np.asarray(a), np.asarray(other)
            if a.size <= OUTPUT_LIMIT or a.shape != other.shape:
                entry[name] = encode_array(a)
            else:
                at = np.flatnonzero(a.reshape(-1).astype(np.float64) != other.reshape(-1).astype(np.float64))
                entry[name] = {"shape": list(a.shape), "differing": int(at.size), "at": [int(i) for i in at[:64]],
                               "values": [float(v) for v in a.reshape(-1)[at[:64]]]}
        out[key] = {"label": str(label), "outputs": entry}
    return out


# -- strict loading ---------------------------------------------------------------------------

def _fail(where: str, what: str):
    raise CaseFileError(f"{where}: {what}")


def _decode_array(obj: dict, where: str) -> np.ndarray:
    if set(obj) - {"array", "dtype", "shape", "preview"} or not {"array", "dtype", "shape"} <= set(obj):
        _fail(where, "an array needs exactly the keys array, dtype, shape (and preview)")
    if obj["dtype"] not in ARRAY_DTYPES:
        _fail(where, f"dtype must be one of {', '.join(ARRAY_DTYPES)}; got {obj['dtype']!r:.40}")
    shape = obj["shape"]
    if not isinstance(shape, list) or len(shape) > 8 or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**40 for n in shape):
        _fail(where, "shape must be a list of at most 8 non-negative integers")
    if not isinstance(obj["array"], str):
        _fail(where, "array must be a base64 string")
    dt = _dtype(obj["dtype"])
    if math.prod(shape) * dt.itemsize != len(obj["array"]) // 4 * 3 - obj["array"][-2:].count("="):
        _fail(where, f"the data does not hold {math.prod(shape)} elements of {obj['dtype']} (shape {shape})")
    try:
        raw = base64.b64decode(obj["array"], validate=True)
    except (binascii.Error, ValueError):
        _fail(where, "array is not valid base64")
    return np.frombuffer(raw, dtype=dt).reshape(tuple(shape)).copy()


def _decode_value(value, where: str):
    if isinstance(value, dict) and "array" in value:
        return _decode_array(value, where)
    if isinstance(value, dict) and set(value) == {"float"} and isinstance(value["float"], str):
        try:
            return float.fromhex(value["float"])
        except (ValueError, OverflowError):
            _fail(where, f"not a hex float: {value['float']!r:.40}")
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 64):
        return value
    _fail(where, "a value must be an array, a float, a number, a short string or null")


def _check_header(obj, where: str) -> None:
    """The keys, kernel, mode, dtype, label and (for a ladder case) the rung of a case object."""
    from . import DESCRIPTORS, large

    if not isinstance(obj, dict):
        _fail(where, "a case must be an object")
    extra = set(obj) - {"kernel", "mode", "dtype", "label", "kwargs", "ladder"}
    if extra:
        _fail(where, f"unknown key(s) {', '.join(sorted(extra))}")
    kernel = obj.get("kernel")
    if not isinstance(kernel, str) or kernel not in DESCRIPTORS:
        _fail(where, f"kernel must be one of {', '.join(DESCRIPTORS)}; got {kernel!r:.40}")
    d = DESCRIPTORS[kernel]
    if not isinstance(obj.get("mode"), (str, type(None))) or obj.get("mode") not in d.modes():
        _fail(where, f"mode of {kernel} must be one of {', '.join(map(str, d.modes()))}; got {obj.get('mode')!r:.40}")
    if not isinstance(obj.get("dtype"), str) or obj.get("dtype") not in xdt.FLOAT_DTYPES:
        _fail(where, f"dtype must be one of {', '.join(xdt.FLOAT_DTYPES)}; got {obj.get('dtype')!r:.40}")
    label = obj.get("label", "")
    if not isinstance(label, str) or len(label) > 1000:
        _fail(where, "label must be a string (at most 1000 characters)")
    if ("kwargs" in obj) == ("ladder" in obj):
        _fail(where, "a case has either kwargs or ladder")
    if "ladder" in obj:
        lad = obj["ladder"]
        if not isinstance(lad, dict) or set(lad) != {"rung", "seed"} or not isinstance(lad["rung"], str) \
                or lad["rung"] not in large.rungs(kernel) or not isinstance(lad["seed"], int) \
                or isinstance(lad["seed"], bool) or not 0 <= lad["seed"] < 2**63:
            _fail(where, f"ladder must be {{rung: one of {large.rungs(kernel)}, seed: a non-negative integer}}")
    elif not isinstance(obj["kwargs"], dict):
        _fail(where, "kwargs must be an object")


def _build(obj, where: str, caps=None) -> Case:
    """The case of a checked object (:func:`_check_header`); a ladder case is built for the variants
    ``caps`` declares (or, where none fits, the default ones)."""
    from . import large

    kernel = obj["kernel"]
    if "ladder" in obj:
        lad = obj["ladder"]
        case = large.build(kernel, obj["dtype"], obj["mode"], lad["rung"], lad["seed"], caps)
        if case is None:
            case = large.build(kernel, obj["dtype"], obj["mode"], lad["rung"], lad["seed"])
        case.ladder = dict(lad)
        return case
    kw = obj["kwargs"]
    unknown = set(kw) - KERNELS[kernel].parameters()
    if unknown:
        _fail(where, f"{kernel} takes no argument(s) {', '.join(sorted(unknown))}")
    return Case(kernel, obj["mode"], obj["dtype"], {k: _decode_value(v, f"{where}: {k}") for k, v in kw.items()},
                obj.get("label", ""))


def _case_from_json(obj, where: str) -> Case:
    _check_header(obj, where)
    return _build(obj, where)


def case_from_json(obj: dict) -> Case:
    return _case_from_json(obj, "case")


def _check_outputs(obj, where: str):
    if obj is None:
        return
    for key in ("first", "second"):
        entry = obj.get(key)
        if set(obj) != {"first", "second"} or not isinstance(entry, dict) or set(entry) != {"label", "outputs"} \
                or not isinstance(entry["label"], str) or not isinstance(entry["outputs"], dict):
            _fail(where, "outputs must be {first, second: {label, outputs}}")
        for name, value in entry["outputs"].items():
            if isinstance(value, dict) and "array" in value:
                _decode_array(value, f"{where}: {key}: {name}")
            elif not (isinstance(value, dict) and set(value) == {"shape", "differing", "at", "values"}):
                _fail(where, f"{key}: {name} must be an array or {{shape, differing, at, values}}")


def save_cases(path, cases: list[Case], **meta) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"format": FORMAT, **meta, "cases": [case_to_json(c) for c in cases]}, indent=1))
    return path


class _ArgumentsOnly(Backend):
    """Takes every request and computes nothing: a saved case's arguments go through the public
    function's own validation, so an invalid one is refused here, never reported as a backend's FAIL."""

    def __init__(self):
        super().__init__(name="case file")

    def capabilities(self):
        from . import DESCRIPTORS

        return {k: KernelCaps.declare(k, dtypes=tuple(xdt.FLOAT_DTYPES)) for k in DESCRIPTORS}

    def run(self, args):
        pass


def _case_bytes(obj, where: str) -> int:
    """The bytes of the arrays of a checked case object, found without building it (a kwargs case
    is decoded and its arguments validated, then dropped; a ladder case is measured on one period)."""
    from . import DESCRIPTORS, large

    if "ladder" in obj:
        return large.nbytes(obj["kernel"], obj["dtype"], obj["mode"], obj["ladder"]["rung"])
    case = _build(obj, where)
    try:
        DESCRIPTORS[case.kernel].call(case, _ArgumentsOnly())
    except (XLossError, TypeError, ValueError, OverflowError) as exc:  # what the public function refuses
        _fail(where, f"invalid arguments for {case.kernel}: {exc}")
    return sum(v.nbytes for v in case.kwargs.values() if isinstance(v, np.ndarray))


class Cases(Sequence):
    """The cases of a case file, every one checked when the file is loaded, each built only when it
    is asked for (so a file of large cases holds one in memory at a time)."""

    def __init__(self, objs: list, where: str):
        self._objs, self._where = objs, where

    def __len__(self):
        return len(self._objs)

    def kernel(self, i: int) -> str:
        return self._objs[i]["kernel"]

    def build(self, i: int, caps=None) -> Case:
        """Case ``i`` (a ladder case for the variants ``caps`` declares)."""
        return _build(self._objs[i], f"{self._where}: case {i}", caps)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.build(k) for k in range(len(self))[i]]
        return self.build(range(len(self))[i])


def _read(path, where: str) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES (a FIFO is opened without blocking and
    refused, as is a device, a directory or anything else that is not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        _fail(where, f"cannot read: {exc.strerror or exc}")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _fail(where, "not a regular file (a case file is never a device, a FIFO or a directory)")
        if st.st_size > MAX_FILE_BYTES:
            _fail(where, f"{st.st_size} bytes is larger than a case file can be ({MAX_FILE_BYTES})")
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            _fail(where, f"cannot read: {exc.strerror or exc}")
    if len(data) > MAX_FILE_BYTES:
        _fail(where, f"larger than a case file can be ({MAX_FILE_BYTES} bytes)")
    return data


def load_cases(path) -> tuple[Cases, dict]:
    """The cases and metadata of a case file; :class:`CaseFileError` (one line) if it is not valid.
    Every case is checked (structure, arguments, size against the memory available) before any is
    built; :class:`Cases` builds them one at a time."""
    where = str(path)
    data = _read(path, where)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(where, f"not JSON ({exc})")
    except RecursionError:
        _fail(where, "not a case file: JSON nested too deeply")
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        _fail(where, f"not a case file: {exc}")
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        _fail(where, f"not an xloss case file (format {got!r:.40}; expected {FORMAT!r})")
    meta = {k: v for k, v in obj.items() if k not in ("format", "cases")}
    for key, value in meta.items():
        if key not in META_KEYS:
            _fail(where, f"unknown key {key!r:.40}")
        if not isinstance(value, META_KEYS[key]):
            _fail(where, f"{key} has the wrong type ({type(value).__name__})")
    for key, value in (meta.get("options") or {}).items():
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and len(value) > 4096):
            _fail(where, f"option {key!r:.40} must be a string, number or boolean")
    _check_outputs(meta.get("outputs"), f"{where}: outputs")
    cases = obj.get("cases")
    if not isinstance(cases, list) or not 0 < len(cases) <= MAX_CASES:
        _fail(where, f"cases must be a list of 1 to {MAX_CASES} cases")
    for i, c in enumerate(cases):
        _check_header(c, f"{where}: case {i}")
    available = available_bytes()
    for i, c in enumerate(cases):
        need = CASE_MEMORY_FACTOR * _case_bytes(c, f"{where}: case {i}")
        if available is not None and need > available:
            _fail(f"{where}: case {i}", f"checking it needs about {need} bytes of memory; {available} are available")
    return Cases(cases, where), meta
