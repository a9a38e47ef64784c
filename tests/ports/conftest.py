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
* ``port_findings`` collects one row per seeded bug; the rows are printed at the end of the run;
* ``port_harness.build(fn, variants, **options)`` is ``fn(out_dir, variants, **options)`` (a vendor
  folder's ``build``, ``build_all``, ``build_bce_with_logits``...) built once per test session: every
  test file and xdist worker asking for the same libraries gets the same ones (build a port library
  through it, not into a test's own folder, unless the test changes the library).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
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


class _Builds:
    """Port libraries built once per test session, shared by the test files and the xdist workers.

    The folder is the session's (``getbasetemp()``, or its parent, which the workers of one run share,
    under xdist). A build is keyed on the build function (its file and name), its options, the compiler
    environment and the text of every file in the build script's folder and the one above (the port
    sources, their headers); the libraries of one key accumulate, each build that adds variants in a
    folder of its own (a library another process has loaded is never replaced), under a file lock."""

    def __init__(self, root: Path):
        self.root = root

    def __call__(self, fn, variants=None, **options) -> dict[str, Path]:
        source = Path(sys.modules[fn.__module__].__file__).resolve()
        key = hashlib.sha256(json.dumps([str(source), fn.__qualname__, sorted(options.items()), _sources(source),
                                         [os.environ.get(v) for v in ("CC", "CFLAGS")]], default=str).encode())
        folder = self.root / f"{source.parent.name}-{fn.__name__}-{key.hexdigest()[:16]}"
        folder.mkdir(parents=True, exist_ok=True)
        index = folder / "built.json"
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            # "default": the variants of a call without ``variants`` (the build function's default set)
            built = json.loads(index.read_text()) if index.exists() else {"default": None, "libraries": {}}
            libs = built["libraries"]
            if variants is None and built["default"] is None:
                made = fn(self._part(folder), None, **options)
                built["default"] = list(made)
            elif variants is not None and not set(variants) <= set(libs):
                made = fn(self._part(folder), [v for v in variants if v not in libs], **options)
            else:
                made = {}
            if made:
                libs.update({v: str(p) for v, p in made.items()})
                tmp = index.with_suffix(".tmp")
                tmp.write_text(json.dumps(built))
                os.replace(tmp, index)
        return {v: Path(libs[v]) for v in (built["default"] if variants is None else variants)}

    @staticmethod
    def _part(folder: Path) -> Path:
        part = folder / f"part{len(list(folder.glob('part*')))}"
        part.mkdir()
        return part


def _sources(build_script: Path) -> list:
    """(name, digest) of the files a port build reads: its folder's sources and script, the headers above."""
    files = sorted([p for p in build_script.parent.iterdir() if p.suffix in (".c", ".h", ".py")]
                   + list(build_script.parent.parent.glob("*.h")))
    return [(str(p), hashlib.sha256(p.read_bytes()).hexdigest()) for p in files]


class _Harness:
    check = staticmethod(check)
    load_module = staticmethod(load_module)
    Measured = Measured

    def __init__(self, build: _Builds):
        self.build = build


@pytest.fixture(scope="session")
def port_harness(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    return _Harness(_Builds((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "port-builds"))


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
