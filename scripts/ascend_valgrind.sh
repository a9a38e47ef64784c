#!/usr/bin/env bash
# Valgrind memcheck over the ascend emulator's C programs: the documented example
# (examples/ascend_nll_loss_backward.c) and the ABI stress/fuzz program
# (tests/backends/ascend/c/abi_stress.c), both linked against the emulator's two shared libraries
# (libxloss_aclnn.so + libxloss_aclrt.so, built in place if missing). Fails (exit 1) on any
# memory error or any definitely/indirectly lost block; prints "valgrind: clean <program>" per
# clean program.
#
# usage: scripts/ascend_valgrind.sh [WORK_DIR] [STRESS_ITERATIONS]
#   WORK_DIR           where the programs are built (default: a temporary folder)
#   STRESS_ITERATIONS  fuzz calls of abi_stress (default 300; valgrind runs it ~50x slower)
# env: PYTHON (default python3), CC (default gcc), VALGRIND (default valgrind)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d)}"
ITERS="${2:-300}"
PY="${PYTHON:-python3}"
CC="${CC:-gcc}"
VALGRIND="${VALGRIND:-valgrind}"
PKG="$ROOT/backends/ascend_aclnn"
mkdir -p "$WORK"

command -v "$VALGRIND" >/dev/null || { echo "valgrind not found" >&2; exit 2; }
if [[ ! -f "$PKG/libxloss_aclnn.so" || ! -f "$PKG/libxloss_aclrt.so" ]]; then
    "$PY" "$PKG/build.py" >/dev/null
fi

"$PY" "$ROOT/examples/ascend_build_example.py" --include "$PKG/include" --out "$WORK/ascend_nll_loss_backward" >/dev/null
"$CC" -std=c11 -O1 -g -D_POSIX_C_SOURCE=200809L -I"$PKG/include" "$ROOT/tests/backends/ascend/c/abi_stress.c" \
    -o "$WORK/abi_stress" -L"$PKG" -lxloss_aclnn -lxloss_aclrt -Wl,-rpath,"$PKG" -lm -pthread

status=0
run() {
    local name="$1"; shift
    if "$VALGRIND" -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
            --errors-for-leak-kinds=definite,indirect "$@" >"$WORK/$name.log" 2>&1; then
        echo "valgrind: clean $name"
    else
        echo "valgrind: FAILED $name (log: $WORK/$name.log)"
        tail -n 60 "$WORK/$name.log"
        status=1
    fi
}
run ascend_nll_loss_backward "$WORK/ascend_nll_loss_backward"
run abi_stress "$WORK/abi_stress" "$ITERS"
exit $status
