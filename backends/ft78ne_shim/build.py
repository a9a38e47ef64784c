"""Build the FT78NE/MT7004 emulator, ``libxloss_ft78ne.so`` (a plain C library, no Python).

``setup.py`` calls :func:`extension` and builds it into the package folder. Run as a script it
builds the same library in place with gcc directly (or ``$CC``)::

    python backends/ft78ne_shim/build.py              # -> backends/ft78ne_shim/libxloss_ft78ne.so
    python backends/ft78ne_shim/build.py --sanitize   # ASan+UBSan build (load it with LD_PRELOAD=libasan)
    python backends/ft78ne_shim/build.py --out /tmp/libx.so

Only the vendor ABI (``include/ft78ne.h``) and the emulator helpers (``include/ft78ne_emu.h``)
are exported: everything else is built with ``-fvisibility=hidden``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "xloss.backends.ft78ne_shim.libxloss_ft78ne"
LIBRARY = HERE / "libxloss_ft78ne.so"

CFLAGS = ["-O2", "-std=c11", "-pthread", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
LDFLAGS = ["-pthread"]
LIBS = ["m"]


def sources(root: Path = HERE) -> list[Path]:
    return sorted((root / "csrc").glob("*.c"))


def include_dirs(root: Path = HERE) -> list[Path]:
    return [root / "include", root / "csrc"]


def extension(sanitize: bool = False):
    """The setuptools Extension that ``setup.py`` turns into ``libxloss_ft78ne.so``."""
    from setuptools import Extension

    root = HERE.parent.parent  # setup.py passes paths relative to the repository root
    rel = lambda p: str(p.relative_to(root))  # noqa: E731
    extra = CFLAGS + (SANITIZE if sanitize else [])
    return Extension(
        NAME,
        sources=[rel(p) for p in sources()],
        include_dirs=[rel(p) for p in include_dirs()],
        depends=[rel(p) for p in sorted((HERE / "include").glob("*.h")) + sorted((HERE / "csrc").glob("*.h"))],
        extra_compile_args=extra,
        extra_link_args=LDFLAGS + (SANITIZE if sanitize else []),
        libraries=LIBS,
    )


def gcc_command(out: Path, *, sanitize: bool = False, cc: str | None = None) -> list[str]:
    cc_cmd = shlex.split(cc or os.environ.get("CC") or "gcc")
    cmd = cc_cmd + CFLAGS + (SANITIZE if sanitize else []) + ["-shared"]
    cmd += [f"-I{d}" for d in include_dirs()]
    cmd += [str(s) for s in sources()]
    cmd += ["-o", str(out)] + LDFLAGS + (SANITIZE if sanitize else []) + [f"-l{lib}" for lib in LIBS]
    return cmd


def build(out: Path = LIBRARY, *, sanitize: bool = False, cc: str | None = None, quiet: bool = False) -> Path:
    """Compile the emulator to ``out`` (atomically: a half-written library is never left at ``out``)."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = gcc_command(tmp, sanitize=sanitize, cc=cc)
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
    ap.add_argument("--out", type=Path, default=LIBRARY, help=f"output path (default {LIBRARY})")
    ap.add_argument("--cc", default=None, help="C compiler (default $CC or gcc)")
    args = ap.parse_args(argv)
    try:
        build(args.out, sanitize=args.sanitize, cc=args.cc)
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
