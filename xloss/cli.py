"""The ``xloss`` command: ``xloss backends`` (and the subcommands other modules add)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from . import registry
from .errors import UsageError, XLossError
from .kernels import ALIASES, KERNELS


def _caps_json(caps):
    return {"dtypes": sorted(caps.dtypes), "reductions": sorted(caps.reductions),
            "variants": {k: sorted(v, key=str) for k, v in caps.variants.items()},
            "max_elements": caps.max_elements, "fixed": dict(caps.fixed), "notes": caps.notes}


def cmd_backends(args) -> int:
    infos = registry.list_backends()
    if args.json:
        print(json.dumps([{"name": i.name, "available": i.available, "reason": i.reason,
                           "description": i.description, "info": dict(i.info),
                           "capabilities": {k: _caps_json(c) for k, c in i.capabilities.items()}}
                          for i in infos], indent=2))
        return 0
    for i in infos:
        status = "available" if i.available else f"UNAVAILABLE: {i.reason}"
        print(f"{i.name}  [{status}]")
        if i.description:
            print(f"    {i.description}")
        for key, value in i.info.items():
            print(f"    {key}: {value}")
        for kernel in KERNELS:
            caps = i.capabilities.get(kernel)
            print(f"    {kernel:<{_NAME_WIDTH}} {caps.describe() if caps else '-'}")
        print()
    return 0


_SHORT_NAMES = ", ".join(k.aliases[0] for k in KERNELS.values())
_NAME_WIDTH = max(map(len, KERNELS)) + 1


def _option_value(text: str):
    for convert in (lambda t: int(t, 0), float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _backend_options(args) -> dict:
    options = {}
    for item in args.option or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--option takes KEY=VALUE, got {item!r}")
        options[key] = _option_value(value)
    if args.lib is not None:
        if not args.lib.strip() or "" in args.lib.split(os.pathsep):
            raise UsageError(f"--lib names no library ({args.lib!r}: an unset shell variable?); give the path of "
                             "your shared library, or leave --lib out to check the backend's own")
        options["lib"] = args.lib
    return options


def _hypothesis_storage():
    """Hypothesis keeps its caches under the user's cache folder, not in the working directory
    (the isolated children inherit the variable)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(cache, "xloss", "hypothesis"))


def _describe_here(backend) -> dict:
    """What :func:`xloss.conformance.isolated.describe` asks a child, from a backend made in this process."""
    from .conformance import report

    ok, why = backend.availability()
    caps = backend.capabilities() if ok else {}
    return {"available": ok, "reason": why, "info": dict(backend.info()) if ok else {},
            "variants_text": report.variants_text(caps), "declared_variants": report.declared_variants(caps),
            "configurations": [label for label, _ in backend.configurations()] if ok else []}


def cmd_check(args) -> int:
    from .conformance import report
    from .conformance.isolated import LoadFailure, describe, run_isolated
    from .conformance.making import make_backend
    from .conformance.runner import FAILING, run_suite

    _hypothesis_storage()
    if args.judge or args.export:
        return _on_target(args)
    if args.case_deadline is None:
        from .conformance.isolated import DEFAULT_CASE_DEADLINE

        args.case_deadline = DEFAULT_CASE_DEADLINE
    if not 0 < args.case_deadline < float("inf"):
        raise UsageError(f"--case-deadline must be a positive number of seconds; got {args.case_deadline}")
    if args.replay:
        from .conformance.replay import replay

        return replay(args, _backend_options(args), make_backend, isolated=not args.in_process)
    if not args.backend:
        raise UsageError("--backend NAME is required (or --replay FILE)")
    if args.repeat < 1:
        raise UsageError(f"--repeat must be >= 1; got {args.repeat}")
    kernels = [ALIASES.get(k, k) for k in args.kernels] if args.kernels else None
    for k in kernels or ():
        if k not in KERNELS:
            short = ", ".join(a for a in ALIASES if a not in KERNELS)
            raise UsageError(f"unknown kernel {k!r}; choose from {short} or full names")
    options = _backend_options(args)
    settings = {"max_examples": args.max_examples, "seed": args.seed, "kernels": kernels, "options": options,
                "isolated": not args.in_process, "large": not args.no_large, "repeat": args.repeat,
                "case_deadline": args.case_deadline}
    if args.in_process:
        backend = make_backend(args.backend, options)
        described = _describe_here(backend)
    else:  # the library is loaded in a child only: one that crashes as it loads is a verdict, not our death
        try:
            described = describe(args.backend, options, case_deadline=args.case_deadline)
        except LoadFailure as exc:
            return _report(args, [exc.result], {}, {"library": options.get("lib", "")}, settings, [])
    if not described["available"]:
        raise UsageError(f"backend {args.backend!r} is not available: {described['reason']}")
    info = described["info"]
    print(f"xloss check: backend {args.backend} {info.get('library', '')}".rstrip(), file=sys.stderr)
    note = report.error_reporting_note(info)
    if note:
        print(note, file=sys.stderr)

    def progress(r):
        print(f"  {r.kernel:<{_NAME_WIDTH}} {r.dtype:<9} {str(r.mode):<13} {r.group:<6} {r.status} "
              f"({r.examples} examples, {r.seconds:.1f}s)", file=sys.stderr)

    settings["configurations"] = described["configurations"]
    common = dict(kernels=kernels, max_examples=args.max_examples, seed=args.seed, on_result=progress,
                  large_cases=not args.no_large, repeats=args.repeat)
    if args.in_process:
        results = run_suite(backend, **common)
    else:
        results = run_isolated(args.backend, options, case_deadline=args.case_deadline, **common)
    code = _report(args, results, described, info, settings, described["declared_variants"], note)
    return code if any(r.status in FAILING for r in results) else 0


def _report(args, results, described, info, settings, variants, note="") -> int:
    """Print the report (and write the JSON and the replay files); 1 (some target failed)."""
    from .conformance import report

    options = settings["options"]
    saved = report.write_failures(results, args.failures_dir, args.backend, info.get("library"), options)
    if described.get("variants_text"):
        print(described["variants_text"] + "\n")
    print(report.table(results))
    command = report.replay_command(args.backend, options)
    text = report.failures_text(results, saved, command)
    if text:
        print()
        print(text)
    warnings = report.warnings_text(results)
    if warnings:
        print(warnings)
    if note:
        print(note)
    print(report.summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(results, backend=args.backend, info=info, settings=settings, saved=saved,
                                     variants=variants, command=command), f, indent=1)
    return 1


def _on_target(args) -> int:
    """``--export DIR`` (the suite, or ``--replay FILE``'s cases) and ``--judge DIR``: xloss/conformance/export.py."""
    if args.judge:
        if args.export or args.replay or args.lib:
            raise UsageError("--judge DIR takes no --export, --replay or --lib: the folder's manifest says what ran")
        from .conformance.judge import judge

        return judge(args.judge, failures_dir=args.failures_dir, json_path=args.json)
    from .conformance.export import export

    if not args.backend:
        raise UsageError("--export DIR needs --backend NAME (ascend, ft78ne or mt7004)")
    kernels = [ALIASES.get(k, k) for k in args.kernels] if args.kernels else None
    for k in kernels or ():
        if k not in KERNELS:
            raise UsageError(f"unknown kernel {k!r}")
    settings = {"max_examples": args.max_examples, "seed": args.seed, "kernels": kernels, "large": not args.no_large,
                "repeat": args.repeat, "repeat_given": args.repeat_given}
    export(args.export, args.backend, _backend_options(args), settings, replay_args=args if args.replay else None)
    return 0


def _bench_sizes(sizes):
    """Each size parsed strictly (N, NxC or BTxHxV; K/M/G suffixes) before anything is measured."""
    from .bench.workloads import parse_count

    for text in sizes or ():
        parts = text.lower().split("x")
        try:
            dims = [parse_count(p) for p in parts]
        except ValueError:
            dims = None
        if not dims or len(dims) > 3 or min(dims) < 1:
            raise UsageError(f"--sizes: {text!r} is not a size: N (focal, bce: e.g. 8M), NxC (nll: 32768x1000) "
                             "or BTxHxV (flce: 2048x1024x32000), each a positive count with an optional K/M/G")
    return sizes


def _seconds(value, option: str):
    """``value`` if it is None or a positive, finite number of seconds; else a one-line UsageError."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} takes a positive, finite number of seconds; got {value}")
    return value


def _bench_outputs(args) -> dict:
    """The output paths, each checked before anything is measured."""
    from .bench import outputs

    paths = {opt: outputs.check(path, opt) for opt, path in (("--json", args.json), ("--csv", args.csv),
                                                             ("--plot", args.plot)) if path}
    if "--plot" in paths:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install 'xloss[bench]')") from None
    return paths


def _bench_compare(args, new_result=None) -> int:
    from .bench import compare

    old = compare.load(args.compare[0])
    new_path = args.compare[1] if len(args.compare) == 2 else (args.json or "this run")
    new = compare.load(args.compare[1]) if len(args.compare) == 2 else new_result
    entries = compare.compare(old, new, args.threshold)
    print(compare.text(entries, args.compare[0], new_path, old, new, args.threshold))
    return compare.exit_status(entries)


def cmd_bench(args) -> int:
    from .bench import BenchConfig, outputs, plot, report, run
    from .bench.compare import load

    if args.compare and len(args.compare) > 2:
        raise UsageError("--compare takes OLD.json and optionally NEW.json")
    if args.threshold < 0 or not math.isfinite(args.threshold):
        raise UsageError(f"--threshold takes a fraction at least 0 (e.g. 0.05); got {args.threshold}")
    if args.compare and len(args.compare) == 2:
        return _bench_compare(args)
    old = load(args.compare[0]) if args.compare else None
    _bench_sizes(args.sizes)
    known = registry.backend_names()
    for name in args.backends or ():
        if name not in known:
            raise UsageError(f"--backends: no backend named {name!r}; registered backends: {', '.join(known)}")
    if args.repeat is not None and args.repeat < 1:
        raise UsageError(f"--repeat takes a positive number of rounds; got {args.repeat}")
    settings = dict(kernels=args.kernels or BenchConfig().kernels, backends=args.backends, sizes=args.sizes,
                    dtype=args.dtype, quick=args.quick, emulators=args.emulators)
    if old is not None and not (args.kernels or args.sizes or args.backends):  # measure what the old run did
        settings.update({k: old["config"][k] for k in settings if k in old.get("config", {})})
    config = BenchConfig(**settings, repeat=args.repeat, compile=not args.no_compile,
                         budget_s=_seconds(args.budget, "--budget"), max_call_s=_seconds(args.max_call, "--max-call"),
                         cold_start=args.cold_start)
    config.resolved()  # every mistake in the arguments, before anything is measured
    paths = _bench_outputs(args)

    def save(result):
        if "--json" in paths:
            outputs.write_text(paths["--json"], report.json_text(result))
        if "--csv" in paths:
            outputs.write_text(paths["--csv"], report.csv_text(result))

    result = run(config, progress=not args.no_progress, on_cell=save)
    print(report.table(result))
    if "--plot" in paths and result["cells"]:
        plot.plot(result, paths["--plot"])
    status = _bench_compare(args, result) if old is not None else 0
    return 130 if result["interrupted"] else status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xloss", description="xloss: loss kernels over CPU and vendor-ABI backends")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("backends", help="list registered backends, their library and declared capabilities")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("check", help="run the conformance suite against a backend or a port library",
                       description="Property-test a backend (or your own library through a backend's ABI) against "
                                   "the float64 oracle; report per kernel, dtype and mode.")
    p.add_argument("--backend", help="backend name (see `xloss backends`)")
    p.add_argument("--lib", help="load this shared library (or os.pathsep-separated list) through the backend's ABI")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="backend option, e.g. memory=private or core_mask=0x0f (repeatable)")
    p.add_argument("--kernels", nargs="+", metavar="KERNEL",
                   help=f"kernels to test ({_SHORT_NAMES} or full names); default all")
    p.add_argument("--max-examples", type=int, default=100, help="hypothesis examples per target (default 100)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--failures-dir", default="xloss-check-failures", metavar="DIR",
                   help="where failing inputs are saved for --replay (default ./xloss-check-failures)")
    p.add_argument("--in-process", action="store_true",
                   help="run (or --replay) in this process (faster start; a crashing or hanging port takes the "
                        "report down)")
    p.add_argument("--case-deadline", type=float, metavar="SECONDS",
                   help="seconds a case of up to 2^20 elements may take before it is a HANG (larger cases get "
                        "proportionally more; default: a generous two minutes); the library's process group is "
                        "killed")
    p.add_argument("--no-large", action="store_true", help="skip the ladder of large cases (a quick check)")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="runs of each large case (and of each replayed case) that must agree (default 3; "
                        "1 for a replay unless the saved status was nondeterministic)")
    p.add_argument("--replay", metavar="FILE",
                   help="re-run the cases saved in FILE (data only: the backend and its options come from the "
                        "command line or are confirmed from the file; a library is loaded only with --lib)")
    p.add_argument("--export", metavar="DIR",
                   help="write the check's ABI calls (or --replay FILE's) as data, with a C runner and build.sh, "
                        "for a run on the target (docs/on-target.md)")
    p.add_argument("--judge", metavar="DIR", help="report on what the runner wrote under DIR/out/")
    p.set_defaults(func=cmd_check, repeat_given=None)

    p = sub.add_parser("bench", help="time the backends and the PyTorch alternatives side by side",
                       description="Time each kernel on the host backends and on PyTorch eager, torch.compile, "
                                   "ATen backward ops and a materialised linear+cross-entropy, in one process, within "
                                   "a time budget; speed-ups with 95% paired bootstrap intervals.")
    p.add_argument("--kernels", nargs="+", metavar="KERNEL",
                   help=f"{_SHORT_NAMES}, lm_step or full names (default all)")
    p.add_argument("--backends", nargs="+", metavar="NAME",
                   help="xloss backends to include (default: the host backends; naming a vendor-ABI backend, or "
                        "--emulators, adds the C emulators)")
    p.add_argument("--sizes", nargs="+", metavar="SIZE",
                   help="e.g. 8M (focal, bce), 32768x1000 (nll), 2048x1024x32000 (flce: BT x H x V)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"])
    p.add_argument("--repeat", type=int, metavar="N",
                   help="at most N timed rounds per cell (default: as many as the budget allows)")
    p.add_argument("--quick", action="store_true", help="small sizes and a 40 s budget (the whole run within a minute)")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="time for the whole run, shared among the cells (default 240; 40 with --quick)")
    p.add_argument("--max-call", type=float, metavar="SECONDS",
                   help="skip an implementation whose one call, measured, takes longer (default: the cell's share of "
                        "the budget)")
    p.add_argument("--emulators", action="store_true",
                   help="also time the vendor-ABI backends (xloss's C emulators), in their own section, unranked")
    p.add_argument("--cold-start", action="store_true",
                   help="also time each first call in a fresh process with empty compiler caches (outside the budget)")
    p.add_argument("--no-cold-start", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first call compiles)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON, rewritten after every cell")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per implementation and cell, after every cell")
    p.add_argument("--plot", metavar="FILE.png", help="one panel per kernel: speed-ups with their intervals")
    p.add_argument("--compare", nargs="+", metavar="RUN.json",
                   help="OLD.json [NEW.json]: per cell, the time ratio with its interval and a verdict; without "
                        "NEW.json, run the old run's cells now and compare. Exit status 1 if anything got slower")
    p.add_argument("--threshold", type=float, default=0.05, metavar="FRACTION",
                   help="with --compare: smaller changes are 'same' (default 0.05)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.repeat_given = any(a == "--repeat" or a.startswith("--repeat=") for a in argv)
    try:
        return args.func(args)
    except XLossError as exc:  # a usage mistake or a refusal: one line, no traceback
        print(f"xloss {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (xloss check has killed its child's process group on the way out)
        print(f"xloss {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
