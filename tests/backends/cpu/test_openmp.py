"""How the cpu backend sets up OpenMP: passive waiting by default, one runtime shared with torch.

Each case runs in a fresh interpreter (OpenMP reads its settings once, when it loads). Speed is
measured in benchmarks/train_step.py, never asserted here.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")


def run(code: str, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_changes)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_importing_xloss_first_makes_openmp_wait_passively():
    out = run("""
        import os, xloss
        assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
        print(xloss.backend("cpu").info()["openmp wait policy"])
    """)
    assert out.stdout.startswith("PASSIVE (set to PASSIVE by xloss")


@pytest.mark.parametrize("var, value", [("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "5000")])
def test_a_users_choice_is_kept(var, value):
    out = run("""
        import os, xloss
        print(os.environ.get("OMP_WAIT_POLICY"), xloss.backend("cpu").info()["openmp wait policy"])
    """, **{var: value})
    want = value if var == "OMP_WAIT_POLICY" else "None"
    assert out.stdout.startswith(f"{want} ") and "chosen by the environment" in out.stdout


def test_after_torch_loaded_openmp_xloss_leaves_the_policy_and_says_why():
    pytest.importorskip("torch")
    out = run("""
        import os, torch, xloss
        assert "OMP_WAIT_POLICY" not in os.environ
        print(xloss.backend("cpu").info()["openmp wait policy"])
    """)
    assert "loaded before xloss" in out.stdout


@pytest.mark.slow  # 77 s at load 15 (a cold kernel cache and the linker's full trace)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the dynamic linker's trace is Linux's")
def test_numbas_parallel_regions_run_on_torchs_openmp_runtime_whatever_the_import_order():
    """The first cpu kernel runs before torch is imported, yet Numba's OpenMP pool binds to the
    runtime torch ships (one pool for both; the linker's binding trace says which)."""
    pytest.importorskip("torch")
    from xloss.backends.cpu_onednn import threads

    torch_rt = threads.torch_openmp_runtime()
    if torch_rt is None or not os.path.basename(torch_rt).startswith("libgomp"):
        pytest.skip("this torch build ships no GNU OpenMP runtime")
    out = run("""
        import numpy as np, xloss
        x = np.linspace(-4, 4, 200_000, dtype=np.float32)
        xloss.focal_loss(x, (x > 0).astype(np.float32))
        import numba, torch
        assert numba.threading_layer() == "omp"
        torch.ones(1 << 22).exp_()
    """, LD_DEBUG="bindings")
    bound = {line.split(" to ")[1].split(" [")[0] for line in out.stderr.splitlines()
             if "omppool" in line.split(" to ")[0] and "`GOMP_parallel'" in line}
    assert bound == {torch_rt} or {os.path.realpath(p) for p in bound} == {os.path.realpath(torch_rt)}, bound
