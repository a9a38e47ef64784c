"""Build the FT78NE/MT7004 test ports: the correct one, one that omits an operator, one per seeded bug.

Every variant is compiled from the same sources; a seeded bug is one ``-DBUG_<NAME>`` switch. The
ports link against the private-memory shim (``libxloss_ft78ne_private.so``, built into the same
folder from ``backends/ft78ne_shim``), which gives their ``_p`` functions the arenas to check::

    python tests/ports/ft78ne/build.py --out /tmp/ports                # every variant
    python tests/ports/ft78ne/build.py --out /tmp/ports last_slice     # some
    xloss check --backend mt7004 --lib /tmp/ports/libport_last_slice.so --option core_mask=0x07
    xloss check --backend mt7004 \
        --lib /tmp/ports/libport_flce_accumulate_ignored.so:/tmp/ports/libxloss_ft78ne_private.so \
        --option memory=private --option private_bytes=8192 --kernels flce

Standard library only; the compiler is ``$CC`` or gcc.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM_DIR = HERE.parents[2] / "backends" / "ft78ne_shim"
INCLUDE = SHIM_DIR / "include"
SHIM = "libxloss_ft78ne_private.so"
HEADER = HERE / "port.h"
VOCAB_PARALLEL = ("fused_linear_online_max_sum", "fused_cross_entropy_loss_with_max_sum")
LOSS_FORWARD = ("nll_loss", "binary_cross_entropy")  # issue #30
ALL_KERNELS = ("focal_loss", "bce_grad", "nll_loss_grad", "fused_linear_cross_entropy_grad", *VOCAB_PARALLEL,
               *LOSS_FORWARD)
#: source -> the xloss kernels whose entry points it holds (port_common.c serves all of them)
SOURCES = {
    "port_common.c": ALL_KERNELS,
    "bce.c": ("bce_grad",),
    "focal.c": ("focal_loss",),
    "nll.c": ("nll_loss_grad",),
    "flce.c": ("fused_linear_cross_entropy_grad",),
    "vocab_parallel.c": VOCAB_PARALLEL,
    "loss_forward.c": LOSS_FORWARD,
}
# -O1: these are test subjects; compile time matters more than speed
CFLAGS = ("-std=c11", "-O1", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-Wdouble-promotion")

#: variant -> (BUG_ switches, sources left out)
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "correct": ((), ()),
    "omit_nll": ((), ("nll.c",)),  # a port whose author has not written nlllossgrad yet
    "bce_eps_clamp": (("BUG_BCE_EPS_CLAMP",), ()),
    "mean_per_slice": (("BUG_MEAN_PER_SLICE",), ()),
    "nll_mean_by_batch": (("BUG_NLL_MEAN_BY_BATCH",), ()),
    # correct, but reads the manual's parameter list for nlllossgrad's codes (0 sum, 1 mean, 2 none)
    "nll_codes_sum_mean_none": (("PORT_NLL_CODES_SUM_MEAN_NONE",), ()),
    "nll_row_past_end": (("BUG_NLL_ROW_PAST_END",), ()),  # checked mode (guards) only
    "nll_fill_u16": (("BUG_NLL_FILL_U16",), ()),  # above 65535 elements per core (the large ladder)
    "flce_input_in_place": (("BUG_FLCE_INPUT_IN_PLACE",), ()),  # checked mode (input comparison)
    "bce_p_vector_tail": (("BUG_BCE_P_VECTOR_TAIL",), ()),  # private memory, checked mode (guards)
    "bce_mask_contiguous": (("BUG_BCE_MASK_CONTIGUOUS",), ()),  # masks that are not low bits (0x55, 0x81, 0xf0)
    "focal_sum_race": (("BUG_FOCAL_SUM_RACE",), ()),  # any mask of more than one core
    "flce_masked_rows": (("BUG_FLCE_MASKED_ROWS",), ()),
    "last_slice": (("BUG_LAST_SLICE",), ()),
    "half_truncate": (("BUG_HALF_TRUNCATE",), ()),
    "focal_gamma_sign": (("BUG_FOCAL_GAMMA_SIGN",), ()),
    "bce_weight_always": (("BUG_BCE_WEIGHT_ALWAYS",), ()),  # segfaults: only run in a child process
    "flce_accumulate_ignored": (("BUG_FLCE_ACCUMULATE_IGNORED",), ()),  # private memory only
    "bce_mean_per_chunk": (("BUG_BCE_MEAN_PER_CHUNK",), ()),  # private memory only
    # the vocabulary-parallel forward (issue 17)
    "vp_sum_unshifted": (("BUG_VP_SUM_UNSHIFTED",), ()),  # exp overflows without the max shift
    "vp_masked_target_kept": (("BUG_VP_MASKED_TARGET_KEPT",), ()),
    "vp_loss_half": (("BUG_VP_LOSS_HALF",), ()),
    # the NLL and BCE forward (issue #30)
    "nllf_mean_by_batch": (("BUG_NLLF_MEAN_BY_BATCH",), ()),
    "nllf_total_weight_count": (("BUG_NLLF_TOTAL_WEIGHT_COUNT",), ()),
    "bcef_log_unclamped": (("BUG_BCEF_LOG_UNCLAMPED",), ()),
    "bcef_weight_none_only": (("BUG_BCEF_WEIGHT_NONE_ONLY",), ()),
}


def library_name(variant: str) -> str:
    return f"libport_{variant}.so"


def touched_sources(variant: str) -> list[str]:
    """The sources a variant's switches change (the switch appears in them, or in port.h: all)."""
    defines, omitted = VARIANTS[variant]
    header = HEADER.read_text()
    return [s for s in SOURCES if s not in omitted
            and any(d in (HERE / s).read_text() or d in header for d in defines)]


def touched_kernels(variant: str) -> set[str]:
    """The xloss kernels whose code differs from the correct port's."""
    return {k for s in touched_sources(variant) for k in SOURCES[s]}


def _cc(cc):
    return shlex.split(cc or os.environ.get("CC") or "gcc")


def _run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)}\n{res.stderr}")


def build_shim(out_dir, *, cc: str | None = None, sanitize: bool = False) -> Path:
    """The private-memory shim, built by the backend's own build script into ``out_dir``."""
    spec = importlib.util.spec_from_file_location("ft78ne_shim_build_for_ports", SHIM_DIR / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(Path(out_dir) / SHIM, sanitize=sanitize, cc=cc, quiet=True, shim=True)


def build_all(out_dir, variants=None, *, cc: str | None = None, jobs: int = 2, extra=()) -> dict[str, Path]:
    """Build variants into ``out_dir``; return {variant: library path}.

    Each source is compiled once without switches and once more per variant whose switch it
    contains; a variant links the objects it needs. So every variant shares the correct port's
    object code outside the files its bug lives in. Every variant links against the private-memory
    shim built into ``out_dir`` (found there at run time through its rpath)."""
    out_dir = Path(out_dir)
    names = list(variants or VARIANTS)
    flags = list(CFLAGS) + list(extra)
    build_shim(out_dir, cc=cc, sanitize=any(f.startswith("-fsanitize") for f in extra))
    shim_link = [f"-L{out_dir}", "-lxloss_ft78ne_private", f"-Wl,-rpath,{out_dir.resolve()}"]

    def key(variant, source):
        defines = VARIANTS[variant][0]
        return source, (defines if source in touched_sources(variant) else ())

    objects = {}
    for v in names:
        for s in SOURCES:
            if s not in VARIANTS[v][1]:
                k = key(v, s)
                objects.setdefault(k, out_dir / (Path(s).stem + "".join("." + d for d in k[1]) + ".o"))

    def compile_one(item):
        (source, defines), obj = item
        includes = [f"-I{INCLUDE}", f"-I{HERE.parent}"]  # HERE.parent: pairwise.h, shared with ascend/
        _run(_cc(cc) + flags + includes + ["-c"] + [f"-D{d}" for d in defines] + [str(HERE / source), "-o", str(obj)])

    def link(v):
        objs = [str(objects[key(v, s)]) for s in SOURCES if s not in VARIANTS[v][1]]
        out = out_dir / library_name(v)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # never a half-written library at `out`
        try:
            _run(_cc(cc) + flags + ["-shared"] + objs + ["-o", str(tmp)] + shim_link + ["-lm"])
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(compile_one, objects.items()))
        return dict(zip(names, pool.map(link, names)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", nargs="*", help=f"default: all ({', '.join(VARIANTS)})")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--sanitize", action="store_true", help="ASan+UBSan build (load it with LD_PRELOAD=libasan)")
    args = p.parse_args(argv)
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    extra = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g") if args.sanitize else ()
    for variant, path in build_all(args.out, args.variants or None, extra=extra).items():
        print(f"{variant:<24} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- binary cross entropy with logits (issue #30): its own libraries ------------------------------------------
# port_common.c with sigmoid_ce.c only, so the seven-operator ports above are unchanged.
BCE_WITH_LOGITS_SOURCES = ("port_common.c", "sigmoid_ce.c")
BCE_WITH_LOGITS_VARIANTS: dict[str, tuple[str, ...]] = {
    "sce_correct": (),
    "sce_literal_log": ("BUG_SCE_LITERAL_LOG",),  # the page's ln p and ln(1 - p) as printed
    "sce_split_by_eight": ("BUG_SCE_SPLIT_BY_EIGHT",),  # forward slices cut for 8 cores whatever the mask
    "sce_grad_literal": ("BUG_SCE_GRAD_LITERAL",),  # sigmoid(x) - y by subtraction
    "sce_grad_one_sided": ("BUG_SCE_GRAD_ONE_SIDED",),  # e^x / (1 + e^x) for every x
}


def build_separate(out_dir, sources, table, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """Port libraries built apart from the ports above: each variant of ``table`` ({variant: BUG_ switches}, default
    all of them) compiled from ``sources`` into ``out_dir``, a source with a variant's switch in it compiled with
    that switch (its object shared by every variant with the same switches). {variant: library path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    build_shim(out_dir, cc=cc)
    shim_link = [f"-L{out_dir}", "-lxloss_ft78ne_private", f"-Wl,-rpath,{out_dir.resolve()}"]
    out = {}
    for v in variants or table:
        objs = []
        for s in sources:
            defines = [d for d in table[v] if d in (HERE / s).read_text()]
            obj = out_dir / (Path(s).stem + "".join("." + d for d in defines) + ".o")
            if not obj.exists():
                _run(_cc(cc) + list(CFLAGS) + [f"-I{INCLUDE}", f"-I{HERE.parent}", "-c"] + [f"-D{d}" for d in defines]
                     + [str(HERE / s), "-o", str(obj)])
            objs.append(str(obj))
        lib = out_dir / library_name(v)
        _run(_cc(cc) + list(CFLAGS) + ["-shared"] + objs + ["-o", str(lib)] + shim_link + ["-lm"])
        out[v] = lib
    return out


def build_bce_with_logits(out_dir, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """The BCE-with-logits port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return build_separate(out_dir, BCE_WITH_LOGITS_SOURCES, BCE_WITH_LOGITS_VARIANTS, variants, cc=cc)


# -- softmax cross entropy (issue #30): its own libraries ---------------------------------------------------
# port_common.c with softmax_ce.c only, so the ports above are unchanged.
SOFTMAX_CE_SOURCES = ("port_common.c", "softmax_ce.c")
SOFTMAX_CE_VARIANTS: dict[str, tuple[str, ...]] = {
    "smce_correct": (),
    "smce_no_max": ("BUG_SMCE_NO_MAX",),  # both pages' softmax without the max shift: inf / inf
    "smce_split_by_eight": ("BUG_SMCE_SPLIT_BY_EIGHT",),  # dense rows cut for 8 cores whatever the mask
    "smce_labels_sum_to_one": ("BUG_SMCE_LABELS_SUM_TO_ONE",),  # dense loss assumes rows of labels sum to 1
    "smce_sum_of_first_row": ("BUG_SMCE_SUM_OF_FIRST_ROW",),  # sparse rows normalised by their slice's first row
    # correct, but reads the pages' "usually a scalar": one mean loss per call (option softmax_ce_losses=one)
    "smce_scalar_loss": ("PORT_SMCE_SCALAR_LOSS",),
}


def build_softmax_ce(out_dir, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """The softmax cross entropy port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return build_separate(out_dir, SOFTMAX_CE_SOURCES, SOFTMAX_CE_VARIANTS, variants, cc=cc)


# -- the cross-entropy gradient through the sparse page (issue #30): bugs of its is_grad path only --------------------
SOFTMAX_CE_GRAD_VARIANTS: dict[str, tuple[str, ...]] = {
    "smce_correct": (),
    "smce_grad_no_one_hot": ("BUG_SMCE_GRAD_NO_ONE_HOT",),  # softmax(x) as the gradient: no - onehot(label)
    "smce_grad_slice_rows": ("BUG_SMCE_GRAD_SLICE_ROWS",),  # _s gradient rows indexed within each core's slice
}


def build_softmax_ce_grad(out_dir, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """The sparse page's gradient port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return build_separate(out_dir, SOFTMAX_CE_SOURCES, SOFTMAX_CE_GRAD_VARIANTS, variants, cc=cc)


# -- the int8 form of sigmoidcrossentropywithlogits (issue #30): its own libraries ----------------------------------
# port_common.c with sigmoid_ce_i8.c only: the i8_ entry points and nothing else.
SCE_I8_SOURCES = ("port_common.c", "sigmoid_ce_i8.c")
SCE_I8_VARIANTS: dict[str, tuple[str, ...]] = {
    "sce_i8_correct": (),  # rounds half away from zero: not the emulator's rounding, within the check's unit
    "sce_i8_wrap": ("BUG_SCE_I8_WRAP",),  # converted to int8_t without saturation
    "sce_i8_abs_int8": ("BUG_SCE_I8_ABS_INT8",),  # |x| in int8_t arithmetic: |-128| wraps
}


def build_sigmoid_ce_i8(out_dir, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """The int8 sigmoidcrossentropywithlogits port libraries of ``variants`` (default all) in ``out_dir``."""
    return build_separate(out_dir, SCE_I8_SOURCES, SCE_I8_VARIANTS, variants, cc=cc)


# -- the int8 form of nllloss (issue #30): its own libraries -------------------------------------------------------
# port_common.c with nllloss_i8.c only: i8_nllloss_s and nothing else.
NLL_I8_SOURCES = ("port_common.c", "nllloss_i8.c")
NLL_I8_VARIANTS: dict[str, tuple[str, ...]] = {
    "nll_i8_correct": (),  # rounds the mean to nearest: not the emulator's truncation, within the check's unit
    "nll_i8_sum_int16": ("BUG_NLL_I8_SUM_INT16",),  # the loss sum kept in int16_t: wraps past 32767
    "nll_i8_mean_by_batch": ("BUG_NLL_I8_MEAN_BY_BATCH",),  # the mean divides by batch_size, not the weight sum
}


def build_nllloss_i8(out_dir, variants=None, *, cc: str | None = None) -> dict[str, Path]:
    """The int8 nllloss port libraries of ``variants`` (default all) in ``out_dir``: {variant: path}."""
    return build_separate(out_dir, NLL_I8_SOURCES, NLL_I8_VARIANTS, variants, cc=cc)
