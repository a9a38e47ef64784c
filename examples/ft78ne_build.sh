#!/bin/sh
# Build examples/ft78ne_bce.c against the FT78NE/MT7004 emulator and run it.
#   sh examples/ft78ne_build.sh [output-binary]   (default build/ft78ne_bce; CC, CFLAGS are honoured)
# The emulator is built first if it is missing (backends/ft78ne_shim/build.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
shim="$here/../backends/ft78ne_shim"
shim=$(cd "$shim" && pwd)
[ -f "$shim/libxloss_ft78ne.so" ] || "${PYTHON:-python3}" "$shim/build.py" >&2  # keep stdout the example's
out=${1:-"$here/../build/ft78ne_bce"}
mkdir -p "$(dirname "$out")"
${CC:-gcc} -std=c11 -O2 -Wall -Wextra ${CFLAGS:-} -I"$shim/include" "$here/ft78ne_bce.c" \
    -L"$shim" -lxloss_ft78ne -Wl,-rpath,"$shim" -o "$out"
"$out"
