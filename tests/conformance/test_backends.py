"""Every registered backend against the float64 oracle, generated from the kernel descriptors.

One parametrised test per (backend, kernel, dtype, mode) that the backend declares: property
tests (hypothesis), fixed edge cases, and error inputs. A backend joins by being registered.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import xloss
from xloss.backend import Backend, KernelCaps
from xloss.conformance import DESCRIPTORS, available_backends, supports, targets
from xloss.conformance.execute import call_checked, judge
from xloss.dtypes import FLOAT_DTYPES

BACKENDS = {b.name: b for b in available_backends()}
TARGETS = [(name, *t) for name, b in BACKENDS.items() for t in targets(b)]


def _id(t):
    name, kernel, dtype, mode = t
    return f"{name}-{kernel}-{dtype}" + (f"-{mode}" if mode is not None else "")


def _check(d, case, b):
    """Run ``case`` the way ``xloss check`` does: checked mode, inputs compared, oracle from the snapshot."""
    outputs = call_checked(d, case, b.checked())
    bad = [r for r in judge(d, case, outputs, b.capabilities().get(case.kernel)) if not r.ok]
    assert not bad, "\n".join(f"{r.name}: {r.detail} (max ulp {r.max_ulp:.3g})" for r in bad) + "\n" + case.describe()


@pytest.mark.parametrize("target", TARGETS, ids=_id)
@given(data=st.data())
def test_matches_oracle(target, data):
    name, kernel, dtype, mode = target
    b = BACKENDS[name]
    d = DESCRIPTORS[kernel]
    case = data.draw(d.strategy(dtype, mode, b.capabilities()[kernel]), label="case")
    _check(d, case, b)


@pytest.mark.parametrize("target", TARGETS, ids=_id)
def test_edge_cases(target):
    name, kernel, dtype, mode = target
    b = BACKENDS[name]
    d = DESCRIPTORS[kernel]
    caps = b.capabilities()[kernel]
    cases = [c for c in d.edge_cases(dtype, mode) if supports(caps, c)]
    assert cases, "no edge case applies: the descriptor or the declaration is wrong"
    for case in cases:
        _check(d, case, b)


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

    focal_loss = bce_grad = nll_loss_grad = fused_linear_cross_entropy_grad = _reached


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
