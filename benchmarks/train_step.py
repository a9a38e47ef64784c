"""LM training step, stock PyTorch vs the fused xloss loss, under thread-runtime settings.

Each setting runs in a fresh interpreter (OpenMP reads its environment once, when it loads);
inside it the stock and fused steps are timed round-robin, idle and with a competing busy
process, so each reported number is a ratio from one process (stock median / fused median:
above 1 the fused step is faster).

    python benchmarks/train_step.py [--size 4096x256x32000] [--dtype float32|bfloat16]
        [--rounds 4] [--settings default,passive,...] [--competitors none,pinned,free] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: name -> (extra environment, cpu backend options)
#: ("default": what a user gets — xloss imported first sets OMP_WAIT_POLICY=PASSIVE; "spinning":
#: GNU OpenMP's own default, 300000 spins, what a process gets when torch loaded OpenMP first.)
SETTINGS = {
    "default": ({}, {}),
    "spinning": ({"GOMP_SPINCOUNT": "300000"}, {}),
    "spin1k": ({"GOMP_SPINCOUNT": "1000"}, {}),
    "workqueue": ({"NUMBA_THREADING_LAYER": "workqueue"}, {}),
    "serial": ({}, {"threads": 1}),
}


def child(args) -> None:
    import xloss  # first, as a user's script would: before torch loads OpenMP
    from xloss.bench import training as T

    env, opts = SETTINGS[args.setting]
    backend = xloss.backend("cpu", **opts) if opts else None
    shape = T.parse_step(args.size, args.dtype)
    out = []
    for comp in args.competitors.split(","):
        r = T.measure(shape, rounds=args.rounds, competitor=comp, backend=backend)
        r["setting"] = args.setting
        out.append(r)
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="4096x256x32000")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--settings", default="default,spinning")
    p.add_argument("--competitors", default="none,pinned")
    p.add_argument("--repeats", type=int, default=1, help="run the whole sweep this many times")
    p.add_argument("--json")
    p.add_argument("--child", dest="setting")
    args = p.parse_args()
    if args.setting:
        return child(args)
    results = []
    for rep in range(args.repeats):
        for name in args.settings.split(","):
            env = {**os.environ, **SETTINGS[name][0]}
            cmd = [sys.executable, __file__, "--child", name, "--size", args.size, "--dtype", args.dtype,
                   "--rounds", str(args.rounds), "--competitors", args.competitors]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if proc.returncode:
                print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            for r in json.loads(proc.stdout.strip().splitlines()[-1]):
                s, x = statistics.median(r["times"]["stock"]), statistics.median(r["times"]["xloss"])
                r["ratio"] = s / x
                results.append(r)
                print(f"rep {rep} {name:10s} competitor {r['competitor']:6s} load {r['load_before']:.2f}  "
                      f"stock {s:.3f} s  xloss {x:.3f} s  ratio {s / x:.2f}x  (n={r['rounds']} each)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
