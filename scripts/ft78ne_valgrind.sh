#!/bin/sh
# Leak and memory-error check of the FT78NE/MT7004 emulator under valgrind (memcheck).
#
#   sh scripts/ft78ne_valgrind.sh [--stress] [WORKDIR]
#
# Builds, from the emulator's sources (-O1 -g, so valgrind reports name lines):
#   - examples/ft78ne_bce.c: the manual's shared- and private-memory calls (8-core thread team,
#     private arena, a refused call);
#   - with --stress, also tests/backends/ft78ne/c/abi_stress.c --threads-only: 8 threads, each with
#     its own chip and core, shared calls on every mask width, private alloc / _p call / free cycles;
# and runs each under valgrind --leak-check=full. Fails (exit status 1) on any leak (definite,
# indirect or possible), any memory error, or a program that does not print OK. The arenas are
# process-lifetime allocations, reported as "still reachable" and not counted as leaks.
# Needs gcc and valgrind; CC and VALGRIND override them.
set -eu
stress=0
if [ "${1:-}" = "--stress" ]; then
    stress=1
    shift
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
shim="$repo/backends/ft78ne_shim"
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/xloss-ft78ne-vg.XXXXXX")}
mkdir -p "$work"
cc=${CC:-gcc}
vg=${VALGRIND:-valgrind}
command -v "$vg" >/dev/null 2>&1 || { echo "ft78ne_valgrind: $vg not found" >&2; exit 2; }

build() { # build OUT SOURCE...
    out=$1
    shift
    $cc -std=c11 -O1 -g -pthread -I"$shim/include" -I"$shim/csrc" "$@" "$shim"/csrc/*.c -o "$out" -lm
}

check() { # check NAME OK-LINE PROGRAM ARGS...
    name=$1 expect=$2
    shift 2
    log="$work/$name.valgrind"
    if ! "$vg" --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --show-leak-kinds=definite,indirect,possible \
        --error-exitcode=99 --log-file="$log" "$@" >"$work/$name.out" 2>&1; then
        echo "ft78ne_valgrind: $name: valgrind found errors or leaks (or the program failed):" >&2
        cat "$log" "$work/$name.out" >&2
        exit 1
    fi
    if ! grep -q "$expect" "$work/$name.out"; then
        echo "ft78ne_valgrind: $name did not report '$expect':" >&2
        cat "$work/$name.out" >&2
        exit 1
    fi
    echo "$name: $(grep -E 'ERROR SUMMARY' "$log" | sed 's/^==[0-9]*== //'); $(grep -E 'definitely lost|still reachable' "$log" | sed 's/^==[0-9]*== *//' | tr '\n' ' ')"
}

build "$work/ft78ne_bce" "$repo/examples/ft78ne_bce.c"
check example '^OK$' "$work/ft78ne_bce"
if [ "$stress" = 1 ]; then
    build "$work/abi_stress" "$repo/tests/backends/ft78ne/c/abi_stress.c"
    check stress 'abi_stress: OK' "$work/abi_stress" --threads-only
fi
echo "ft78ne_valgrind: OK"
