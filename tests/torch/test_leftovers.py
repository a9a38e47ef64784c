"""Leftovers a new user tripped on (issue 26): the profiler's notes on stderr from
``benchmarks/peak_memory.py``, and ``xloss.list_backends()`` shown as one very long line."""

import subprocess
import sys
import textwrap
from pathlib import Path

import xloss

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_track_peak_memory_writes_no_profiler_notes():
    code = textwrap.dedent("""
        import sys, torch
        sys.path.append(BENCHMARKS)
        from peak_memory import track_peak_memory
        with track_peak_memory() as peak:
            x = torch.ones(250_000)
        print("peak", peak.torch_bytes)
        print("a line of our own", file=sys.stderr)
    """).replace("BENCHMARKS", repr(str(BENCHMARKS)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split()[1]) >= 1_000_000
    assert "profiler_start" not in p.stderr and "profiler_stop" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "a line of our own"  # stderr itself still works


def test_list_backends_repr_is_one_short_line_per_backend():
    infos = xloss.list_backends()
    text = repr(infos)
    assert len(text.splitlines()) == len(infos) and max(map(len, text.splitlines())) <= 100, text
    assert all(f"BackendInfo({i.name!r}, " in text for i in infos)
    assert isinstance(infos, list) and infos[0].capabilities  # still the full records
