"""The suite's drawn cases are a function of the seed alone, not of what else the process imported.

Hypothesis mixes the literals of every local module into its draws (xloss/conformance/draws.py):
an editable install of xloss drew other cases than ``pip install .`` for the same seed, and a probe
that failed on a checkout passed in CI. Here a module full of constants is imported in between.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import xloss
from xloss.conformance import DESCRIPTORS, draws, runner
from xloss.conformance.casefile import case_to_json

TARGETS = [("bce_grad", "float32"), ("focal_loss", "float16"), ("nll_loss_grad", "float32")]


def _drawn(kernel, dtype, mode):
    cases = []
    runner.run_target(xloss.backend("reference"), kernel, dtype, mode, max_examples=10, seed=5,
                      on_case=cases.append, shrink=False, configurations=False, leaks=False)
    return [case_to_json(c) for c in cases]


def _import_constants(folder, name):
    """Import a module (outside site-packages, not a test file) holding many literals a draw could use."""
    rng = np.random.default_rng(7)
    # values every dtype can hold (k/64), so each draw's float width permits them, and small sizes
    floats = ", ".join(repr(float(k) / 64) for k in rng.integers(-256, 256, 300))
    ints = ", ".join(str(int(v)) for v in rng.integers(0, 200, 100))
    path = folder / f"{name}.py"
    path.write_text(f"FLOATS = [{floats}]\nINTS = [{ints}]\nWORD = 'xloss-port-author'\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def author_module(tmp_path):
    folder = tmp_path / "author"
    folder.mkdir()
    yield lambda: _import_constants(folder, "xloss_author_constants_for_draws")
    sys.modules.pop("xloss_author_constants_for_draws", None)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: "-".join(t))
def test_draws_ignore_the_importing_program(target, author_module):
    kernel, dtype = target
    mode = DESCRIPTORS[kernel].modes()[0]
    with draws.program_constants():  # as a program is without the test suite's own guard (conftest)
        before = _drawn(kernel, dtype, mode)
        author_module()
        assert _drawn(kernel, dtype, mode) == before


def test_the_guard_empties_the_pool_hypothesis_draws_from(author_module):
    """The mechanism, deterministically (a draw takes a pool constant only now and then)."""
    if not draws.has_local_pool():
        pytest.skip("this hypothesis mixes no local constants into its draws")
    from hypothesis.internal.conjecture import providers

    with draws.program_constants():
        author_module()
        assert len(providers._get_local_constants()) > 0
        with draws.seed_only():
            assert len(providers._get_local_constants()) == 0
        assert len(providers._get_local_constants()) > 0
