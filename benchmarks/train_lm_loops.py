"""Whole training steps of two small transformers LMs under bf16 autocast: stock against
``xloss.torch.apply_to_causal_lm``, interleaved in one process.

    python benchmarks/train_lm_loops.py                       # both models, idle
    python benchmarks/train_lm_loops.py --busy                # one other core spinning (a pinned busy loop)
    python benchmarks/train_lm_loops.py --models gemma2 --rounds 9 --json out.json

Models (built from configs, random weights, nothing downloaded), vocabulary 32000, 2 layers, 256 wide:

* ``gpt2``: ``GPT2LMHeadModel`` (tied embedding/``lm_head``);
* ``gemma2``: a Gemma-2-style ``Gemma2ForCausalLM`` with the final-logit soft-cap
  (``final_logit_softcapping=30``: ``30 tanh(logits / 30)``), fused by xloss with ``softcap=30``.

A step is ``zero_grad``, forward under ``torch.autocast("cpu", torch.bfloat16)`` with float32
parameters (as a mixed-precision Trainer runs it), ``loss.backward()`` and an AdamW update. Stock
and xloss are two copies of one initial model fed the same batches; each round runs both, in
alternating order (stock first on even rounds). Reported per model: each side's median step
time, the median of the per-round ratios stock/xloss with its 20th and 80th percentiles, the peak
memory of one step (``benchmarks/peak_memory.py``: allocation by allocation, over what was live
before the step) and the load average (``os.getloadavg``, as ``uptime`` prints it) before and after.

Same computation: on the first step both copies hold the same parameters; their losses are
compared against a float64 loss from the same hidden states, and the largest loss difference
over all the rounds is printed. Stock rounds its logits to bf16 (``lm_head`` under autocast) and
xloss keeps them in float32, so the two differ by about bf16's rounding of a logit, and xloss is
the one closer to float64.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

# isort: off
import xloss  # noqa: F401  first, as a user's script should: before torch loads OpenMP (xloss.openmp)
import torch
import transformers
from peak_memory import track_peak_memory

import xloss.torch as xt
from xloss.bench.training import Competitor, competitor_cpu
# isort: on

VOCAB, WIDTH, LAYERS, HEADS = 32000, 256, 2, 4
SOFTCAP = 30.0


def build(name: str, seq: int):
    """The model ``name`` from a small config, seeded, in training mode."""
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH, vocab_size=VOCAB, n_positions=seq,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    elif name == "gemma2":
        cfg = transformers.Gemma2Config(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=4 * WIDTH,
                                        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
                                        head_dim=WIDTH // HEADS, max_position_embeddings=seq, sliding_window=seq,
                                        final_logit_softcapping=SOFTCAP, attn_logit_softcapping=50.0,
                                        attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        cfg._attn_implementation = "eager"  # Gemma-2's attention soft-cap runs on the eager path
        model = transformers.Gemma2ForCausalLM(cfg)
    else:
        raise SystemExit(f"unknown model {name!r}: gpt2 or gemma2")
    return model.train()


def batches(n: int, batch: int, seq: int):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
        labels = ids.clone()
        labels[:, : seq // 8] = -100  # a short prompt not trained on
        out.append((ids, labels))
    return out


class Side:
    """One copy of the model, its optimizer, and a step."""

    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.losses = []

    def step(self, ids, labels) -> float:
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = self.model(input_ids=ids, labels=labels).loss
        loss.backward()
        self.opt.step()
        value = float(loss.detach())
        self.losses.append(value)
        return value


def float64_loss(model, ids, labels) -> float:
    """The model's loss with float64 logits from its last hidden states and head weight as ``lm_head``
    sees them under autocast (rounded to bf16): the common reference of the first step's check."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model.base_model(input_ids=ids)[0]
    z = hidden.to(torch.bfloat16).double() @ model.get_output_embeddings().weight.to(torch.bfloat16).double().T
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        z = cap * torch.tanh(z / cap)
    t = torch.nn.functional.pad(labels[..., 1:], (0, 1), value=-100)
    return float(torch.nn.functional.cross_entropy(z.reshape(-1, VOCAB), t.reshape(-1), ignore_index=-100))


def quantiles(values, qs=(0.2, 0.5, 0.8)):
    s = sorted(values)
    return [s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] for q in qs]


def run_model(name: str, args) -> dict:
    stock_model = build(name, args.seq)
    fused_model = xt.apply_to_causal_lm(copy.deepcopy(stock_model), chunk_size=args.chunk_size)
    data = batches(args.rounds + 2, args.batch, args.seq)
    ref = float64_loss(stock_model, *data[0])
    sides = {"stock": Side(stock_model), "xloss": Side(fused_model)}
    first = {k: s.step(*data[0]) for k, s in sides.items()}  # warm-up (kernels compile), the same parameters
    peaks = {}
    for k, s in sides.items():
        with track_peak_memory() as pk:
            s.step(*data[1])
        peaks[k] = pk.bytes
    load_before = os.getloadavg()
    times = {k: [] for k in sides}
    for r in range(args.rounds):
        order = ("stock", "xloss") if r % 2 == 0 else ("xloss", "stock")
        for k in order:
            t0 = time.perf_counter()
            sides[k].step(*data[2 + r])
            times[k].append(time.perf_counter() - t0)
    load_after = os.getloadavg()
    ratios = [a / b for a, b in zip(times["stock"], times["xloss"], strict=True)]
    diffs = [abs(a - b) for a, b in zip(sides["stock"].losses, sides["xloss"].losses, strict=True)]
    return {"model": name, "tokens": args.batch * args.seq, "rounds": args.rounds, "busy": args.busy,
            "median_s": {k: statistics.median(v) for k, v in times.items()}, "times_s": times,
            "ratio_p20_p50_p80": quantiles(ratios), "peak_bytes": peaks,
            "memory_vs_stock": peaks["xloss"] / peaks["stock"],
            "first_loss": first, "first_loss_float64": ref, "max_loss_diff": max(diffs),
            "load_before": load_before, "load_after": load_after}


def report(r: dict) -> None:
    p20, p50, p80 = r["ratio_p20_p50_p80"]
    f, ref = r["first_loss"], r["first_loss_float64"]
    print(f"{r['model']}: {r['tokens']} tokens/step, {r['rounds']} rounds, busy={r['busy']}, "
          f"load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}")
    print(f"  step median: stock {r['median_s']['stock'] * 1e3:.0f} ms, xloss {r['median_s']['xloss'] * 1e3:.0f} ms;"
          f" stock/xloss {p50:.2f}x [p20 {p20:.2f}, p80 {p80:.2f}]")
    print(f"  peak step memory: stock {r['peak_bytes']['stock'] / 2**20:.0f} MiB, xloss "
          f"{r['peak_bytes']['xloss'] / 2**20:.0f} MiB ({r['memory_vs_stock']:.2f} of stock)")
    print(f"  first-step loss: float64 {ref:.6f}, stock {f['stock']:.6f} ({f['stock'] - ref:+.1e}), "
          f"xloss {f['xloss']:.6f} ({f['xloss'] - ref:+.1e}); largest |stock - xloss| over the run "
          f"{r['max_loss_diff']:.1e}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,gemma2")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=None, help="xloss's token chunk (default: its own)")
    p.add_argument("--busy", action="store_true", help="a busy loop pinned to one other core while timing")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, transformers {transformers.__version__}; "
          f"uptime load {os.getloadavg()}")
    results = []
    for name in args.models.split(","):
        if args.busy:
            with Competitor(competitor_cpu()):
                results.append(run_model(name, args))
        else:
            results.append(run_model(name, args))
        report(results[-1])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
