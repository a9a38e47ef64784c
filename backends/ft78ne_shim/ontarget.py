"""On-target conformance for the FT78NE/MT7004 convention (OURS): the adapter, recorded and played back.

:class:`OnTargetBackend` is the host adapter (:class:`~.backend.DspBackend`, checked mode) with one
change: its library is the in-tree emulator behind a proxy that declares only the entry points the
port exports, and whose vendor entry points are wrapped. In an export each call is recorded (its
scalars, and every buffer with the guard layout checked mode gives it and its initial bytes) and then
run on the emulator, so the check's flow is that of a correct library; in a judge each call is
answered with what the runner wrote: the outputs, any changed guard or input bytes, the status. The
adapter's own checks (guards, input comparison, status) then report it exactly as on the host.

The runner (``runner/xloss_runner.c``) makes the same calls: ``_s`` with the recorded core mask over
malloc'd buffers, ``_p`` on the recorded core through its private memory.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

from ...clib import MissingSymbolError
from ...conformance.export_format import RUNNER_STATUS, Buffer, digest
from ...errors import KernelError
from . import abi, capabilities, guards, library
from .backend import CONFIG_MASKS, DspBackend

RUNNER_DIR = Path(__file__).resolve().with_name("runner")
INCLUDE_DIR = Path(__file__).resolve().with_name("include")
HEADERS = ("ft78ne.h", "ft78ne_emu.h", "fusedlinearonlinemaxsum.h", "fusedcrossentropylosswithmaxsum.h",
           "nllloss.h", "binarycrossentropy.h")
#: operator -> the runner's dispatch macro family (xloss_runner.c); _S/_P appended except FLCE
MACROS = {"binarycrossentropygrad": "BCE", "sigmoidfocalloss": "FOCAL", "sigmoidfocallossgrad": "FOCALGRAD",
          "nlllossgrad": "NLL", "fusedlinearcrossentropylossgrad": "FLCE", "fusedlinearonlinemaxsum": "MAXSUM",
          "fusedcrossentropylosswithmaxsum": "LOSS",
          "nllloss": "NLLF", "binarycrossentropy": "BCEF",  # the forward pages (issue #30)
          "sigmoidcrossentropywithlogits": "SCE", "sigmoidcrossentropywithlogitsgrad": "SCE"}
VENDOR_SYMBOLS = frozenset(capabilities.symbol(d, op, s) for d in capabilities.PREFIX for op in MACROS
                           for s in ("_s", "_p"))
#: the runner's back guard after a shared buffer: the host check's (a page, or the buffer's own size),
#: capped here so a board holds a 512 MiB buffer in 512 MiB and 64 KiB, not 1 GiB
BACK_GUARD_MAX = 64 << 10
#: a one-phase convention: no workspace, so no workspace guards
WORKSPACE_GUARD = 0
_current = threading.local()  # the backend whose _invoke is running on this thread


class _Status(threading.local):
    code = 0
    message = b""


class _Lib:
    """The emulator, seen through the port's symbol table; vendor entry points go through ``wrap``."""

    def __init__(self, emulator, symbols, wrap, status: _Status | None):
        self._emu, self._symbols, self._wrap, self._status = emulator, frozenset(symbols), wrap, status
        self._wrapped = {}
        self.ffi = emulator.ffi
        self.paths = emulator.paths

    def has(self, name: str) -> bool:
        if name in VENDOR_SYMBOLS or name == abi.EXT_MARKER:
            return name in self._symbols
        return self._emu.has(name)

    def symbol(self, name: str):
        if name in VENDOR_SYMBOLS:
            if name not in self._symbols:
                raise MissingSymbolError(f"symbol {name} is not exported by the port")
            if name not in self._wrapped:
                self._wrapped[name] = self._wrap(name, self._emu.symbol(name))
            return self._wrapped[name]
        if self._status is not None and name == "ft78ne_emu_last_error":
            return lambda: self._status.code
        if self._status is not None and name == "ft78ne_emu_last_error_message":
            return lambda: self.ffi.new("char[]", self._status.message)
        return self._emu.symbol(name)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.symbol(name)


class OnTargetBackend(DspBackend):
    """The adapter over a :class:`_Lib`; ``session`` holds the proxy, the port's features and determinism."""

    def __init__(self, chip: str, session, **opts):
        opts = {k: v for k, v in opts.items() if k != "lib"}
        super().__init__(chip, **dict(opts, guards=True, lib=str(abi.EMULATOR)))
        self.session = session
        self._lib, self._features = session.lib, session.features
        self.deterministic = session.deterministic if opts.get("deterministic") is None else self.deterministic
        # the report names the port's library and the options the user gave, as a host run does
        self.options = {k: v for k, v in self.options.items() if k not in ("lib", "guards")}
        if session.library:
            self.options["lib"] = session.library

    @property
    def lib(self):
        return self._lib

    def configurations(self) -> list:
        return [(f"core_mask={m:#04x}", OnTargetBackend(self.chip, self.session, **dict(self._given, core_mask=m)))
                for m in CONFIG_MASKS]

    def checked(self):
        return self

    def _invoke(self, fname: str, *args) -> None:
        _current.backend = self
        super()._invoke(fname, *args)


def describe(fname: str, fn, call_args, ffi):
    """(core, args, pointers): the call as recorded, ``args`` holding ints, floats, None (NULL) and
    :class:`Buffer` with the guard layout checked mode gave each pointer (guards.checked_call)."""
    b = _current.backend
    op = fname[3:-2]
    names = guards.ARGS[op]
    es = 2 if fname.startswith("hp") else 4
    ctypes = ffi.typeof(fn).args
    scalars = {n: a for n, a in zip(names, call_args) if not isinstance(a, ffi.CData)}
    ext = guards.extents(op, es, scalars, b._codes.get(op, {}))
    blocks = getattr(b._private_blocks, "blocks", None)
    core = -1
    args, pointers = [], []
    for name, ct, a in zip(names, ctypes, call_args):
        if ct.kind != "pointer":
            args.append(float(a) if ct.cname == "float" else int(a))
            continue
        if a == ffi.NULL:
            args.append(None)
            continue
        addr = int(ffi.cast("uintptr_t", a))
        if blocks is not None and addr in blocks:
            raw = blocks[addr]
            nbytes = min(ext.get(name, 0), raw.size - 2 * guards.GUARD)
            front, back = guards.GUARD, raw.size - guards.GUARD - nbytes
            core = b.session.emulator.ft78ne_emu_core()
        else:
            nbytes = ext.get(name, 0)
            front, back = guards.HOST_FRONT, min(max(guards.HOST_FRONT, -(-nbytes // 64) * 64), BACK_GUARD_MAX)
        out = name in guards.outputs(op)
        body = ffi.buffer(ffi.cast("char *", a), nbytes)
        args.append(Buffer(name, out, nbytes, front, back, "" if out else digest(body)))
        pointers.append(ffi.cast("unsigned char *", a))
    return core, args, pointers


class _Session:
    def __init__(self, emulator, symbols, features, deterministic, wrap, status=None, library=None):
        self.emulator = emulator
        self.library = library
        self.features = features
        self.deterministic = deterministic
        self.lib = _Lib(emulator, symbols, wrap, status)


def declaring_backend(chip: str, options: dict) -> DspBackend:
    """The backend whose declarations the export uses: the port's library if ``lib`` is given (it is
    only loaded for its symbol table and helpers, never called), else the emulator's."""
    return DspBackend(chip, **options)


def chip_code(backend: str) -> int:
    """The runner's chip code for ``backend`` (ft78ne or mt7004)."""
    return abi.CHIPS[backend]


def recorder(chip: str, options: dict, recording) -> tuple[OnTargetBackend, dict]:
    """The export's backend, and what the manifest must hold to rebuild its declarations."""
    decl = declaring_backend(chip, options)
    lib = decl.lib  # BackendUnavailableError if the port does not load
    symbols = sorted(s for s in VENDOR_SYMBOLS | {abi.EXT_MARKER} if lib.has(s))
    features = dataclasses.replace(decl._features, direct=False)
    emulator, _ = library.load([str(abi.EMULATOR)])

    def wrap(fname, fn):
        def recorded(*call_args):
            core, args, pointers = describe(fname, fn, call_args, emulator.ffi)
            contents = [bytes(emulator.ffi.buffer(p, a.extent)) for p, a in
                        zip(pointers, [x for x in args if hasattr(x, "extent")])]
            recording.record(fname, core, args, contents)
            emulator.ft78ne_emu_set_chip(abi.CHIPS[chip])  # whatever helpers the port has: it is the chip
            fn(*call_args)

        return recorded

    library_given = ":".join(decl.paths) if "lib" in options else None
    session = _Session(emulator, symbols, features, decl.deterministic, wrap, library=library_given)
    facts = {"symbols": symbols, "features": vars(features), "deterministic": decl.deterministic,
             "chip": chip, "library": library_given}
    return OnTargetBackend(chip, session, **options), facts


def player(chip: str, options: dict, facts: dict, playback) -> OnTargetBackend:
    """The judge's backend: the port's declarations from the manifest, each call answered by ``playback``."""
    emulator, _ = library.load([str(abi.EMULATOR)])
    ffi = emulator.ffi
    status = _Status()
    features = library.Features(**facts["features"])

    def wrap(fname, fn):
        def played(*call_args):
            core, args, pointers = describe(fname, fn, call_args, ffi)
            call, res = playback.answer(fname, core, args)
            if res.status < 0:
                raise KernelError(f"{fname}: {RUNNER_STATUS.get(res.status, f'runner status {res.status}')}",
                                  status=res.status)
            buffers = [a for a in args if hasattr(a, "extent")]
            for p, b, (_flags, out, front, back, inp) in zip(pointers, buffers, res.buffers):
                if out is not None:
                    ffi.memmove(p, playback.results.bytes_at(out, b.extent), b.extent)
                if front is not None:
                    ffi.memmove(p - b.front, playback.results.bytes_at(front, b.front), b.front)
                if back is not None:
                    ffi.memmove(p + b.extent, playback.results.bytes_at(back, b.back), b.back)
                if inp is not None:
                    ffi.memmove(p, playback.results.bytes_at(inp, b.extent), b.extent)
            status.code, status.message = res.status, res.message.encode()

        return played

    session = _Session(emulator, facts["symbols"], features, facts["deterministic"], wrap, status,
                       library=facts["library"])
    return OnTargetBackend(chip, session, **options)


def write_runner(folder: Path, facts: dict, calls: list[dict]) -> None:
    """The runner's sources next to the cases: xloss_runner.c, the headers, runner_config.h (the
    port's optional helpers) and runner_calls.h (one dispatch line per entry point the cases call)."""
    src = folder / "src"
    src.mkdir(exist_ok=True)
    shutil.copyfile(RUNNER_DIR / "xloss_runner.c", src / "xloss_runner.c")
    for h in HEADERS:
        shutil.copyfile(INCLUDE_DIR / h, src / h)
    f = facts["features"]
    private = any(c["core"] >= 0 for c in calls)
    (src / "runner_config.h").write_text(
        "/* written by xloss check --export: what the port exports besides the vendor entry points */\n"
        f"#define XLOSS_RUNNER_ERRORS {int(f['errors'])}\n#define XLOSS_RUNNER_CLEAR {int(f['clear'])}\n"
        f"#define XLOSS_RUNNER_CHIP {int(f['chip'])}\n#define XLOSS_RUNNER_PRIVATE {int(private)}\n")
    lines = []
    for fname in sorted({c["fname"] for c in calls}):
        op, suffix = fname[3:-2], fname[-1].upper()
        macro = MACROS[op] if op == "fusedlinearcrossentropylossgrad" else f"{MACROS[op]}_{suffix}"
        lines.append(f"{macro}({fname}, {capabilities.CTYPE['float16' if fname[0] == 'h' else 'float32']})")
    (src / "runner_calls.h").write_text(
        "/* written by xloss check --export: the entry points the cases call */\n" + "\n".join(lines) + "\n")
    build = folder / "build.sh"
    build.write_text(BUILD_SH)
    build.chmod(0o755)


BUILD_SH = r"""#!/bin/sh
# Written by xloss check --export (OURS): build the on-target runner against a port.
#   DIR/build.sh PORT_LIB [extra linker arguments]   ->  DIR/xloss_runner
# ${CC:-cc} and ${CFLAGS} are honoured: cross-compile with CC=<vendor compiler>.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 PORT_LIB [extra linker arguments]" >&2; exit 2; }
lib=$1; shift
mkdir -p "$here/out"
${CC:-cc} -std=c99 ${CFLAGS:--O1} -I"$here/src" "$here/src/xloss_runner.c" -o "$here/xloss_runner" "$lib" "$@"
echo "built $here/xloss_runner; run: $here/xloss_runner $here"
"""


# -- softmax cross entropy (issue #30): the two pages, each in its own header --------------------------------
HEADERS += tuple(f"{op}.h" for op in abi.SOFTMAX_CE_OPS)
MACROS.update({abi.SOFTMAX_CE: "SMCE", abi.SPARSE_SOFTMAX_CE: "SSMCE"})
VENDOR_SYMBOLS = frozenset(capabilities.symbol(d, op, s) for d in capabilities.PREFIX for op in MACROS
                           for s in ("_s", "_p"))
