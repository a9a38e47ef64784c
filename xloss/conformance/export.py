"""``xloss check --export DIR``: the suite's calls of one ABI convention as data, plus the runner.

The export runs the host check (the same cases, seeds, configurations and large ladder) on the
convention's in-tree emulator with the port's declarations, recording every ABI call the adapter
makes (:mod:`.export_format`); it writes ``DIR/cases.bin`` (for the runner), ``DIR/manifest.json``
(for the judge), the runner's C sources under ``DIR/src/`` and ``DIR/build.sh``. From a replay
file (``--replay FILE``) it records just the saved cases, so one failure can be iterated on.

Each convention's knowledge (how its adapter's calls are recorded and played back, and its
runner) lives with its backend, in the module its package names in the ``xloss.on_target``
entry-point group (a port's own package may add one); the module's ``chip_code(backend)`` is the
runner's chip code.
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from pathlib import Path

from ..errors import XLossError
from . import process_state
from .export_format import FORMAT, Recording, write_manifest

#: the entry-point group naming each backend's on-target module (recorder, player, write_runner,
#: WORKSPACE_GUARD, chip_code)
GROUP = "xloss.on_target"


#: what an export (and the runner built in it) writes: an earlier export may be overwritten, nothing else
EXPORT_FILES = frozenset({"cases.bin", "manifest.json", "out", "src", "build.sh", "xloss_runner"})


class ExportError(XLossError):
    """The export cannot be made as asked (printed as one line)."""


def convention(backend: str):
    """``backend``'s on-target module and its runner's chip code."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}
    if backend not in found:
        raise ExportError(f"--export/--judge support the backends {', '.join(sorted(found))}; got {backend!r}")
    module = found[backend].load()
    return module, module.chip_code(backend)


def prepare(folder) -> Path:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"--export {folder}: exists and is not a folder")
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in EXPORT_FILES) if folder.is_dir() else []
    if foreign:
        raise ExportError(f"--export {folder}: the folder is not empty (it holds {', '.join(foreign[:3])}, which an "
                          "export does not write); choose an empty or new folder")
    (folder / "out").mkdir(parents=True, exist_ok=True)
    old = folder / "out" / "results.bin"
    if old.exists():
        old.unlink()  # results of an earlier export would not match these cases
    return folder


def export(folder, backend: str, options: dict, settings: dict, replay_args=None) -> dict:
    """Record the check's calls into ``folder`` (``replay_args``: the calls of ``xloss check --replay``
    instead of the suite's); return the manifest."""
    from .runner import run_suite

    module, chip = convention(backend)
    folder = prepare(folder)
    start = time.perf_counter()
    recording = Recording(folder / "cases.bin", chip)
    (folder / "manifest.json").unlink(missing_ok=True)  # an export half-written is no export
    try:
        with process_state.unwatched():  # the calls run on the in-tree emulator, not on the port
            if replay_args is None:
                b, facts = module.recorder(backend, options, recording)
                results = run_suite(b, kernels=settings["kernels"], max_examples=settings["max_examples"],
                                    seed=settings["seed"], on_case=recording.new_attempt,
                                    large_cases=settings["large"], repeats=settings["repeat"], leaks=False)
                statuses = [[r.kernel, r.dtype, str(r.mode), r.group, r.status] for r in results]
            else:
                facts, options, statuses = _record_replay(module, options, replay_args, recording)
    except BaseException:
        recording.close()
        (folder / "cases.bin").unlink()
        raise
    calls = recording.close()
    options = {k: v for k, v in options.items() if k != "lib"}
    manifest = {"format": FORMAT, "backend": backend, "options": options, "settings": settings,
                "port": facts, "replay_file": None if replay_args is None else Path(replay_args.replay).read_text(),
                "emulator_statuses": statuses, "calls": calls}
    write_manifest(folder / "manifest.json", manifest)
    module.write_runner(folder, facts, calls)
    seconds = time.perf_counter() - start
    size = (folder / "cases.bin").stat().st_size
    print(f"xloss check --export: {len(calls)} calls ({size / 2**20:.1f} MiB) in {folder} ({seconds:.1f}s); "
          f"next: {folder}/build.sh PORT_LIB && {folder}/xloss_runner {folder} && "
          f"xloss check --judge {folder}", file=sys.stderr)
    return manifest


def _record_replay(module, options, args, recording):
    """The calls ``xloss check --replay`` makes (its repeats and configurations included), with the
    options it settles on; its printout goes to stderr. Occurrences are counted over the whole
    replay, by the judge too. Returns (facts, options, statuses)."""
    import contextlib

    from .replay import replay

    made = {}

    def make(name, opts):
        opts = dict(opts, lib=options["lib"]) if "lib" in options else dict(opts)
        b, made["facts"] = module.recorder(name, opts, recording)
        made["options"] = opts
        return b

    with contextlib.redirect_stdout(sys.stderr):
        code = replay(args, {k: v for k, v in options.items() if k != "lib"}, make)
    if "facts" not in made:
        raise ExportError(f"{args.replay}: no backend was made for it")
    return made["facts"], made["options"], [["replay", "", "", "replay", "fails on the emulator" if code else "pass"]]
