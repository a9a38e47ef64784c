"""A kernel family written outside xloss and registered at run time (issue #28's promise: a new kernel is
a family package plus one function per backend, with no generic file edited).

The toy family ``toy_scale`` (out = alpha * x) lives in a temporary folder, as a port author's or a
plugin's would. Registered after ``import xloss``, it must show up everywhere the generic layers list
kernels: ``xloss backends``, ``xloss check`` (which must pass a correct backend and catch a wrong
one), ``xloss bench``'s plan and workloads, and the Request a call makes. Nothing in the test edits
xloss; it runs in a fresh interpreter so the registration does not leak into other tests.
"""

import json
import subprocess
import sys
import textwrap

FAMILY = '''
from types import MappingProxyType

from xloss.kernels import KernelSpec, register

ROW = KernelSpec(
    name="toy_scale", axes=MappingProxyType({"weight": (False,)}), primary=None, reduces=False,
    aliases=("toy",), functions=("toy_scale",), package=__name__, api=".impl", args=".impl:ToyArgs",
    validator=".impl:toy_args", reference=".impl:reference", descriptor=".impl:DESCRIPTOR", torch=None,
    workload=".impl:workload", bench=".impl:IMPLS", bench_dims=1, bench_sizes=("64k", "4k"), order=900)
register(ROW)
'''

IMPL = '''
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from xloss import dispatch
from xloss.bench.impls import KernelImpls
from xloss.bench.workloads import Workload, parse_count
from xloss.conformance.descriptor import Case, ErrorCase, KernelDescriptor, allowance
from xloss.containers import from_numpy, kind_of
from xloss.dtypes import float_name
from xloss.errors import XLossTypeError
from xloss.kernel_args import Request
from xloss.validation import contiguous, float_array, output, real_number

from . import ROW


@dataclass(frozen=True)
class ToyArgs:
    x: np.ndarray
    alpha: float
    out: np.ndarray

    def request(self):
        return Request(ROW.name, float_name(self.x.dtype), None, {"weight": False}, self.x.size)


def toy_args(x, alpha, out=None):
    x_raw = float_array(x, "x")
    x = contiguous(x_raw, "x")
    return ToyArgs(x, real_number(alpha, "alpha"), output(out, "out", x.shape, x.dtype, {"x": x_raw}))


def toy_scale(x, alpha=2.0, *, backend=None, out=None):
    a = toy_args(x, alpha, out)
    dispatch.run(a, backend, out)
    return out if out is not None else from_numpy(a.out, kind_of(x))


def reference(x, alpha):
    return np.asarray(x, np.float64) * alpha


def _case(x, alpha, dtype, label=""):
    return Case(ROW.name, None, dtype, {"x": np.asarray(x, np.float64).astype(dtype), "alpha": alpha}, label)


def draw_case(draw, dtype, mode, caps):
    xs = draw(st.lists(st.floats(-1e3, 1e3), max_size=40), label="x")
    return _case(xs, draw(st.floats(-4, 4), label="alpha"), dtype)


def edge_cases(dtype, mode, caps=None):
    return [_case([], 1.5, dtype, "empty"), _case(np.linspace(-3, 3, 4097), 0.5, dtype, "odd size")]


def error_cases():
    return [ErrorCase(ROW.name, {"x": np.arange(3)}, XLossTypeError, "x must have a floating dtype", "int x")]


DESCRIPTOR = KernelDescriptor(
    spec=ROW, draw_case=draw_case, edge_cases=edge_cases, error_cases=error_cases,
    call=lambda case, backend: (np.asarray(toy_scale(**case.kwargs, backend=backend)),),
    oracle=lambda case: (reference(case.kwargs["x"], case.kwargs["alpha"]),),
    allowed=lambda case, expected, caps=None: (allowance(expected[0], np.abs(expected[0]), case.dtype),),
    output_names=lambda mode: ("out",))


def workload(mode, size, dtype, rng):
    n = parse_count(size)
    x = rng.standard_normal(n).astype(dtype)
    return Workload(ROW.name, mode, size, dtype, {"x": x}, bytes_moved=2 * x.nbytes)


IMPLS = KernelImpls("numpy", lambda w, b: [("", lambda: toy_scale(w.inputs["x"], backend=b))],
                    lambda w, i, torch, compile_: ([], []))
'''

BACKEND = '''
import numpy as np

from xloss import Backend, KernelCaps


class ToyBackend(Backend):
    """Implements the toy kernel; ``bug=True`` drops the last element's scaling (a port's off-by-one)."""

    def __init__(self, bug=False):
        super().__init__(name="toy-buggy" if bug else "toy")
        self.bug = bug

    def capabilities(self):
        return {"toy_scale": KernelCaps.declare("toy_scale", dtypes=("float32", "float64"))}

    def toy_scale(self, a):
        np.multiply(a.x, a.alpha, out=a.out, dtype=a.out.dtype)
        if self.bug and a.x.size > 3:
            a.out[-1] = a.x[-1]
'''

SCRIPT = '''
import contextlib, io, json, sys

import xloss
import toy_family
from toy_backend import ToyBackend
from xloss import bench, conformance
from xloss.bench import workloads
from xloss.cli import main

xloss.register_backend("toy", ToyBackend)
xloss.register_backend("toy-buggy", lambda: ToyBackend(bug=True))
found = {}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    found["backends_rc"] = main(["backends"])
found["listed"] = "toy_scale" in out.getvalue()
found["descriptor"] = "toy_scale" in conformance.DESCRIPTORS
found["request"] = conformance.request_of(conformance.DESCRIPTORS["toy_scale"].edge_cases("float32", None)[1]).kernel
for name in ("toy", "toy-buggy"):
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        found[name] = main(["check", "--backend", name, "--kernels", "toy", "--max-examples", "10", "--seed", "0",
                            "--no-large", "--in-process"])
    found[name + " report"] = report.getvalue()
found["bench_plan"] = bench.plan(bench.BenchConfig(kernels=["toy"], quick=True).resolved())
found["workload"] = workloads.build("toy_scale", "grad", "4k", "float32").bytes_moved
print(json.dumps(found))
'''


def test_a_family_registered_at_run_time_joins_every_generic_layer(tmp_path):
    pkg = tmp_path / "toy_family"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(FAMILY))
    (pkg / "impl.py").write_text(textwrap.dedent(IMPL))
    (tmp_path / "toy_backend.py").write_text(textwrap.dedent(BACKEND))
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env=None)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["backends_rc"] == 0 and found["listed"] and found["descriptor"]
    assert found["request"] == "toy_scale"
    assert found["toy"] == 0, "a correct implementation of the toy kernel passes xloss check"
    assert found["toy-buggy"] == 1, "xloss check catches the toy port's wrong last element"
    report = found["toy-buggy report"]
    assert "FAIL: toy_scale float32" in report and "smallest failing input" in report
    assert found["bench_plan"] == [["toy_scale", "grad", "4k"]]
    assert found["workload"] == 2 * 4000 * 4
