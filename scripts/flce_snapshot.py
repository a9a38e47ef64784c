"""Bit-identity snapshot of xloss.torch's fused linear-cross-entropy, for refactoring it.

``python scripts/flce_snapshot.py save FILE`` runs a grid of configurations (backends, dtypes,
reductions, options, chunk sizes, a 2-rank threaded process group, the custom ops called directly,
forward-mode and errors) forward and backward, and pickles every loss, gradient and error message
byte for byte; ``compare FILE`` runs it again and lists each configuration whose outputs differ.
"""

import pickle
import sys
import threading

import torch

import xloss.torch as xt

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
OPTIONS = {
    "plain": {},
    "bias": {"bias": True},
    "cw": {"class_weight": True},
    "ls": {"label_smoothing": 0.1},
    "ls_bias": {"label_smoothing": 0.1, "bias": True},
    "ls_cw_bias": {"label_smoothing": 0.2, "class_weight": True, "bias": True},
    "softcap": {"softcap": 3.0},
    "zloss": {"lse_square_scale": 1e-3, "return_z_loss": True},
    "zloss_quiet": {"lse_square_scale": 1e-3},
    "acc": {"return_token_accuracy": True},
    "scaling": {"use_token_scaling": True},
    "accum64": {"accum_dtype": torch.float64},
    "all_extras": {"softcap": 2.0, "lse_square_scale": 1e-3, "return_z_loss": True, "return_token_accuracy": True,
                   "use_token_scaling": True, "label_smoothing": 0.1, "bias": True},
    "ignore2_chunks": {"ignore_index": 2, "chunk_size": 5, "vocab_chunk_size": 7},
    "cw_ls_chunks": {"class_weight": True, "label_smoothing": 0.1, "chunk_size": 4, "vocab_chunk_size": 10},
}


def blob(t):
    if t is None:
        return None
    t = t.detach().contiguous()
    raw = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
    return (str(t.dtype), tuple(t.shape), raw.numpy().tobytes())


def case(seed, bt=13, h=8, v=37, dtype=torch.float32, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(bt, h, generator=g, dtype=torch.float64)).to(dtype)
    w = (torch.randn(v, h, generator=g, dtype=torch.float64) * 0.7).to(dtype)
    b = torch.randn(v, generator=g, dtype=torch.float64).to(dtype)
    cw = torch.rand(v, generator=g, dtype=torch.float64) + 0.5
    t = torch.randint(0, v, (bt,), generator=g)
    t[1::4] = ignore_index
    up = torch.rand(bt, generator=g, dtype=torch.float64) + 0.5
    return x, w, b, cw, t, up


def attempt(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 (the message is part of the snapshot)
        return ("error", f"{type(exc).__name__}: {exc}")


def one(backend, dtype, reduction, opts, grads=(True, True, True), group=None, w_override=None, seed=0):
    opts = dict(opts)
    ii = opts.get("ignore_index", -100)
    x, w, b, cw, t, up = case(seed, dtype=dtype, ignore_index=ii)
    if w_override is not None:
        w = w_override(w, group)
    use_b = opts.pop("bias", False)
    use_cw = opts.pop("class_weight", False)
    if use_b and w_override is not None:
        b = w_override(b[:, None], group)[:, 0]
    xr, wr = x.clone().requires_grad_(grads[0]), w.clone().requires_grad_(grads[1])
    br = b.clone().requires_grad_(grads[2]) if use_b else None

    def run():
        out = xt.fused_linear_cross_entropy(xr, wr, t, br, reduction=reduction, backend=backend,
                                            class_weight=cw if use_cw else None, process_group=group, **opts)
        outs = list(out) if isinstance(out, tuple) else [out]
        loss = outs[0]
        res = [blob(o) for o in outs]
        if loss.requires_grad:
            g = up.to(loss.dtype) if reduction == "none" else torch.tensor(1.7, dtype=loss.dtype)
            loss.backward(g)
            res += [blob(a.grad) for a in (xr, wr, br) if a is not None]
        return res

    return attempt(run)


def run_ranks(world, fn):
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import (
        ProcessLocalGroup,
        _install_threaded_pg,
        _uninstall_threaded_pg,
    )

    results, errors = [None] * world, []

    def body(rank, store):
        try:
            dist.init_process_group("threaded", rank=rank, world_size=world, store=store)
            try:
                results[rank] = fn(rank, dist.group.WORLD)
            finally:
                dist.destroy_process_group()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            ProcessLocalGroup.exception_handle(exc)

    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    _install_threaded_pg()
    try:
        store = dist.HashStore()
        threads = [threading.Thread(target=body, args=(r, store)) for r in range(world)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        _uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
    if errors:
        return ("error", f"{type(errors[0]).__name__}: {errors[0]}")
    return ("ok", results)


def grid():
    out = {}
    for backend in ("cpu", "reference", "ascend", "ft78ne", None):
        for dn, dtype in DTYPES.items():
            for reduction in ("none", "mean", "sum"):
                for on, opts in OPTIONS.items():
                    out[(backend, dn, reduction, on)] = one(backend, dtype, reduction, opts)
                out[(backend, dn, reduction, "x_only")] = one(backend, dtype, reduction, {}, (True, False, False))
                out[(backend, dn, reduction, "w_only_bias")] = one(backend, dtype, reduction, {"bias": True},
                                                                   (False, True, True))
                out[(backend, dn, reduction, "no_grad")] = one(backend, dtype, reduction, {"label_smoothing": 0.1},
                                                               (False, False, False))
    # a process group of 2 ranks (threads)
    for backend in ("cpu", "reference", "ascend", "ft78ne"):
        for dn in ("f32", "bf16", "f64"):
            for reduction in ("none", "mean", "sum"):
                for on in ("plain", "cw_ls_chunks", "acc", "ignore2_chunks", "ls_cw_bias", "softcap"):
                    def fn(rank, group, backend=backend, dn=dn, reduction=reduction, on=on):
                        return one(backend, DTYPES[dn], reduction, OPTIONS[on], group=group,
                                   w_override=lambda w, g: xt.shard_vocab(w, g).contiguous())
                    out[("pg2", backend, dn, reduction, on)] = run_ranks(2, fn)
    # the custom op directly, non-native (as tests/torch/test_vocab_parallel.py calls it)
    from xloss.torch.flce_passes import Params
    for backend in ("cpu", "reference"):
        for dn in ("f32", "bf16"):
            for reduction in ("none", "sum"):
                x, w, _, _, t, up = case(3, dtype=DTYPES[dn])
                p = Params(reduction, -100, 0.0, 0.0, 0.0, 4, 1 << 20, 0, w.shape[0], None, False, None, False, False)
                args = (x, w, None, t, None, *p, True, True, False, backend)

                def op(args=args, up=up, reduction=reduction):
                    o = torch.ops.xloss.fused_linear_cross_entropy(*args)
                    res = [blob(a) for a in o]
                    if reduction == "none":
                        bw = torch.ops.xloss.fused_linear_cross_entropy_backward(
                            up.float(), *args[:5], o[3], o[4], o[8], o[9], None, None, None, *args[5:])
                        res += [blob(a) for a in bw]
                    return res

                out[("op", backend, dn, reduction)] = attempt(op)
    # forward mode
    from torch.func import jvp
    for backend in ("cpu", "reference"):
        for dn in ("f32", "f64", "bf16"):
            for reduction in ("none", "mean", "sum"):
                x, w, b, _, t, _ = case(4, dtype=DTYPES[dn])
                gen = torch.Generator().manual_seed(6)
                tx = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
                tw = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype)

                def fj(x=x, w=w, t=t, tx=tx, tw=tw, reduction=reduction, backend=backend):
                    r = jvp(lambda a, c: xt.fused_linear_cross_entropy(a, c, t, reduction=reduction, backend=backend),
                            (x, w), (tx, tw if reduction != "none" else torch.zeros_like(tw)))
                    return [blob(a) for a in r]

                out[("jvp", backend, dn, reduction)] = attempt(fj)
    # forward mode w.r.t. input only, and torch.func.grad (its first-order guard)
    from torch.func import grad as fgrad
    for backend in ("cpu", "reference"):
        for dn in ("f32", "bf16"):
            for reduction in ("none", "mean"):
                x, w, b, _, t, up = case(7, dtype=DTYPES[dn])
                gen = torch.Generator().manual_seed(8)
                tx = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)

                def fx(x=x, w=w, t=t, tx=tx, reduction=reduction, backend=backend):
                    r = jvp(lambda a: xt.fused_linear_cross_entropy(a, w, t, reduction=reduction, backend=backend),
                            (x,), (tx,))
                    return [blob(a) for a in r]

                def fg(x=x, w=w, t=t, backend=backend):
                    return [blob(a) for a in fgrad(lambda a, c: xt.fused_linear_cross_entropy(
                        a, c, t, backend=backend, reduction="sum"), argnums=(0, 1))(x, w)]

                out[("jvp_x", backend, dn, reduction)] = attempt(fx)
                out[("func_grad", backend, dn, reduction)] = attempt(fg)
    # autocast
    for backend in ("cpu", "reference"):
        for cast in (torch.bfloat16, torch.float16):
            x, w, b, _, t, _ = case(9)

            def ac(x=x, w=w, b=b, t=t, cast=cast, backend=backend):
                xr, wr, br = (a.clone().requires_grad_() for a in (x, w, b))
                with torch.autocast("cpu", dtype=cast):
                    loss = xt.fused_linear_cross_entropy(xr, wr, t, br, backend=backend)
                loss.backward()
                return [blob(a) for a in (loss, xr.grad, wr.grad, br.grad)]

            out[("autocast", backend, str(cast))] = attempt(ac)
    # the backward op given precomputed gradients (as under torch.compile)
    for native, dn in ((True, "bf16"), (True, "f32"), (False, "f32")):
        x, w, _, _, t, _ = case(10, dtype=DTYPES[dn])
        p = Params("sum", -100, 0.0, 0.0, 0.0, 4, 1 << 20, 0, w.shape[0], None, native, None, False, False)
        args = (x, w, None, t, None, *p, True, True, False, "cpu")
        for g in (1.7, 0.5):
            def opb(args=args, g=g):
                o = torch.ops.xloss.fused_linear_cross_entropy(*args)
                bw = torch.ops.xloss.fused_linear_cross_entropy_backward(
                    torch.tensor(g, dtype=o[0].dtype), *args[:5], o[3], o[4], o[8], o[9], o[5], o[6], o[7], *args[5:])
                return [blob(a) for a in (*o, *bw)]

            out[("op_pre", native, dn, g)] = attempt(opb)
    # errors
    x, w, b, cw, t, _ = case(5)
    bad = {
        "ls1": dict(label_smoothing=1.0), "softcap_neg": dict(softcap=-1.0), "z_neg": dict(lse_square_scale=-1.0),
        "accum_bad": dict(accum_dtype="x"), "ref_softcap": dict(softcap=1.0, backend="reference"),
        "red_bad": dict(reduction="avg"), "cw_shape": dict(class_weight=torch.ones(5)),
        "chunk_bad": dict(chunk_size=0), "vchunk_bad": dict(vocab_chunk_size=-1),
        "target_range": dict(target=torch.full((13,), 99)), "target_float": dict(target=torch.zeros(13)),
        "target_shape": dict(target=torch.zeros(12, dtype=torch.long)), "w_shape": dict(weight=torch.zeros(3, 4)),
        "w_dtype": dict(weight=w.double()), "b_shape": dict(bias=torch.zeros(3)), "ii_bad": dict(ignore_index=1.5),
        "backend_bad": dict(backend="nope"), "cw_grad": dict(class_weight=cw.float().requires_grad_()),
        "ref_target_range": dict(target=torch.full((13,), 99), backend="reference"),
        "ascend_f64": dict(backend="ascend", weight=w.double(), input=x.double()),
        "input_0d": dict(input=torch.tensor(1.0)), "cw_2d": dict(class_weight=torch.ones(37, 1)),
        "no_rows": dict(weight=torch.zeros(0, 8)),
        "no_rows_no_tokens": dict(weight=torch.zeros(0, 8), input=torch.zeros(0, 8), target=torch.zeros(0).long()),
    }
    for name, kw in bad.items():
        kw = dict(kw)
        args = (kw.pop("input", x), kw.pop("weight", w), kw.pop("target", t), kw.pop("bias", None))
        out[("err", name)] = attempt(lambda args=args, kw=kw: blob(xt.fused_linear_cross_entropy(*args, **kw)))
    # the Module and double backward
    m = xt.FusedLinearCrossEntropyLoss(reduction="sum", softcap=2.0, lse_square_scale=1e-3)
    out[("module_repr",)] = ("ok", repr(m))
    out[("module",)] = attempt(lambda: blob(m(x, w, t)))

    def double():
        xr = x.clone().requires_grad_()
        loss = xt.fused_linear_cross_entropy(xr, w, t)
        (g,) = torch.autograd.grad(loss, xr, create_graph=True)
        return blob(g)

    out[("double",)] = attempt(double)
    return out


def main():
    mode, path = sys.argv[1], sys.argv[2]
    got = grid()
    if mode == "save":
        with open(path, "wb") as f:
            pickle.dump(got, f)
        print(f"saved {len(got)} configurations, {sum(r[0] == 'error' for r in got.values())} errors")
        return
    with open(path, "rb") as f:
        want = pickle.load(f)
    diff = [k for k in sorted(set(want) | set(got), key=repr) if want.get(k) != got.get(k)]
    for k in diff:
        print("DIFF", k, str(want.get(k))[:300], "|", str(got.get(k))[:300])
    print(f"compared {len(set(want) | set(got))} configurations: {len(diff)} differ")
    sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
