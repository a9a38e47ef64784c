"""Train a small GPT-2 (built from a config, no download) with xloss's fused linear cross entropy
patched in, beside the stock model: the two loss curves agree, the patched one never holds the
(tokens x vocabulary) logits.

    python examples/train_gpt2_apply_to_causal_lm.py
    python examples/train_gpt2_apply_to_causal_lm.py --steps 20 --vocab 8192 --backend reference
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import transformers

import xloss.torch as xt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--backend", default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=args.vocab, n_positions=args.seq,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                  eos_token_id=0)
    stock = transformers.GPT2LMHeadModel(cfg).train()
    patched = xt.apply_to_causal_lm(copy.deepcopy(stock), backend=args.backend)
    models = {"stock": stock, "xloss": patched}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    spent = dict.fromkeys(models, 0.0)
    print(f"{'step':>4}  {'stock loss':>11}  {'xloss loss':>11}")
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.seq))
        labels = ids.clone()
        labels[:, : args.seq // 4] = -100  # a prompt not trained on
        losses = {}
        for name in models:  # interleaved, so both see the same machine load
            t0 = time.perf_counter()
            opts[name].zero_grad()
            out = models[name](input_ids=ids, labels=labels)
            out.loss.backward()
            opts[name].step()
            if step:  # step 0 includes the kernels' first (JIT) compilation
                spent[name] += time.perf_counter() - t0
            losses[name] = out.loss.item()
        assert out.logits is None  # the patched model returns no logits while training
        print(f"{step:>4}  {losses['stock']:>11.6f}  {losses['xloss']:>11.6f}")
    timed = max(args.steps - 1, 1)
    print(f"time per step after the first: stock {spent['stock'] / timed * 1e3:.1f} ms, "
          f"xloss {spent['xloss'] / timed * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
