"""``xloss check --replay FILE``: re-run saved cases, treating the file as data only.

The backend comes from ``--backend`` or, if the file names a *registered* backend (never a
``module:factory`` path), from the file; its options come from ``--option``, or from the file
when the same backend is used (scalars only, never ``lib``; the backend's own factory refuses
any it does not take). A library path in the file is shown, never loaded: pass ``--lib`` to
load one. Each case runs in checked mode, ``--repeat`` times (the runs must agree), and under
every configuration of the backend where the saved status was ``mask-dependent``.

The library is loaded and the cases run in a child process, as in the check (:mod:`.isolated`): a
case whose call never returns is a HANG line naming it once its deadline passes (``--case-deadline``,
scaled by the case's size), one that kills the child a CRASH line naming it, each with the ABI call
the library received; the child's process group is killed, and a fresh child takes the cases after
it. ``--in-process`` runs them in this process instead (as does ``--export``, which records the calls).
"""

from __future__ import annotations

import os
import time

from .. import registry
from ..errors import XLossError
from . import DESCRIPTORS
from .casefile import load_cases
from .configs import MASK_DEPENDENT, NONDETERMINISTIC, across_configurations, checked_configurations, repeat_runs
from .descriptor import printable
from .execute import check_case, describe_failure
from .isolated import (
    DEFAULT_CASE_DEADLINE,
    Child,
    ChildSetupError,
    LoadFailure,
    abi_calls_after,
    await_loaded,
    case_message,
    child_backend,
    deadline_for,
    verdict,
)
from .report import error_reporting_note


class ReplayError(XLossError):
    """The replay cannot run as asked (printed as one line)."""


def _backend_name(args, meta) -> str:
    if args.backend:
        return args.backend
    name = meta.get("backend")
    if not name:
        raise ReplayError(f"{args.replay} names no backend: pass --backend NAME")
    if name not in registry.backend_names():  # a "module:factory" or unknown name is never imported
        raise ReplayError(f"{args.replay} names backend {name!r}, which is not a registered backend "
                          f"({', '.join(registry.backend_names())}); pass --backend NAME to choose one")
    return name


def _options(args, meta, name, given: dict) -> tuple[dict, str]:
    """The options to use and where they came from: the file's (for the same backend), updated
    by the command line's."""
    saved = dict(meta.get("options") or {})
    if not saved or name != meta.get("backend"):
        return given, "command line"
    if "lib" in saved:
        raise ReplayError(f"{args.replay}: options may not name a library (lib); pass --lib to load one")
    return {**saved, **given}, "case file" + (" and the command line" if given else "")


def replay(args, given_options: dict, make_backend, isolated: bool = False) -> int:
    """Exit status: 0 every case agreed, 1 one failed (or crashed, or hung). ``isolated``: in a child
    process (``xloss check``), whose backend ``making.make_backend`` makes; else in this one, with
    ``make_backend(name, options)`` (the export records the calls it makes)."""
    cases, meta = load_cases(args.replay)
    saved_lib = meta.get("library")
    if saved_lib and not args.lib:  # the backend's default library is not what failed: it could pass
        raise ReplayError(f"{args.replay} was recorded with library {printable(saved_lib)}: pass --lib with it "
                          "(or with your rebuilt library) to replay what failed")
    name = _backend_name(args, meta)
    options, source = _options(args, meta, name, given_options)
    status = meta.get("status")
    repeats = args.repeat if getattr(args, "repeat_given", False) else (3 if status == NONDETERMINISTIC else 1)
    plan = {"name": name, "options": options, "source": source, "saved_lib": saved_lib, "status": status,
            "repeats": repeats}
    if not isolated:
        return 1 if _run_cases(make_backend(name, options), cases, plan, print) else 0
    deadline = getattr(args, "case_deadline", None) or DEFAULT_CASE_DEADLINE
    return _run_isolated(cases, plan, float(deadline))


def _run_cases(backend, cases, plan: dict, out, first: int = 0, on_case=None) -> bool:
    """Run ``cases[first:]`` on ``backend``, writing the report's lines with ``out`` (the heading only
    from the first case); ``on_case(k, case)`` before each case runs. True if one failed."""
    name = plan["name"]
    ok, why = backend.availability()
    if not ok:
        raise ReplayError(f"backend {name!r} is not available: {why}")
    if first == 0:
        shown = ", ".join(f"{k}={v}" for k, v in plan["options"].items()) or "none"
        out(f"replaying {len(cases)} case(s) on backend {name} (options from the {plan['source']}: {shown})")
        loaded, saved_lib = str(backend.info().get("library", "")), plan["saved_lib"]
        if saved_lib and os.path.abspath(saved_lib) != os.path.abspath(loaded or "."):
            out(f"note: the case was recorded with library {printable(saved_lib)}; it is not loaded from the file; "
                f"using {loaded}")
        note = error_reporting_note(dict(backend.info()))
        if note:
            out(note)
    repeats = plan["repeats"]
    configs = checked_configurations(backend) if plan["status"] == MASK_DEPENDENT else []
    runner = backend.checked()
    failed = False
    for k in range(first, len(cases)):  # built one at a time (a large case for the variants the backend declares)
        caps = backend.capabilities().get(cases.kernel(k))
        case = cases.build(k, caps)
        d = DESCRIPTORS[case.kernel]
        out(case.describe())
        if on_case is not None:
            on_case(k, case)
        try:
            outputs, comparisons, allowed = check_case(d, case, runner, caps)
            for c in comparisons:
                out(f"  {c.name}: ok  max abs {c.max_abs:.3g}, max ulp {c.max_ulp:.3g}, err/tol {c.ratio:.3g}")
            if repeats > 1:
                repeat_runs(d, case, runner, outputs, allowed, repeats)
                out(f"  {repeats} runs agree")
            if configs:
                across_configurations(d, case, configs, outputs, allowed, backend.deterministic)
                out(f"  {len(configs)} configurations agree")
        except Exception as exc:
            out(f"  FAIL {describe_failure(exc, case.kernel)}")
            failed = True
    return failed


# ---- in a child process (isolated.py's children) ------------------------------------------------------

#: seconds the child lingers after the last case, so a thread or timer that case's call left behind
#: crashes it while the parent still waits (the check's child gives it the next case's time)
SETTLE_SECONDS = 0.25


def _replay_main(cases, plan, first, conn):
    send, backend = child_backend(plan["name"], plan["options"], conn)
    if backend is None:
        return
    try:
        failed = _run_cases(backend, cases, plan, lambda line: send("line", line), first,
                            lambda k, case: send("case", (k, case_message(case))))
    except XLossError as exc:  # (the backend is not available: one line, exit status 2, as in this process)
        send("setup-error", str(exc))
        return
    time.sleep(SETTLE_SECONDS)
    send("done", failed)


def _run_isolated(cases, plan: dict, base: float) -> int:
    """Run the cases in children; a case that crashes or hangs one is reported, and a fresh child
    takes the cases after it."""
    first, failed = 0, False
    while first < len(cases):
        with Child(_replay_main, (cases, plan, first)) as child:
            try:
                got = await_loaded(child, plan["name"], base)
            except LoadFailure as exc:
                print(f"{exc.result.status.upper()}: {printable(exc.result.message)}")
                return 1
            k, case_msg, calls, wait_s = None, None, [], base
            while got[0] == "message":
                kind, payload = got[1], got[2]
                if kind == "setup-error":
                    raise ChildSetupError(payload)
                if kind == "done":
                    return 1 if failed or payload else 0
                if kind == "line":
                    print(payload)
                elif kind == "case":
                    (k, case_msg), calls = payload, []
                    wait_s = deadline_for(base, case_msg[0])
                elif kind == "abi":
                    calls = abi_calls_after(calls, payload)
                got = child.receive(wait_s)
        status, message, _ = verdict(got[0], got[1], case_msg, wait_s)
        print(f"  {status.upper()} {printable(message)}")
        if calls:
            print("  as the library received it:")
            print("\n".join(f"    {printable(call)}" for call in calls))
        failed = True
        first = (first if k is None else k) + 1  # (the child stopped before a case: the next one is skipped)
    return 1 if failed else 0
