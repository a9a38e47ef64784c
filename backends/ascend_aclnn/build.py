"""Build of the Ascend host emulator: two plain C shared libraries with the CANN ABI (no Python
dependency), loaded through cffi and linkable from C.

* ``libxloss_aclrt.so`` — the runtime: init, device, streams, device memory, tensors (and CANN's
  tensor accessors), executors, conversions, and the emulator-only helpers of
  ``xloss_aclnn_emu.h`` (leak counter, the executor interface operator libraries use). No
  ``aclnn*`` operator symbols. Port authors link their operator library against it.
* ``libxloss_aclnn.so`` — the operator pairs, built against the runtime's exported API and
  linked to it (``DT_NEEDED libxloss_aclrt.so``, found next to it through ``RUNPATH $ORIGIN``).
  What the ``ascend`` backend loads by default. Like CANN's ``libopapi.so`` over its runtime, so
  a process holds one runtime, whichever libraries it loads.

``extensions(sanitize)`` is what ``setup.py`` builds at install: the runtime first, then the
operators, which carry ``xloss_needs`` (the runtime's extension name) so setup.py can add the
runtime's output folder to their ``library_dirs``. ``extension(sanitize)`` is the older
one-library form (runtime and operators in one self-contained ``libxloss_aclnn.so``, no runtime
library) for a setup.py that builds one library per backend. Run as a script, this file builds
both libraries in place with gcc (``--sanitize`` adds ASan/UBSan, ``--out`` names the operator
library's path; the runtime goes beside it)::

    python backends/ascend_aclnn/build.py [--sanitize] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
INCLUDE = HERE / "include"
# xloss_half.h, shared with the FT78NE emulator: csrc includes it by its relative path
# ("../../common/include/xloss_half.h"), so no -I is needed; it is listed in the dependencies.
COMMON_INCLUDE = HERE.parent / "common" / "include"

NAME = "xloss.backends.ascend_aclnn.libxloss_aclnn"          # the operators
RUNTIME_NAME = "xloss.backends.ascend_aclnn.libxloss_aclrt"  # the runtime
LIBRARY = HERE / "libxloss_aclnn.so"
RUNTIME_FILENAME = "libxloss_aclrt.so"
RUNTIME_LIBRARY = HERE / RUNTIME_FILENAME

RUNTIME_SOURCES = ("runtime.c", "tensor.c", "executor.c", "cast.c")
OPERATOR_SOURCES = ("view.c", "ops_elementwise.c", "ops_focal_drivingsdk.c", "ops_nll.c", "ops_flce.c",
                    "ops_vocab_parallel.c",
                    "ops_bce_with_logits.c",
                    # NLL and BCE forward (issue #30)
                    "ops_nll_forward.c", "ops_bce_forward.c",
                    "ops_cross_entropy.c",
                    # dense-label cross entropy
                    "ops_softmax_ce.c",
                    # NLL backward on (N, C, d1, ..., dk) input (issue #30)
                    "ops_nll2d_backward.c")

# FUNC_VISIBILITY makes ACL_FUNC_VISIBILITY export exactly the ABI symbols under -fvisibility=hidden.
DEFINES = ["-DFUNC_VISIBILITY", "-D_POSIX_C_SOURCE=200809L"]
# -fvect-cost-model=dynamic lets -O2 vectorize the row loops (no reassociation: results are unchanged)
CFLAGS = ["-O2", "-fvect-cost-model=dynamic", "-std=c11", "-pthread", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-Wno-unused-parameter", "-Wno-unused-const-variable"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
LIBS = ["-lm", "-pthread"]
# The runtime: a fixed soname (what dependents record) and its own calls bound to itself, so a
# second runtime loaded into the process (a self-contained vendor or port library) cannot
# interpose on it.
RUNTIME_LINK = [f"-Wl,-soname,{RUNTIME_FILENAME}", "-Wl,-Bsymbolic", "-Wl,--no-undefined"]
# The operators: find the runtime next to themselves wherever they are installed.
OPERATOR_LINK = ["-Wl,-rpath,$ORIGIN", "-Wl,--no-undefined"]


def runtime_sources() -> list[Path]:
    return [CSRC / n for n in RUNTIME_SOURCES]


def operator_sources() -> list[Path]:
    return [CSRC / n for n in OPERATOR_SOURCES]


def sources() -> list[Path]:
    """Every C source (runtime and operators): for programs that compile the emulator in."""
    return runtime_sources() + operator_sources()


def _rel(p: Path) -> str:
    return str(p.relative_to(HERE.parent.parent))  # setup.py wants paths relative to the project root


def _depends() -> list[str]:
    headers = sorted(CSRC.glob("*.h")) + sorted(INCLUDE.rglob("*.h")) + sorted(COMMON_INCLUDE.glob("*.h"))
    return [_rel(p) for p in headers]


def extensions(sanitize: bool) -> list:
    """The setuptools Extensions for ``setup.py``, in build order: runtime, then operators.

    The operators' Extension has ``xloss_needs = [RUNTIME_NAME]``: before building it, setup.py
    adds the folder the runtime was built into to its ``library_dirs`` (``-lxloss_aclrt``).
    """
    from setuptools import Extension

    extra = SANITIZE if sanitize else []
    common = dict(include_dirs=[_rel(INCLUDE), _rel(CSRC)], depends=_depends(),
                  extra_compile_args=DEFINES + CFLAGS + extra)
    runtime = Extension(RUNTIME_NAME, sources=[_rel(p) for p in runtime_sources()],
                        extra_link_args=LIBS + RUNTIME_LINK + extra, **common)
    operators = Extension(NAME, sources=[_rel(p) for p in operator_sources()], libraries=["xloss_aclrt"],
                          extra_link_args=LIBS + OPERATOR_LINK + extra, **common)
    operators.xloss_needs = [RUNTIME_NAME]
    return [runtime, operators]


def extension(sanitize: bool):
    """One self-contained ``libxloss_aclnn.so`` (runtime and operators together, no runtime library):
    for a setup.py that builds a single Extension per backend. Prefer :func:`extensions`."""
    from setuptools import Extension

    extra = SANITIZE if sanitize else []
    return Extension(NAME, sources=[_rel(p) for p in sources()], include_dirs=[_rel(INCLUDE), _rel(CSRC)],
                     depends=_depends(), extra_compile_args=DEFINES + CFLAGS + extra,
                     extra_link_args=LIBS + ["-Wl,-Bsymbolic"] + extra)


def _cc(cc: str | None) -> str:
    return cc or os.environ.get("CC", "gcc")


def runtime_command(out: Path, sanitize: bool = False, cc: str | None = None) -> list[str]:
    extra = SANITIZE if sanitize else []
    return [_cc(cc), "-shared", "-fPIC", *DEFINES, *CFLAGS, *extra, f"-I{INCLUDE}", f"-I{CSRC}",
            *map(str, runtime_sources()), "-o", str(out), *LIBS, *RUNTIME_LINK, *extra]


def operators_command(out: Path, runtime_dir: Path, sanitize: bool = False, cc: str | None = None) -> list[str]:
    """Links against ``runtime_dir/libxloss_aclrt.so`` (which must exist)."""
    extra = SANITIZE if sanitize else []
    return [_cc(cc), "-shared", "-fPIC", *DEFINES, *CFLAGS, *extra, f"-I{INCLUDE}", f"-I{CSRC}",
            *map(str, operator_sources()), "-o", str(out), f"-L{runtime_dir}", "-lxloss_aclrt", *LIBS,
            *OPERATOR_LINK, *extra]


def combined_command(out: Path, sanitize: bool = False, cc: str | None = None) -> list[str]:
    """A self-contained library (runtime and operators), as :func:`extension` builds it."""
    extra = SANITIZE if sanitize else []
    return [_cc(cc), "-shared", "-fPIC", *DEFINES, *CFLAGS, *extra, f"-I{INCLUDE}", f"-I{CSRC}",
            *map(str, sources()), "-o", str(out), *LIBS, "-Wl,-Bsymbolic", *extra]


def runtime_path_for(out: Path | str) -> Path:
    """Where :func:`build` puts the runtime for an operator library at ``out``."""
    return Path(out).parent / RUNTIME_FILENAME


def _replace(build_into, final: Path) -> None:
    """Build into a temporary file beside ``final`` and rename it over ``final``, so a process that
    has the old library mapped keeps a valid copy."""
    fd, tmp = tempfile.mkstemp(prefix=f".{final.stem}.", suffix=".so", dir=final.parent)
    os.close(fd)
    try:
        build_into(Path(tmp))
        os.chmod(tmp, 0o755)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(sanitize: bool = False, out: Path | str | None = None) -> Path:
    """Compile the runtime (``libxloss_aclrt.so`` beside ``out``) and the operators (``out``, default
    in place) with gcc; returns the operator library's path."""
    out = Path(out) if out is not None else LIBRARY
    out.parent.mkdir(parents=True, exist_ok=True)
    runtime = runtime_path_for(out)
    _replace(lambda tmp: subprocess.run(runtime_command(tmp, sanitize), check=True), runtime)
    _replace(lambda tmp: subprocess.run(operators_command(tmp, runtime.parent, sanitize), check=True), out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer and UBSan")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"operator library path (default {LIBRARY}); the runtime goes beside it")
    args = ap.parse_args(argv)
    if shutil.which(_cc(None)) is None:
        print("no C compiler found (set CC)", file=sys.stderr)
        return 1
    out = build(args.sanitize, args.out)
    print(runtime_path_for(out))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
