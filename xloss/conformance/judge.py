"""``xloss check --judge DIR``: the report of a host run, from what the runner wrote on the target.

The judge runs the export's check again, in the same order and with the same settings (from
``DIR/manifest.json``), on the adapter with the port's declarations; each ABI call is answered with
the runner's result for it (:class:`.export_format.Playback`). So the cases, the guards, the input
comparison, the oracle and tolerances, the configurations and repeats, and the report are those of
``xloss check``. It does not shrink (the board would have to run the smaller cases): the failing
case it saves is the first one found, for ``xloss check --replay`` on the host, or for
``xloss check --export DIR2 --replay FILE`` back on the board.

A call the runner has no result for fails its target ("not run"); a damaged or foreign file is
one :class:`~.export_format.OnTargetFormatError` line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from . import process_state
from .export import convention
from .export_format import OnTargetFormatError, Playback, Results, read_manifest


def _player(folder: Path):
    m = read_manifest(folder)
    module, _ = convention(m.get("backend"))
    results = Results(folder / "out" / "results.bin", m["calls"], module.WORKSPACE_GUARD)
    playback = Playback(m["calls"], results)
    if not isinstance(m.get("options"), dict) or not _valid_settings(m.get("settings")):
        raise OnTargetFormatError(f"{folder / 'manifest.json'}: options and settings are not what the export writes")
    return m, module, results, playback


def _valid_settings(s) -> bool:
    from ..kernels import KERNELS

    def count(v, least):
        return isinstance(v, int) and not isinstance(v, bool) and v >= least

    return (isinstance(s, dict) and count(s.get("max_examples"), 0) and count(s.get("seed"), 0)
            and count(s.get("repeat"), 1) and isinstance(s.get("large"), bool)
            and (s.get("kernels") is None
                 or (isinstance(s["kernels"], list) and all(k in KERNELS for k in s["kernels"]))))


def _make(module, m, playback, options):
    try:
        return module.player(m["backend"], options, m["port"], playback)
    except (KeyError, TypeError) as exc:
        raise OnTargetFormatError(f"manifest.json: the port's facts are not what the export writes ({exc})") from None


def judge_results(folder, *, progress=None) -> tuple[dict, list]:
    """(the manifest, the TargetResults) of a suite export whose runner has run."""
    from .runner import run_suite

    folder = Path(folder)
    m, module, results, playback = _player(folder)
    if m.get("replay_file") is not None:
        raise OnTargetFormatError(f"{folder} holds a replay export: xloss check --judge {folder} replays it")
    _say(m, results)
    s = m["settings"]
    b = _make(module, m, playback, m["options"])
    with process_state.unwatched():  # the calls are answered from the runner's results
        out = run_suite(b, kernels=s["kernels"], max_examples=s["max_examples"], seed=s["seed"],
                        on_case=playback.new_attempt, on_result=progress, large_cases=s["large"],
                        repeats=s["repeat"], shrink=False, leaks=False)
    return m, out


def _say(m, results) -> None:
    got = len(results.by_call)
    want = sum(c["runs"] for c in m["calls"])
    print(f"xloss check --judge: backend {m['backend']}, {got} of {want} call runs have results; the port ran "
          f"{results.total_seconds():.3f}s", file=sys.stderr)
    if results.partial_at is not None:
        print(f"note: {results.path} ends in a partial record at byte {results.partial_at}: the runner stopped "
              "while writing it; the calls after it are not run", file=sys.stderr)


def judge(folder, *, failures_dir, json_path=None, progress=None) -> int:
    """Print the report of ``folder`` (as ``xloss check`` does); 1 if a target fails, else 0."""
    from . import report
    from .runner import FAILING

    folder = Path(folder)
    m = read_manifest(folder)
    if m.get("replay_file") is not None:
        _m, module, results, playback = _player(folder)
        _say(m, results)
        return _judge_replay(m, module, playback)
    m, out = judge_results(folder, progress=progress)
    library = m["port"].get("library") if isinstance(m.get("port"), dict) else None
    saved = report.write_failures(out, failures_dir, m["backend"], library, m["options"])
    print(report.table(out))
    text = report.failures_text(out, saved)
    if text:
        print()
        print(text)
    print(report.summary(out))
    if json_path:
        import json

        with open(json_path, "w") as f:
            json.dump(report.to_json(out, backend=m["backend"], info={"on-target": str(folder)},
                                     settings=m["settings"], saved=saved), f, indent=1)
    return 1 if any(r.status in FAILING for r in out) else 0


def _judge_replay(m, module, playback) -> int:
    """A single-case export: the replay's own flow, answered by the runner."""
    from argparse import Namespace

    from .replay import replay

    s = m["settings"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay.json"
        recorded = json.loads(str(m["replay_file"]))
        recorded.pop("library", None)  # the runner's results stand in for the port the case was recorded with
        path.write_text(json.dumps(recorded))
        args = Namespace(replay=str(path), backend=m["backend"], lib=None, repeat=s.get("repeat", 3),
                         repeat_given=bool(s.get("repeat_given")))
        with process_state.unwatched():
            return replay(args, dict(m["options"]), lambda name, options: _make(module, m, playback, options))
