"""``xloss check --replay FILE``: re-run saved cases, treating the file as data only.

The backend comes from ``--backend`` or, if the file names a *registered* backend (never a
``module:factory`` path), from the file; its options come from ``--option``, or from the file
when the same backend is used (scalars only, never ``lib``; the backend's own factory refuses
any it does not take). A library path in the file is shown, never loaded: pass ``--lib`` to
load one. Each case runs in checked mode, ``--repeat`` times (the runs must agree), and under
every configuration of the backend where the saved status was ``mask-dependent``.
"""

from __future__ import annotations

import os

from .. import registry
from ..errors import XLossError
from . import DESCRIPTORS
from .casefile import load_cases
from .configs import MASK_DEPENDENT, NONDETERMINISTIC, across_configurations, checked_configurations, repeat_runs
from .descriptor import printable
from .execute import check_case, describe_failure
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


def replay(args, given_options: dict, make_backend) -> int:
    cases, meta = load_cases(args.replay)
    saved_lib = meta.get("library")
    if saved_lib and not args.lib:  # the backend's default library is not what failed: it could pass
        raise ReplayError(f"{args.replay} was recorded with library {printable(saved_lib)}: pass --lib with it "
                          "(or with your rebuilt library) to replay what failed")
    name = _backend_name(args, meta)
    options, source = _options(args, meta, name, given_options)
    backend = make_backend(name, options)
    ok, why = backend.availability()
    if not ok:
        raise ReplayError(f"backend {name!r} is not available: {why}")
    shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "none"
    print(f"replaying {len(cases)} case(s) on backend {name} (options from the {source}: {shown})")
    loaded = str(backend.info().get("library", ""))
    if saved_lib and os.path.abspath(saved_lib) != os.path.abspath(loaded or "."):
        print(f"note: the case was recorded with library {printable(saved_lib)}; it is not loaded from the file; "
              f"using {loaded}")
    note = error_reporting_note(dict(backend.info()))
    if note:
        print(note)
    status = meta.get("status")
    repeats = args.repeat if getattr(args, "repeat_given", False) else (3 if status == NONDETERMINISTIC else 1)
    configs = checked_configurations(backend) if status == MASK_DEPENDENT else []
    runner = backend.checked()
    failed = False
    for k in range(len(cases)):  # built one at a time (a large case for the variants the backend declares)
        caps = backend.capabilities().get(cases.kernel(k))
        case = cases.build(k, caps)
        d = DESCRIPTORS[case.kernel]
        print(case.describe())
        try:
            outputs, comparisons, allowed = check_case(d, case, runner, caps)
            for c in comparisons:
                print(f"  {c.name}: ok  max abs {c.max_abs:.3g}, max ulp {c.max_ulp:.3g}, err/tol {c.ratio:.3g}")
            if repeats > 1:
                repeat_runs(d, case, runner, outputs, allowed, repeats)
                print(f"  {repeats} runs agree")
            if configs:
                across_configurations(d, case, configs, outputs, allowed, backend.deterministic)
                print(f"  {len(configs)} configurations agree")
        except Exception as exc:
            print(f"  FAIL {describe_failure(exc, case.kernel)}")
            failed = True
    return 1 if failed else 0
