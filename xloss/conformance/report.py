"""Rendering check results: a table, the failing inputs, JSON, and replay files."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from .casefile import case_from_json, save_cases
from .runner import FAILING, TargetResult


def _num(v: float) -> str:
    return "-" if v == 0 else f"{v:.2e}"


def table(results: list[TargetResult]) -> str:
    head = ("kernel", "dtype", "mode", "status", "examples", "max abs err", "max rel err", "max ulp", "time")
    rows = [head]
    for r in results:
        rows.append((r.kernel, r.dtype, "-" if r.mode is None else str(r.mode),
                     r.status.upper() if r.status in FAILING else r.status, str(r.examples), _num(r.max_abs),
                     _num(r.max_rel), "-" if r.max_ulp == 0 else f"{r.max_ulp:.1f}", f"{r.seconds:.1f}s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(results: list[TargetResult]) -> str:
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    failed = sum(counts.get(s, 0) for s in FAILING)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{'FAILED' if failed else 'PASSED'}: {parts}"


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "-".join(str(p) for p in parts))


def write_failures(results: list[TargetResult], directory, backend: str, library: str | None,
                   options: dict | None = None) -> dict:
    """Save each failing input as a replayable case file (with the backend options, so a replay
    runs the same configuration); return {target key: path}."""
    options = {k: v for k, v in (options or {}).items() if k != "lib"}
    directory = Path(directory)
    saved = {}
    for r in results:
        if r.status in FAILING and r.case is not None:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{_slug('xloss-failure', backend, r.kernel, r.dtype, r.mode)}.json"
            save_cases(path, [case_from_json(r.case)], backend=backend, library=library, options=options,
                       status=r.status, message=r.message)
            saved[(r.kernel, r.dtype, r.mode)] = str(path)
    return saved


def failures_text(results: list[TargetResult], saved: dict) -> str:
    out = []
    for r in results:
        if r.status not in FAILING:
            continue
        out.append(f"{r.status.upper()}: {r.kernel} {r.dtype} mode={r.mode}: {r.message}")
        if r.case is not None:
            out.append("  smallest failing input:" if r.status != "crash" else "  input that crashed:")
            out.append("  " + case_from_json(r.case).describe().replace("\n", "\n  "))
        path = saved.get((r.kernel, r.dtype, r.mode))
        if path:
            out.append(f"  saved: {path}   (replay: xloss check --replay {path})")
        out.append("")
    return "\n".join(out)


def to_json(results: list[TargetResult], *, backend: str, info: dict, settings: dict, saved: dict) -> dict:
    import numpy

    from .. import __version__

    return {
        "xloss": __version__,
        "backend": backend,
        "backend_info": dict(info),
        "settings": settings,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "numpy": numpy.__version__},
        "passed": not any(r.status in FAILING for r in results),
        "summary": summary(results),
        "results": [dict(r.to_json(), replay_file=saved.get((r.kernel, r.dtype, r.mode))) for r in results],
    }
