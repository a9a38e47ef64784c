"""On-target conformance for the Ascend aclnn convention (OURS): the adapter, recorded and played back.

:class:`OnTargetBackend` is the host adapter (:class:`AscendBackend`, checked) over the emulator's
runtime, declaring only the operators the port exports; its sessions (:class:`OnTargetSession`)
record each two-phase call in an export (every tensor's shape, strides, offset, storage shape,
dtype and format; each device buffer with its guards and initial bytes; the scalars), then run it
on the emulator; in a judge they answer it with what the runner wrote (outputs, changed guard and
input bytes, the workspace phase one asked for, the status and the phase it came from) and then
run the session's own guard and input checks, so the report is the host's.

The runner (``runner/xloss_runner.c``) makes the same calls through AscendCL: aclrtMalloc,
aclrtMemcpy, aclCreateTensor, ``<op>GetWorkspaceSize``, a guarded workspace, ``<op>``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from ...clib import MissingSymbolError
from ...conformance.export_format import RUNNER_STATUS, Bool, Buffer, Double, Int64, String, Tensor, digest
from ...errors import BackendUnavailableError, KernelError
from . import AscendBackend, emulator_library_path
from . import _cdef as C
from .operators import OPERATORS, declare
from .runtime import WRITTEN_INPUTS, Session, contiguous_strides

RUNNER_DIR = Path(__file__).resolve().with_name("runner")
INCLUDE_DIR = Path(__file__).resolve().with_name("include")
#: cffi type name -> the runner's argument macro (xloss_runner.c); a ``char *`` is S, an aclTensor T
MACROS = {"int64_t": "L", "double": "D", "float": "F", "_Bool": "B"}
#: the operators the on-target runner calls: every one (CANN's ``char *`` reductions and ``bool`` flags are
#: records of their own, export_format.String and Bool)
ON_TARGET_OPERATORS = OPERATORS
#: each side of a workspace (runtime.Session.malloc's guard; the runner's WORKSPACE_GUARD)
WORKSPACE_GUARD = 64


class OnTargetSession(Session):
    """A checked session whose ``run`` goes through ``hook(session, op, args)``; it remembers each
    tensor's layout (an aclTensor is opaque)."""

    def __init__(self, rt, layout, hook, symbols, library):
        super().__init__(rt, layout, checked=True)
        self.hook = hook
        self.symbols = symbols
        self.library = library or "the port"
        self.layouts: dict[int, tuple] = {}

    def tensor(self, buf, shape, dtype, *, strides=None, offset: int = 0, storage_shape=None,
               fmt: int = C.ACL_FORMAT_ND):
        t = super().tensor(buf, shape, dtype, strides=strides, offset=offset, storage_shape=storage_shape, fmt=fmt)
        code = dtype if isinstance(dtype, int) else C.ACL_DTYPES[np.dtype(dtype)]
        shape = tuple(int(d) for d in shape)
        strides = contiguous_strides(shape) if strides is None else tuple(int(s) for s in strides)
        storage = shape if storage_shape is None else tuple(int(d) for d in storage_shape)
        self.layouts[int(self.ffi.cast("uintptr_t", t))] = (code, int(fmt), shape, strides, int(offset), storage)
        return t

    def run(self, op: str, *args) -> int:
        for fn in (op + "GetWorkspaceSize", op):  # as the port's library would: the symbol is not there
            if fn not in self.symbols:
                raise MissingSymbolError(f"symbol {fn} is not exported by {self.library}")
        return self.hook(self, op, args)

    def plain_run(self, op: str, args) -> int:
        return Session.run(self, op, *args)


def describe(s: OnTargetSession, op: str, args):
    """(call args, device buffers, their names): the buffers first (Buffer), then the operator's
    arguments (Tensor referring to a buffer by index, None for NULL, Int64, Double, float)."""
    s._name_operands(op, args)
    ffi = s.ffi
    types = ffi.typeof(s.lib.symbol(op + "GetWorkspaceSize")).args
    buffers, index, out = [], {}, []
    for ct, a in zip(types, args):
        if ct.kind == "pointer" and ct.item.cname == "char":  # a C string: CANN's reduction name
            out.append(None if a is None or a == ffi.NULL else String(bytes(a)))
        elif ct.kind == "pointer":
            if a == ffi.NULL:
                out.append(None)
                continue
            addr = int(ffi.cast("uintptr_t", a))
            buf = s._tensor_buffer[addr]
            if id(buf) not in index:
                index[id(buf)] = len(buffers)
                buffers.append(buf)
            code, fmt, shape, strides, offset, storage = s.layouts[addr]
            out.append(Tensor(index[id(buf)], code, fmt, shape, strides, offset, storage))
        elif ct.cname == "double":
            out.append(Double(float(a)))
        elif ct.cname == "int64_t":
            out.append(Int64(int(a)))
        elif ct.cname == "_Bool":
            out.append(Bool(bool(a)))
        else:
            out.append(float(a))
    written = WRITTEN_INPUTS.get(op, frozenset())
    described = []
    for buf in buffers:
        output = buf.uploaded is None or buf.name in written
        body = bytes(s._read_raw(buf.ptr, buf.nbytes))
        described.append((Buffer(buf.name or "?", output, buf.nbytes, buf.guard, buf.tail,
                                 "" if output else digest(body)), body))
    # the buffers come first in the record, so a tensor's buffer index is also its argument index
    return [b for b, _ in described] + out, [body for _, body in described], buffers, len(described)


class OnTargetBackend(AscendBackend):
    """The adapter over the emulator's runtime with the port's declarations (``symbols``)."""

    def __init__(self, hook, symbols, library=None, *, layout: str = "contiguous", **_):
        super().__init__(emulator_library_path(), layout=layout, checked=True)
        self._hook = hook
        self._symbols = frozenset(symbols)
        if not self._why:
            self._caps, self.focal_abi = declare(lambda op: op in self._symbols and op + "GetWorkspaceSize"
                                                 in self._symbols)
        self.options = {k: v for k, v in self.options.items() if k not in ("lib", "checked")}
        if library:
            self.options["lib"] = library

    def checked(self):
        return self

    def session(self, layout: str | None = None) -> Session:
        self.rt.ensure_initialized()
        return OnTargetSession(self.rt, layout or self.layout, self._hook, self._symbols, self.options.get("lib"))


def _symbols(backend: AscendBackend) -> list[str]:
    lib = backend.rt.lib
    return sorted(fn for op in ON_TARGET_OPERATORS for fn in (op, op + "GetWorkspaceSize") if lib.has(fn))


def chip_code(backend: str) -> int:
    """The runner's chip code for ``backend`` (the Ascend runner has one)."""
    return 0


def recorder(name: str, options: dict, recording):
    """The export's backend and the facts the judge needs (the port's operators)."""
    decl = AscendBackend(options.get("lib"), layout=options.get("layout", "contiguous"))
    ok, why = decl.availability()
    if not ok:
        raise BackendUnavailableError(why)
    symbols = _symbols(decl)
    library = ":".join(decl.paths) if options.get("lib") else None

    def hook(s, op, args):
        call_args, contents, _, _ = describe(s, op, args)
        recording.record(op, -1, call_args, contents)
        return s.plain_run(op, args)

    facts = {"symbols": symbols, "library": library, "layout": options.get("layout", "contiguous")}
    return OnTargetBackend(hook, symbols, library, layout=facts["layout"]), facts


def player(name: str, options: dict, facts: dict, playback):
    """The judge's backend: each call answered by ``playback`` (:class:`.export_format.Playback`)."""
    def hook(s, op, args):
        call_args, _, buffers, n = describe(s, op, args)
        call, res = playback.answer(op, -1, call_args)
        results = playback.results
        if res.status < 0:
            raise KernelError(f"{op}: {RUNNER_STATUS.get(res.status, f'runner status {res.status}')}",
                              status=res.status)
        if res.phase == 1 and res.status:
            raise _error(op + "GetWorkspaceSize", res)
        if res.workspace:
            ws = s.malloc(res.workspace, guarded=True)
            ws.name = "workspace"
            front, back = res.workspace_guards
            if front is not None:
                _put(s, ws.base, results.bytes_at(front, WORKSPACE_GUARD))
            if back is not None:
                _put(s, s.ffi.cast("char *", ws.ptr) + res.workspace, results.bytes_at(back, WORKSPACE_GUARD))
        for buf, b, (_flags, out, front, back, inp) in zip(buffers, call_args[:n], res.buffers):
            ptr = s.ffi.cast("char *", buf.ptr)
            if out is not None:
                _put(s, ptr, results.bytes_at(out, b.extent))
            if front is not None:
                _put(s, buf.base, results.bytes_at(front, b.front))
            if back is not None:
                _put(s, ptr + b.extent, results.bytes_at(back, b.back))
            if inp is not None:
                _put(s, ptr, results.bytes_at(inp, b.extent))
        s.check_guards(op)
        s.check_inputs(op)
        if res.status:
            raise _error(op, res)
        return res.workspace

    return OnTargetBackend(hook, facts["symbols"], facts.get("library"), layout=facts.get("layout", "contiguous"))


def _put(s, dst, data: bytes) -> None:
    if data:
        s.rt.call("aclrtMemcpy", dst, len(data), s.ffi.from_buffer(data), len(data), C.ACL_MEMCPY_HOST_TO_DEVICE)


def _error(api: str, res) -> KernelError:
    name = C.status_name(int(res.status))
    return KernelError(f"{api} failed with {name} ({res.status})" + (f": {res.message}" if res.message else ""),
                       status=int(res.status), status_name=name)


def write_runner(folder: Path, facts: dict, calls: list[dict]) -> None:
    """The runner's sources next to the cases: xloss_runner.c, the CANN headers (include/) and
    runner_calls.h (one line per operator the cases call, its arguments typed from the ABI)."""
    import cffi

    src = folder / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(INCLUDE_DIR, src)
    shutil.copyfile(RUNNER_DIR / "xloss_runner.c", src / "xloss_runner.c")
    ffi = cffi.FFI()
    ffi.cdef(C.CDEF)
    lines = []
    for op in sorted({c["fname"] for c in calls}):
        fn = ffi.typeof(f"aclnnStatus(*)({_params(op)})")
        args = [f"{_macro(t)}({i})" for i, t in enumerate(fn.args)]
        lines.append(f"OP({op}, {', '.join(args)})")
    (src / "runner_calls.h").write_text(
        "/* written by xloss check --export: the operators the cases call, with their arguments */\n"
        + "\n".join(lines) + "\n")
    build = folder / "build.sh"
    build.write_text(BUILD_SH)
    build.chmod(0o755)


def _macro(t) -> str:
    """The runner's argument macro for the cffi type ``t``: S a C string, T an aclTensor, else by the scalar type."""
    if t.kind == "pointer":
        return "S" if t.item.cname == "char" else "T"
    return MACROS[t.cname]


def _params(op: str) -> str:
    for line in C.CDEF.splitlines():
        head, _, rest = line.partition("GetWorkspaceSize(")
        if rest and head.split()[-1] == op:
            params = [p.strip() for p in rest.rstrip(");").split(",")]
            return ", ".join(p.rsplit(" ", 1)[0].replace("*", "").strip() + (" *" if "*" in p else "")
                             for p in params if not p.endswith(("workspaceSize", "executor")))
    raise KeyError(op)


BUILD_SH = r"""#!/bin/sh
# Written by xloss check --export (OURS): build the on-target runner against an aclnn port.
#   DIR/build.sh PORT_LIB [extra linker arguments, e.g. the CANN runtime: -lascendcl]  ->  DIR/xloss_runner
# ${CC:-cc} and ${CFLAGS} are honoured.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 PORT_LIB [extra linker arguments]" >&2; exit 2; }
lib=$1; shift
mkdir -p "$here/out"
${CC:-cc} -std=c99 ${CFLAGS:--O1} -I"$here/src" "$here/src/xloss_runner.c" -o "$here/xloss_runner" "$lib" "$@"
echo "built $here/xloss_runner; run: $here/xloss_runner $here"
"""

