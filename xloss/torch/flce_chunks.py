"""The chunked arithmetic of the fused linear-cross-entropy on one vocabulary shard: statistics from
PyTorch's GEMMs, gradients from the backend's ``fused_linear_cross_entropy_grad``, called per (token chunk,
vocabulary block) with Args built here (contiguous views, compute-dtype statistics, fresh outputs).

G as in ``reference/flce.py``'s ``cross_entropy_extras_grad_logits`` (K classes, class weights w summing
to W_sum). The kernel computes ``k_i (p_ij - ls'/K - (1-ls') [j == t])``: without class weights
``k = g, ls' = ls`` is exact; otherwise (or where the backend has no smoothing) ``k = g a, ls' = 0`` and
the remainder ``R_ij = (ls/K) g_i (W_sum [j == t] - w_j)`` is added here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import registry
from ..containers import to_numpy
from ..errors import UnsupportedRequestError
from ..kernel_args import Request
from ..kernels.flce.args import FLCEArgs
from .chunking import spans
from .distributed import Collectives, group_of
from .ops import backend_of, compute_dtype

NO_INDEX = torch.iinfo(torch.int64).max  # "no maximum here" in the first-maximum search


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def view(t: torch.Tensor | None):
    """A tensor as a kernel's Args hold it: a contiguous NumPy array sharing its memory (None: None)."""
    return None if t is None else to_numpy(t.detach().contiguous(), "operand")


def kernel_of(req: Request, backend, required: bool = True):
    """What runs ``req``'s kernel on the backend the registry resolves ``backend`` to for it; where there is
    none, an UnsupportedRequestError, or None when not ``required``."""
    try:
        b = registry.resolve(backend, req)
        if b.kernel(req.kernel) is None:
            raise UnsupportedRequestError(f"backend {b.name!r} declares kernel {req.kernel} but has no method "
                                          f"{req.kernel}")
    except UnsupportedRequestError:
        if required:
            raise
        return None
    return b.kernel(req.kernel)


@dataclass
class Shard:
    """One op call's operands (this rank's vocabulary rows) and its options, read through (``sh.vocab``)."""

    x: torch.Tensor  # (BT, H), contiguous
    w: torch.Tensor  # (V_r, H), contiguous, x's dtype
    b: torch.Tensor | None  # (V_r,)
    target: torch.Tensor  # (BT,), int64
    class_weight: torch.Tensor | None  # (K,), compute dtype
    opts: object  # flce_passes.FlceOptions

    def __post_init__(self):
        self.coll, self.backend = Collectives(group_of(self.opts.group)), backend_of(self.opts.backend)
        self.cdt, self.rows = compute_dtype(self.x.dtype), self.w.shape[0]
        self.accum = self.opts.accum and getattr(torch, self.opts.accum)  # the dw/db accumulators' dtype, or None
        self.w_sum = float(self.opts.vocab if self.class_weight is None else self.class_weight.sum(dtype=torch.float64))

    def __getattr__(self, name):
        return getattr(self.opts, name)


@dataclass
class Targets:
    target: torch.Tensor  # of a chunk's tokens as given (global class indices or ignore_index)
    valid: torch.Tensor  # not ignore_index
    w_t: torch.Tensor  # class weight of the target (0 where ignored), compute dtype
    in_shard: torch.Tensor  # valid and one of this shard's rows
    local: torch.Tensor  # target - start where in_shard, else 0


def targets_of(sh: Shard, rows) -> Targets:
    """The target facts of the tokens ``rows`` (a slice, or an index tensor of token positions)."""
    t = sh.target[rows]
    valid = t != sh.ignore_index
    safe = torch.where(valid, t, 0)
    w_t = valid.to(sh.cdt) if sh.class_weight is None else torch.where(valid, sh.class_weight[safe], 0.0)
    in_shard = valid & (safe >= sh.start) & (safe < sh.start + sh.rows)
    return Targets(t, valid, w_t, in_shard, torch.where(in_shard, safe - sh.start, 0))


def logits(sh: Shard, x_c: torch.Tensor, v0: int, v1: int) -> torch.Tensor:
    w = sh.w[v0:v1].to(sh.cdt)
    return torch.mm(x_c, w.T) if sh.b is None else torch.addmm(sh.b[v0:v1].to(sh.cdt), x_c, w.T)


@dataclass
class RowStats:
    logits_max: torch.Tensor  # global row max
    sum_exp: torch.Tensor  # global sum of exp(z - logits_max)
    target_logit: torch.Tensor | None  # z_it (0 where ignored)
    smooth: torch.Tensor | None  # sum_j w_j z_ij (with label smoothing)
    blocks: list | None  # the chunk's blocks turned into softmax in place, when kept
    first: torch.Tensor | None = None  # with accuracy: global index of the row's first maximum
    target_mask: torch.Tensor | None = None  # the shard's, from the online max-sum kernel (else from the targets)
    masked_target: torch.Tensor | None = None

    def block_args(self, tg: Targets, v0: int, v1: int):
        """(target_mask, masked_target) of the kernel call on shard rows [v0, v1): bool, and in [0, v1 - v0)."""
        hit, local = (tg.in_shard, tg.local) if self.target_mask is None else (~self.target_mask, self.masked_target)
        hit = hit & (local >= v0) & (local < v1)
        return ~hit, torch.where(hit, local - v0, 0)


def chunk_stats(sh: Shard, x_c: torch.Tensor, tg: Targets, keep: bool) -> tuple[RowStats, torch.Tensor]:
    """Global row max and sum of exponentials of one chunk, and its per-token loss. ``keep``: the logits stay,
    a tensor per block, and come back as the softmax; else the sum is taken online, a block at a time."""
    c, cdt = x_c.shape[0], sh.cdt
    first = torch.full((c,), NO_INDEX) if sh.accuracy else None
    m = torch.full((c,), float("-inf"), dtype=cdt)
    s, zt, smooth = (torch.zeros(c, dtype=cdt) for _ in range(3))
    blocks = [] if keep else None
    for v0, v1 in spans(sh.rows, sh.block):
        z = logits(sh, x_c, v0, v1)
        hit = tg.in_shard & (tg.local >= v0) & (tg.local < v1)
        zt += torch.where(hit, z.gather(1, torch.where(hit, tg.local - v0, 0)[:, None]).squeeze(1), 0.0)
        if sh.label_smoothing:
            smooth += z.sum(1) if sh.class_weight is None else torch.mv(z, sh.class_weight[sh.start + v0:sh.start + v1])
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
        first = sh.coll.min_(torch.where(m == sh.coll.max_(m.clone()), first, NO_INDEX))
    local_m = None if keep else m.clone()
    sh.coll.max_(m)
    for z in blocks or ():
        s += z.sub_(m[:, None]).exp_().sum(1)
    if local_m is not None:  # a rank whose shard is empty (or whose row max is below another's) rescales its sum
        s.mul_(torch.where(torch.isneginf(local_m), 0.0, torch.exp(local_m - m)))
    s, zt, smooth = sh.coll.sum_(torch.stack([s, zt, smooth]))
    for z in blocks or ():
        z.mul_(1.0 / s[:, None])
    st = RowStats(m, s, zt, smooth, blocks, first)
    return st, token_loss(sh, tg, st)


def token_loss(sh: Shard, tg: Targets, st: RowStats) -> torch.Tensor:
    ls = sh.label_smoothing
    loss = (st.logits_max - st.target_logit + torch.log(st.sum_exp)) * tg.w_t
    if ls:
        loss = (1.0 - ls) * loss + (ls / sh.vocab) * (sh.w_sum * (st.logits_max + torch.log(st.sum_exp)) - st.smooth)
    return torch.where(tg.valid, loss, 0.0)


def correct(tg: Targets, st: RowStats) -> torch.Tensor:
    return (tg.valid & (st.first == tg.target)).to(torch.float32)


class Grads:
    """The gradient accumulators in the compute dtype (None where not wanted), and the backend's gradient
    kernel for the op call: resolved and checked once per mode, on the call's largest block."""

    def __init__(self, sh: Shard, want):
        (bt, h), cdt, v = sh.x.shape, sh.cdt, sh.rows
        alloc = torch.empty if bt and v else torch.zeros  # the first kernel call on each part copies
        self.sh, self._kernels, self.row_sum = sh, {}, None
        self.dx = alloc(bt, h, dtype=cdt) if want[0] else None
        self.dw = alloc(v, h, dtype=cdt) if want[1] else None
        self.db = torch.zeros(v, dtype=cdt) if want[2] else None
        self.rank1_x, self.rank1_g = None, 0.0  # sum_i r_i x_i and sum_i r_i: R's rank-one parts

    def kernel(self, mode: str, numel: int):
        """(kernel, the smoothing it applies): the label smoothing where there are no class weights and the
        backend declares it, else 0 (and the remainder R here)."""
        sh = self.sh
        for ls in (sh.label_smoothing, 0.0) if sh.label_smoothing and sh.class_weight is None else (0.0,):
            if mode in self._kernels:
                break
            req = Request("fused_linear_cross_entropy_grad", dtype_name(sh.x.dtype), None,
                          {"mode": mode, "mask": "bool", "label_smoothing": bool(ls)}, numel)
            run = kernel_of(req, sh.backend, required=not ls)
            if run is not None:
                self._kernels[mode] = (run, ls)
        return self._kernels[mode]

    def add_chunk(self, t0: int, t1: int, tg: Targets, g: torch.Tensor, st: RowStats) -> None:
        """Add tokens [t0, t1)'s gradients (``g``: upstream, 0 where ignored). The kernel gets ``st.blocks``'
        softmax, or recomputes it (with a bias, which it does not know, the softmax is rebuilt here)."""
        sh, x_raw, c, ls = self.sh, self.sh.x[t0:t1], t1 - t0, self.sh.label_smoothing
        mode = "softmax" if (st.blocks is not None or sh.b is not None) else "recompute"
        vb, h = min(sh.block, sh.rows), sh.x.shape[1]
        run, kls = self.kernel(mode, max(c * vb, c * h, vb * h))
        remainder = bool(ls) and kls == 0.0
        k = (g * (tg.w_t if not remainder else (1.0 - ls) * tg.w_t + (ls / sh.vocab) * sh.w_sum)).contiguous()
        x_c = x_raw.to(sh.cdt) if (mode == "softmax" and st.blocks is None) else None
        for i, (v0, v1) in enumerate(spans(sh.rows, sh.block)):
            mask, mt = st.block_args(tg, v0, v1)
            p = (st.blocks[i] if st.blocks is not None else None if x_c is None  # None: recompute mode
                 else logits(sh, x_c, v0, v1).sub_(st.logits_max[:, None]).exp_().div_(st.sum_exp[:, None]))
            ig, wg = torch.empty_like(x_raw), torch.empty(v1 - v0, h, dtype=x_raw.dtype)
            stats = (None, None) if p is not None else (st.logits_max, st.sum_exp)
            run(FLCEArgs(view(k), view(x_raw), view(sh.w[v0:v1]), view(mask), "bool", view(mt), mode,
                         *map(view, stats), view(p), kls, sh.vocab, view(ig), view(wg)))
            if self.dx is not None:
                self.dx[t0:t1].copy_(ig) if v0 == 0 else self.dx[t0:t1].add_(ig)
            if self.dw is not None:
                self.dw[v0:v1].copy_(wg) if t0 == 0 else self.dw[v0:v1].add_(wg)
            del ig, wg
            if self.db is not None:
                db = self.db[v0:v1]
                db += torch.mv(p.T, k)
                if kls:
                    db -= (kls / sh.vocab) * float(k.sum(dtype=torch.float64))
                db.index_add_(0, mt[~mask], k[~mask], alpha=-(1.0 - kls))
            if st.blocks is not None:
                st.blocks[i] = None  # released as soon as used
            del p
        if remainder:
            self._add_remainder(t0, t1, tg, g)

    def _add_remainder(self, t0: int, t1: int, tg: Targets, g: torch.Tensor) -> None:
        """R's target part, and its rank-one part into dx here and into dw/db at :meth:`finish`."""
        sh = self.sh
        r = (sh.label_smoothing / sh.vocab) * g
        rows, t_loc = tg.in_shard.nonzero().squeeze(1), tg.local[tg.in_shard]
        hit_r = (sh.w_sum * r[rows])
        if self.dx is not None:
            if self.row_sum is None:  # sum_j w_j W_j over this shard's rows
                w, cw = sh.w.to(sh.cdt), sh.class_weight
                self.row_sum = w.sum(0) if cw is None else torch.mv(w.T, cw[sh.start:sh.start + sh.rows])
            dx = self.dx[t0:t1]
            dx.index_add_(0, rows, sh.w[t_loc].to(sh.cdt) * hit_r[:, None])
            dx.sub_(r[:, None] * self.row_sum[None, :])
        if self.dw is not None:
            x_c = sh.x[t0:t1].to(sh.cdt)
            self.dw.index_add_(0, t_loc, x_c[rows] * hit_r[:, None])
            rx = torch.mv(x_c.T, r)
            self.rank1_x = rx if self.rank1_x is None else self.rank1_x + rx
        if self.db is not None:
            self.db.index_add_(0, t_loc, hit_r)
        self.rank1_g += float(r.sum(dtype=torch.float64))

    def finish(self):
        """``(dx, dw, db)`` in the operands' dtype: R's rank-one parts applied, dx summed over the ranks."""
        sh = self.sh
        w_shard = None if sh.class_weight is None else sh.class_weight[sh.start:sh.start + sh.rows]
        if self.rank1_x is not None and self.dw is not None:
            self.dw.sub_(self.rank1_x[None, :]) if w_shard is None else self.dw.addr_(w_shard, self.rank1_x, alpha=-1.0)
        if self.rank1_g and self.db is not None:
            self.db.sub_(self.rank1_g if w_shard is None else self.rank1_g * w_shard)
        if self.dx is not None:
            sh.coll.sum_(self.dx)
        return tuple(None if t is None else t.to(sh.x.dtype) for t in (self.dx, self.dw, self.db))
