"""Header layout as CANN's, from C and C++: the C example builds as C and as C++, the ACLNN_* codes
come from aclnn/opdev/op_errno.h (not aclnn_base.h), the ACL_ERROR_RT_* codes are #defines usable
in case labels, aclnnInit/aclnnFinalize exist; and the three samples written in the style of
CANN's operator documentation build against xloss's headers and compute, on the emulator, what
the float64 reference computes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import ml_dtypes  # noqa: F401  (bfloat16 registered for the reference)
import numpy as np
import pytest

from xloss import reference as ref
from xloss.backends import ascend_aclnn

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "examples" / "ascend_samples"
INCLUDE = ROOT / "backends" / "ascend_aclnn" / "include"
LIB = Path(ascend_aclnn.emulator_library_path()).parent
LINK = [f"-L{LIB}", "-lxloss_aclnn", "-lxloss_aclrt", f"-Wl,-rpath,{LIB}", "-lm"]


def _build(src: Path, out: Path, cxx: bool) -> Path:
    cmd = (["g++", "-std=c++17"] if cxx else ["gcc", "-std=c11"]) + ["-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}"]
    res = subprocess.run(cmd + ["-x", "c++" if cxx else "c", str(src), "-o", str(out), "-x", "none", *LINK],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


def _run(exe: Path) -> dict:
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    out: dict = {}
    for name, i, v in re.findall(r"^(\w+)\[(\d+)\] is: (\S+)$", res.stdout, re.M):
        out.setdefault(name, {})[int(i)] = float(v)
    return {k: np.array([d[i] for i in range(len(d))]) for k, d in out.items()}


@pytest.mark.parametrize("cxx", [False, True], ids=["C", "C++"])
def test_c_example_builds_as_c_and_cpp(tmp_path, cxx):
    _build(ROOT / "examples" / "ascend_nll_loss_backward.c", tmp_path / "example", cxx)


@pytest.mark.parametrize("cxx", [False, True], ids=["C", "C++"])
def test_status_codes_where_cann_keeps_them(tmp_path, cxx):
    """op_errno.h holds the ACLNN codes (aclnn_base.h alone does not); RT codes work in case labels and #if."""
    src = tmp_path / "codes.c"
    src.write_text('''#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#ifdef ACLNN_SUCCESS
#error "CANN's aclnn_base.h does not define the ACLNN codes"
#endif
#include "aclnn/opdev/op_errno.h"
#if ACL_ERROR_RT_MEMORY_ALLOCATION != 207001 || ACLNN_ERR_INNER != 561000
#error "wrong values"
#endif
static int kind(int st) {
    switch (st) {
    case ACLNN_SUCCESS: return 0;
    case ACLNN_ERR_PARAM_NULLPTR: case ACLNN_ERR_PARAM_INVALID: return 1;
    case ACL_ERROR_RT_MEMORY_ALLOCATION: case ACL_ERROR_RT_CONTEXT_NULL: return 2;
    default: return 3;
    }
}
int main(void) {
    if (aclnnInit(NULL) != ACLNN_SUCCESS) return 10;
    int k = kind(aclInit(NULL)) + kind(ACL_ERROR_RT_MEMORY_ALLOCATION);
    if (aclnnFinalize() != ACLNN_SUCCESS) return 11;
    return k == 2 ? 0 : 12;
}
''')
    subprocess.run([str(_build(src, tmp_path / "codes", cxx))], check=True, timeout=30)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    d = tmp_path_factory.mktemp("samples")
    return {p.stem: _run(_build(p, d / p.stem, True)) for p in sorted(SAMPLES.glob("*.cpp"))}


def test_nll_loss_backward_sample(samples):
    self_ = np.array([-1.2, -0.3, -2.5, -0.9, -0.1, -3.0, -1.1, -0.7, -0.4, -0.4, -0.4, -0.4], np.float32).reshape(3, 4)
    want = ref.nll_loss_grad(2.0, self_, np.array([1, 3, -100]), weight=np.array([0.5, 1.5, 1.0, 2.0], np.float32),
                             reduction="mean", total_weight=3.5)
    np.testing.assert_allclose(samples["aclnn_nll_loss_backward_sample"]["result"], want.reshape(-1), rtol=1e-6)


def test_binary_cross_entropy_backward_sample(samples):
    x = np.array([0.1, 0.5, 0.9, 0.25, 0.999, 1e-6], np.float32).reshape(2, 3)
    y = np.array([0.0, 1.0, 1.0, 0.5, 0.0, 0.0], np.float32).reshape(2, 3)
    want = ref.bce_grad(x, y, 0.75, weight=np.array([1.0, 0.5, 2.0], np.float32), reduction="mean")
    np.testing.assert_allclose(samples["aclnn_binary_cross_entropy_backward_sample"]["result"], want.reshape(-1),
                               rtol=2e-6)


def test_fused_linear_cross_entropy_loss_grad_sample(samples):
    bt, h, v = 4, 8, 16
    x = (0.125 * (np.arange(bt * h) % 7) - 0.375).astype(np.float16).reshape(bt, h)
    w = (0.0625 * ((3 * np.arange(v * h)) % 9) - 0.25).astype(np.float16).reshape(v, h)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    lmax = logits.max(axis=1)
    sexp = np.exp(logits - lmax[:, None]).sum(axis=1)
    ig, wg = ref.flce_grad(np.array([0.25, -0.5, 1.0, 0.125]), x, w, np.array([0, 0, 1, 0], bool),
                           np.array([3, 15, 0, 7]), logits_max=lmax, sum_exp_logits=sexp)
    got = samples["aclnn_fused_linear_cross_entropy_loss_grad_sample"]
    # G and the results are float16 (G rounded once, float32 accumulation): a few float16 ulps
    np.testing.assert_allclose(got["inputGradOut"], ig.reshape(-1), rtol=4e-3, atol=2e-4)
    np.testing.assert_allclose(got["weightGradOut"], wg.reshape(-1), rtol=4e-3, atol=2e-4)
    assert np.abs(got["weightGradOut"]).max() > 0.01  # not all zero
