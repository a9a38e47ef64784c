"""Fixtures shared by the port tests (``tests/ports/<vendor>/`` + ``test_<vendor>_ports.py``).

A port test builds small C libraries in a vendor's calling convention (one correct, others with
one seeded bug each), runs the conformance harness against them and checks what it reports. The
helpers here know nothing about a particular vendor:

* ``port_harness.check(backend, targets, ...)`` runs targets in-process and reports how many
  examples it took to hit the first failure (the harness's ``found_at``; its ``examples`` count
  also includes hypothesis's shrinking replays);
* ``port_harness.load_module(path)`` loads a helper script (a vendor folder's ``build.py``)
  under ``--import-mode=importlib``, where tests cannot import each other;
* ``xloss_cli(*args, cwd=...)`` runs ``python -m xloss.cli`` in a subprocess;
* ``port_findings`` collects one row per seeded bug; the rows are printed at the end of the run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xloss.conformance import runner


@dataclass
class Measured:
    """A harness result plus the 1-based index of the first failing example (None if none failed):
    edge cases count first, in the harness's order, then hypothesis's examples."""

    result: runner.TargetResult
    first_failure: int | None
    seconds: float = field(default=0.0)

    @property
    def target(self) -> tuple:
        return (self.result.kernel, self.result.dtype, self.result.mode)


def check(backend, targets, *, max_examples: int, seed: int, shrink: bool = True) -> list[Measured]:
    """``runner.run_target`` over ``targets`` (kernel, dtype, mode), in this process (``shrink=False``:
    a failure is reported as found, unshrunk: enough to know that a target fails)."""
    out = []
    for kernel, dtype, mode in targets:
        r = runner.run_target(backend, kernel, dtype, mode, max_examples=max_examples, seed=seed, shrink=shrink)
        out.append(Measured(r, r.found_at if r.status in runner.FAILING else None, r.seconds))
    return out


def load_module(path, name: str | None = None):
    path = Path(path)
    name = name or f"port_helper_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses (and pickling) look a module up by name while it executes
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


class _Harness:
    check = staticmethod(check)
    load_module = staticmethod(load_module)
    Measured = Measured


@pytest.fixture(scope="session")
def port_harness():
    return _Harness


@pytest.fixture(scope="session")
def xloss_cli():
    def run(*args, cwd, timeout: int = 600):
        if args[:1] == ("check",) and "--replay" not in args:  # the large ladder is measured elsewhere
            args = (*args, "--no-large")
        return subprocess.run([sys.executable, "-m", "xloss.cli", *map(str, args)], capture_output=True, text=True,
                              cwd=cwd, timeout=timeout, check=False)

    return run


@pytest.fixture
def port_findings(request):
    """``.append(row)``: a dict with keys vendor, port, target, first_failure, examples, seconds,
    sweep_seconds, kept with the test's report (so it reaches the table from an xdist worker too)."""

    class Rows:
        def append(self, row: dict) -> None:
            target = [str(p) for p in row["target"] if p is not None]  # plain data: it crosses processes
            request.node.user_properties.append(("port_finding", dict(row, target=target)))

    return Rows()
