"""The options of the ``ft78ne``/``mt7004`` backends: parsed and validated once, at construction.

Every refusal is an ``XLossError`` naming the option; a boolean option also takes the strings the
command line passes (``guards=yes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...errors import XLossTypeError, XLossValueError
from . import abi
from .staging import ALIGN

#: every option a backend takes
OPTIONS = ("memory", "core_mask", "lib", "private_bytes", *abi.CODE_OPTIONS, "guards", "deterministic")


@dataclass(frozen=True)
class DspOptions:
    """The options of one backend, validated."""

    chip: str
    memory: str  # "shared" or "private"
    core_mask: int
    private_bytes: int | None  # the staging budget per core; None: the library's capacity
    paths: list  # the libraries loaded, in order
    codes: dict  # operator -> {reduction name: code}
    guards: bool  # checked mode
    deterministic: bool | None  # as declared; None: not declared
    given: dict  # the options passed (None left out): what configurations() and checked() vary
    shown: dict  # what repr and `xloss backends` show

    @property
    def cores(self) -> list[int]:
        return [c for c in range(abi.NUM_CORES) if self.core_mask >> c & 1]

    @property
    def suffix(self) -> str:
        """The entry-point suffix of the memory model: ``_s`` shared, ``_p`` private."""
        return "_s" if self.memory == "shared" else "_p"


def flag(chip: str, name: str, value) -> bool:
    """A boolean option, also as the command line passes it (a string)."""
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return text in ("true", "yes", "on", "1")
    raise XLossValueError(f"backend {chip!r}: {name} must be true or false; got {value!r}")


def parse(chip: str, options: dict) -> DspOptions:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise XLossTypeError(f"backend {chip!r}: unknown option(s) {', '.join(unknown)}; "
                             f"options: {', '.join(OPTIONS)}")
    memory = options.get("memory")
    source = ""
    if memory is None:  # the environment may set the default (e.g. to run a suite in private memory)
        memory, source = os.environ.get(abi.MEMORY_ENV_VAR) or "shared", f" (from ${abi.MEMORY_ENV_VAR})"
    if memory not in ("shared", "private"):
        raise XLossValueError(f"backend {chip!r}: memory must be 'shared' or 'private'; got {memory!r}{source}")
    core_mask = _core_mask(chip, options.get("core_mask", abi.CORE_MASK_ALL))
    private_bytes = _private_bytes(chip, options.get("private_bytes"))
    guards = flag(chip, "guards", options.get("guards", False))
    # the in-tree emulator is deterministic for every mask (fixed blocks, fixed order); a
    # library says so with deterministic=True
    declared = options.get("deterministic")
    given = {k: v for k, v in options.items() if v is not None}
    paths = abi.resolve(options.get("lib"))
    try:
        codes = abi.code_table(**{k: options.get(k) for k in abi.CODE_OPTIONS})
    except ValueError as exc:
        raise XLossValueError(f"backend {chip!r}: {exc}") from None
    shown = {"memory": memory, "core_mask": f"{core_mask:#04x}"}
    shown.update({k: ",".join(abi.parse_codes(k, options[k])) for k in abi.CODE_OPTIONS
                  if options.get(k) is not None})
    if options.get("lib") is not None:
        shown["lib"] = ":".join(paths)
    if private_bytes is not None:
        shown["private_bytes"] = private_bytes
    if guards:
        shown["guards"] = True
    deterministic = None if declared is None else flag(chip, "deterministic", declared)
    if deterministic is not None:
        shown["deterministic"] = deterministic
    return DspOptions(chip, memory, core_mask, private_bytes, paths, codes, guards, deterministic, given, shown)


def _core_mask(chip: str, core_mask) -> int:
    if isinstance(core_mask, (bool, np.bool_)) or not isinstance(core_mask, (int, np.integer)):
        raise XLossTypeError(f"backend {chip!r}: core_mask must be an int (bit i = core i); "
                             f"got {type(core_mask).__name__}")
    core_mask = int(core_mask)
    if not 0 < core_mask <= abi.CORE_MASK_ALL:
        what = "selects no core" if core_mask == 0 else "names cores outside 0..7"
        raise XLossValueError(f"backend {chip!r}: core_mask {core_mask:#x} {what}; valid masks are "
                              f"0x01..0xff (bit i = core i of {abi.NUM_CORES}, 0xff = all)")
    return core_mask


def _private_bytes(chip: str, private_bytes) -> int | None:
    if private_bytes is None:
        return None
    if isinstance(private_bytes, bool) or not isinstance(private_bytes, (int, np.integer)):
        raise XLossTypeError(f"backend {chip!r}: private_bytes must be an int; got {private_bytes!r}")
    if private_bytes < ALIGN:
        raise XLossValueError(f"backend {chip!r}: private_bytes must be >= {ALIGN}; got {private_bytes}")
    return int(private_bytes)


# -- softmax cross entropy (issue #30): how many losses one call writes ------------------------------------
# The dense page calls its loss output "usually a scalar or each sample's loss" (and the sparse page gives
# `losses` no shape, beside a partial_losses workspace "for the reduction"); both pages' formulas are per row.
# "rows" (the default, the emulator's): batch_size losses per call. "one": a library that writes a single value
# per call is called one row at a time, so that value is that row's loss whatever reduction it applies.
SOFTMAX_CE_LOSSES = ("rows", "one")
OPTIONS += ("softmax_ce_losses",)
_parse_without_softmax_ce = parse


def parse(chip: str, options: dict) -> DspOptions:  # noqa: F811 -- the parser above, plus this option
    value = options.get("softmax_ce_losses")
    if value is not None and value not in SOFTMAX_CE_LOSSES:
        raise XLossValueError(f"backend {chip!r}: softmax_ce_losses must be 'rows' (batch_size losses per call, "
                              f"the pages' formulas) or 'one' (one loss per call); got {value!r}")
    o = _parse_without_softmax_ce(chip, options)
    if value is not None:
        o.shown["softmax_ce_losses"] = value
    return o


def rows_per_call(given: dict) -> int | None:
    """The most rows one softmax cross entropy call may take under ``softmax_ce_losses`` (None: any)."""
    return 1 if given.get("softmax_ce_losses") == "one" else None
