"""The chunked arithmetic of the fused linear-cross-entropy, for one vocabulary shard.

For token i with logits ``z_i = x_i @ W.T + b`` over the global vocabulary of K classes,
target t, class weights w (all ones when none are given; ``W_sum = sum(w)``) and label
smoothing ls, the loss (PyTorch's ``cross_entropy``) and its gradient w.r.t. the logits are

    loss_i = (1-ls) w_t (lse_i - z_it) + (ls/K) (W_sum lse_i - sum_j w_j z_ij)
    G_ij   = g_i [a_i p_ij - (1-ls) w_t [j == t] - (ls/K) w_j],   a_i = (1-ls) w_t + (ls/K) W_sum

with ``p = softmax(z)`` and g_i the upstream gradient of token i (1/denominator for
``mean``). The backend kernel computes ``k_i (p_ij - ls'/K - (1-ls') [j == t])`` for a
per-token ``k`` and one smoothing ``ls'``. Without class weights ``a_i = 1`` and
``k = g, ls' = ls`` is exact. Otherwise (or when the backend has no label smoothing) the
kernel runs with ``k = g a, ls' = 0`` and the remainder

    R_ij = (ls/K) g_i (W_sum [j == t] - w_j)

— a sparse part on the target plus a rank-one part — is added here. ``input_grad = G @ W``,
``weight_grad = G.T @ x``, ``bias_grad = sum_i G_ij``.

Tokens go in chunks; the vocabulary in blocks, each a kernel call with its own target mask
and local targets (the same arguments a vocabulary-parallel rank gives the Ascend kernel). In
the forward with gradients (scalar reductions) a chunk's logits are kept, turned into
softmax in place and handed to the kernel in "softmax" mode: three GEMMs in all. The other
paths keep only the per-token row max and sum of exponentials, found online block by block,
and the kernel recomputes the logits ("recompute" mode).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import registry
from ..errors import UnsupportedRequestError
from ..kernel_args import Request
from ..kernels.flce import api
from .chunking import spans
from .distributed import Collectives

_KERNEL = "fused_linear_cross_entropy_grad"
NO_INDEX = torch.iinfo(torch.int64).max  # "no maximum here" in the first-maximum search
_NUMPY_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.float64: "float64"}


@dataclass
class Shard:
    """One call's operands (this rank's vocabulary rows) and settings, already validated."""

    x: torch.Tensor  # (BT, H), contiguous, input dtype
    w: torch.Tensor  # (V_r, H), contiguous, x's dtype
    b: torch.Tensor | None  # (V_r,), x's dtype
    target: torch.Tensor  # (BT,), int64
    class_weight: torch.Tensor | None  # (K,), compute dtype
    start: int  # global index of this shard's first row
    vocab: int  # K, the global vocabulary
    ignore_index: int
    label_smoothing: float
    chunk: int
    block: int
    coll: Collectives
    backend: object  # what the caller passed as backend=
    softcap: float = 0.0  # logits -> softcap * tanh(logits / softcap); 0: off (torch GEMM path only)
    z_scale: float = 0.0  # z-loss: + z_scale * lse**2 per token not ignored (torch GEMM path only)
    accum: torch.dtype | None = None  # dtype of the weight/bias gradient accumulators; None: compute dtype
    accuracy: bool = False  # find each row's first maximum (token accuracy)
    token_scaling: bool = False  # each token's loss times its (constant) target probability (torch GEMM path only)

    @property
    def cdt(self) -> torch.dtype:
        return torch.float64 if self.x.dtype == torch.float64 else torch.float32

    @property
    def rows(self) -> int:
        return self.w.shape[0]

    @property
    def w_sum(self) -> float:
        return float(self.vocab) if self.class_weight is None else float(self.class_weight.sum(dtype=torch.float64))


@dataclass
class Targets:
    """Per-token target facts for one chunk."""

    target: torch.Tensor  # the chunk's targets as given (global class indices or ignore_index)
    valid: torch.Tensor  # not ignore_index
    w_t: torch.Tensor  # class weight of the target (0 where ignored), compute dtype
    in_shard: torch.Tensor  # valid and the target is one of this shard's rows
    local: torch.Tensor  # target - start where in_shard, else 0

    def block_args(self, v0: int, v1: int):
        """(target_mask, masked_target) for the kernel call on shard rows [v0, v1)."""
        hit = self.in_shard & (self.local >= v0) & (self.local < v1)
        return ~hit, torch.where(hit, self.local - v0, 0)


def targets_of(sh: Shard, rows) -> Targets:
    """The target facts of the tokens ``rows`` (a slice, or an index tensor of token positions)."""
    t = sh.target[rows]
    valid = t != sh.ignore_index
    safe = torch.where(valid, t, 0)
    if sh.class_weight is None:
        w_t = valid.to(sh.cdt)
    else:
        w_t = torch.where(valid, sh.class_weight[safe], 0.0)
    in_shard = valid & (safe >= sh.start) & (safe < sh.start + sh.rows)
    return Targets(t, valid, w_t, in_shard, torch.where(in_shard, safe - sh.start, 0))


def denominator(sh: Shard) -> float:
    """``mean``'s divisor: the summed class weight of every non-ignored token (the token count
    without class weights), over the whole batch — never per chunk."""
    return float(targets_of(sh, slice(None)).w_t.sum(dtype=torch.float64))


# -- choosing the kernel --------------------------------------------------------------------


class Kernels:
    """The backend that runs each kernel mode, resolved once per call (and its label smoothing)."""

    def __init__(self, sh: Shard):
        self.sh = sh
        self._cache = {}

    def get(self, mode: str, numel: int):
        """``(backend, kernel_smoothing)`` for ``mode``: the kernel applies the label smoothing itself
        when there are no class weights and the backend declares it; otherwise the remainder R
        (module docstring) is added here, so a backend without smoothing still runs the call."""
        key = mode
        if key not in self._cache:
            sh = self.sh
            dtype = _NUMPY_NAME[sh.x.dtype]
            want_ls = bool(sh.label_smoothing) and sh.class_weight is None

            def req(ls_flag):
                return Request(_KERNEL, dtype, None, {"mode": mode, "mask": "bool", "label_smoothing": ls_flag}, numel)

            if want_ls:
                try:
                    self._cache[key] = (registry.resolve(sh.backend, req(True)), sh.label_smoothing)
                except UnsupportedRequestError:
                    self._cache[key] = (registry.resolve(sh.backend, req(False)), 0.0)
            else:
                self._cache[key] = (registry.resolve(sh.backend, req(False)), 0.0)
        return self._cache[key]


# -- logits and row statistics --------------------------------------------------------------


def logits(sh: Shard, x_c: torch.Tensor, v0: int, v1: int) -> torch.Tensor:
    """(chunk, v1 - v0) logits in the compute dtype (16-bit operands are widened, so the
    products accumulate and are stored in float32)."""
    w = sh.w[v0:v1].to(sh.cdt)
    if sh.b is None:
        return torch.mm(x_c, w.T)
    return torch.addmm(sh.b[v0:v1].to(sh.cdt), x_c, w.T)


@dataclass
class RowStats:
    logits_max: torch.Tensor  # global row max
    sum_exp: torch.Tensor  # global sum of exp(z - logits_max)
    target_logit: torch.Tensor  # z_it (0 where ignored)
    smooth: torch.Tensor  # sum_j w_j z_ij (only with label smoothing)
    blocks: list | None  # with keep: the chunk's blocks, turned into softmax in place
    first: torch.Tensor | None = None  # with sh.accuracy: global index of the row's first maximum (int64)
    # from the online max-sum kernel (flce_max_sum): the shard's target mask (bool) and masked target,
    # handed to the gradient kernel as they are; None: each block's are built from the targets
    target_mask: torch.Tensor | None = None
    masked_target: torch.Tensor | None = None

    def block_args(self, tg: Targets, v0: int, v1: int, rows: int):
        """(target_mask, masked_target) for the kernel call on shard rows [v0, v1) of ``rows``."""
        if self.target_mask is None:
            return tg.block_args(v0, v1)
        if v0 == 0 and v1 == rows:  # the whole shard: the forward kernel's own
            return self.target_mask, self.masked_target
        hit = ~self.target_mask & (self.masked_target >= v0) & (self.masked_target < v1)
        return ~hit, torch.where(hit, self.masked_target - v0, 0)


def chunk_stats(sh: Shard, x_c: torch.Tensor, tg: Targets, keep: bool) -> RowStats:
    """Row max and sum of exponentials over the global vocabulary for one chunk.

    ``keep``: the chunk's logits stay (one (chunk, block) tensor per block) and come back as
    the softmax. Otherwise each block is dropped after an online max/sum update, so the
    transient is one block."""
    c, cdt = x_c.shape[0], sh.cdt
    first = torch.full((c,), NO_INDEX) if sh.accuracy else None
    m = torch.full((c,), float("-inf"), dtype=cdt)
    s = torch.zeros(c, dtype=cdt)
    zt = torch.zeros(c, dtype=cdt)
    smooth = torch.zeros(c, dtype=cdt)
    blocks = [] if keep else None
    for v0, v1 in spans(sh.rows, sh.block):
        z = logits(sh, x_c, v0, v1)
        hit = tg.in_shard & (tg.local >= v0) & (tg.local < v1)
        col = torch.where(hit, tg.local - v0, 0)
        zt += torch.where(hit, z.gather(1, col[:, None]).squeeze(1), 0.0)
        if sh.label_smoothing:
            if sh.class_weight is None:
                smooth += z.sum(1)
            else:
                smooth += torch.mv(z, sh.class_weight[sh.start + v0:sh.start + v1])
        if first is not None and z.shape[1]:  # a later block's maximum counts only when larger
            bmax, barg = z.max(1)
            first = torch.where(bmax > m, barg + (sh.start + v0), first)
        if keep:
            blocks.append(z)
            torch.maximum(m, z.amax(1), out=m)
        else:
            m_new = torch.maximum(m, z.amax(1))
            s.mul_(torch.exp(m - m_new)).add_(z.sub_(m_new[:, None]).exp_().sum(1))
            m = m_new
    if first is not None and sh.coll.active:  # the lowest index among the ranks holding the global maximum
        m_global = m.clone()
        sh.coll.max_(m_global)
        first = torch.where(m == m_global, first, NO_INDEX)
        sh.coll.min_(first)
    if keep:
        sh.coll.max_(m)
        for z in blocks:
            s += z.sub_(m[:, None]).exp_().sum(1)
    else:
        local_m = m.clone()
        sh.coll.max_(m)
        # a rank whose shard is empty (or a row max below another rank's) rescales its sum
        scale = torch.where(torch.isneginf(local_m), 0.0, torch.exp(local_m - m))
        s.mul_(scale)
    packed = torch.stack([s, zt, smooth])
    sh.coll.sum_(packed)
    s, zt, smooth = packed[0], packed[1], packed[2]
    if keep:
        inv = 1.0 / s[:, None]
        for z in blocks:
            z.mul_(inv)
    return RowStats(m, s, zt, smooth, blocks, first)


def token_loss(sh: Shard, tg: Targets, st: RowStats) -> torch.Tensor:
    """Per-token loss in the compute dtype (0 for ignored tokens)."""
    lse = st.logits_max + torch.log(st.sum_exp)
    ls = sh.label_smoothing
    loss = (st.logits_max - st.target_logit + torch.log(st.sum_exp)) * tg.w_t
    if ls:
        loss = (1.0 - ls) * loss + (ls / sh.vocab) * (sh.w_sum * lse - st.smooth)
    return torch.where(tg.valid, loss, 0.0)


def z_loss(sh: Shard, tg: Targets, st: RowStats) -> torch.Tensor:
    """Per-token z-loss ``z_scale * lse**2`` (0 for ignored tokens; not class-weighted, as Liger-Kernel)."""
    lse = st.logits_max + torch.log(st.sum_exp)
    return torch.where(tg.valid, sh.z_scale * lse * lse, 0.0)


def token_scale(tg: Targets, st: RowStats) -> torch.Tensor:
    """Liger-Kernel's ``use_token_scaling`` factor: the target's softmax probability (0 where ignored),
    a constant for autograd."""
    return torch.where(tg.valid, torch.exp(st.target_logit - st.logits_max) / st.sum_exp, 0.0)


def correct(tg: Targets, st: RowStats) -> torch.Tensor:
    """Per token: 1.0 where ``argmax(logits) == target`` (the first maximum, as torch.argmax),
    0.0 otherwise and for ignored tokens. float32."""
    return (tg.valid & (st.first == tg.target)).to(torch.float32)


# -- gradients --------------------------------------------------------------------------------


@dataclass
class Grads:
    """Accumulators in the compute dtype (None where that gradient is not wanted)."""

    dx: torch.Tensor | None  # (BT, H)
    dw: torch.Tensor | None  # (V_r, H)
    db: torch.Tensor | None  # (V_r,)
    rank1_x: torch.Tensor | None = None  # sum_i r_i x_i, for R's rank-one part of dw
    rank1_g: float = 0.0  # sum_i r_i, for R's rank-one part of db

    @classmethod
    def new(cls, sh: Shard, want_dx: bool, want_dw: bool, want_db: bool) -> Grads:
        """dx and dw are left uninitialised when the kernel calls will cover them (the first call on
        each part copies instead of adding, saving a fill and a read of the (V, H) accumulator)."""
        (bt, h), cdt = sh.x.shape, sh.cdt
        alloc = torch.empty if bt and sh.rows else torch.zeros
        return cls(alloc(bt, h, dtype=cdt) if want_dx else None,
                   alloc(sh.rows, h, dtype=cdt) if want_dw else None,
                   torch.zeros(sh.rows, dtype=cdt) if want_db else None)


def remainder_row_sum(sh: Shard) -> torch.Tensor:
    """``sum_j w_j W_j`` over this shard's rows (R's rank-one part of dx), compute dtype."""
    w = sh.w.to(sh.cdt)
    if sh.class_weight is None:
        return w.sum(0)
    return torch.mv(w.T, sh.class_weight[sh.start:sh.start + sh.rows])


def chunk_grads(sh: Shard, kernels: Kernels, gr: Grads, t0: int, t1: int, tg: Targets, g: torch.Tensor,
                st: RowStats, row_sum=None) -> None:
    """Add chunk [t0, t1)'s gradients into ``gr``. ``g``: per-token upstream gradient (0 where
    ignored). With ``st.blocks`` the kernel gets the softmax; otherwise it recomputes (unless
    there is a bias, which the kernel's recompute does not know: then the softmax is rebuilt here)."""
    x_raw = sh.x[t0:t1]
    c = t1 - t0
    mode = "softmax" if (st.blocks is not None or sh.b is not None) else "recompute"
    vb, h = min(sh.block, sh.rows), sh.x.shape[1]
    be, kls = kernels.get(mode, max(c * vb, c * h, vb * h))  # numel: the call's largest operand
    ls = sh.label_smoothing
    remainder = bool(ls) and kls == 0.0
    a = tg.w_t if not remainder else (1.0 - ls) * tg.w_t + (ls / sh.vocab) * sh.w_sum
    k = (g * a).contiguous()
    x_c = x_raw.to(sh.cdt) if (mode == "softmax" and st.blocks is None) else None
    for i, (v0, v1) in enumerate(spans(sh.rows, sh.block)):
        mask, mt = st.block_args(tg, v0, v1, sh.rows)
        if st.blocks is not None:
            p = st.blocks[i]
        elif mode == "softmax":
            p = logits(sh, x_c, v0, v1).sub_(st.logits_max[:, None]).exp_().div_(st.sum_exp[:, None])
        else:
            p = None
        if p is not None:
            ig, wg = api.fused_linear_cross_entropy_grad(k, x_raw, sh.w[v0:v1], mask, mt, softmax=p,
                                                         label_smoothing=kls, vocab_size=sh.vocab, backend=be)
        else:
            ig, wg = api.fused_linear_cross_entropy_grad(k, x_raw, sh.w[v0:v1], mask, mt,
                                                         logits_max=st.logits_max, sum_exp_logits=st.sum_exp,
                                                         label_smoothing=kls, vocab_size=sh.vocab, backend=be)
        if gr.dx is not None:
            gr.dx[t0:t1].copy_(ig) if v0 == 0 else gr.dx[t0:t1].add_(ig)
        if gr.dw is not None:
            gr.dw[v0:v1].copy_(wg) if t0 == 0 else gr.dw[v0:v1].add_(wg)
        del ig, wg
        if gr.db is not None:
            hit = ~mask
            db = gr.db[v0:v1]
            db += torch.mv(p.T, k)
            if kls:
                db -= (kls / sh.vocab) * float(k.sum(dtype=torch.float64))
            db.index_add_(0, mt[hit], k[hit], alpha=-(1.0 - kls))
        if st.blocks is not None:
            st.blocks[i] = None  # release the block as soon as it is used
        del p
    if remainder:
        _add_remainder(sh, gr, t0, t1, tg, g, row_sum)


def _add_remainder(sh: Shard, gr: Grads, t0: int, t1: int, tg: Targets, g: torch.Tensor, row_sum) -> None:
    """R = (ls/K) g_i (W_sum [j == t] - w_j): its target part here, its rank-one part into dx here
    and into dw/db at :func:`finish` (one pass over dw instead of one per chunk)."""
    r = (sh.label_smoothing / sh.vocab) * g
    hit = tg.in_shard
    rows, t_loc = hit.nonzero().squeeze(1), tg.local[hit]
    x_c = sh.x[t0:t1].to(sh.cdt)
    if gr.dx is not None:
        dx = gr.dx[t0:t1]
        dx.index_add_(0, rows, sh.w[t_loc].to(sh.cdt) * (sh.w_sum * r[rows])[:, None])
        dx.sub_(r[:, None] * row_sum[None, :])
    if gr.dw is not None:
        gr.dw.index_add_(0, t_loc, x_c[rows] * (sh.w_sum * r[rows])[:, None])
        rx = torch.mv(x_c.T, r)
        gr.rank1_x = rx if gr.rank1_x is None else gr.rank1_x + rx
    if gr.db is not None:
        gr.db.index_add_(0, t_loc, sh.w_sum * r[rows])
    gr.rank1_g += float(r.sum(dtype=torch.float64))


def finish(sh: Shard, gr: Grads):
    """Apply R's rank-one parts, sum the partial input gradients over the ranks, and cast to the
    operands' dtypes: ``(dx, dw, db)``."""
    if sh.class_weight is None:
        w_shard = None
    else:
        w_shard = sh.class_weight[sh.start:sh.start + sh.rows]
    if gr.rank1_x is not None and gr.dw is not None:
        if w_shard is None:
            gr.dw.sub_(gr.rank1_x[None, :])
        else:
            gr.dw.addr_(w_shard, gr.rank1_x, alpha=-1.0)
    if gr.rank1_g and gr.db is not None:
        gr.db.sub_(gr.rank1_g if w_shard is None else gr.rank1_g * w_shard)
    if gr.dx is not None:
        sh.coll.sum_(gr.dx)
    dt = sh.x.dtype
    return tuple(None if t is None else t.to(dt) for t in (gr.dx, gr.dw, gr.db))
