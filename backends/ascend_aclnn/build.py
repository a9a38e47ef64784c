"""Build of the Ascend host emulator, ``libxloss_aclnn.so``: a plain C shared library with the CANN
ABI (no Python dependency), loaded through cffi and linkable from C.

``extension(sanitize)`` is what ``setup.py`` builds at install. Run as a script, this file
builds the same library in place with gcc directly (``--sanitize`` adds ASan/UBSan, ``--out``
writes elsewhere)::

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
NAME = "xloss.backends.ascend_aclnn.libxloss_aclnn"
LIBRARY = HERE / "libxloss_aclnn.so"
INCLUDE = HERE / "include"

# FUNC_VISIBILITY makes ACL_FUNC_VISIBILITY export exactly the ABI symbols under -fvisibility=hidden.
DEFINES = ["-DFUNC_VISIBILITY", "-D_POSIX_C_SOURCE=200809L"]
# -fvect-cost-model=dynamic lets -O2 vectorize the row loops (no reassociation: results are unchanged)
CFLAGS = ["-O2", "-fvect-cost-model=dynamic", "-std=c11", "-pthread", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-Wno-unused-parameter", "-Wno-unused-const-variable"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
LIBS = ["-lm", "-pthread"]


def sources() -> list[Path]:
    return sorted((HERE / "csrc").glob("*.c"))


def extension(sanitize: bool):
    """The setuptools Extension that setup.py turns into ``libxloss_aclnn.so``."""
    from setuptools import Extension

    root = HERE.parent.parent  # setup.py wants paths relative to the project root
    extra = SANITIZE if sanitize else []
    return Extension(
        NAME,
        sources=[str(p.relative_to(root)) for p in sources()],
        include_dirs=[str(INCLUDE.relative_to(root)), str((HERE / "csrc").relative_to(root))],
        extra_compile_args=DEFINES + CFLAGS + extra,
        extra_link_args=LIBS + extra,
    )


def compile_command(out: Path, sanitize: bool = False, cc: str | None = None) -> list[str]:
    cc = cc or os.environ.get("CC", "gcc")
    extra = SANITIZE if sanitize else []
    return [cc, "-shared", "-fPIC", *DEFINES, *CFLAGS, *extra, f"-I{INCLUDE}", f"-I{HERE / 'csrc'}",
            *map(str, sources()), "-o", str(out), *LIBS, *extra]


def build(sanitize: bool = False, out: Path | str | None = None) -> Path:
    """Compile the library with gcc. Writes a temporary file and renames it over ``out``, so a
    process that has the old library mapped keeps a valid copy."""
    out = Path(out) if out is not None else LIBRARY
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libxloss_aclnn.", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        subprocess.run(compile_command(Path(tmp), sanitize), check=True)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer and UBSan")
    ap.add_argument("--out", type=Path, default=None, help=f"output path (default {LIBRARY})")
    args = ap.parse_args(argv)
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        print("no C compiler found (set CC)", file=sys.stderr)
        return 1
    print(build(args.sanitize, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
