"""Build the FT78NE/MT7004 emulator, ``libxloss_ft78ne.so``, and the private-memory shim for port
authors, ``libxloss_ft78ne_private.so`` (plain C libraries, no Python).

The shim is the emulator's arena code alone (``csrc/arena.c``): the helpers of
``include/ft78ne_emu.h`` but the chip pair, and no vendor operator. A port links against it to
check its ``_p`` buffers (``ft78ne_emu_private_check``) and is tested with ``memory="private"``
(README, "For port authors").

``setup.py`` calls :func:`extensions` (or :func:`extension`, the emulator alone) and builds them
into the package folder. Run as a script it builds the same libraries in place with gcc directly
(or ``$CC``)::

    python backends/ft78ne_shim/build.py              # -> libxloss_ft78ne.so and libxloss_ft78ne_private.so
    python backends/ft78ne_shim/build.py --sanitize   # ASan+UBSan builds (load them with LD_PRELOAD=libasan)
    python backends/ft78ne_shim/build.py --out /tmp/libx.so             # the emulator only
    python backends/ft78ne_shim/build.py --shim --out /tmp/libshim.so   # the shim only

Only the vendor ABI (``include/ft78ne.h``) and the emulator helpers (``include/ft78ne_emu.h``)
are exported: everything else is built with ``-fvisibility=hidden``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "xloss.backends.ft78ne_shim.libxloss_ft78ne"
LIBRARY = HERE / "libxloss_ft78ne.so"
SHIM_NAME = "xloss.backends.ft78ne_shim.libxloss_ft78ne_private"
SHIM_LIBRARY = HERE / "libxloss_ft78ne_private.so"

CFLAGS = ["-O2", "-std=c11", "-pthread", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
LDFLAGS = ["-pthread"]
# the shim: its port-facing API, and a soname so that every port of a process binds to one instance
SHIM_CFLAGS = ["-DFT78NE_PRIVATE_SHIM"]
SHIM_LDFLAGS = ["-Wl,-soname,libxloss_ft78ne_private.so"]
LIBS = ["m"]
# xloss_half.h, shared with the Ascend emulator: csrc/emu.h includes it by its relative path
# ("../../common/include/xloss_half.h"), so no -I is needed; it is listed in the dependencies.
COMMON_INCLUDE = HERE.parent / "common" / "include"


def sources(root: Path = HERE, *, shim: bool = False) -> list[Path]:
    if shim:  # the arenas, the core and the error pair: what a port needs for memory="private"
        return [root / "csrc" / "arena.c"]
    return sorted((root / "csrc").glob("*.c"))


def include_dirs(root: Path = HERE) -> list[Path]:
    return [root / "include", root / "csrc"]


def extension(sanitize: bool = False, *, shim: bool = False):
    """The setuptools Extension that ``setup.py`` turns into ``libxloss_ft78ne.so`` (``shim``:
    ``libxloss_ft78ne_private.so``)."""
    from setuptools import Extension

    root = HERE.parent.parent  # setup.py passes paths relative to the repository root
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    extra = CFLAGS + (SHIM_CFLAGS if shim else []) + (SANITIZE if sanitize else [])
    return Extension(
        SHIM_NAME if shim else NAME,
        sources=[rel(p) for p in sources(shim=shim)],
        include_dirs=[rel(p) for p in include_dirs()],
        depends=[rel(p) for p in sorted((HERE / "include").glob("*.h")) + sorted((HERE / "csrc").glob("*.h"))
                 + sorted(COMMON_INCLUDE.glob("*.h"))],
        extra_compile_args=extra,
        extra_link_args=LDFLAGS + (SHIM_LDFLAGS if shim else []) + (SANITIZE if sanitize else []),
        libraries=LIBS,
    )


def extensions(sanitize: bool = False):
    """Both libraries: the emulator and the private-memory shim."""
    return [extension(sanitize), extension(sanitize, shim=True)]


def gcc_command(out: Path, *, sanitize: bool = False, cc: str | None = None, shim: bool = False) -> list[str]:
    cc_cmd = shlex.split(cc or os.environ.get("CC") or "gcc")
    cmd = cc_cmd + CFLAGS + (SHIM_CFLAGS if shim else []) + (SANITIZE if sanitize else []) + ["-shared"]
    cmd += [f"-I{d}" for d in include_dirs()]
    cmd += [str(s) for s in sources(shim=shim)]
    cmd += ["-o", str(out)] + LDFLAGS + (SHIM_LDFLAGS if shim else []) + (SANITIZE if sanitize else [])
    cmd += [f"-l{lib}" for lib in LIBS]
    return cmd


def build(out: Path | None = None, *, sanitize: bool = False, cc: str | None = None, quiet: bool = False,
          shim: bool = False) -> Path:
    """Compile the emulator (``shim``: the private-memory shim) to ``out`` (default: in place),
    atomically: a half-written library is never left at ``out``."""
    out = Path(out if out is not None else SHIM_LIBRARY if shim else LIBRARY)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    cmd = gcc_command(tmp, sanitize=sanitize, cc=cc, shim=shim)
    if not quiet:
        print(" ".join(shlex.quote(c) for c in cmd))
    try:
        subprocess.run(cmd, check=True)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitize", action="store_true", help="build with -fsanitize=address,undefined")
    ap.add_argument("--shim", action="store_true", help=f"build only the private-memory shim ({SHIM_LIBRARY.name})")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"output path of the one library built (default: both, in place: {LIBRARY.name} and "
                         f"{SHIM_LIBRARY.name})")
    ap.add_argument("--cc", default=None, help="C compiler (default $CC or gcc)")
    args = ap.parse_args(argv)
    try:
        if args.shim or args.out is not None:
            build(args.out, sanitize=args.sanitize, cc=args.cc, shim=args.shim)
        else:
            build(sanitize=args.sanitize, cc=args.cc)
            build(sanitize=args.sanitize, cc=args.cc, shim=True)
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
