"""Hugging Face causal LMs: the fused linear cross entropy in place of ``lm_head`` + cross entropy.

    >>> model = transformers.AutoModelForCausalLM.from_config(cfg)
    >>> xloss.torch.apply_to_causal_lm(model)          # one line; undo with remove_from_causal_lm
    >>> out = model(input_ids, labels=labels)          # model.train(): out.loss fused, out.logits None

While the model is in training mode and ``labels`` (or ``shift_labels``) are given, the patched
``forward`` runs the base model (``model.base_model``), then
:func:`xloss.torch.fused_linear_cross_entropy` on the last hidden states and ``lm_head``'s
weight (and bias): the (tokens x vocabulary) logits are never materialised, and the output's
``logits`` is None (as Liger-Kernel and cut-cross-entropy do). The loss is transformers'
``ForCausalLMLoss``: labels shifted left by one (the last position of each row predicts
nothing), ``ignore_index=-100``, the mean over the tokens not ignored, or the sum divided by
``num_items_in_batch`` when the Trainer passes it (gradient accumulation). Without labels, or
in eval mode, the stock ``forward`` runs unchanged (logits, generation, evaluation metrics).

A head soft-capped by ``config.final_logit_softcapping`` (Gemma-2 and kin:
``cap * tanh(lm_head(hidden) / cap)``) is fused with ``softcap=cap`` (the ``cpu`` backend or the
default; other backends are refused when patching). Heads that do anything else after
``lm_head(hidden)`` (logit scaling, ...) are refused rather than given a different loss.
"""

from __future__ import annotations

import inspect
import types

import torch

from ..errors import XLossTypeError, XLossValueError
from .flce import fused_linear_cross_entropy, gemm_route

_STOCK = "_xloss_stock_forward"
# config attributes that change the logits after lm_head: the fused loss would differ from stock
_HEAD_TRANSFORMS = ("logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
_SOFTCAP = "final_logit_softcapping"  # cap * tanh(logits / cap): fused with softcap=cap
_NOT_FOR_BASE = ("labels", "logits_to_keep", "return_dict")


def _head(model) -> torch.nn.Linear:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise XLossTypeError(f"{type(model).__name__} has no nn.Linear output embedding (lm_head); "
                             "apply_to_causal_lm patches causal LMs whose head is one linear layer")
    return head


def _check_config(model, backend):
    """The head's soft-cap (None when off); refuses heads the fused loss cannot reproduce."""
    cfg = getattr(model, "config", None)
    for name in _HEAD_TRANSFORMS:
        value = getattr(cfg, name, None)
        if value not in (None, 0, 0.0, 1, 1.0, False):
            raise XLossValueError(f"{type(model).__name__} sets config.{name}={value!r}: its logits are not just "
                                  "lm_head(hidden), so the fused loss would not be the model's loss")
    cap = getattr(cfg, _SOFTCAP, None)
    if cap in (None, 0, 0.0):
        return None
    if not gemm_route(backend):
        raise XLossValueError(f"{type(model).__name__} sets config.{_SOFTCAP}={cap!r}: the soft-capped fused loss "
                              "runs on the cpu backend (backend='cpu' or None), not on backend "
                              f"{getattr(backend, 'name', backend)!r}")
    return float(cap)


def _output_class(model):
    """The stock forward's annotated output class (CausalLMOutputWithPast and kin)."""
    ret = inspect.signature(type(model).forward).return_annotation
    if isinstance(ret, type):
        return ret
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return CausalLMOutputWithPast


def apply_to_causal_lm(model, *, backend=None, chunk_size=None):
    """Patch ``model`` (a transformers ``*ForCausalLM`` instance) in place; returns it.

    ``backend``/``chunk_size`` go to :func:`xloss.torch.fused_linear_cross_entropy`. Patching
    twice replaces the settings; :func:`remove_from_causal_lm` restores the stock forward.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "base_model"):
        raise XLossTypeError(f"model must be a transformers PreTrainedModel; got {type(model).__name__}")
    _head(model)
    softcap = _check_config(model, backend)
    stock = model.__dict__.get(_STOCK) or model.forward
    signature = inspect.signature(stock)
    var_kw = next((p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD), None)

    def forward(self, *args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        labels = bound.arguments.get("labels")
        extra = bound.arguments.get(var_kw, {}) if var_kw else {}
        shift_labels = extra.get("shift_labels")
        if not self.training or (labels is None and shift_labels is None):
            return stock(*args, **kwargs)
        base_kwargs = {k: v for k, v in bound.arguments.items() if k not in _NOT_FOR_BASE and k != var_kw}
        base_kwargs.update({k: v for k, v in extra.items() if k not in _NOT_FOR_BASE})
        out = self.base_model(**base_kwargs)
        hidden = out[0]
        if shift_labels is None:  # position t predicts token t+1; the last one predicts nothing
            shift_labels = torch.nn.functional.pad(labels[..., 1:], (0, 1), value=-100)
        head = _head(self)
        n_items = extra.get("num_items_in_batch")
        loss = fused_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), head.weight,
                                          shift_labels.reshape(-1).to(hidden.device), head.bias, ignore_index=-100,
                                          reduction="mean" if n_items is None else "sum", chunk_size=chunk_size,
                                          backend=backend, softcap=softcap)
        if n_items is not None:
            loss = loss / (n_items.to(loss.device) if torch.is_tensor(n_items) else n_items)
        fields = {"loss": loss, "logits": None}
        for name in ("past_key_values", "hidden_states", "attentions", "cross_attentions"):
            if name in getattr(out, "keys", lambda: ())() or hasattr(out, name):
                fields[name] = getattr(out, name, None)
        cls = _output_class(self)
        fields = {k: v for k, v in fields.items() if k in getattr(cls, "__dataclass_fields__", fields)}
        return cls(**fields)

    model.__dict__[_STOCK] = stock
    model.forward = types.MethodType(forward, model)
    return model


def remove_from_causal_lm(model):
    """Undo :func:`apply_to_causal_lm` (a no-op on a model that was not patched); returns it."""
    stock = model.__dict__.pop(_STOCK, None)
    if stock is not None:
        model.__dict__.pop("forward", None)
    return model
