"""Build the Ascend (aclnn) test ports: one shared library per variant.

Each library is the emulator's runtime (``backends/ascend_aclnn/csrc/{runtime,tensor,executor,cast}.c``,
not its operators) + ``port_rt.c`` (the CANN tensor accessors and the executor interface a port
is written against) + the port's operators (``port_*.c``) compiled with the variant's ``-D``
switches. It exports the CANN runtime ABI and whichever operators the variant implements, so
``xloss check --backend ascend --lib libport_<variant>.so`` tests it like any vendor library.

Runtime objects are compiled once; an operator source is recompiled for a variant only if one of
the variant's switches appears in it (or in ``port.h``, which all of them include)::

    python tests/ports/ascend/build.py --out DIR [--sanitize] [VARIANT ...]   # default: every variant

``--sanitize`` adds ASan/UBSan (load the result with libasan and libubsan preloaded).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EMU = ROOT / "backends" / "ascend_aclnn"
INCLUDE = EMU / "include"
CSRC = EMU / "csrc"

RUNTIME_SOURCES = [CSRC / n for n in ("runtime.c", "tensor.c", "executor.c", "cast.c")] + [HERE / "port_rt.c"]
PORT_SOURCES = [HERE / n for n in ("port_common.c", "port_focal.c", "port_bce.c", "port_nll.c", "port_flce.c")]
PORT_HEADERS = [HERE / "port.h", HERE / "port_rt.h"]

# The emulator's own flags (build.py): FUNC_VISIBILITY + -fvisibility=hidden export exactly the
# ACL_FUNC_VISIBILITY symbols. -Bsymbolic keeps each library's calls inside it, so several ports
# (each with its own runtime state) can be loaded into one process.
DEFINES = ["-DFUNC_VISIBILITY", "-D_POSIX_C_SOURCE=200809L"]
CFLAGS = ["-O2", "-std=c11", "-pthread", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-Wno-unused-parameter", "-Wno-unused-const-variable"]
LDFLAGS = ["-shared", "-Wl,-Bsymbolic", "-Wl,--no-undefined", "-lm", "-pthread"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]

#: variant -> preprocessor switches. "correct" implements all five operators without a bug.
VARIANTS: dict[str, tuple[str, ...]] = {
    "correct": (),
    "no_focal_backward": ("PORT_OMIT_FOCAL_BACKWARD",),
    "bce_eps_added": ("BUG_BCE_EPS_ADDED",),
    "focal_mean_padded_count": ("BUG_FOCAL_MEAN_PADDED_COUNT",),
    "focal_grad_gamma_sign": ("BUG_FOCAL_GRAD_GAMMA_SIGN",),
    "focal_weight_tiled": ("BUG_FOCAL_WEIGHT_TILED",),
    "nll_ignore_by_range": ("BUG_NLL_IGNORE_BY_RANGE",),
    "flce_mask_from_target": ("BUG_FLCE_MASK_FROM_TARGET",),
    "half_output_trunc": ("BUG_HALF_OUTPUT_TRUNC",),
}


def library_name(variant: str) -> str:
    return f"libport_{variant}.so"


def _cc() -> str:
    return os.environ.get("CC", "gcc")


def _relevant(source: Path, switches) -> tuple[str, ...]:
    """The switches that can change ``source``'s object (named in it or in a port header)."""
    text = source.read_text() + "".join(h.read_text() for h in PORT_HEADERS)
    return tuple(sorted(s for s in switches if s in text))


def _object_path(obj_dir: Path, source: Path, switches, extra=()) -> Path:
    """Named by everything that goes into the object, so a reused --out folder never serves stale code."""
    h = hashlib.sha1(" ".join((_cc(), *DEFINES, *CFLAGS, *extra, *switches)).encode())
    for f in [source, *PORT_HEADERS, *sorted(CSRC.glob("*.h")), *sorted(INCLUDE.rglob("*.h"))]:
        h.update(f.read_bytes())
    return obj_dir / f"{source.stem}-{h.hexdigest()[:12]}.o"


def _compile(source: Path, obj: Path, switches, includes, werror: bool, extra) -> None:
    cmd = [_cc(), "-c", *DEFINES, *CFLAGS, *extra, *(["-Werror"] if werror else []), *[f"-D{s}" for s in switches],
           *[f"-I{i}" for i in includes], str(source), "-o", str(obj)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"compiling {source.name} {' '.join(switches)} failed:\n{res.stderr}")


def build(out_dir, variants=None, jobs: int | None = None, sanitize: bool = False) -> dict[str, Path]:
    """Build the libraries of ``variants`` (default all) into ``out_dir``; return {variant: path}."""
    extra = SANITIZE if sanitize else []
    out_dir = Path(out_dir)
    obj_dir = out_dir / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)
    names = list(variants) if variants is not None else list(VARIANTS)
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown port variants {unknown}; choose from {sorted(VARIANTS)}")

    # (source, switches) -> object; the runtime's own sources see its internal headers (csrc),
    # the port's operators only the public headers and port_rt.h
    work = {}
    for src in RUNTIME_SOURCES:
        work[_object_path(obj_dir, src, (), extra)] = (src, (), [INCLUDE, CSRC, HERE], src.parent == HERE)
    links = {}
    for v in names:
        objs = [_object_path(obj_dir, src, (), extra) for src in RUNTIME_SOURCES]
        for src in PORT_SOURCES:
            sw = _relevant(src, VARIANTS[v])
            obj = _object_path(obj_dir, src, sw, extra)
            work[obj] = (src, sw, [INCLUDE, HERE], True)
            objs.append(obj)
        links[v] = objs
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        futures = [pool.submit(_compile, src, obj, sw, inc, werror, extra)
                   for obj, (src, sw, inc, werror) in work.items() if not obj.exists()]
        for f in futures:
            f.result()

        def link(v):
            lib = out_dir / library_name(v)
            tmp = out_dir / f".{lib.name}.tmp"
            res = subprocess.run([_cc(), *map(str, links[v]), "-o", str(tmp), *LDFLAGS, *extra],
                                 capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"linking {lib.name} failed:\n{res.stderr}")
            os.replace(tmp, lib)  # a process that has the old library mapped keeps a valid copy
            return v, lib

        return dict(pool.map(link, names))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer and UBSan")
    ap.add_argument("variants", nargs="*", help=f"variants to build (default all: {', '.join(VARIANTS)})")
    args = ap.parse_args(argv)
    for v, path in build(args.out, args.variants or None, sanitize=args.sanitize).items():
        print(f"{v:<26} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
