"""Cases to and from JSON, exactly (floats as hex), so a failing input can be replayed anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import dtypes as xdt
from .descriptor import Case

FORMAT = "xloss-cases/1"


def _encode(value):
    if isinstance(value, np.ndarray):
        name = xdt.float_name(value.dtype)
        if name is not None:
            data = [float(v).hex() for v in value.astype(np.float64).reshape(-1)]
        else:
            name = value.dtype.name
            data = value.reshape(-1).tolist()
        return {"array": data, "dtype": name, "shape": list(value.shape)}
    if isinstance(value, float):
        return {"float": value.hex()}
    return value


def _decode(value):
    if isinstance(value, dict) and "array" in value:
        shape, name = tuple(value["shape"]), value["dtype"]
        if name in xdt.FLOAT_DTYPES:
            data = np.array([float.fromhex(v) for v in value["array"]], dtype=np.float64)
            return data.astype(xdt.FLOAT_DTYPES[name]).reshape(shape)
        return np.array(value["array"], dtype=name).reshape(shape)
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
