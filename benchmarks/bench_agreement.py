"""Do several ``xloss bench --json`` runs agree? For every cell and every pair of native
implementations, the paired speed-up of one over the other in each run (from the saved per-round
samples), and whether any two runs contradict each other: one saying "a faster than b", another
"b faster than a", each with an interval excluding 1. Also lists a native implementation missing
from a cell of any run, and each run's budget and load.

    python benchmarks/bench_agreement.py run1.json run2.json run3.json
"""

from __future__ import annotations

import argparse
import itertools

from xloss.bench import compare, impls, stats


def pair_verdicts(run: dict) -> dict:
    """{(cell key, a, b): verdict of a over b} for every pair of native implementations of every cell."""
    out = {}
    for cell in run["cells"]:
        key = (cell["kernel"], cell["mode"], cell["size"], cell["dtype"])
        rows = {r["implementation"]: r for r in cell["results"] if r["kind"] != impls.VENDOR_ABI}
        for a, b in itertools.combinations(sorted(rows), 2):
            ta = dict(zip(rows[a]["rounds"], rows[a]["wall_samples_s"]))
            common = [(ta[r], w) for r, w in zip(rows[b]["rounds"], rows[b]["wall_samples_s"]) if r in ta]
            if not common:
                out[(key, a, b)] = stats.TOO_FEW
                continue
            # speed-up of a over b: b's time / a's time, round by round
            ratio = stats.paired_ratio([w for _, w in common], [x for x, _ in common])
            out[(key, a, b)] = stats.speed_verdict(ratio)
    return out


def _native(name: str) -> bool:
    """A PyTorch candidate or floor, or an xloss host backend (not a vendor ABI)."""
    if not name.startswith("xloss:"):
        return True
    return impls.is_native(name.split(":", 1)[1].split()[0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN.json")
    args = parser.parse_args(argv)
    runs = [compare.load(p, "run") for p in args.runs]
    for path, run in zip(args.runs, runs):
        load = run["load"]
        print(f"{path}: {run['started_at']}, budget {run['budget']['total_s']:.0f} s, used "
              f"{run['budget']['used_s']:.0f} s, load average {load['load_average_before']:.2f} -> "
              f"{load['load_average_after']:.2f}, other processes {load['other_processes_cpus']:.2f} CPUs")
    verdicts = [pair_verdicts(r) for r in runs]
    keys = sorted(set().union(*verdicts))
    decided = contradictions = always = 0
    for k in keys:
        seen = [v.get(k, "absent") for v in verdicts]
        ranked = {s for s in seen if s in (stats.FASTER, stats.SLOWER)}
        if ranked:
            decided += 1
        if len(ranked) == 2:
            contradictions += 1
            print(f"CONTRADICTION {k[0][0]} {k[0][1]} {k[0][2]}: {k[1]} vs {k[2]}: {', '.join(seen)}")
        if all(s in (stats.FASTER, stats.SLOWER) for s in seen) and len(ranked) == 1:
            always += 1
    missing = []
    for path, run in zip(args.runs, runs):
        for cell in run["cells"]:
            for s in cell["skipped"]:
                if _native(s["name"]) and "timed on the cpu backend only" not in s["reason"] \
                        and "disabled" not in s["reason"]:
                    missing.append(f"{path}: {cell['kernel']} {cell['mode']}: {s['name']}: {s['reason']}")
    print(f"{len(keys)} pairs of native implementations; {decided} ranked (interval excluding 1) in at least one "
          f"run, {always} ranked the same way in every run, {contradictions} contradicted between runs")
    print("native implementations skipped: " + ("; ".join(missing) if missing else "none"))
    return 1 if contradictions or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
