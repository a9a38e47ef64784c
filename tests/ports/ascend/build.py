"""Build the Ascend (aclnn) test ports: one shared library per variant, each linked against the
emulator's runtime library ``libxloss_aclrt.so``.

A port library holds only the port's operators (``port_*.c``, compiled with the variant's ``-D``
switches): it exports whichever ``aclnn*`` operator pairs the variant implements and takes the CANN
runtime (device memory, tensors and their accessors, executors) from ``libxloss_aclrt.so``, which
it records as ``DT_NEEDED`` with the runtime's folder as ``RUNPATH``. So
``xloss check --backend ascend --lib libport_<variant>.so`` tests it like any vendor library, and
an operator the variant lacks is "not implemented" (nothing fills it in).

The runtime is the one the installed ``ascend`` backend loads (``emulator_runtime_path()``; in an
editable install, the checkout's, built if missing); with ``--sanitize`` a sanitized runtime is built
into the output folder and the ports link that one. Objects are compiled once; an operator source is
recompiled for a variant only if one of
the variant's switches appears in it (or in ``port.h``, which all of them include)::

    python tests/ports/ascend/build.py --out DIR [--sanitize] [VARIANT ...]   # default: every variant

``--sanitize`` adds ASan/UBSan (load the result with libasan and libubsan preloaded, in a process
that loads no other build of the runtime).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EMU = ROOT / "backends" / "ascend_aclnn"
INCLUDE = EMU / "include"

PORT_SOURCES = [HERE / n for n in ("port_common.c", "port_focal.c", "port_focal_drivingsdk.c", "port_bce.c",
                                   "port_nll.c", "port_flce.c", "port_vocab_parallel.c",
                                   "port_loss_forward.c")]  # NLL and BCE forward (issue #30)
PORT_SOURCES += [HERE / "port_cross_entropy.c"]  # the cross-entropy family's operators
PORT_SOURCES += [HERE / "port_nll2d_backward.c"]  # aclnnNLLLoss2dBackward (issue #30)
PORT_HEADERS = [HERE / "port.h", HERE.parent / "pairwise.h"]

# The emulator's flags: FUNC_VISIBILITY + -fvisibility=hidden export exactly the ACL_FUNC_VISIBILITY
# symbols (the operators). --no-undefined: every runtime symbol a port uses must be in libxloss_aclrt.
DEFINES = ["-DFUNC_VISIBILITY", "-D_POSIX_C_SOURCE=200809L"]
CFLAGS = ["-O2", "-std=c11", "-pthread", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
          "-Wno-unused-parameter", "-Wno-unused-const-variable", "-Wdouble-promotion"]
LDFLAGS = ["-shared", "-Wl,--no-undefined", "-lm", "-pthread"]
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
    "bce_contiguous_fast_path": ("BUG_BCE_CONTIGUOUS_FAST_PATH",),
    # memory-contract and large-size bugs (issue 12): caught by guards, input comparison, the large ladder
    "nll_zero_fill_rounded": ("BUG_NLL_ZERO_FILL_ROUNDED",),
    "focal_grad_scratch_in_self": ("BUG_FOCAL_GRAD_SCRATCH_IN_SELF",),
    "bce_mean_count_24bit": ("BUG_BCE_MEAN_COUNT_24BIT",),
    "nll_zero_fill_short": ("BUG_NLL_ZERO_FILL_SHORT",),  # one element of out never written
    # FLCE numerics (issue 12): 16-bit weight-gradient partials, a tile's row max, G truncated
    "flce_wgrad_half_partials": ("BUG_FLCE_WGRAD_HALF_PARTIALS",),
    "flce_tile_max": ("BUG_FLCE_TILE_MAX",),
    "flce_g_trunc": ("BUG_FLCE_G_TRUNC",),
    # DrivingSDK's focal ABI only (INT32 one-hot targets: binary targets only), correct and with a bug
    "drivingsdk": ("PORT_FOCAL_DRIVINGSDK",),
    "drivingsdk_grad_alpha_swapped": ("PORT_FOCAL_DRIVINGSDK", "BUG_DS_GRAD_ALPHA_SWAPPED"),
    # not a bug: DrivingSDK's own kernel arithmetic (naive float32): passes within the declared vendor range
    "drivingsdk_vendor_numerics": ("PORT_FOCAL_DRIVINGSDK", "PORT_DS_VENDOR_NUMERICS"),
    # the vocabulary-parallel forward (issue 17): CANN's contract as an outside port author gets it wrong
    "vp_end_inclusive": ("BUG_VP_END_INCLUSIVE",),  # the doc page's "target > vocabEndIndex"
    "vp_padding_set": ("BUG_VP_PADDING_SET",),  # the mask's padding bits always set (not target 0's mask)
    "vp_pred_unshifted": ("BUG_VP_PRED_UNSHIFTED",),  # the predicted logit not relative to the max
    "vp_softmax_half_inv": ("BUG_VP_SOFTMAX_HALF_INV",),  # softmax times a FLOAT16 1/sum
    # the NLL and BCE forward (issue #30): the vendor pages read the way an outside port author errs
    "nllf_mean_by_n": ("BUG_NLLF_MEAN_BY_N",),  # mean over the positions, not the total weight
    "nllf_ignored_in_total": ("BUG_NLLF_IGNORED_IN_TOTAL",),  # ignored positions' class weight in the total
    "nll2d_target_column_major": ("BUG_NLL2D_TARGET_COLUMN_MAJOR",),  # aclnnNLLLoss2d: the target plane as W x H
    "bcef_log_unclamped": ("BUG_BCEF_LOG_UNCLAMPED",),  # no -100 clamp of the logs
    "bcef_mean_by_weight_sum": ("BUG_BCEF_MEAN_BY_WEIGHT_SUM",),  # a weighted mean
    # cross entropy (aclnnCrossEntropyLoss / aclnnCrossEntropyLossGrad) as an outside port author errs
    "ce_smooth_over_c_minus_1": ("BUG_CE_SMOOTH_OVER_C_MINUS_1",),  # the smoothing mass over the C - 1 others
    "ce_mean_counts_ignored": ("BUG_CE_MEAN_COUNTS_IGNORED",),  # the mean's divisor counts ignored rows
    "ce_no_max_shift": ("BUG_CE_NO_MAX_SHIFT",),  # log-sum-exp without the max: overflow
    "ce_grad_smooth_unweighted": ("BUG_CE_GRAD_SMOOTH_UNWEIGHTED",),  # the gradient's smoothing term unweighted
    "ce_grad_mean_counts_ignored": ("BUG_CE_GRAD_MEAN_COUNTS_IGNORED",),  # the gradient's mean over N rows
    # aclnnNLLLoss2dBackward (issue #30)
    "nll2db_target_transposed": ("BUG_NLL2DB_TARGET_TRANSPOSED",),  # the target plane read as W x H
    "nll2db_grad_per_sample": ("BUG_NLL2DB_GRAD_PER_SAMPLE",),  # reduction 0's gradOutput read as (N)
    "nll2db_mean_own_total": ("BUG_NLL2DB_MEAN_OWN_TOTAL",),  # mean by its own weight sum, not totalWeight
}

#: hostile ports (tests/ports/test_hostile_ports.py): correct numbers, but each breaks the process or the
#: two-phase contract; built only when named (never by default: one aborts as it is loaded)
HOSTILE: dict[str, tuple[str, ...]] = {
    "phase_one_write": ("HOSTILE_PHASE_ONE_WRITE",),  # GetWorkspaceSize zeroes out, the kernel adds into it
    "plan_consumed": ("HOSTILE_PLAN_CONSUMED",),  # a repeatable executor's second run differs
    "round_upward": ("HOSTILE_ROUND_UPWARD",),  # fesetround(FE_UPWARD) left set
    "ftz_daz": ("HOSTILE_FTZ_DAZ",),  # MXCSR FTZ and DAZ left on
    "signal_handler": ("HOSTILE_SIGNAL_HANDLER",),  # a SIGUSR2 handler installed
    "thread_left": ("HOSTILE_THREAD_LEFT",),  # a thread left running per call
    "leak": ("HOSTILE_LEAK",),  # 4 MiB per call, never freed
    "hang": ("HOSTILE_HANG",),  # never returns on float32, ignores SIGTERM and SIGINT
    "async_crash": ("HOSTILE_ASYNC_CRASH",),  # a thread segfaults 20 ms after the call returned
    "fork": ("HOSTILE_FORK",),  # forks (once per process); both processes carry on
    "helper": ("HOSTILE_HELPER",),  # starts a long-lived helper process on its first call
    "ctor_abort": ("HOSTILE_CTOR_ABORT",),  # a constructor that aborts
}


def _switches(variant: str) -> tuple[str, ...]:
    return VARIANTS[variant] if variant in VARIANTS else HOSTILE[variant]


def library_name(variant: str) -> str:
    return f"libport_{variant}.so"


def _cc() -> str:
    return os.environ.get("CC", "gcc")


def _emulator_build():
    spec = importlib.util.spec_from_file_location("ascend_emulator_build_for_ports", EMU / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def runtime_library(out_dir: Path, sanitize: bool) -> Path:
    """The libxloss_aclrt.so the ports link: the one the installed ``ascend`` backend loads (so a
    process holds one runtime file), else the checkout's (built if missing), or with ``sanitize``
    a sanitized one in ``out_dir``."""
    emu = _emulator_build()
    if not sanitize:
        try:
            from xloss.backends.ascend_aclnn import emulator_runtime_path

            installed = Path(emulator_runtime_path())
        except ImportError:
            installed = None
        if installed is not None and installed.exists():
            return installed
        if not emu.RUNTIME_LIBRARY.exists():
            emu.build()
        return emu.RUNTIME_LIBRARY
    target = out_dir / emu.RUNTIME_FILENAME
    emu._replace(lambda tmp: subprocess.run(emu.runtime_command(tmp, sanitize=True), check=True), target)
    return target


def _relevant(source: Path, switches) -> tuple[str, ...]:
    """The switches that can change ``source``'s object (named in it or in a port header)."""
    text = source.read_text() + "".join(h.read_text() for h in PORT_HEADERS)
    return tuple(sorted(s for s in switches if s in text))


_OPERATOR = re.compile(r"ACL_FUNC_VISIBILITY\s+aclnnStatus\s+(aclnn\w+?)(?:GetWorkspaceSize)?\s*\(")


def changed_kernels(variant: str) -> list[str]:
    """The kernels whose code ``variant``'s switches change: those with an operator defined in a source
    a switch appears in; every kernel when a switch is in a port header or in a source that defines
    no operator (shared helpers). Every other kernel runs the correct port's very objects."""
    from xloss.backends.ascend_aclnn import operators

    changed = set()
    for src in PORT_SOURCES:
        if _relevant(src, _switches(variant)):
            defined = set(_OPERATOR.findall(src.read_text()))
            if not defined or any(s in h.read_text() for h in PORT_HEADERS for s in _switches(variant)):
                changed = None
                break
            changed |= defined
    kernels = {}
    for d in (*operators.TABLE, *operators.FOCAL.values()):
        kernels.setdefault(d.kernel, set()).update(d.ops, *d.modes.values())
    return [k for k, ops in kernels.items() if changed is None or ops & changed]


def _object_path(obj_dir: Path, source: Path, switches, extra=()) -> Path:
    """Named by everything that goes into the object, so a reused --out folder never serves stale code."""
    h = hashlib.sha1(" ".join((_cc(), *DEFINES, *CFLAGS, *extra, *switches)).encode())
    for f in [source, *PORT_HEADERS, *sorted(INCLUDE.rglob("*.h"))]:
        h.update(f.read_bytes())
    return obj_dir / f"{source.stem}-{h.hexdigest()[:12]}.o"


def _compile(source: Path, obj: Path, switches, extra) -> None:
    cmd = [_cc(), "-c", *DEFINES, *CFLAGS, *extra, *[f"-D{s}" for s in switches], f"-I{INCLUDE}", f"-I{HERE}",
           f"-I{HERE.parent}", str(source), "-o", str(obj)]  # HERE.parent: pairwise.h, shared with ft78ne/
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
    unknown = [v for v in names if v not in VARIANTS and v not in HOSTILE]
    if unknown:
        raise ValueError(f"unknown port variants {unknown}; choose from {sorted(VARIANTS) + sorted(HOSTILE)}")
    runtime = runtime_library(out_dir, sanitize)

    work, links = {}, {}
    for v in names:
        objs = []
        for src in PORT_SOURCES:
            sw = _relevant(src, _switches(v))
            obj = _object_path(obj_dir, src, sw, extra)
            work[obj] = (src, sw)
            objs.append(obj)
        links[v] = objs
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        futures = [pool.submit(_compile, src, obj, sw, extra) for obj, (src, sw) in work.items() if not obj.exists()]
        for f in futures:
            f.result()

        def link(v):
            lib = out_dir / library_name(v)
            tmp = out_dir / f".{lib.name}.tmp"
            cmd = [_cc(), *map(str, links[v]), "-o", str(tmp), f"-L{runtime.parent}", "-lxloss_aclrt",
                   f"-Wl,-rpath,{runtime.parent}", *LDFLAGS, *extra]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"linking {lib.name} failed:\n{res.stderr}")
            os.replace(tmp, lib)  # a process that has the old library mapped keeps a valid copy
            return v, lib

        return dict(pool.map(link, names))


def build_zeroed_memory(out_dir) -> Path:
    """``libzeroed_memory.so`` (``zeroed_memory.c``): an ``aclrtMalloc`` that zero-fills the emulator
    runtime's blocks, standing in for a vendor runtime whose fresh memory is not poisoned. List it
    first: ``lib=[it, port]``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runtime = runtime_library(out_dir, False)
    lib = out_dir / "libzeroed_memory.so"
    cmd = [_cc(), *DEFINES, *CFLAGS, f"-I{INCLUDE}", f'-DRUNTIME_PATH="{runtime}"', str(HERE / "zeroed_memory.c"),
           "-o", str(lib), "-shared", "-ldl"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"building {lib.name} failed:\n{res.stderr}")
    return lib


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


# -- binary cross entropy with logits (issue #30): its own libraries ------------------------------------------
# port_common.c with port_bce_with_logits.c only, so the seven-operator ports above are unchanged.
BCE_WITH_LOGITS_SOURCES = [HERE / "port_common.c", HERE / "port_bce_with_logits.c"]
BCE_WITH_LOGITS_VARIANTS: dict[str, tuple[str, ...]] = {
    "bcel_correct": (),
    "bcel_naive_softplus": ("BUG_BCEL_NAIVE_SOFTPLUS",),  # log(1 + exp(-x)) as written: overflows below -88
    "bcel_pos_weight_negative": ("BUG_BCEL_POS_WEIGHT_NEGATIVE",),  # pos_weight on the (1 - y) term
    "bcel_half_accumulate": ("BUG_BCEL_HALF_ACCUMULATE",),  # the forward's sum in the 16-bit output dtype
    "bcel_mean_by_rows": ("BUG_BCEL_MEAN_BY_ROWS",),  # the backward's mean over the leading dimension
}


def build_bce_with_logits(out_dir, variants=None) -> dict[str, Path]:
    """The BCE-with-logits port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return _build_own(out_dir, BCE_WITH_LOGITS_VARIANTS, BCE_WITH_LOGITS_SOURCES, variants)


def _build_own(out_dir, table: dict, sources, variants=None) -> dict[str, Path]:
    """Libraries of ``sources`` alone, one per variant of ``table`` (default all), in ``out_dir``: {variant: path}.
    Objects are shared between calls on the same folder (named by their inputs)."""
    out_dir = Path(out_dir)
    obj_dir = out_dir / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)
    runtime = runtime_library(out_dir, False)
    out = {}
    for v in variants or table:
        objs = []
        for src in sources:
            sw = tuple(s for s in table[v] if s in src.read_text())
            obj = _object_path(obj_dir, src, sw)
            if not obj.exists():
                _compile(src, obj, sw, [])
            objs.append(obj)
        lib = out_dir / library_name(v)
        cmd = [_cc(), *map(str, objs), "-o", str(lib), f"-L{runtime.parent}", "-lxloss_aclrt",
               f"-Wl,-rpath,{runtime.parent}", *LDFLAGS]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"linking {lib.name} failed:\n{res.stderr}")
        out[v] = lib
    return out


# -- dense-label cross entropy (aclnnSoftmaxCrossEntropyWithLogits): its own libraries ---------------------------
SOFTMAX_CE_SOURCES = [HERE / "port_common.c", HERE / "port_softmax_ce.c"]
SOFTMAX_CE_VARIANTS: dict[str, tuple[str, ...]] = {
    "sce_correct": (),
    "sce_no_max_shift": ("BUG_SCE_NO_MAX_SHIFT",),  # exp(x) unshifted: inf / inf above ~88
    "sce_backprop_sign": ("BUG_SCE_BACKPROP_SIGN",),  # labels - softmax
    "sce_half_loss_sum": ("BUG_SCE_HALF_LOSS_SUM",),  # the loss summed in the 16-bit output dtype
    "sce_one_hot_labels": ("BUG_SCE_ONE_HOT_LABELS",),  # the loss at the label row's largest entry only
}


def build_softmax_ce(out_dir, variants=None) -> dict[str, Path]:
    """The dense-label cross-entropy port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return _build_own(out_dir, SOFTMAX_CE_VARIANTS, SOFTMAX_CE_SOURCES, variants)
