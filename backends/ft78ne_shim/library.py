"""The library behind a ``ft78ne``/``mt7004`` backend: loading, which optional helpers it exports
(``include/ft78ne_emu.h``), its status codes as ``KernelError``, and what ``availability()`` and
``info()`` say about it.

Only the vendor entry points are required; a library without the error pair runs, but its refusals
cannot be seen, and ``memory="private"`` needs the private-memory helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import KernelError
from . import abi


@dataclass(frozen=True)
class Features:
    """What the loaded library offers beyond the vendor entry points."""

    errors: bool  # ft78ne_emu_last_error and ft78ne_emu_last_error_message
    clear: bool  # ft78ne_emu_clear_error
    chip: bool  # ft78ne_emu_set_chip
    capacity: bool  # ft78ne_emu_private_capacity
    direct: bool  # the in-tree emulator: validates before it writes, so it may write the caller's arrays
    ext: bool  # declares our layouts: abi.EXT_MARKER() returns abi.EXT_ABI


def load(paths: list[str]):
    """(the CLibrary, its Features), dlopened once per set of paths (BackendUnavailableError if missing)."""
    lib = abi.load(paths)
    return lib, Features(
        errors=all(lib.has(s) for s in abi.ERROR_HELPERS),
        clear=lib.has("ft78ne_emu_clear_error"),
        chip=lib.has(abi.CHIP_HELPER),
        capacity=lib.has(abi.CAPACITY_HELPER),
        direct=abi.is_emulator(paths),
        ext=lib.has(abi.EXT_MARKER) and int(lib.symbol(abi.EXT_MARKER)()) == abi.EXT_ABI,
    )


def prepare_call(lib, features: Features, chip: str) -> None:
    """Before every vendor call on this thread: select the chip (per thread, as any caller on this
    thread must) and clear the last error."""
    if features.chip:
        lib.ft78ne_emu_set_chip(abi.CHIPS[chip])
    if features.clear:
        lib.ft78ne_emu_clear_error()


def raise_for_status(lib, features: Features, backend_name: str, what: str) -> None:
    """KernelError (``.status``, ``.status_name``) if the library's last call on this thread failed."""
    if not features.errors:
        return
    code = int(lib.ft78ne_emu_last_error())
    if code:
        msg = lib.ffi.string(lib.ft78ne_emu_last_error_message()).decode("utf-8", "replace") or what
        name = abi.STATUS.get(code, f"status {code}")
        raise KernelError(f"backend {backend_name!r}: {msg} [{name}]", status=code, status_name=abi.STATUS.get(code))


def unavailable_hint(paths: list[str]) -> str:
    """What to do when the library does not load: build it, if it is the in-tree emulator."""
    if abi.is_emulator(paths) or paths == [str(abi.EMULATOR)]:
        return " (build the emulator: python backends/ft78ne_shim/build.py, or reinstall xloss)"
    return ""


def needs_private_shim(lib) -> bool:
    """Whether the library lacks every private-memory helper (then xloss's shim supplies them, if
    it is built); a library with only some of them is refused instead (its own memory is half there)."""
    return not any(lib.has(s) for s in abi.PRIVATE_HELPERS) and abi.PRIVATE_SHIM.exists()


def private_refusal(lib, features: Features, paths: list[str], private_bytes) -> str | None:
    """Why ``memory="private"`` cannot run on this library (None if it can)."""
    missing = [s for s in abi.PRIVATE_HELPERS if not lib.has(s)]
    if missing:
        return (f"memory='private' needs the private-memory helpers {', '.join(missing)} "
                f"(see include/ft78ne_emu.h), which {':'.join(paths)} does not export")
    if not features.capacity and private_bytes is None:
        return (f"memory='private' needs {abi.CAPACITY_HELPER} or the private_bytes= option "
                "(the private memory per core)")
    return None


def facts(lib, features: Features, private_bytes) -> dict:
    """The library's part of ``info()``."""
    out = {"library kind": "in-tree emulator" if features.direct else "external (vendor or port) library"}
    if features.capacity:
        out["private memory per core"] = f"{int(lib.ft78ne_emu_private_capacity())} bytes"
    if private_bytes is not None:
        out["staging budget per core"] = f"{private_bytes} bytes"
    if features.errors:
        out["error reporting"] = "yes (ft78ne_emu_last_error and ft78ne_emu_last_error_message)"
    else:
        have = [s for s in abi.ERROR_HELPERS if lib.has(s)]
        out["error reporting"] = (f"no: the library exports {' and '.join(have) or 'neither'} of "
                                  f"{', '.join(abi.ERROR_HELPERS)}, so its refusals cannot be seen")
    return out


def select_core(lib, features: Features, backend_name: str, core: int) -> None:
    """Make this thread core ``core`` (private memory); KernelError if the library refuses."""
    if int(lib.ft78ne_emu_set_core(core)) != 0:
        raise_for_status(lib, features, backend_name, "ft78ne_emu_set_core")
        raise KernelError(f"backend {backend_name!r}: ft78ne_emu_set_core({core}) failed")
