"""Running the suite in a child process, so a port that crashes cannot take the report down.

The child runs targets in order, announcing each target before it starts and writing every
case to a file just before calling the backend. If the child dies (a segfault in the port),
the parent records a ``crash`` for the announced target with the case that was running, and
starts a fresh child for the remaining targets.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import tempfile
from pathlib import Path

from .casefile import case_to_json
from .descriptor import Case
from .runner import CRASH, DRAWN, LARGE, TargetResult, declared_caps, run_large, run_target, universe


def _child_main(name, options, items, settings, case_path, conn):
    from .. import registry

    try:
        backend = registry.backend(name, **options) if options else registry.backend(name)
    except Exception as exc:
        conn.send(("setup-error", f"{type(exc).__name__}: {exc}"))
        return

    def on_case(case):
        if case.ladder is not None:  # rebuilt from its rung: no need to write hundreds of MiB
            case = Case(case.kernel, case.mode, case.dtype, {}, case.label, case.ladder)
        with open(case_path, "wb") as f:
            pickle.dump(case, f)

    for kernel, dtype, mode, group in items:
        declared = declared_caps(backend, kernel, dtype, mode) is not None
        conn.send(("start", (kernel, dtype, mode, declared, group)))
        if group == DRAWN:
            r = run_target(backend, kernel, dtype, mode, max_examples=settings["max_examples"],
                           seed=settings["seed"], on_case=on_case, configurations=settings["configurations"])
        else:
            r = run_large(backend, kernel, dtype, mode, seed=settings["seed"], repeats=settings["repeats"],
                          on_case=on_case, configurations=settings["configurations"])
        conn.send(("result", r.to_json() if r is not None else None))
    conn.send(("done", None))


def _signal_name(exitcode: int) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


class ChildSetupError(RuntimeError):
    pass


def run_isolated(name: str, options: dict, *, kernels=None, max_examples=100, seed=0, on_result=None,
                 large_cases=True, repeats=3, configurations=True):
    """Like :func:`runner.run_suite` for the backend ``xloss.backend(name, **options)``, in child processes."""
    ctx = multiprocessing.get_context("spawn")
    chosen = [t for t in universe() if not kernels or t[0] in kernels]
    remaining = [(*t, DRAWN) for t in chosen] + ([(*t, LARGE) for t in chosen] if large_cases else [])
    settings = {"max_examples": max_examples, "seed": seed, "repeats": repeats, "configurations": configurations}
    results = []
    with tempfile.TemporaryDirectory(prefix="xloss-check-") as tmp:
        case_path = Path(tmp, "current-case.pkl")
        while remaining:
            receiver, sender = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child_main, daemon=True,
                               args=(name, options, list(remaining), settings, str(case_path), sender))
            proc.start()
            sender.close()
            current = None
            while True:
                try:
                    kind, payload = receiver.recv()
                except EOFError:
                    break
                if kind == "setup-error":
                    proc.join()
                    raise ChildSetupError(payload)
                if kind == "start":
                    current = tuple(payload)
                    case_path.unlink(missing_ok=True)
                elif kind == "result":
                    remaining.remove(current[:3] + current[4:])
                    current = None
                    if payload is None:  # no large case applies
                        continue
                    r = TargetResult(**payload)
                    results.append(r)
                    if on_result is not None:
                        on_result(r)
            proc.join()
            if current is None:
                if remaining:  # died between targets: nothing to blame, but do not loop forever
                    raise ChildSetupError(f"the check process ended early ({_signal_name(proc.exitcode)})")
                break
            case = None
            if case_path.exists():
                with open(case_path, "rb") as f:
                    case = pickle.load(f)
            r = TargetResult(*current[:4], status=CRASH, group=current[4],
                             message=f"the backend crashed the process ({_signal_name(proc.exitcode)}) on this input",
                             case=case_to_json(case) if case is not None else None)
            results.append(r)
            remaining.remove(current[:3] + current[4:])
            if on_result is not None:
                on_result(r)
    return results
