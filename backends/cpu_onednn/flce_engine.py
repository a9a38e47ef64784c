"""The fused linear-cross-entropy for ``xloss.torch`` on the ``cpu`` backend: PyTorch's GEMMs and this
backend's row passes (:mod:`.flce_rows`), one pass over a batch in token chunks. ``xloss.torch`` reaches it
through the backend object (``Backend.flce_row_passes()`` returns an :class:`Engine`), never by name; the
NumPy API's kernel (:mod:`.flce`) shares its GEMM facts and products (:mod:`.gemm`) and its planner.

float32 operands: the three products in float32 (one GEMM per chunk over the shard's whole
vocabulary), the statistics and G in one row pass each, the weight gradient accumulated in place
— the three GEMMs of autograd through materialised logits plus two sweeps of the chunk's logits.
For 16-bit operands (bfloat16, float16):

Where the CPU has native 16-bit GEMMs (oneDNN's bfloat16 kernels on AVX512-BF16/AMX, about 2.5×
float32 on the reference AMD machine) the two gradient products run in the operand dtype; otherwise
(float16 on CPUs without AVX512-FP16/AMX-FP16, where PyTorch's float16 ``mm`` is a scalar loop) the
operands are widened to float32 — the products of 16-bit values are exact in float32 either way and
both accumulate in float32. The numerics, per token chunk of the batch:

* logits ``z = x W.T (+ b)``: float32 products and accumulation, **never rounded to 16 bits** (the
  softmax statistics and the loss see float32 logits, as cut-cross-entropy keeps them): on the
  native path :func:`.gemm.logits_f32` (oneDNN's bf16 matmul with a float32 destination where the
  optional library is installed; else the operands widened exactly and multiplied in float32, the
  weight a tile at a time), since PyTorch's CPU bf16 GEMMs can only return bf16;
* row max, sum of exponentials, loss: float32 (the loss is returned in float32);
* ``G = g (a p - (1-ls) w_t onehot - (ls/K) w)`` (``xloss.torch.flce_chunks``) in float32, rounded once
  to the operand dtype (as the Ascend kernel does) — on the native path into the storage of the float32
  logits it replaces (each row's first half), so the chunk holds one float32 buffer;
* ``dx[chunk] = G W``: one GEMM over the whole shard (K = V), so rounded once;
* ``dW = sum over chunks of G.T x``: one GEMM when the batch is one chunk; otherwise each chunk's
  product is taken as ``hi + lo`` (:func:`.gemm.product_into`) and summed in float32, then rounded
  once. The same split carries a rank's partial ``dx`` to the float32 all-reduce of the
  vocabulary-parallel path;
* ``db``: column sums of the float32 G, accumulated in float32, rounded once.

Widened, every partial is float32 already and is accumulated in float32 directly. float64 operands
take this path (every product and sum in float64) when a call needs what only it computes:
soft-capping and z-loss (``xloss.torch.fused_linear_cross_entropy``); ``accum_dtype=float64``
widens the weight/bias gradient accumulators.

The chunks cover only the tokens that are not ignored (gathered when some are; in a batch of fewer
than ``COMPUTE_BOUND_ROWS`` tokens their hidden states are zeroed instead), in near-equal sizes (a
ragged tail chunk would cost a pass over the weight for little work), chunks of
``COMPUTE_BOUND_ROWS`` tokens or more padded with zero rows to a multiple of ``GEMM_ROWS``; the
logits buffer is allocated once per call.

The two elementwise sweeps over float32 logits (statistics; logits -> G) run as this backend's Numba
row passes, launched under its options (thread count, launch lock, SIGINT held) — one sweep each,
plus one that soft-caps the logits (:mod:`.flce_softcap_rows`, whose G pass also applies the cap's
derivative) — and as PyTorch ops otherwise (float64; float16 widened, whose G is rounded back into
float32 storage; and G when a bias gradient is wanted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...torch import flce_chunks as fc
from ...torch.chunking import even_spans, spans
from . import flce_softcap_rows, gemm
from .flce import plan

HALF = (torch.bfloat16, torch.float16)
# From COMPUTE_BOUND_ROWS tokens on a chunk's GEMMs are compute-bound: ignored tokens are left out and
# the chunk is padded to a multiple of GEMM_ROWS. Below, they stream the weight (memory-bound), so
# leaving tokens out saves nothing and a ragged row count costs time (see run, NativePass.tokens).
COMPUTE_BOUND_ROWS = 256
GEMM_ROWS = 16


class Engine:
    """What the ``cpu`` backend offers ``xloss.torch``'s FLCE (``Backend.flce_row_passes()``): the row
    passes (:mod:`.flce_rows`), launched as this backend's kernels are — its thread count, the launch
    lock where the threading layer needs it, SIGINT held — and :meth:`run`, the whole batch."""

    def __init__(self, backend, rows_module, launch):
        """``launch()``: the context the backend runs its kernels in (``CpuBackend._thread_count``)."""
        self._backend = backend
        self._rows = rows_module
        self._launch_context = launch

    def _launch(self, name: str, *args, module=None) -> None:
        with self._launch_context():
            getattr(module or self._rows, name)(*args)

    def row_stats(self, *args) -> None:
        self._launch("row_stats", *args)

    def gradient_in_place(self, *args) -> None:
        self._launch("gradient_in_place", *args)

    def gradient_narrow(self, *args) -> None:
        self._launch("gradient_narrow", *args)

    def softcap_in_place(self, *args) -> None:
        self._launch("softcap_in_place", *args, module=flce_softcap_rows)

    def gradient_capped(self, *args) -> None:
        self._launch("gradient_capped", *args, module=flce_softcap_rows)

    def native(self, dtype: torch.dtype) -> bool:
        """Whether this engine runs ``dtype``'s gradient GEMMs on native 16-bit kernels."""
        return gemm.native(dtype)

    def tile_bytes(self) -> int:
        """The backend's tile budget (``flce_chunk_bytes``): bounds the float32 copy of a weight tile."""
        return self._backend.flce_chunk_bytes()

    def run(self, sh: fc.Shard, want, g_all, stats, gz_all=None, passes=None):
        """The whole batch (see :func:`run`), with ``passes`` (this engine, or None: PyTorch ops) for the
        row passes."""
        return run(sh, want, g_all, stats, gz_all, passes=passes, engine=self)


def _np(t: torch.Tensor):
    """A contiguous float32 tensor as a NumPy array, a 16-bit one as its integer bits (zero-copy)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("uint16")
    if t.dtype == torch.float16:
        return t.view(torch.int16).numpy()
    return t.numpy()


@dataclass
class NativeGrads:
    """Accumulators: 16-bit results written once where a single GEMM makes them, float32 otherwise."""

    dx: torch.Tensor | None  # (BT, H): operand dtype, or float32 when partials are summed (ranks, widened)
    dw: torch.Tensor | None  # (V_r, H): operand dtype when one chunk on the native path, else the accumulator dtype
    db: torch.Tensor | None  # (V_r,) the accumulator dtype (float32, or float64 for float64 operands / accum_dtype)


class NativePass:
    """One pass over the batch: logits, statistics and loss, and (when ``want`` any) the gradients."""

    def __init__(self, sh: fc.Shard, want=(False, False, False), tokens: int | None = None, passes=None,
                 tile_bytes: int | None = None):
        """``tokens``: how many tokens the chunks will cover (the batch's, unless ignored tokens are
        left out); the input-gradient rows of tokens left out stay zero. ``passes``: the backend's row
        passes (:class:`Engine`) or None (PyTorch ops); ``tile_bytes``: the budget of a float32 weight
        tile for the native path's logits."""
        self.sh = sh
        self.dt = sh.x.dtype
        self.native = self.dt in HALF and gemm.native(self.dt)
        self.cdt = sh.cdt  # float32, or float64 for float64 operands: also the logits' dtype
        self.odt = self.dt if self.native else self.cdt  # the gradient GEMMs' operand dtype
        self.tile_bytes = tile_bytes
        bt, h = sh.x.shape
        n = bt if tokens is None else tokens
        self.one_chunk = sh.chunk >= n
        wx, ww, wb = want
        # accumulators: accum_dtype where it is wider than the compute dtype
        acc = sh.accum if sh.accum is not None and sh.accum.itemsize > self.cdt.itemsize else self.cdt
        dx_dt = self.dt if (self.native and not sh.coll.active) else self.cdt
        dw_dt = self.dt if (self.native and self.one_chunk and acc == self.cdt) else acc
        # the chunks write every dx row they cover and the first one writes dw: no fill unless rows are left out
        self._new_dx = (lambda: (torch.empty if 0 < n == bt else torch.zeros)(bt, h, dtype=dx_dt)) if wx else None
        self._new_dw = (lambda: (torch.empty if n else torch.zeros)(sh.rows, h, dtype=dw_dt)) if ww else None
        self.gr = NativeGrads(None, None, torch.zeros(sh.rows, dtype=acc) if wb else None)
        self._z = None  # the chunks' logits buffer, allocated once (a fresh large tensor per chunk costs page faults)
        # the weight (and bias) in the GEMMs' dtype: a view when native, one widened copy otherwise
        self.w = sh.w.to(self.odt)
        self.b = None if sh.b is None else sh.b.to(self.odt)
        self.cw = sh.class_weight  # float32, (K,) or None
        # the row passes read float32 logits; they round G to the operand dtype (native: into 16-bit storage)
        # or leave it float32 (float32 operands); float16 widened rounds G back into float32 (PyTorch ops)
        self.rows = passes if self.native or self.dt == torch.float32 else None
        if self.rows is not None:
            cw = sh.class_weight
            self.cw_np = np.empty(0, np.float32) if cw is None else cw[sh.start:sh.start + sh.rows].float().numpy()

    # -- one chunk -------------------------------------------------------------------------

    def logits(self, x_c: torch.Tensor) -> torch.Tensor:
        """(chunk, V_r) logits in the compute dtype (float32 for 16-bit operands, never rounded to 16 bits),
        soft-capped (``softcap * tanh(z / softcap)``) when asked."""
        c, v = x_c.shape[0], self.w.shape[0]
        if self._z is None or self._z.shape[0] < c:  # the first chunk is the largest one
            self._z = torch.empty(c, v, dtype=self.cdt)
        z = self._z[:c]
        if self.native:  # float32 products of the 16-bit operands: the weight widened a tile at a time
            cols = plan(c, v, 4, self.tile_bytes)[1] if self.tile_bytes else None
            gemm.logits_f32(z, x_c, self.w, self.b, cols)  # (16-bit x_c: no widened copy to narrow back)
        else:
            torch.mm(x_c, self.w.T, out=z) if self.b is None else torch.addmm(self.b, x_c, self.w.T, out=z)
        cap = self.sh.softcap
        if cap and self.rows is not None:  # one sweep, tanh in float64 rounded once (.flce_softcap_rows)
            self.rows.softcap_in_place(_np(z), float(cap))
        elif cap:
            z.div_(cap).tanh_().mul_(cap)
        return z

    def narrow(self, zp: torch.Tensor) -> torch.Tensor:
        """The 16-bit G of the native path: each row's first half of the float32 logits' storage, as a
        (rows, V) view of the operand dtype (row stride 2V)."""
        return zp.view(self.dt)[:, :zp.shape[1]]

    def stats(self, z: torch.Tensor, tg: fc.Targets) -> fc.RowStats:
        """Global row max, sum of exponentials, target logit and smoothing sum, in float32."""
        if self.rows is not None:
            return self._stats_row_passes(z, tg)
        sh, c, cdt = self.sh, z.shape[0], self.cdt
        m_loc = z.amax(1).to(cdt) if z.shape[1] else torch.full((c,), float("-inf"), dtype=cdt)
        m = m_loc.clone() if sh.coll.active else m_loc
        sh.coll.max_(m)
        s, zt, smooth = (torch.zeros(c, dtype=cdt) for _ in range(3))
        for v0, v1 in spans(sh.rows, sh.block):
            zf = z[:, v0:v1].to(cdt, copy=True)  # z stays: it becomes G later
            hit = tg.in_shard & (tg.local >= v0) & (tg.local < v1)
            col = torch.where(hit, tg.local - v0, 0)
            zt += torch.where(hit, zf.gather(1, col[:, None]).squeeze(1), 0.0)
            if sh.label_smoothing:
                smooth += zf.sum(1) if self.cw is None else torch.mv(zf, self.cw[sh.start + v0:sh.start + v1])
            s += zf.sub_(m[:, None]).exp_().sum(1)
        packed = torch.stack([s, zt, smooth])
        sh.coll.sum_(packed)
        return fc.RowStats(m, packed[0], packed[1], packed[2], None, self._first_max(z, m_loc, m))

    def _first_max(self, z: torch.Tensor, m_loc: torch.Tensor, m: torch.Tensor):
        """Global index of each row's first maximum (token accuracy), or None when not asked."""
        sh = self.sh
        if not sh.accuracy:
            return None
        if not z.shape[1]:
            first = torch.full((z.shape[0],), fc.NO_INDEX)
        else:
            first = z.argmax(1) + sh.start
        if sh.coll.active:  # the lowest index among the ranks holding the global maximum
            first = torch.where(m_loc == m, first, fc.NO_INDEX)
            sh.coll.min_(first)
        return first

    def _stats_row_passes(self, z: torch.Tensor, tg: fc.Targets) -> fc.RowStats:
        sh, c = self.sh, z.shape[0]
        s, zt, smooth = (torch.empty(c) for _ in range(3))
        m_loc = z.amax(1).float() if z.shape[1] else torch.full((c,), float("-inf"))
        tcol = torch.where(tg.in_shard, tg.local, -1)
        self.rows.row_stats(_np(z), m_loc.numpy(), tcol.numpy(), self.cw_np, bool(sh.label_smoothing), s.numpy(),
                            zt.numpy(), smooth.numpy())
        m = m_loc
        if sh.coll.active:  # rescale each rank's sum to the global max
            m = m_loc.clone()
            sh.coll.max_(m)
            s.mul_(torch.where(torch.isneginf(m_loc), 0.0, torch.exp(m_loc - m)))
        packed = torch.stack([s, zt, smooth])
        sh.coll.sum_(packed)
        return fc.RowStats(m, packed[0], packed[1], packed[2], None, self._first_max(z, m_loc, m))

    def gradient_in_place(self, z: torch.Tensor, tg: fc.Targets, g: torch.Tensor, st: fc.RowStats,
                          gz: torch.Tensor | None = None) -> None:
        """Overwrite the logits z with G (compute-dtype arithmetic, one rounding to the operand dtype);
        add its column sums to db. ``gz``: the z-loss's per-token upstream gradient (its term is
        ``2 z_scale lse p``, folded into the coefficient of p); soft-capping multiplies G by
        ``1 - tanh(z / softcap)**2``, read off the capped logits before they are overwritten."""
        sh, ls, k = self.sh, self.sh.label_smoothing, self.sh.vocab
        a = (1.0 - ls) * tg.w_t + (ls / k) * sh.w_sum if self.cw is not None else torch.ones_like(g)
        hit_scale = g * (1.0 - ls) * tg.w_t
        p_coef = g * a
        if sh.z_scale and gz is not None:
            p_coef = p_coef + (2.0 * sh.z_scale) * (st.logits_max + torch.log(st.sum_exp)) * gz
        if self.rows is not None and self.gr.db is None:
            tcol = torch.where(tg.in_shard, tg.local, -1)
            args = (st.logits_max.contiguous().numpy(), (1.0 / st.sum_exp).numpy(), p_coef.numpy(),
                    ((ls / k) * g).numpy(), hit_scale.numpy(), tcol.numpy(), self.cw_np)
            if sh.softcap:  # G times the cap's derivative, in one sweep (.flce_softcap_rows)
                out = self.narrow(z) if self.native else z
                self.rows.gradient_capped(_np(z), _np(out), *args, float(sh.softcap))
            elif self.native:
                self.rows.gradient_narrow(_np(z), _np(self.narrow(z)), *args)
            else:
                self.rows.gradient_in_place(_np(z), *args)
            return
        ga = p_coef[:, None]
        inv = (1.0 / st.sum_exp)[:, None]
        cdt = self.cdt
        for v0, v1 in spans(sh.rows, sh.block):
            chain = None
            if sh.softcap:  # d(capped)/dz = 1 - (capped / softcap)**2
                chain = z[:, v0:v1].to(cdt).div(sh.softcap).square_().neg_().add_(1.0)
            gf = z[:, v0:v1].to(cdt, copy=self.native).sub_(  # (in z itself unless G goes to 16-bit storage)
                st.logits_max[:, None]).exp_().mul_(inv).mul_(ga)
            if ls:
                share = (ls / k) * g[:, None]
                gf.sub_(share if self.cw is None else share * self.cw[sh.start + v0:sh.start + v1][None, :])
            rows = (tg.in_shard & (tg.local >= v0) & (tg.local < v1)).nonzero().squeeze(1)
            cols = tg.local[rows] - v0
            gf[rows, cols] -= hit_scale[rows]
            if chain is not None:
                gf.mul_(chain)
            if self.gr.db is not None:
                self.gr.db[v0:v1] += gf.sum(0)
            if self.native:  # the one rounding of G, onto columns of z already read (see narrow)
                self.narrow(z)[:, v0:v1].copy_(gf)
            else:
                z[:, v0:v1].copy_(gf.to(self.dt))  # (float16 widened: rounded, back in float32)

    def tokens(self, rows, valid: torch.Tensor) -> torch.Tensor:
        """The chunk's hidden states in the GEMMs' dtype. From ``COMPUTE_BOUND_ROWS`` tokens on, zero rows
        are appended up to a multiple of ``GEMM_ROWS`` (oneDNN's bfloat16 GEMMs run 25-35% slower per token
        on a ragged row count); :meth:`chunk` zeroes the padding rows of G, so they add nothing to dW.
        Ignored tokens still in the chunk (``valid`` False: a batch too small to leave them out) are
        zeroed, so their hidden states reach no output here either."""
        x_c = self.sh.x[rows]
        m = x_c.shape[0]
        pad = (-m) % GEMM_ROWS if m >= COMPUTE_BOUND_ROWS else 0
        ignored = not bool(valid.all())
        if not (pad or ignored):
            return x_c.to(self.odt)
        padded = torch.zeros(m + pad, x_c.shape[1], dtype=self.odt)
        padded[:m] = x_c
        if ignored:
            padded[:m][~valid] = 0
        return padded

    def grads(self) -> NativeGrads:
        """The accumulators, dx and dW allocated on first use: after the first chunk's logits, whose
        transients (a float32 weight tile and its product) then never coexist with them."""
        gr = self.gr
        if self._new_dx is not None and gr.dx is None:
            gr.dx = self._new_dx()
        if self._new_dw is not None and gr.dw is None:
            gr.dw = self._new_dw()
        return gr

    def products(self, zp: torch.Tensor, m: int, x_c: torch.Tensor, rows, first: bool) -> None:
        """dx[rows] and this chunk's part of dW from G (the first ``m`` rows of ``zp``, the padding rows
        zero); ``first``: the first chunk (writes dW)."""
        gr = self.grads()
        if gr.dx is not None:
            if isinstance(rows, slice) and m == zp.shape[0]:
                gemm.product_into(gr.dx[rows], zp, self.w, first=True)
            else:
                dx_c = torch.empty(zp.shape[0], gr.dx.shape[1], dtype=gr.dx.dtype)
                gemm.product_into(dx_c, zp, self.w, first=True)
                gr.dx[rows] = dx_c[:m]
        if gr.dw is not None:
            gemm.product_into(gr.dw, zp.T, x_c, first=first)

    def chunk(self, rows, first: bool, g: torch.Tensor | None, st: fc.RowStats | None, gz: torch.Tensor | None = None):
        """Run the tokens ``rows`` (a slice, or an index tensor of positions); ``first``: the first chunk.
        Returns (per-token compute-dtype loss or None, stats, targets)."""
        sh = self.sh
        tg = fc.targets_of(sh, rows)
        x_c = self.tokens(rows, tg.valid)
        zp = self.logits(x_c)
        z = zp[:tg.target.shape[0]]  # the chunk's own rows, without the padding
        loss = None
        if st is None:
            st = self.stats(z, tg)
            loss = fc.token_loss(sh, tg, st)
        if g is not None:
            g = torch.where(tg.valid, g, 0.0)
            gz = None if gz is None else torch.where(tg.valid, gz, 0.0)
            if sh.token_scaling:  # the loss is scaled by a constant per token: so is its gradient
                if st.target_logit is None:  # backward: the target logits again, from this chunk's logits
                    st.target_logit = self._target_logit(z, tg)
                s = token_scale(tg, st)
                g, gz = g * s, None if gz is None else gz * s
            self.gradient_in_place(z, tg, g, st, gz)
            gp = self.narrow(zp) if self.native else zp  # G in the gradient GEMMs' dtype
            gp[z.shape[0]:].zero_()
            self.products(gp, z.shape[0], x_c, rows, first)
        return loss, st, tg

    def _target_logit(self, z: torch.Tensor, tg: fc.Targets) -> torch.Tensor:
        """Each token's (soft-capped) target logit from the chunk's logits, summed over the ranks."""
        zt = torch.zeros(z.shape[0], dtype=self.cdt)
        if z.shape[1]:
            zt = torch.where(tg.in_shard, z.gather(1, tg.local[:, None]).squeeze(1).to(self.cdt), 0.0)
        self.sh.coll.sum_(zt)
        return zt

    def finish(self):
        """(dx, dw, db) in the operand dtype: the float32 parts summed over the ranks and rounded once."""
        gr, sh = self.grads(), self.sh
        if gr.dx is not None and sh.coll.active:
            sh.coll.sum_(gr.dx)
        return tuple(None if t is None else t.to(self.dt) for t in (gr.dx, gr.dw, gr.db))


@dataclass
class PerToken:
    """What the forward pass leaves per token (compute dtype, BT each; z/correct None unless asked)."""

    loss: torch.Tensor
    z: torch.Tensor | None
    correct: torch.Tensor | None


def run(sh: fc.Shard, want, g_all: torch.Tensor | None, stats: tuple | None, gz_all: torch.Tensor | None = None,
        passes=None, engine: Engine | None = None):
    """The whole batch. ``g_all``: per-token upstream gradient of the cross entropy (compute dtype, BT)
    or None for no gradients; ``gz_all``: that of the z-loss (when ``sh.z_scale``); ``stats``: saved
    (row max, sum of exponentials) to skip the statistics (backward), or None.
    Returns (PerToken or None, (row max, sum exp), (dx, dw, db)).

    Ignored tokens (``target == ignore_index``) are left out of the chunks from ``COMPUTE_BOUND_ROWS``
    tokens on: every per-token output of theirs is 0 and their gradient rows are 0 whatever their logits, so
    their three GEMMs would be wasted work (a quarter of the batch when a prompt is masked). Their
    row max and sum of exponentials are returned as 0 and 1. A smaller batch keeps them in, with
    their hidden states zeroed (:meth:`NativePass.tokens`). ``passes``: the row passes (or None: PyTorch
    ops); ``engine``: whose options bound the weight tiles (or None: the weight whole)."""
    bt, cdt = sh.x.shape[0], sh.cdt
    kept = None  # every token in the chunks (slices, no gathers)
    if bt >= COMPUTE_BOUND_ROWS:  # below, the weight's stream sets the GEMMs' time, not the token count
        kept = (sh.target != sh.ignore_index).nonzero().squeeze(1)
        kept = None if kept.numel() == bt else kept
    n = bt if kept is None else kept.numel()
    hp = NativePass(sh, want if g_all is not None else (False, False, False), tokens=n, passes=passes,
                    tile_bytes=None if engine is None else engine.tile_bytes())
    out = None
    if stats is not None:
        row_max, sum_exp = stats
    else:
        out = PerToken(torch.zeros(bt, dtype=cdt), torch.zeros(bt, dtype=cdt) if sh.z_scale else None,
                       torch.zeros(bt) if sh.accuracy else None)
        if kept is None:  # every row is written below
            row_max, sum_exp = torch.empty(bt, dtype=cdt), torch.empty(bt, dtype=cdt)
        else:
            row_max, sum_exp = torch.zeros(bt, dtype=cdt), torch.ones(bt, dtype=cdt)
    for a, b in even_spans(n, sh.chunk, GEMM_ROWS):
        rows = slice(a, b) if kept is None else kept[a:b]
        st = None if stats is None else fc.RowStats(row_max[rows], sum_exp[rows], None, None, None)
        loss, st, tg = hp.chunk(rows, a == 0, None if g_all is None else g_all[rows], st,
                                None if gz_all is None else gz_all[rows])
        if loss is not None:
            scale = token_scale(tg, st) if sh.token_scaling else None
            out.loss[rows] = loss if scale is None else loss * scale
            row_max[rows], sum_exp[rows] = st.logits_max, st.sum_exp
            if out.z is not None:
                out.z[rows] = z_loss(sh, tg, st) if scale is None else z_loss(sh, tg, st) * scale
            if out.correct is not None:
                out.correct[rows] = fc.correct(tg, st)
    return out, (row_max, sum_exp), hp.finish()


def z_loss(sh: fc.Shard, tg: fc.Targets, st: fc.RowStats) -> torch.Tensor:
    """Per-token ``z_scale * lse**2`` (0 where ignored; not class-weighted, as Liger-Kernel)."""
    lse = st.logits_max + torch.log(st.sum_exp)
    return torch.where(tg.valid, sh.z_scale * lse * lse, 0.0)


def token_scale(tg: fc.Targets, st: fc.RowStats) -> torch.Tensor:
    """``use_token_scaling``'s factor: the target's softmax probability (0 where ignored), a constant."""
    return torch.where(tg.valid, torch.exp(st.target_logit - st.logits_max) / st.sum_exp, 0.0)
