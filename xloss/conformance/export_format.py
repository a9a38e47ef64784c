"""The on-target files (OURS): ``cases.bin`` (the ABI calls the runner makes), ``manifest.json`` (what
the judge needs to find them again) and ``out/results.bin`` (what the runner saw), plus the two
sessions that use them: :class:`Recording` (``xloss check --export``) and :class:`Playback`
(``xloss check --judge``).

An export runs the host check on the emulator with the port's declarations and records every ABI
call the adapter makes, keyed by the entry point, the core, the scalars and the digest of every
input buffer. A call made again in one case (a configuration that passes the same arguments, a
repeat of a large case) is one record run several times. The judge runs the same check again, in
the same order, and answers each call with what the runner wrote for it: the adapter, the guards,
the comparison with the oracle and the report are the host check's own.

Every integer is little-endian; docs/on-target.md has the byte layout. Nothing read is executed.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import XLossError
from .execute import CheckFailure

CASES_MAGIC = b"XLRCASE1"
RESULTS_MAGIC = b"XLRSLT01"
FORMAT = "xloss-on-target-1"
ARG_INT, ARG_FLOAT, ARG_NULL, ARG_BUFFER, ARG_INT64, ARG_DOUBLE, ARG_TENSOR = 0, 1, 2, 3, 4, 5, 6
#: a C string (``char *``: CANN's reduction names) and a C ``bool`` (the runners check both as they read them)
ARG_STRING, ARG_BOOL = 7, 8
#: the longest string a record holds, in bytes (the runners' buffer less its NUL)
MAX_STRING = 63
FRONT_CHANGED, BACK_CHANGED, INPUT_CHANGED, NOT_MADE = 1, 2, 4, 8
#: runner statuses below zero are the runner's own (xloss_runner.c)
RUNNER_STATUS = {-2: "the runner could not allocate the buffers in the core's private memory",
                 -3: "the runner ran out of memory for the buffers",
                 -4: "the runner was not built with this entry point (runner_calls.h)"}
MAX_MESSAGE = 1024


class OnTargetFormatError(XLossError):
    """An export or output folder that is not what ``xloss check --export`` and the runner write."""


class NotRun(CheckFailure):
    """A call of the check has no result from the runner."""


@dataclass
class Buffer:
    """A pointer argument as the library sees it: ``front`` guard bytes, ``extent`` body bytes, ``back``
    guard bytes; ``output``: the call writes it (else an input, which must not change)."""

    name: str
    output: bool
    extent: int
    front: int
    back: int
    digest: str = ""  # of an input's content (the key)


@dataclass(frozen=True)
class Int64:
    """A C ``int64_t`` argument (an ``int`` is a C ``int``)."""

    value: int


@dataclass(frozen=True)
class Double:
    """A C ``double`` argument (a ``float`` is a C ``float``)."""

    value: float


@dataclass(frozen=True)
class String:
    """A C string argument (``char *``): printable ASCII, at most :data:`MAX_STRING` bytes, no NUL; data, passed
    to the operator as it is and never interpreted."""

    value: bytes

    def __post_init__(self):
        v = self.value
        if not isinstance(v, bytes) or len(v) > MAX_STRING or any(b < 0x20 or b > 0x7E for b in v):
            raise OnTargetFormatError(f"a string argument must be printable ASCII of at most {MAX_STRING} bytes; "
                                      f"got {v!r:.80}")


@dataclass(frozen=True)
class Bool:
    """A C ``bool`` argument (one byte, 0 or 1 in the record)."""

    value: bool

    def __post_init__(self):
        if not isinstance(self.value, bool):
            raise OnTargetFormatError(f"a bool argument must be True or False; got {self.value!r:.80}")


@dataclass(frozen=True)
class Tensor:
    """An aclTensor argument: a view of the call's ``buffer``-th Buffer argument."""

    buffer: int
    dtype: int
    fmt: int
    shape: tuple
    strides: tuple
    offset: int
    storage: tuple


def call_key(fname: str, core: int, args: list) -> str:
    """The identity of one call: entry point, core, scalars and every input's content digest."""
    parts = [fname, str(core)]
    for a in args:
        if isinstance(a, Buffer):
            parts.append(f"{a.name}:{int(a.output)}:{a.extent}:{a.front}:{a.back}:{a.digest}")
        else:
            parts.append(repr(a))
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()


def digest(data) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class _Attempts:
    """Occurrences of each key within the current case (a case with its configurations and repeats)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}

    def new_attempt(self, case=None) -> None:
        with self.lock:
            self.seen = {}

    def occurrence(self, key: str) -> int:
        with self.lock:
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            return n


class Recording(_Attempts):
    """Writes ``cases.bin`` as the export's check runs; :meth:`close` returns the manifest's calls."""

    def __init__(self, path: Path, chip: int):
        super().__init__()
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.file.write(CASES_MAGIC + struct.pack("<II", 0, chip))
        self.calls: list[dict] = []
        self.index: dict[str, int] = {}
        self.runs_at: list[int] = []  # file offset of each record's runs field

    def record(self, fname: str, core: int, args: list, contents: list) -> None:
        """One call: ``args`` (ints, floats, None for NULL, Buffer), ``contents`` the initial bytes
        of each Buffer (inputs and outputs: an accumulating output is read too)."""
        key = call_key(fname, core, args)
        n = self.occurrence(key)
        with self.lock:
            i = self.index.get(key)
            if i is None:
                i = self.index[key] = len(self.calls)
                self._write(i, fname, core, args, contents)
                self.calls.append({"fname": fname, "core": core, "key": key, "runs": 1,
                                   "buffers": [vars(a) for a in args if isinstance(a, Buffer)]})
            self.calls[i]["runs"] = max(self.calls[i]["runs"], n + 1)

    def _write(self, i, fname, core, args, contents) -> None:
        f = self.file
        name = fname.encode()
        f.write(b"CALL" + struct.pack("<I", i))
        self.runs_at.append(f.tell())
        f.write(struct.pack("<Ii", 1, core) + bytes([len(name)]) + name + bytes([len(args)]))
        data = iter(contents)
        for a in args:
            if a is None:
                f.write(bytes([ARG_NULL]))
            elif isinstance(a, Buffer):
                f.write(bytes([ARG_BUFFER, int(a.output)]) + struct.pack("<QQQ", a.extent, a.front, a.back))
                f.write(next(data))
            elif isinstance(a, float):
                f.write(bytes([ARG_FLOAT]) + struct.pack("<f", a))
            elif isinstance(a, Int64):
                f.write(bytes([ARG_INT64]) + struct.pack("<q", a.value))
            elif isinstance(a, Double):
                f.write(bytes([ARG_DOUBLE]) + struct.pack("<d", a.value))
            elif isinstance(a, String):
                f.write(bytes([ARG_STRING, len(a.value)]) + a.value)
            elif isinstance(a, Bool):
                f.write(bytes([ARG_BOOL, int(a.value)]))
            elif isinstance(a, Tensor):
                f.write(bytes([ARG_TENSOR]) + struct.pack("<Iii", a.buffer, a.dtype, a.fmt)
                        + bytes([len(a.shape)]) + struct.pack(f"<{len(a.shape)}q", *a.shape)
                        + struct.pack(f"<{len(a.strides)}q", *a.strides) + struct.pack("<q", a.offset)
                        + bytes([len(a.storage)]) + struct.pack(f"<{len(a.storage)}q", *a.storage))
            else:
                f.write(bytes([ARG_INT]) + struct.pack("<i", a))

    def close(self) -> list[dict]:
        for at, call in zip(self.runs_at, self.calls):
            self.file.seek(at)
            self.file.write(struct.pack("<I", call["runs"]))
        self.file.seek(len(CASES_MAGIC))
        self.file.write(struct.pack("<I", len(self.calls)))
        self.file.close()
        return self.calls


@dataclass
class Result:
    """One run of one call as the runner wrote it (offsets into results.bin)."""

    status: int
    nanoseconds: int
    message: str
    phase: int = 0  # two-phase conventions: 1 the status is phase one's, 2 phase two's
    workspace: int = 0  # bytes of workspace phase one asked for
    workspace_guards: tuple = (None, None)  # offsets of the workspace's changed front / back guard
    buffers: list = field(default_factory=list)  # per Buffer: (flags, output at, front at, back at, input at)


class Results:
    """``out/results.bin``, checked against the manifest's calls record by record."""

    def __init__(self, path: Path, calls: list[dict], workspace_guard: int = 0):
        self.path = path
        self.workspace_guard = workspace_guard  # bytes of guard each side of a workspace
        self.partial_at: int | None = None
        self.by_call: dict[tuple[int, int], Result] = {}
        if not path.is_file():
            raise OnTargetFormatError(f"{path} does not exist: run the runner first (DIR/xloss_runner DIR)")
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self._parse(calls)

    def _fail(self, at: int, what: str):
        raise OnTargetFormatError(f"{self.path}: byte {at}: {what} (not what xloss_runner writes: a damaged "
                                  "or foreign file; run the runner again)")

    def _parse(self, calls: list[dict]) -> None:
        d, n = self.data, len(self.data)
        if n < len(RESULTS_MAGIC) or d[:len(RESULTS_MAGIC)] != RESULTS_MAGIC:
            if n < len(RESULTS_MAGIC) and RESULTS_MAGIC.startswith(bytes(d[:n])):
                self.partial_at = 0
                return
            self._fail(0, "the file does not start with the results magic")
        at = len(RESULTS_MAGIC)
        while at < n:
            start = at
            try:
                at = self._record(d, at, n, calls)
            except _Truncated:
                self.partial_at = start
                return

    def _record(self, d, at, n, calls) -> int:
        def take(k):
            nonlocal at
            if at + k > n:
                raise _Truncated
            at += k
            return d[at - k:at]

        start = at
        if take(4) != b"RSLT":
            self._fail(start, "a record does not start with RSLT")
        index, run, status, ns, mlen = struct.unpack("<IIiQH", take(22))
        if index >= len(calls):
            self._fail(start, f"call index {index}, but the export has {len(calls)} calls")
        call = calls[index]
        if run >= call["runs"]:
            self._fail(start, f"run {run} of call {index}, which has {call['runs']} run(s)")
        if (index, run) in self.by_call:
            self._fail(start, f"a second record of call {index} run {run}")
        if mlen > MAX_MESSAGE:
            self._fail(start, f"a status message of {mlen} bytes (at most {MAX_MESSAGE})")
        message = bytes(take(mlen)).decode("utf-8", "replace")
        phase, workspace, wflags = struct.unpack("<BQB", take(10))
        if phase > 2 or wflags & ~(FRONT_CHANGED | BACK_CHANGED) or (wflags and not workspace):
            self._fail(start, f"phase {phase}, workspace flags {wflags:#x} (call {index})")
        wfront = at if wflags & FRONT_CHANGED else None
        if wfront is not None:
            take(self.workspace_guard)
        wback = at if wflags & BACK_CHANGED else None
        if wback is not None:
            take(self.workspace_guard)
        res = Result(status, ns, message, phase, workspace, (wfront, wback))
        for b in call["buffers"]:
            flags = take(1)[0]
            if flags & ~(FRONT_CHANGED | BACK_CHANGED | INPUT_CHANGED | NOT_MADE) or (
                    flags & NOT_MADE and flags != NOT_MADE) or (flags & INPUT_CHANGED and b["output"]):
                self._fail(at - 1, f"buffer flags {flags:#x} of `{b['name']}` (call {index})")
            if flags == NOT_MADE:
                res.buffers.append((flags, None, None, None, None))
                continue
            out = at if b["output"] else None
            if b["output"]:
                take(b["extent"])
            front = at if flags & FRONT_CHANGED else None
            if front is not None:
                take(b["front"])
            back = at if flags & BACK_CHANGED else None
            if back is not None:
                take(b["back"])
            inp = at if flags & INPUT_CHANGED else None
            if inp is not None:
                take(b["extent"])
            res.buffers.append((flags, out, front, back, inp))
        if status >= 0 and any(f == NOT_MADE for f, *_ in res.buffers):
            self._fail(start, f"call {index} has status {status} but buffers that were never made")
        if take(4) != b"DONE":
            self._fail(start, "a record does not end with DONE")
        self.by_call[(index, run)] = res
        return at

    def bytes_at(self, offset: int, n: int) -> bytes:
        return bytes(self.data[offset:offset + n])

    def total_seconds(self) -> float:
        return sum(r.nanoseconds for r in self.by_call.values()) / 1e9


class _Truncated(Exception):
    pass


class Playback(_Attempts):
    """Answers each call of the judge's check with the runner's result for it."""

    def __init__(self, calls: list[dict], results: Results):
        super().__init__()
        self.calls = calls
        self.results = results
        self.index = {c["key"]: i for i, c in enumerate(calls)}

    def answer(self, fname: str, core: int, args: list) -> tuple[dict, Result]:
        key = call_key(fname, core, args)
        n = self.occurrence(key)
        i = self.index.get(key)
        if i is None:
            raise NotRun(f"not run: the export recorded no call of {fname} with these arguments (export and judge "
                         "disagree: was the folder exported by this version of xloss, with these options?)")
        runs = self.calls[i]["runs"]
        res = self.results.by_call.get((i, n % runs))
        if res is None:
            where = (f"; {self.results.path} ends in a partial record at byte {self.results.partial_at}"
                     if self.results.partial_at is not None else "")
            raise NotRun(f"not run: the runner wrote no result for call {i} ({fname}, run {n % runs + 1}): it "
                         f"stopped before it (crash, reset or timeout){where}")
        return self.calls[i], res


def write_manifest(path: Path, manifest: dict) -> None:
    path.write_text(json.dumps(manifest, indent=1))


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.is_file():
        raise OnTargetFormatError(f"{path} does not exist: is {folder} a folder written by xloss check --export?")
    try:
        m = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise OnTargetFormatError(f"{path} is not JSON: {exc}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise OnTargetFormatError(f"{path}: format is not {FORMAT!r}")
    calls = m.get("calls")
    if not isinstance(calls, list) or not all(_valid_call(c) for c in calls):
        raise OnTargetFormatError(f"{path}: `calls` is not a list of calls as the export writes them")
    return m


def _valid_call(c) -> bool:
    def nat(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    return (isinstance(c, dict) and isinstance(c.get("fname"), str) and isinstance(c.get("key"), str)
            and isinstance(c.get("core"), int) and nat(c.get("runs")) and c["runs"] >= 1
            and isinstance(c.get("buffers"), list)
            and all(isinstance(b, dict) and isinstance(b.get("name"), str) and isinstance(b.get("output"), bool)
                    and all(nat(b.get(k)) for k in ("extent", "front", "back")) for b in c["buffers"]))
