"""Cases to and from JSON, exactly, so a failing input can be replayed anywhere.

Arrays are stored as base64 of their raw little-endian bytes (exact and compact even for the
large edge cases) with a readable preview of the first values; Python floats as hex.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from .. import dtypes as xdt
from .descriptor import Case

FORMAT = "xloss-cases/1"


PREVIEW = 8


def _dtype(name: str) -> np.dtype:
    return xdt.FLOAT_DTYPES.get(name) or np.dtype(name)


def _encode(value):
    if isinstance(value, np.ndarray):
        name = xdt.float_name(value.dtype) or value.dtype.name
        raw = np.ascontiguousarray(value).tobytes()  # native order: little-endian on every supported host
        preview = [float(v) if name in xdt.FLOAT_DTYPES else v.item() for v in value.reshape(-1)[:PREVIEW]]
        return {"array": base64.b64encode(raw).decode("ascii"), "dtype": name, "shape": list(value.shape),
                "preview": preview}
    if isinstance(value, float):
        return {"float": value.hex()}
    return value


def _decode(value):
    if isinstance(value, dict) and "array" in value:
        dt = _dtype(value["dtype"])
        return np.frombuffer(base64.b64decode(value["array"]), dtype=dt).reshape(tuple(value["shape"])).copy()
    if isinstance(value, dict) and "float" in value:
        return float.fromhex(value["float"])
    return value


def case_to_json(case: Case) -> dict:
    return {"kernel": case.kernel, "mode": case.mode, "dtype": case.dtype, "label": case.label,
            "kwargs": {k: _encode(v) for k, v in case.kwargs.items()}}


def case_from_json(obj: dict) -> Case:
    return Case(obj["kernel"], obj["mode"], obj["dtype"], {k: _decode(v) for k, v in obj["kwargs"].items()},
                obj.get("label", ""))


def save_cases(path, cases: list[Case], **meta) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"format": FORMAT, **meta, "cases": [case_to_json(c) for c in cases]}, indent=1))
    return path


def load_cases(path) -> tuple[list[Case], dict]:
    obj = json.loads(Path(path).read_text())
    if obj.get("format") != FORMAT:
        raise ValueError(f"{path} is not an xloss case file (format {obj.get('format')!r})")
    meta = {k: v for k, v in obj.items() if k not in ("format", "cases")}
    return [case_from_json(c) for c in obj["cases"]], meta
