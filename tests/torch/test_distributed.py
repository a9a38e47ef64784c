"""Vocabulary-parallel FLCE on 2 ranks (gloo, localhost) against the single-process result and
PyTorch's float64 cross entropy: loss and input gradient on every rank, weight/bias gradients
of each rank's shard."""

import importlib.util
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import xloss
import xloss.torch as xt

WORKER = Path(__file__).with_name("dist_worker.py")
TOL = {"float64": 1e-12, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def load_worker():
    spec = importlib.util.spec_from_file_location("xloss_torch_dist_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def close(actual, expected, rel, what):
    actual, expected = actual.to(torch.float64), expected.to(torch.float64)
    assert torch.equal(torch.isnan(actual), torch.isnan(expected)), what
    a, e = actual[~torch.isnan(expected)], expected[~torch.isnan(expected)]
    if e.numel():
        scale, err = max(e.abs().max().item(), 1e-3), (a - e).abs().max().item()
        assert err <= rel * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this build")
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, str(WORKER), str(free_port()), str(out)], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def single_process(worker, cfg, seed):
    """The same case on one process (full weight): our FLCE and PyTorch's float64 cross entropy."""
    dt = getattr(torch, cfg["dtype"])
    x, w, b, t, cw, up = worker.make_case(cfg, seed)
    leaves = [x.to(dt), w.to(dt)] + ([b.to(dt)] if b is not None else [])
    kw = dict(reduction=cfg["reduction"], label_smoothing=cfg.get("ls", 0.0))
    ours = [a.clone().requires_grad_() for a in leaves]
    loss = xt.fused_linear_cross_entropy(ours[0], ours[1], t, ours[2] if b is not None else None,
                                         chunk_size=cfg.get("chunk"), backend=cfg["backend"], class_weight=cw,
                                         vocab_chunk_size=cfg.get("block"), **kw, **worker.extras(cfg))
    acc = None
    if cfg.get("accuracy"):
        loss, acc = loss.loss, loss.token_accuracy
    loss.backward(up.to(dt))
    ref = [a.detach().to(torch.float64).requires_grad_() for a in leaves]
    z = F.linear(ref[0], ref[1], ref[2] if b is not None else None)
    if cfg.get("softcap"):
        z = cfg["softcap"] * torch.tanh(z / cfg["softcap"])
    oracle = F.cross_entropy(z, t, weight=cw, **kw)
    if cfg.get("z"):  # z-loss: per token not ignored; mean divides by their count
        zl = torch.where(t != -100, cfg["z"] * torch.logsumexp(z, 1) ** 2, 0.0)
        oracle = oracle + {"none": zl, "sum": zl.sum(), "mean": zl.sum() / (t != -100).sum()}[cfg["reduction"]]
    if cfg.get("scaling"):  # per-token losses times the target's probability, detached
        assert cfg["reduction"] == "none"
        valid = t != -100
        p_target = torch.softmax(z.detach(), 1).gather(1, torch.where(valid, t, 0)[:, None])[:, 0]
        oracle = oracle * torch.where(valid, p_target, 0.0)
    oracle.backward(up)
    return (loss.detach(), [a.grad for a in ours], acc), (oracle.detach(), [a.grad for a in ref])


def test_two_ranks_match_single_process(two_rank_results):
    worker = load_worker()
    r0, r1 = two_rank_results
    ran = [name for name in worker.CASES if name in r0]
    assert {"f64_mean_bias_smoothing", "f64_none_bias", "f64_one_class_empty_shard",
            "f64_sum_reference_accuracy_ties"} <= set(ran)
    for i, (name, cfg) in enumerate(worker.CASES.items()):
        if name not in r0:
            continue
        a, b = r0[name], r1[name]
        tol = TOL[cfg["dtype"]]
        # every rank holds the full loss and the full input gradient
        assert torch.equal(a["loss"], b["loss"]) or (a["loss"].isnan().all() and b["loss"].isnan().all()), name
        assert torch.equal(a["dx"], b["dx"]), name
        assert a["rows"] + b["rows"] == cfg["v"] and a["rows"] >= b["rows"], name
        (loss1, grads1, acc1), (loss64, grads64) = single_process(worker, cfg, 100 + i)
        if cfg.get("accuracy"):  # the same first maximum on every rank and in one process
            assert torch.equal(a["accuracy"], b["accuracy"]) and torch.equal(a["accuracy"], acc1), name
        dw = torch.cat([a["dw"], b["dw"]])
        parallel = [a["loss"], a["dx"], dw] + ([torch.cat([a["db"], b["db"]])] if cfg.get("bias") else [])
        for what, p, s, o in zip(("loss", "dx", "dw", "db"), parallel, [loss1] + grads1, [loss64] + grads64):
            close(p, o, tol, f"{name} {what} vs float64 PyTorch")
            close(p, s, tol, f"{name} {what} vs single process")
        if cfg.get("ignore_all"):
            assert math.isnan(a["loss"].item()) and not a["dx"].any() and not dw.any()


def test_collectives_without_a_group_are_the_single_process_path():
    from xloss.torch.distributed import Collectives

    c = Collectives(None)
    t = torch.tensor([1.0, 2.0])
    assert c.max_(t) is t and c.sum_(t) is t and c.vocab_layout(7, 3) == (0, 7)
    with pytest.raises(xloss.XLossValueError, match="not initialised"):
        if torch.distributed.is_initialized():
            pytest.skip("a process group is already initialised in this process")
        Collectives(object())


def test_vocab_shard_range_covers_the_vocabulary_in_rank_order():
    for v in (0, 1, 7, 32000):
        for world in (1, 2, 3, 8):
            ranges = [xt.vocab_shard_range(v, world, r) for r in range(world)]
            assert ranges[0][0] == 0 and ranges[-1][1] == v
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    with pytest.raises(xloss.XLossValueError, match="rank"):
        xt.vocab_shard_range(10, 2, 2)


def test_first_collective_record_round_trips_and_keeps_its_length():
    """The agreement's record: one length whatever it holds (gloo needs equal sizes); a long message gives
    way to the settings; NaN settings compare equal across ranks, 1 and 1.0 do not."""
    from xloss.torch import distributed as d

    settings = [("label_smoothing", float("nan")), ("backend", "cpu" * 40), ("chunk_size", 1), ("bias given", True)]
    long = xloss.XLossTypeError("ä" * 5000)
    recs = [d._encode(7, settings, None, (20, 0, 7)), d._encode(13, settings, long, None)]
    assert recs[0].shape == recs[1].shape and recs[0].dtype == torch.int64
    a, b = (d._decode(r) for r in recs)
    assert (a["rows"], a["range"], a["error"], b["range"][0]) == (7, [20, 0, 7], None, -1)
    assert 0 < len(b["message"]) < 5000 and set(b["message"]) == {"ä"}
    d._raise_disagreement([a, b], settings)  # equal, NaN included
    with pytest.raises(xloss.XLossTypeError, match="refused on rank 1: ää"):
        d._raise_rank_error([a, b], None)
    other = d._decode(d._encode(7, [*settings[:2], ("chunk_size", 1.0), settings[3]], None, None))
    with pytest.raises(xloss.XLossValueError, match=r"disagree on chunk_size \(1 on rank 0, 1.0 on rank 1\)"):
        d._raise_disagreement([a, other], settings)
    with pytest.raises(xloss.XLossValueError, match="different versions"):
        d._raise_disagreement([a, d._decode(d._encode(7, settings[:3], None, None))], settings)
    with pytest.raises(xloss.XLossValueError, match="different versions"):
        d._decode(torch.full_like(recs[0], -1))
