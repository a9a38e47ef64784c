"""Golden outputs of the CLI, for refactors that must not change them (docs/plans/kernel-families.md, S0).

    python scripts/golden_outputs.py capture DIR              run the commands below; outputs + manifest.json
    python scripts/golden_outputs.py compare OLD_DIR NEW_DIR  normalised comparison; exit 1 on any difference

Check reports are compared exactly after dropping timing, machine and load information; bench reports
only by their structure (cells, candidates, kinds, skip reasons), since timings vary; text exactly.
Run it from outside the repository, so that the installed package is the one imported.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHECK = ["check", "--max-examples", "5", "--seed", "0"]
# (name, kind, arguments, timeout in seconds); kind "text" compares stdout, "check"/"bench" the --json file
COMMANDS = [
    ("backends", "text", ["xloss", "backends", "--json"], 120),
    ("check-help", "text", ["xloss", "check", "--help"], 60),
    ("bench-help", "text", ["xloss", "bench", "--help"], 60),
    ("all", "text", [sys.executable, "-c", "import xloss; print(sorted(xloss.__all__))"], 60),
    ("ref", "check", ["xloss", *CHECK, "--backend", "reference", "--no-large", "--in-process"], 300),
    ("ref-large", "check", ["xloss", "check", "--backend", "reference", "--kernels", "nll", "flce",
                            "--max-examples", "2", "--seed", "0", "--in-process"], 300),  # the ladders
    ("ascend", "check", ["xloss", *CHECK, "--backend", "ascend", "--kernels", "focal", "nll", "flce",
                         "vp_max_sum"], 300),  # isolated children, C emulator
    ("mt7004", "check", ["xloss", *CHECK, "--backend", "mt7004", "--kernels", "bce"], 300),
    ("cpu", "check", ["xloss", *CHECK, "--backend", "cpu", "--kernels", "bce", "focal", "--no-large"], 300),
    ("bench", "bench", ["xloss", "bench", "--quick", "--kernels", "focal", "bce", "nll", "--no-compile",
                        "--budget", "15", "--no-progress"], 180),
]
DROP = {"seconds", "started_at", "machine", "load"}  # plus every key ending in "_s" (a duration)
LEAK = re.compile(r"kept about [\d.]+ [KM]iB \(\d+ bytes\)")  # a leak warning's size is measured: it varies a little
MEASURED = re.compile(r"one (warm )?call took .*limit")  # bench's time-limit skips depend on the machine's speed


def _executable(argv):
    if argv[0] == "xloss":  # the venv's entry point beside this interpreter, else the one on PATH
        here = Path(sys.executable).parent / "xloss"
        return [str(here) if here.exists() else shutil.which("xloss") or "xloss", *argv[1:]]
    return argv


def _shown(argv, out: Path) -> str:
    """The command as the manifest records it: comparable across capture directories."""
    return " ".join(argv).replace(sys.executable, "python").replace(str(out), "<DIR>")


def capture(out: Path) -> int:
    out = out.resolve()  # the commands run in out/work: relative paths would land there
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"  # the cwd: check's default failure directory lands here, not in the caller's cwd
    work.mkdir(exist_ok=True)
    manifest, start = [], time.monotonic()
    # the checkout the installed package comes from: library paths in the outputs name it (another worktree
    # gives other paths, nothing else)
    where = "import os, xloss; print(os.path.dirname(os.path.dirname(os.path.abspath(xloss.__file__))))"
    repo = subprocess.run([sys.executable, "-c", where], cwd=work, capture_output=True, text=True, timeout=120)
    for name, kind, argv, timeout in COMMANDS:
        argv = argv + (["--json", str(out / f"{name}.json")] if kind != "text" else [])
        t0 = time.monotonic()
        try:
            p = subprocess.run(_executable(argv), cwd=work, capture_output=True, text=True, timeout=timeout)
            code, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            code, stdout, stderr = f"timeout after {timeout}s", exc.stdout or "", exc.stderr or ""
            stdout, stderr = (s.decode(errors="replace") if isinstance(s, bytes) else s for s in (stdout, stderr))
        (out / f"{name}.stdout").write_text(stdout)
        (out / f"{name}.stderr").write_text(stderr)
        entry = {"name": name, "kind": kind, "command": _shown(argv, out),
                 "exit_code": code, "stdout": f"{name}.stdout", "stderr": f"{name}.stderr",
                 "file": f"{name}.json" if kind != "text" else f"{name}.stdout", "wall_s": time.monotonic() - t0}
        manifest.append(entry)
        print(f"{name:<11} exit {code}  {entry['wall_s']:.1f}s", file=sys.stderr)
    header = {"root": str(out), "repo": repo.stdout.strip()}
    (out / "manifest.json").write_text(json.dumps({**header, "items": manifest}, indent=1))
    print(f"captured {len(manifest)} items in {time.monotonic() - start:.0f}s into {out}", file=sys.stderr)
    return 0


def _paths(text: str, manifest: dict) -> str:
    """The capture directory (failure files, --json paths) becomes <DIR>, the package's checkout <REPO>."""
    text = text.replace(manifest["root"], "<DIR>")
    return text.replace(manifest["repo"], "<REPO>") if manifest.get("repo") else text


def _strip(v, manifest: dict):
    """Drop timing/machine/load keys everywhere, normalise paths; a leak warning loses its measured size."""
    if isinstance(v, dict):
        return {k: _strip(x, manifest) for k, x in v.items() if k not in DROP and not k.endswith("_s")}
    if isinstance(v, list):
        return [_strip(x, manifest) for x in v]
    return LEAK.sub("kept about <measured size>", _paths(v, manifest)) if isinstance(v, str) else v


def _bench_structure(report: dict) -> list:
    cells = []
    for c in report.get("cells", []):
        skipped = {s["name"]: MEASURED.sub("too slow (measured)", s["reason"]) for s in c.get("skipped", [])}
        cells.append({"cell": f"{c['kernel']} {c['mode']} {c['size']} {c['dtype']}", "baseline": c["baseline"],
                      "candidates": [f"{r['implementation']} ({r['kind']})" for r in c.get("results", [])],
                      "skipped": skipped})
    return cells


def _label(x, i: int) -> str:
    """A list element's name in a diff: a check result by its kernel/dtype/mode/group, a cell by its key."""
    if isinstance(x, dict) and "kernel" in x and "dtype" in x:
        return "/".join(str(x.get(k)) for k in ("kernel", "dtype", "mode", "group"))
    return str(x["cell"]) if isinstance(x, dict) and "cell" in x else str(i)


def _lines(v, path: str = "") -> list[str]:
    """One `path: value` line per leaf, so that a unified diff names the field that changed."""
    if isinstance(v, dict) and v:
        return [line for k, x in v.items() for line in _lines(x, f"{path}.{k}" if path else str(k))]
    if isinstance(v, list) and v:
        return [line for i, x in enumerate(v) for line in _lines(x, f"{path}[{_label(x, i)}]")]
    return [f"{path}: {json.dumps(v)}"]


def _normalised(d: Path, entry: dict, manifest: dict) -> list[str]:
    f = d / entry["file"]
    if not f.exists():
        return [f"<missing {entry['file']}>"]
    if entry["kind"] == "text":
        return _paths(f.read_text(), manifest).splitlines()
    data = json.loads(f.read_text())
    return _lines(_strip(data, manifest) if entry["kind"] == "check" else _bench_structure(data))


def compare(old: Path, new: Path) -> int:
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (old, new)]
    items = [{e["name"]: e for e in m["items"]} for m in manifests]
    differ = 0
    for name in dict.fromkeys([*items[0], *items[1]]):
        a, b = items[0].get(name), items[1].get(name)
        if a is None or b is None:
            print(f"== {name}: only in {old if b is None else new}")
            differ += 1
            continue
        diff = [f"command: {a['command']!r} -> {b['command']!r}"] if a["command"] != b["command"] else []
        diff += [f"exit code: {a['exit_code']} -> {b['exit_code']}"] if a["exit_code"] != b["exit_code"] else []
        diff += list(difflib.unified_diff(_normalised(old, a, manifests[0]),
                                          _normalised(new, b, manifests[1]),
                                          str(old / a["file"]), str(new / b["file"]), n=1, lineterm=""))
        print(f"== {name}: " + ("differs" if diff else "same"))
        for line in diff:
            print("   " + line)
        differ += bool(diff)
    print(f"{differ} of {len(set(items[0]) | set(items[1]))} items differ")
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("capture").add_argument("dir", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = p.parse_args()
    if os.path.exists("xloss/__init__.py"):  # the source tree would shadow the installed package
        print("warning: run this outside the repository root", file=sys.stderr)
    return capture(args.dir) if args.cmd == "capture" else compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
