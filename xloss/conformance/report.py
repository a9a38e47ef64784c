"""Rendering check results: tables (drawn and large groups), the failing inputs, JSON, replay files.

In the tables an error of zero shows as ``0`` and a target that ran no example as ``n/a``;
``tolerance`` is the allowed error at the element with the worst ``error/tol`` ratio (a
ratio above 1 fails).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
from pathlib import Path

from .casefile import FORMAT
from .descriptor import printable
from .runner import CRASH, DRAWN, FAILING, HANG, LARGE, PASS_IN_VENDOR_RANGE, TargetResult

GROUP_TITLES = {DRAWN: "edge and drawn cases", LARGE: "large cases (the sizes a tiling sees; repeated, every "
                                                      "configuration)"}


def _num(v: float, ran: bool) -> str:
    if not ran:
        return "n/a"
    return "0" if v == 0 else f"{v:.2e}"


def _ratio(r: TargetResult) -> str:
    if not r.examples:
        return "n/a"
    return "inf" if r.max_ratio == float("inf") else f"{r.max_ratio:.3f}"


def _rows(results: list[TargetResult]) -> list[tuple]:
    head = ("kernel", "dtype", "mode", "status", "examples", "max abs err", "max ulp", "tolerance", "err/tol",
            "time")
    rows = [head]
    for r in results:
        ran = r.examples > 0 and r.status not in ("not implemented", "refused")
        rows.append((r.kernel, r.dtype, "-" if r.mode is None else str(r.mode),
                     r.status.upper() if r.status in FAILING else r.status, str(r.examples), _num(r.max_abs, ran),
                     ("0" if r.max_ulp == 0 else f"{r.max_ulp:.1f}") if ran else "n/a",
                     _num(r.tolerance, ran and r.tolerance > 0) if ran else "n/a", _ratio(r) if ran else "n/a",
                     f"{r.seconds:.1f}s"))
    return rows


def _render(rows) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table(results: list[TargetResult]) -> str:
    """One table per group (edge and drawn cases; large cases)."""
    out = []
    for group in (DRAWN, LARGE):
        rows = [r for r in results if r.group == group]
        if rows:
            out.append(f"{GROUP_TITLES[group]}:\n{_render(_rows(rows))}")
    return "\n\n".join(out)


def summary(results: list[TargetResult]) -> str:
    counts = {}
    for r in results:
        key = f"{r.status} ({r.group})" if r.group != DRAWN else r.status
        counts[key] = counts.get(key, 0) + 1
    failed = any(r.status in FAILING for r in results)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    warned = sum(len(r.warnings) for r in results)
    return f"{'FAILED' if failed else 'PASSED'}: {parts}" + (f" ({warned} warning(s): see WARN)" if warned else "")


def warnings_text(results: list[TargetResult]) -> str:
    """One ``WARN:`` line per warning (a memory leak); '' if none."""
    return "\n".join(f"WARN: {r.kernel} {r.dtype} mode={r.mode}: {w}" for r in results for w in r.warnings)


def declared_variants(capabilities) -> list[str]:
    """One line per kernel whose declaration leaves out values of a variant axis other than the
    mode (those have rows of their own): the cases are drawn within it, e.g. ``focal_loss: targets:
    binary`` (y drawn from {0, 1} only)."""
    from ..kernels import KERNELS

    out = []
    for kernel, caps in sorted(capabilities.items()):
        spec = KERNELS[kernel]
        parts = [f"{axis}: {', '.join(sorted(map(str, caps.variants[axis])))}" for axis in spec.axes
                 if axis != spec.primary and set(caps.variants[axis]) != set(spec.axes[axis])]
        if parts:
            out.append(f"{kernel}: {'; '.join(parts)}")
    return out


def variants_text(capabilities) -> str:
    """The declared-variants lines as a block of the text report ('' where nothing is restricted)."""
    lines = declared_variants(capabilities)
    if not lines:
        return ""
    return "declared variants (cases are drawn only within them; the rest is not tested):\n" + "\n".join(
        f"  {line}" for line in lines)


def error_reporting_note(info: dict) -> str:
    """A warning line where the library does not report errors (``info()['error reporting']`` "no ...")."""
    value = str(info.get("error reporting", ""))
    if value.lower().startswith("no"):
        return (f"WARNING: this library does not report errors ({value}): a refused or failed call cannot be "
                "told apart from a silent wrong result, so refusals are not checked")
    return ""


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "-".join(str(p) for p in parts))


def absolute_library(library: str | None) -> str | None:
    """Each path of an ``os.pathsep``-separated library list made absolute."""
    if not library:
        return library
    return os.pathsep.join(os.path.abspath(p) for p in library.split(os.pathsep))


def _unique_file(directory: Path, stem: str) -> tuple[Path, object]:
    """A new file ``stem[-N].json`` in ``directory`` opened for writing (never overwriting one)."""
    for n in range(1, 100000):
        path = directory / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        try:
            return path, open(path, "x")
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: too many failure files named {stem}")  # pragma: no cover


def write_failures(results: list[TargetResult], directory, backend: str, library: str | None,
                   options: dict | None = None) -> dict:
    """Save each failing input as a replayable case file (with the backend options, so a replay
    runs the same configuration, and the library path, shown but not loaded by a replay);
    return {target key: path} (see :func:`_key`)."""
    options = {k: v for k, v in (options or {}).items() if k != "lib"}
    directory = Path(directory).resolve()
    saved = {}
    for r in results:
        if r.status in FAILING and r.case is not None:
            directory.mkdir(parents=True, exist_ok=True)
            path, f = _unique_file(directory, _slug("xloss-failure", backend, r.kernel, r.dtype, r.mode, r.group))
            with f:
                json.dump({"format": FORMAT, "backend": backend, "library": absolute_library(library),
                           "options": options, "status": r.status, "message": r.message, "outputs": r.outputs,
                           "cases": [r.case]}, f, indent=1)
            saved[_key(r)] = str(path)
    return saved


def _key(r: TargetResult):
    """(kernel, dtype, mode) for the drawn group, (kernel, dtype, mode, "large") for the ladder."""
    return (r.kernel, r.dtype, r.mode) if r.group == DRAWN else (r.kernel, r.dtype, r.mode, r.group)


def replay_command(backend: str, options: dict | None = None):
    """``path -> the command line`` that replays a saved failure on exactly what failed: the backend,
    its library (absolute) and every option given (a replay without them would run the in-tree
    default and could pass)."""
    options = dict(options or {})
    lib = options.pop("lib", None)
    parts = ["--backend", backend] + (["--lib", absolute_library(str(lib))] if lib else [])
    for key, value in options.items():
        parts += ["--option", f"{key}={value}"]
    tail = " ".join(shlex.quote(str(p)) for p in parts)
    return lambda path: f"xloss check --replay {shlex.quote(str(path))} {tail}"


def failures_text(results: list[TargetResult], saved: dict, command=None) -> str:
    """The failing targets with their smallest input; ``command``: path -> the replay command line
    (:func:`replay_command`)."""
    from .casefile import case_from_json

    command = command or (lambda path: f"xloss check --replay {shlex.quote(str(path))}")

    out = []
    for r in results:
        if r.status == PASS_IN_VENDOR_RANGE:  # reported apart: the vendor kernel's own numerics
            group = " (large cases)" if r.group == LARGE else ""
            out.append(f"OUTSIDE THE VENDOR'S RANGE: {r.kernel} {r.dtype} mode={r.mode}{group}: {r.message}\n")
        if r.status not in FAILING:
            continue
        group = " (large cases)" if r.group == LARGE else ""
        found = f" (example {r.found_at})" if r.found_at else ""
        out.append(f"{r.status.upper()}: {r.kernel} {r.dtype} mode={r.mode}{group}{found}: {printable(r.message)}")
        if r.case is not None:
            out.append({CRASH: "  input that crashed:", HANG: "  input that hung:"}.get(r.status,
                                                                                  "  smallest failing input:"))
            out.append("  " + case_from_json(r.case).describe().replace("\n", "\n  "))
        if r.abi_calls:
            out.append("  as the library received it:")
            out.extend(f"    {printable(call)}" for call in r.abi_calls)
        if r.outputs:
            out.append(f"  the two outputs ({r.outputs['first']['label']}; {r.outputs['second']['label']}) "
                       "are saved in the replay file")
        path = saved.get(_key(r))
        if path:
            more = " --repeat 5" if r.status == "nondeterministic" else ""
            out.append(f"  saved: {path}")
            out.append(f"  replay: {command(path)}{more}")
        out.append("")
    return "\n".join(out)


def to_json(results: list[TargetResult], *, backend: str, info: dict, settings: dict, saved: dict,
            variants: list[str] | None = None, command=None) -> dict:
    """The JSON report; ``command``: path -> the replay command line (:func:`replay_command`)."""
    import numpy

    from .. import __version__

    return {
        "xloss": __version__,
        "backend": backend,
        "backend_info": dict(info),
        "settings": settings,
        "declared_variants": list(variants or []),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "numpy": numpy.__version__},
        "passed": not any(r.status in FAILING for r in results),
        "summary": summary(results),
        "results": [dict(r.to_json(), replay_file=saved.get(_key(r)),
                         replay_command=command(saved[_key(r)]) if command and _key(r) in saved else None)
                    for r in results],
    }
