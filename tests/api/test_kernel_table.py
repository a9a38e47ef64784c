"""The kernel table (``xloss.kernels``): every row's links resolve, and everything that lists kernels
(the API, the registry, dispatch, ``xloss check``, ``xloss bench``, the CLI) lists them from it."""

import dataclasses
import inspect

import numpy as np
import pytest

import xloss
from xloss import conformance
from xloss.backend import Backend, KernelCaps
from xloss.bench import workloads
from xloss.conformance.descriptor import KernelDescriptor
from xloss.dtypes import FLOAT_DTYPES
from xloss.errors import UnsupportedRequestError
from xloss.kernels import ALIASES, KERNELS, kernel_named

ROWS = sorted(KERNELS)


@pytest.mark.parametrize("name", ROWS)
def test_every_link_of_a_row_resolves(name):
    row = KERNELS[name]
    args = row.load("args")
    assert dataclasses.is_dataclass(args) and callable(args.request)
    assert callable(row.load("validator"))
    assert row.load("reference") is not None
    d = row.load("descriptor")
    assert isinstance(d, KernelDescriptor) and d.spec is row
    assert callable(row.load("workload"))
    pytest.importorskip("torch")
    assert callable(row.load("torch"))


@pytest.mark.parametrize("name", ROWS)
def test_public_functions_are_exported_and_take_a_backend(name):
    for fn in KERNELS[name].functions:
        assert fn in xloss.__all__
        assert "backend" in inspect.signature(getattr(xloss, fn)).parameters


@pytest.mark.parametrize("name", ROWS)
def test_a_call_requests_its_row_with_exactly_the_rows_axes(name):
    """Through the real validation path (the descriptor's first edge case)."""
    d = conformance.DESCRIPTORS[name]
    case = d.edge_cases("float32", d.modes()[0])[0]
    req = conformance.request_of(case)
    assert req.kernel == name
    assert set(req.variant) == set(KERNELS[name].axes)
    assert (req.reduction is not None) == KERNELS[name].reduces


def test_aliases_name_one_kernel_each():
    for row in KERNELS.values():
        for alias in row.aliases:
            assert kernel_named(alias) is row
        assert kernel_named(row.name) is row
    assert len(ALIASES) == len(KERNELS) + sum(len(r.aliases) for r in KERNELS.values())
    assert kernel_named("no_such_kernel") is None


def test_the_conformance_suite_and_bench_cover_the_table():
    assert set(conformance.DESCRIPTORS) == set(KERNELS)
    assert set(KERNELS) <= set(workloads.KERNELS)
    for name, row in KERNELS.items():
        assert workloads.DIMS[name] == row.bench_dims
        for size in row.bench_sizes:
            assert len(workloads.parse_dims(size, row.bench_dims)) == row.bench_dims


@pytest.mark.parametrize("name", ROWS)
def test_every_row_builds_a_small_bench_workload(name):
    row = KERNELS[name]
    size = "x".join(["16"] * row.bench_dims)
    w = workloads.build(name, "grad", size, "float32")
    assert w.kernel == name and w.inputs


def test_every_available_backend_implements_what_it_declares():
    for info in xloss.list_backends():
        if not info.available:
            continue
        b = xloss.backend(info.name)
        for kernel in b.capabilities():
            assert kernel in KERNELS, f"{info.name} declares {kernel}, which is not in the table"
            assert callable(b.kernel(kernel)), f"{info.name} declares {kernel} but has no method for it"


def test_a_declared_kernel_without_its_method_fails_loudly():
    class Forgetful(Backend):
        def capabilities(self):
            return {"bce_grad": KernelCaps.declare("bce_grad", dtypes=FLOAT_DTYPES)}

    x = np.full(3, 0.5, np.float32)
    with pytest.raises(UnsupportedRequestError, match="declares kernel bce_grad but does not implement it"):
        xloss.bce_grad(x, x, backend=Forgetful(name="forgetful"))


def test_the_backends_listing_names_every_kernel(capsys):
    from xloss.cli import main

    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in KERNELS:
        assert name in out


def _family_modules() -> list[str]:
    import pkgutil

    import xloss.kernels

    return sorted(m.name for m in pkgutil.walk_packages(xloss.kernels.__path__, "xloss.kernels.")
                  if not m.ispkg)


# One interpreter that has imported the third-party libraries but nothing of xloss forks one child per
# family module: each child's xloss import state is fresh, and no child pays torch's or Numba's import.
_IMPORT_EACH_FIRST = """
import os, sys, traceback
import numpy, numba, cffi, hypothesis
try:
    import torch
except ImportError:
    pass
assert not any(m == "xloss" or m.startswith("xloss.") for m in sys.modules)
failed = []
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(module)
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc()[-600:].encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        err = f.read()
    if os.waitpid(pid, 0)[1] != 0:
        failed.append(module + ": " + err)
print("\\n".join(failed), file=sys.stderr)
sys.exit(1 if failed else 0)
"""


def test_every_family_module_imports_first_in_a_fresh_interpreter():
    """A family module imports generic packages (conformance, bench) that read the rows; none of them
    may load a family module at its own import, or importing that family module first is circular."""
    import subprocess
    import sys

    modules = [m for m in _family_modules() if pytest.importorskip("torch") or not m.endswith("torch_ops")]
    assert {"xloss.kernels.focal.conformance", "xloss.kernels.flce.training"} <= set(modules)
    out = subprocess.run([sys.executable, "-c", _IMPORT_EACH_FIRST, *modules], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-6000:]
