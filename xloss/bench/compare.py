"""``xloss bench --compare OLD.json [NEW.json]``: each implementation of each cell the two runs
share, its time ratio (new / old) with a bootstrap interval over the two runs' samples, and a
verdict: "slower" or "faster" where the interval excludes 1 and the change is at least the
threshold, else "same". The exit status says whether anything got slower (for CI).

Two runs share no rounds, so unlike the ratios within a run these are not paired: a change of
load between the runs moves every implementation alike. Each run's load is printed above.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import XLossValueError
from . import stats
from .report import num, ratio_text, unit

#: The default threshold: a change smaller than this fraction is "same" whatever its interval.
THRESHOLD = 0.05
#: Exit statuses: nothing slower, something slower.
OK, REGRESSED = 0, 1

_CELL_KEY = ("kernel", "mode", "size", "dtype")


def load(path, option: str = "--compare") -> dict:
    """A saved run (``xloss bench --json``), checked to hold per-sample times; else one-line
    :class:`XLossValueError`. The file is read as data only."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise XLossValueError(f"{option}: cannot read {p}: {exc.strerror}") from None
    except ValueError as exc:
        raise XLossValueError(f"{option}: {p} is not JSON ({exc})") from None
    from . import SCHEMA

    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("cells"), list):
        raise XLossValueError(f"{option}: {p} is not a saved xloss bench run of this version (schema {SCHEMA}, "
                              "written by xloss bench --json)")
    for cell in data["cells"]:
        for r in cell.get("results", ()):
            samples = r.get("wall_samples_s")
            if not isinstance(samples, list) or not samples or not all(
                    isinstance(v, (int, float)) and v > 0 for v in samples):
                raise XLossValueError(f"{option}: {p}: {r.get('implementation')!r} has no per-sample times")
    return data


def _cells(run: dict) -> dict:
    return {tuple(c[k] for k in _CELL_KEY): c for c in run["cells"]}


def compare(old: dict, new: dict, threshold: float = THRESHOLD) -> list[dict]:
    """One entry per (cell, implementation) in either run: the ratio and verdict where both have it."""
    out = []
    a, b = _cells(old), _cells(new)
    for key in list(a) + [k for k in b if k not in a]:
        rows_old = {r["implementation"]: r for r in a.get(key, {}).get("results", ())}
        rows_new = {r["implementation"]: r for r in b.get(key, {}).get("results", ())}
        for name in list(rows_old) + [n for n in rows_new if n not in rows_old]:
            ro, rn = rows_old.get(name), rows_new.get(name)
            entry = {**dict(zip(_CELL_KEY, key)), "implementation": name,
                     "old_median_s": ro["median_s"] if ro else None, "new_median_s": rn["median_s"] if rn else None}
            if ro is None or rn is None:
                entry.update(ratio=None, verdict="only in new" if ro is None else "only in old")
            else:
                r = stats.unpaired_ratio(rn["wall_samples_s"], ro["wall_samples_s"])
                entry.update(r.as_dict(), verdict=stats.change_verdict(r, threshold))
            out.append(entry)
    return out


def exit_status(entries: list[dict]) -> int:
    return REGRESSED if any(e["verdict"] == stats.SLOWER for e in entries) else OK


def _describe(label: str, path, run: dict) -> str:
    m, load = run.get("machine", {}), run.get("load", {})
    la = load.get("load_average_before")
    oc = load.get("other_processes_cpus")
    return (f"{label}: {path} ({run.get('started_at', 'time unknown')}; {m.get('cpu', '?')}, "
            f"{m.get('logical_cpus', '?')} CPUs; load average {'-' if la is None else f'{la:.2f}'}, other "
            f"processes {'-' if oc is None else f'{oc:.2f}'} CPUs)")


def text(entries: list[dict], old_path, new_path, old: dict, new: dict, threshold: float) -> str:
    lines = [_describe("old", old_path, old), _describe("new", new_path, new)]
    if old.get("machine", {}).get("cpu") != new.get("machine", {}).get("cpu"):
        lines.append("WARNING: the two runs are from different CPUs")
    lines.append(f"new/old: ratio of median times (below 1: faster), 95% bootstrap interval; slower/faster where "
                 f"the interval excludes 1 and the change is at least {threshold:.0%}, else same")
    by_cell = {}
    for e in entries:
        by_cell.setdefault(tuple(e[k] for k in _CELL_KEY), []).append(e)
    for key, rows in by_cell.items():
        lines.append("")
        lines.append(f"{key[0]} {key[1]}, size {key[2]}, {key[3]}")
        u, k = unit([e["old_median_s"] for e in rows] + [e["new_median_s"] for e in rows])
        table = [("implementation", f"old ({u})", f"new ({u})", "new/old [95% CI]", "verdict")]
        for e in rows:
            table.append((e["implementation"], "-" if e["old_median_s"] is None else num(e["old_median_s"] * k),
                          "-" if e["new_median_s"] is None else num(e["new_median_s"] * k),
                          ratio_text(e) if e.get("ratio") is not None else "-", e["verdict"]))
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    slower = sum(e["verdict"] == stats.SLOWER for e in entries)
    faster = sum(e["verdict"] == stats.FASTER for e in entries)
    lines.append("")
    lines.append(f"{slower} slower, {faster} faster, {len(entries) - slower - faster} same or not comparable")
    return "\n".join(lines)
