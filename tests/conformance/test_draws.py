"""The suite's drawn cases are a function of the seed alone, not of what else the process imported.

Hypothesis mixes the literals of every local module into its draws (xloss/conformance/draws.py):
an editable install of xloss drew other cases than ``pip install .`` for the same seed, and a probe
that failed on a checkout passed in CI. Here a module full of constants is imported in between.
"""

from __future__ import annotations

import contextlib
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
    floats = ", ".join(repr(float(v)) for v in rng.uniform(-3, 3, 300))
    ints = ", ".join(str(int(v)) for v in rng.integers(-300, 300, 100))
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
def test_draws_ignore_the_importing_program(target, author_module, monkeypatch):
    kernel, dtype = target
    mode = DESCRIPTORS[kernel].modes()[0]
    with draws.program_constants():  # as a program is without the test suite's own guard (conftest)
        before = _drawn(kernel, dtype, mode)
        author_module()
        assert _drawn(kernel, dtype, mode) == before
        if not draws.has_local_pool():
            return  # this hypothesis has no local-constant pool: nothing more to show
        # the same draws without the guard take the author's constants: the guard is what holds them
        monkeypatch.setattr(runner, "seed_only", contextlib.nullcontext)
        assert _drawn(kernel, dtype, mode) != before
