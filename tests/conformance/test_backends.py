"""Every registered backend against the float64 oracle, generated from the kernel descriptors.

One test per (backend, kernel, dtype, mode) that the backend declares, run by the same runner as
``xloss check`` (:func:`xloss.conformance.runner.run_target`): the fixed edge cases and the
hypothesis examples in checked mode, inputs compared, failures shrunk. Then the error inputs,
once. A backend joins by being registered.
"""

import random
import zlib

import numpy as np
import pytest
from hypothesis import settings

import xloss
from xloss.backend import Backend, KernelCaps
from xloss.conformance import DESCRIPTORS, available_backends, targets
from xloss.conformance.runner import PASS, run_target
from xloss.dtypes import FLOAT_DTYPES
from xloss.kernels import KERNELS

BACKENDS = {b.name: b for b in available_backends()}
TARGETS = [(name, *t) for name, b in BACKENDS.items() for t in targets(b)]


def _id(t):
    name, kernel, dtype, mode = t
    return f"{name}-{kernel}-{dtype}" + (f"-{mode}" if mode is not None else "")


@pytest.mark.parametrize("target", TARGETS, ids=_id)
def test_matches_oracle(target, request):
    """What ``xloss check`` runs for this target (without the other configurations and the large
    ladder, which tests/conformance/test_large.py and the backends' own tests cover), with the
    hypothesis profile's example count and a seed that differs per test, so that reruns explore."""
    name, kernel, dtype, mode = target
    seed = zlib.crc32(request.node.nodeid.encode()) if settings().derandomize else random.getrandbits(31)
    res = run_target(BACKENDS[name], kernel, dtype, mode, max_examples=settings().max_examples, seed=seed,
                     configurations=False)
    assert res.examples > 0, "no edge case or example ran"
    assert res.status == PASS, f"{res.status}: {res.message} (seed {seed})\n{res.case}"


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_undeclared_requests_are_refused(name):
    """Asking a named backend for an undeclared dtype raises UnsupportedRequestError naming what it supports."""
    b = BACKENDS[name]
    for kernel, d in DESCRIPTORS.items():
        caps = b.capabilities().get(kernel)
        missing = [dt for dt in FLOAT_DTYPES if caps is None or dt not in caps.dtypes]
        for dtype in missing:
            case = d.edge_cases(dtype, d.modes()[0])[-1]
            with pytest.raises(xloss.UnsupportedRequestError, match=rf"backend '{name}' does not support"):
                d.call(case, b)


class _MustNotBeReached(Backend):
    """Declares everything and fails if a kernel is ever called: validation runs in front of dispatch,
    the same for every backend, so an error input must be refused before any backend sees it."""

    def __init__(self):
        super().__init__(name="must-not-be-reached")

    def capabilities(self):
        return {k: KernelCaps.declare(k, dtypes=FLOAT_DTYPES) for k in DESCRIPTORS}

    def _reached(self, args):
        raise AssertionError(f"an invalid call reached the backend: {type(args).__name__}")

    def kernel(self, name):
        return self._reached if name in KERNELS else None


ERROR_CASES = [(kernel, i) for kernel, d in DESCRIPTORS.items() for i in range(len(d.error_cases()))]


@pytest.mark.parametrize("target", ERROR_CASES, ids=lambda t: f"{t[0]}-{DESCRIPTORS[t[0]].error_cases()[t[1]].label}")
def test_error_inputs_are_refused_before_any_backend_runs(target):
    """Once per error case, not once per backend: no backend can change what validation refuses."""
    kernel, i = target
    e = DESCRIPTORS[kernel].error_cases()[i]
    before = np.array(e.kwargs[e.out_arg], copy=True) if e.out_arg else None
    with pytest.raises(e.exc, match=e.match):
        getattr(xloss, e.function)(**e.kwargs, backend=_MustNotBeReached())
    assert issubclass(e.exc, xloss.XLossError)
    if e.out_arg:
        np.testing.assert_array_equal(e.kwargs[e.out_arg], before)  # nothing half-written into out=


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_backend_dispatches_through_validation(name):
    """The one error-case run above speaks for every backend because each is called through the same
    validating API: one error input per kernel, on each real backend, shows it."""
    for d in DESCRIPTORS.values():
        e = d.error_cases()[0]
        with pytest.raises(e.exc, match=e.match):
            getattr(xloss, e.function)(**e.kwargs, backend=BACKENDS[name])
