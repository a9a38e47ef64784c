"""Vocabulary-parallel ranks that disagree (issue 26), on 2 gloo processes (dist_disagree_worker.py):
every argument that must agree is compared in the call's first collective, and a disagreement, an
argument error on one rank, an error that needs the global vocabulary, or shards that overlap or
leave a gap raise the same XLossError on every rank — no hang, no gloo abort, no silent result;
``shard_vocab(W)`` without a group takes the default group's shard. The process group's timeout is
20 s, so a rank left waiting fails the run quickly. The default suite runs a few attacks; ``-m slow``
all of them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from .test_distributed import free_port

WORKER = Path(__file__).with_name("dist_disagree_worker.py")
QUICK = ["default_group", "label_smoothing", "bad_argument_on_one_rank", "target_out_of_global_range",
         "overlapping_shards"]


def _load_worker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("xloss_dist_disagree_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, names):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this build")
    proc = subprocess.run([sys.executable, str(WORKER), str(free_port()), str(tmp_path), *names],
                          capture_output=True, text=True, timeout=180)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) if (tmp_path / f"rank{r}.json").exists() else {}
             for r in range(2)]
    assert proc.returncode == 0, f"{ranks}\n{proc.stderr[-3000:]}"
    return ranks


def _check(ranks, names):
    worker = _load_worker()
    x, w, t = worker._case()
    single = float(F.cross_entropy(x @ w.T, t))
    for name in names:
        r0, r1 = ranks[0][name], ranks[1][name]
        assert r0 == r1, f"{name}: the ranks differ: {r0} vs {r1}"
        if name == "default_group":
            assert r0[0] == "ok" and r0[1] == pytest.approx(single, rel=1e-12), (name, r0, single)
            continue
        assert r0[0] == "error" and r0[1].startswith("XLoss"), (name, r0)
        what = {"targets": "targets", "class_weight": "class_weight", "bad_argument_on_one_rank": "label_smoothing",
                "target_out_of_global_range": "out of range", "class_weight_shape": "class_weight must have shape",
                "overlapping_shards": "overlaps", "gap_between_shards": "gap"}.get(name, name)
        assert what in r0[2], (name, r0)


def test_disagreeing_ranks_raise_the_same_error_on_every_rank(tmp_path):
    _check(_run(tmp_path, QUICK), QUICK)


@pytest.mark.slow
def test_every_disagreement_raises_the_same_error_on_every_rank(tmp_path):
    names = list(_load_worker().SCENARIOS)
    _check(_run(tmp_path, names), names)
