"""Build (and optionally run) the C example that drives aclnnNLLLossBackward through the CANN ABI.

It compiles ``ascend_nll_loss_backward.c`` against xloss's CANN-compatible headers and links
the emulator's two libraries whose paths xloss exposes (the operators, ``libxloss_aclnn.so``, and
the runtime, ``libxloss_aclrt.so``), the way any C tool links them::

    python examples/ascend_build_example.py --run
    python examples/ascend_build_example.py --sanitize --run   # emulator sources compiled in, ASan/UBSan

To build against a CANN installation instead, compile the same file **as C++** (``g++ -x c++``:
CANN's ``aclnn/acl_meta.h`` and ``aclnn_base.h`` are C++-only headers) with CANN's include folder
and link ``-lascendcl -lnnopbase -lopapi``; ``--cxx`` builds it as C++ here too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from xloss.backends import ascend_aclnn

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ascend_nll_loss_backward.c"
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]


def build_command(out: Path, *, sanitize: bool = False, include=None, emulator_sources=None,
                  cc: str | None = None, cxx: bool = False) -> list[str]:
    """The compiler command. ``include``: header folder (default: xloss's); ``emulator_sources``:
    the folder holding ``csrc/`` for a sanitized build (default: the installed package); ``cxx``:
    compile the example as C++ (as a CANN installation's headers require)."""
    cc = cc or os.environ.get("CXX" if cxx else "CC", "g++" if cxx else "gcc")
    include = Path(include or ascend_aclnn.include_dir())
    if not (include / "acl" / "acl.h").exists():
        raise SystemExit(f"{include} lacks acl/acl.h: pass the backends/ascend_aclnn/include folder of a checkout")
    lang = ["-std=c++17", "-x", "c++"] if cxx else ["-std=c11"]
    base = [cc, *lang, "-O1", "-g", "-Wall", "-Wextra", f"-I{include}", str(SOURCE), *(["-x", "none"] if cxx else [])]
    if sanitize:  # the emulator's own sources, instrumented too, in place of the shared library
        if cxx:
            raise SystemExit("--sanitize compiles the emulator's C sources in: build the example as C")
        csrc = Path(emulator_sources or Path(ascend_aclnn.__file__).parent) / "csrc"
        return base + SANITIZE + ["-D_POSIX_C_SOURCE=200809L", f"-I{csrc}", *map(str, sorted(csrc.glob("*.c"))),
                                  "-o", str(out), "-lm", "-pthread"]
    lib = Path(ascend_aclnn.emulator_library_path())
    rt = Path(ascend_aclnn.emulator_runtime_path())
    return base + ["-o", str(out), f"-L{lib.parent}", f"-L{rt.parent}", "-lxloss_aclnn", "-lxloss_aclrt",
                   f"-Wl,-rpath,{lib.parent}", f"-Wl,-rpath,{rt.parent}", "-lm"]


def build(out: Path | None = None, *, sanitize: bool = False, include=None, cxx: bool = False) -> Path:
    out = out or HERE / ("ascend_nll_loss_backward" + ("_asan" if sanitize else "") + ("_cxx" if cxx else ""))
    subprocess.run(build_command(out, sanitize=sanitize, include=include, cxx=cxx), check=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="executable path (default: next to the source)")
    ap.add_argument("--include", type=Path, default=None, help="header folder (default: xloss's)")
    ap.add_argument("--sanitize", action="store_true", help="compile the emulator in, with ASan and UBSan")
    ap.add_argument("--cxx", action="store_true", help="compile it as C++ (what CANN's C++-only headers need)")
    ap.add_argument("--run", action="store_true", help="run it after building")
    args = ap.parse_args(argv)
    exe = build(args.out, sanitize=args.sanitize, include=args.include, cxx=args.cxx)
    print(exe)
    if args.run:
        return subprocess.run([str(exe)]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
