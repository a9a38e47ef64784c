"""The leak measurement of ``xloss check`` (process_state.bytes_per_call): a bounded cache filling
up is not a leak, however many calls it takes to fill (up to the in-tree Ascend runtime's 256-block
quarantine at one block per call); memory kept call after call is."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from xloss.conformance import process_state

BLOCK = 32 << 10

pytestmark = pytest.mark.skipif(not (process_state.AVAILABLE["malloc"] or process_state.AVAILABLE["rss"]),
                                reason="memory in use cannot be measured here")


def test_a_cache_of_256_blocks_filled_one_per_call_is_not_a_leak():
    cache = collections.deque(maxlen=256)  # as the runtime's quarantine: the oldest block goes when full
    per_call = process_state.bytes_per_call(lambda: cache.append(bytearray(BLOCK)))
    assert process_state.leak_warning(per_call) is None, per_call


def test_memory_kept_on_every_call_is_a_leak():
    kept = []
    per_call = process_state.bytes_per_call(lambda: kept.append(bytearray(BLOCK)))
    warning = process_state.leak_warning(per_call)
    assert warning is not None and per_call >= BLOCK * 0.9, per_call
    assert "memory leak" in warning


def test_the_in_tree_ascend_emulator_is_not_called_leaking_in_a_fresh_process(tmp_path):
    """Its quarantine starts empty in a fresh process (in this one, earlier tests filled it)."""
    code = ("import xloss\nfrom xloss.conformance import runner\n"
            "for dt in ('float16', 'float32'):\n"
            "    r = runner.run_target(xloss.backend('ascend'), 'focal_loss', dt, 'forward', max_examples=1,"
            " configurations=False)\n"
            "    print(dt, r.status, r.warnings)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count(" pass []") == 2, res.stdout
