"""apply_to_causal_lm on transformers models built from small configs (no weights downloaded):
the fused loss and its gradients against the stock model's, a few training steps, stock
behaviour in eval and without labels."""

from __future__ import annotations

import copy

import pytest
import torch

import xloss
import xloss.torch as xt

transformers = pytest.importorskip("transformers")


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=101, n_positions=32, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def _llama():
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=101, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(cfg)


MODELS = {"gpt2": _gpt2, "llama": _llama}


def _batch(seed, vocab=101, shape=(3, 9)):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, shape, generator=g)
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt that is not trained on
    labels[2, -2:] = -100  # padding
    return ids, labels


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(params=sorted(MODELS))
def pair(request):
    torch.manual_seed(0)
    stock = MODELS[request.param]().train()
    patched = xt.apply_to_causal_lm(copy.deepcopy(stock), backend="cpu")
    return stock, patched


def test_loss_and_gradients_equal_stock(pair):
    stock, patched = pair
    ids, labels = _batch(1)
    ref = stock(input_ids=ids, labels=labels)
    ref.loss.backward()
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None and out.loss.ndim == 0
    out.loss.backward()
    torch.testing.assert_close(out.loss, ref.loss, rtol=2e-6, atol=1e-6)
    want, got = _grads(stock), _grads(patched)
    assert want.keys() == got.keys() and len(want) > 10
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


def test_num_items_in_batch_and_shift_labels_follow_transformers(pair):
    stock, patched = pair
    ids, labels = _batch(2)
    n = torch.tensor(11)
    ref = stock(input_ids=ids, labels=labels, num_items_in_batch=n).loss
    torch.testing.assert_close(patched(input_ids=ids, labels=labels, num_items_in_batch=n).loss, ref,
                               rtol=2e-6, atol=1e-6)
    shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    torch.testing.assert_close(patched(input_ids=ids, shift_labels=shifted).loss,
                               stock(input_ids=ids, labels=labels).loss, rtol=2e-6, atol=1e-6)


def test_eval_and_no_labels_behave_as_stock(pair):
    stock, patched = pair
    ids, labels = _batch(3)
    out = patched(ids)  # training mode, no labels: logits as stock
    torch.testing.assert_close(out.logits, stock(ids).logits, rtol=0, atol=0)
    stock.eval(), patched.eval()
    with torch.no_grad():
        a, b = stock(input_ids=ids, labels=labels), patched(input_ids=ids, labels=labels)
    assert b.logits is not None
    torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0)
    torch.testing.assert_close(b.loss, a.loss, rtol=0, atol=0)
    xt.remove_from_causal_lm(patched)
    assert "forward" not in vars(patched)


def test_training_steps_track_stock(pair):
    stock, patched = pair
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in (stock, patched)]
    for step in range(4):
        ids, labels = _batch(10 + step)
        losses = []
        for model, opt in zip((stock, patched), opts):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=5e-5, atol=5e-5, msg=f"step {step}")


def test_refuses_heads_it_cannot_fuse():
    model = _gpt2()
    model.config.logit_scale = 0.5
    with pytest.raises(xloss.XLossValueError, match="logit_scale"):
        xt.apply_to_causal_lm(model)
    model = _gpt2()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(xloss.XLossValueError, match="final_logit_softcapping.*cpu backend"):
        xt.apply_to_causal_lm(model, backend="reference")
    with pytest.raises(xloss.XLossTypeError, match="PreTrainedModel"):
        xt.apply_to_causal_lm(torch.nn.Linear(2, 2))


def test_training_step_never_holds_the_logits():
    """Peak memory of forward+backward (second call; 32-token chunks): the patched step stays
    below the stock one by at least one (tokens x vocabulary) float32 matrix (stock holds the
    logits, their gradient and the softmax)."""
    from peak_memory import track_peak_memory

    vocab, shape = 8192, (4, 64)
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=vocab, n_positions=64, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    stock = transformers.GPT2LMHeadModel(cfg).train()
    patched = xt.apply_to_causal_lm(copy.deepcopy(stock), backend="cpu", chunk_size=32)
    ids, labels = _batch(5, vocab, shape)
    peaks = []
    for model in (stock, patched):
        model(input_ids=ids, labels=labels).loss.backward()  # warm: first-call allocations aside
        with track_peak_memory() as peak:
            model(input_ids=ids, labels=labels).loss.backward()
        peaks.append(peak.bytes)
    logits_bytes = shape[0] * shape[1] * vocab * 4
    assert peaks[1] + logits_bytes <= peaks[0], (peaks, logits_bytes)


def test_patched_model_compiles_fullgraph_with_eager_gradients():
    """The patched forward (base model + the fused loss op) traces with no graph break (fullgraph
    raises on any)."""
    torch.manual_seed(0)
    patched = xt.apply_to_causal_lm(_gpt2().train(), backend="cpu")
    ids, labels = _batch(4)

    def step(ids, labels):
        return patched(input_ids=ids, labels=labels).loss

    loss = torch.compile(step, fullgraph=True, backend="eager")(ids, labels)
    loss.backward()
    compiled = _grads(patched)
    patched.zero_grad()
    eager = step(ids, labels)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=0, atol=0)
    for name, g in _grads(patched).items():
        torch.testing.assert_close(compiled[name], g, rtol=0, atol=0, msg=name)


def test_soft_capped_head_is_fused_with_softcap():
    """Gemma-2's final_logit_softcapping: the patched loss and gradients equal the stock model's."""
    if not hasattr(transformers, "Gemma2Config"):
        pytest.skip("this transformers has no Gemma-2")
    cfg = transformers.Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, head_dim=16, vocab_size=101, max_position_embeddings=32,
                                    final_logit_softcapping=2.0)  # small: the cap is active
    torch.manual_seed(0)
    stock = transformers.Gemma2ForCausalLM(cfg).train()
    with torch.no_grad():
        stock.lm_head.weight.mul_(40.0)  # logits of a few units, where tanh is far from linear
    patched = xt.apply_to_causal_lm(copy.deepcopy(stock))
    ids, labels = _batch(6)
    ref = stock(input_ids=ids, labels=labels)
    ref.loss.backward()
    out = patched(input_ids=ids, labels=labels)
    out.loss.backward()
    assert out.logits is None
    torch.testing.assert_close(out.loss, ref.loss, rtol=2e-6, atol=1e-6)
    with torch.no_grad():
        hidden = stock.model(input_ids=ids)[0][:, :-1]
        uncapped = torch.nn.functional.cross_entropy((hidden @ stock.lm_head.weight.T).reshape(-1, 101),
                                                     labels[:, 1:].reshape(-1))
    assert abs(uncapped.item() - ref.loss.item()) > 1e-2  # the cap matters here
    want, got = _grads(stock), _grads(patched)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)
