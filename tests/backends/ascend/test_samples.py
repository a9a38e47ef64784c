"""Header layout as CANN's, from C and C++: the C example builds as C and as C++, the ACLNN_* codes
come from aclnn/opdev/op_errno.h (not aclnn_base.h), the ACL_ERROR_RT_* codes are #defines usable
in case labels, aclnnInit/aclnnFinalize exist, aclInit/aclFinalize/aclGetRecentErrMsg come from
acl/acl_rt.h only, aclnnop/aclnn_util.h exists; op::fp16_t (ours) rounds as IEEE binary16; the five
samples written in the style of CANN's operator documentation build with CANN's include flags
(include, include/aclnnop, include/aclnn: ops-nn build.sh's run_example) and compute, on the
emulator, what the float64 reference computes; and, given an ops-nn checkout
(XLOSS_OPS_NN_DIR), the vendor's own samples for those five and six of issue #30's operators build and
run to success, and its SoftmaxCrossEntropyWithLogits sample, whose output buffers are half their tensors, is
refused as published and, with its buffers sized as its tensors, prints what CANN computes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import ml_dtypes  # noqa: F401  (bfloat16 registered for the reference)
import numpy as np
import pytest

from xloss import reference as ref
from xloss.backends import ascend_aclnn
from xloss.reference import cross_entropy_loss as ref_ce

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "examples" / "ascend_samples"
INCLUDE = ROOT / "backends" / "ascend_aclnn" / "include"
LIB = Path(ascend_aclnn.emulator_library_path()).parent
LINK = [f"-L{LIB}", "-lxloss_aclnn", "-lxloss_aclrt", f"-Wl,-rpath,{LIB}", "-lm"]
#: ops-nn build.sh (run_example): g++ FILE -I ${ASCEND_HOME_PATH}/include -I .../include/aclnnop -I .../include/aclnn
CANN_FLAGS = [f"-I{INCLUDE}", f"-I{INCLUDE / 'aclnnop'}", f"-I{INCLUDE / 'aclnn'}"]
#: the vendor's samples for the five operators, in an ops-nn checkout
VENDOR_SAMPLES = ("loss/nll_loss_grad/examples/test_aclnn_nll_loss_grad.cpp",
                  "loss/binary_cross_entropy_grad/examples/test_aclnn_binary_cross_entropy_backward.cpp",
                  "matmul/fused_linear_cross_entropy_loss_grad/examples/test_aclnn_fused_linear_cross_entropy_loss_grad.cpp",
                  "matmul/fused_linear_online_max_sum/examples/test_aclnn_fused_linear_online_max_sum.cpp",
                  "loss/fused_cross_entropy_loss_with_max_sum/examples/test_aclnn_fused_cross_entropy_loss_with_max_sum.cpp",
                  # issue #30's operators whose samples are consistent (the SoftmaxCrossEntropyWithLogits one: below)
                  "loss/nll_loss/examples/test_aclnn_nll_loss.cpp",
                  "loss/nll_loss_grad/examples/test_aclnn_nll_loss_grad_2d.cpp",
                  "loss/binary_cross_entropy/examples/test_aclnn_binary_cross_entropy.cpp",
                  "loss/sigmoid_cross_entropy_with_logits_v2/examples/test_aclnn_sigmoid_cross_entropy_with_logits_v2.cpp",
                  "loss/sigmoid_cross_entropy_with_logits_grad_v2/examples/"
                  "test_aclnn_sigmoid_cross_entropy_with_logits_grad_v2.cpp",
                  "loss/cross_entropy_loss/examples/test_aclnn_cross_entropy_loss.cpp")
needs_ops_nn = pytest.mark.skipif(not os.environ.get("XLOSS_OPS_NN_DIR"),
                                  reason="XLOSS_OPS_NN_DIR (an ops-nn checkout) not set")


def _compile(src: Path, out: Path, cxx: bool, flags=(f"-I{INCLUDE}",), werror=True):
    cmd = (["g++", "-std=c++17"] if cxx else ["gcc", "-std=c11"]) + ["-Wall", "-Wextra", *(["-Werror"] * werror),
                                                                     *flags]
    return subprocess.run(cmd + ["-x", "c++" if cxx else "c", str(src), "-o", str(out), "-x", "none", *LINK],
                          capture_output=True, text=True)


def _build(src: Path, out: Path, cxx: bool, flags=(f"-I{INCLUDE}",), werror=True) -> Path:
    res = _compile(src, out, cxx, flags, werror)
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


@pytest.mark.parametrize("cxx", [False, True], ids=["C", "C++"])
def test_runtime_init_and_messages_come_from_acl_rt_h(tmp_path, cxx):
    """runtime include/external/acl/acl_rt.h declares aclInit, aclFinalize and aclGetRecentErrMsg."""
    src = tmp_path / "rt.c"
    src.write_text('#include "acl/acl_rt.h"\n'
                   "int main(void) { if (aclInit(NULL)) return 1;\n"
                   "(void)aclGetRecentErrMsg(); return aclFinalize(); }\n")
    subprocess.run([str(_build(src, tmp_path / "rt", cxx))], check=True, timeout=30)


@pytest.mark.parametrize("header", ["aclnn/acl_meta.h", "aclnn/aclnn_base.h", "aclnnop/aclnn_nll_loss_backward.h",
                                    "acl/acl_base.h"])
def test_recent_error_message_is_not_declared_by_other_headers(tmp_path, header):
    """aclGetRecentErrMsg is acl_rt.h's (runtime acl_rt.h); CANN's aclnn headers include acl_base.h only."""
    src = tmp_path / "msg.cpp"
    src.write_text(f'#include "{header}"\nint main() {{ return aclGetRecentErrMsg() != nullptr; }}\n')
    res = _compile(src, tmp_path / "msg", True)
    assert res.returncode != 0 and "aclGetRecentErrMsg" in res.stderr


def test_aclnn_util_h(tmp_path):
    """opbase include/aclnnop/aclnn_util.h: the ACLNN_API export macro, at CANN's path."""
    src = tmp_path / "util.c"
    src.write_text('#include "aclnnop/aclnn_util.h"\nACLNN_API int f(void);\nint f(void) { return 0; }\n'
                   "int main(void) { return f(); }\n")
    subprocess.run([str(_build(src, tmp_path / "util", False))], check=True, timeout=30)


def test_fp16_t_rounds_as_binary16(tmp_path):
    """aclnn/opdev/fp16_t.h (ours, at opbase's include path): op::fp16_t from a double rounds to nearest even as
    IEEE binary16 (NumPy's float16) and converts back to float exactly; a uint16_t is the raw bits, as CANN's."""
    values = np.concatenate([np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 2.0**-24, 2.0**-25,
                                       3 * 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-25, np.inf, -np.inf, 1 / 3]),
                             np.random.default_rng(0).normal(size=400) * np.logspace(-9, 6, 400)])
    src = tmp_path / "fp16.cpp"
    src.write_text('#include <cstdio>\n#include "aclnn/opdev/fp16_t.h"\n'
                   "int main() { double v; while (std::scanf(\"%lf\", &v) == 1) { op::fp16_t h(v);"
                   " std::printf(\"%u %.9g\\n\", (unsigned)h.val, static_cast<double>(static_cast<float>(h))); }"
                   " op::fp16_t raw(static_cast<uint16_t>(0x3c00));"
                   " return static_cast<float>(raw) == 1.0f ? 0 : 1; }\n")
    exe = _build(src, tmp_path / "fp16", True)
    res = subprocess.run([str(exe)], input="\n".join(repr(float(v)) for v in values), capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr
    bits, back = zip(*(line.split() for line in res.stdout.splitlines()))
    with np.errstate(over="ignore"):  # (float32 first, as the constructor converts; 1e6 and up: inf)
        want = values.astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(np.array(bits, np.uint16), want.view(np.uint16))
    back = np.array(back, np.float64).astype(np.float32)  # (%.9g is exact for float32)
    np.testing.assert_array_equal(back, want.astype(np.float32))


def test_build_script_builds_the_c_example_as_cpp(tmp_path):
    """The C example against CANN needs C++ (CANN's aclnn_base.h is C++-only): the build script's --cxx."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ascend_build_example", ROOT / "examples" / "ascend_build_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cmd = mod.build_command(tmp_path / "ex", cxx=True)
    assert cmd[0].endswith("g++") and cmd[1:4] == ["-std=c++17", "-x", "c++"]
    assert "C++ only" in (ROOT / "examples" / "ascend_nll_loss_backward.c").read_text()[:800]
    subprocess.run(cmd, check=True)
    assert subprocess.run([str(tmp_path / "ex")], capture_output=True, timeout=120).returncode == 0


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    d = tmp_path_factory.mktemp("samples")
    return {p.stem: _run(_build(p, d / p.stem, True, CANN_FLAGS)) for p in sorted(SAMPLES.glob("*.cpp"))}


def test_every_operator_has_a_sample(samples):
    assert len(samples) == 5


@needs_ops_nn
@pytest.mark.parametrize("rel", VENDOR_SAMPLES, ids=lambda r: Path(r).stem)
def test_vendor_samples_build_and_run(tmp_path, rel):
    """ops-nn's own samples, unchanged, with its run_example flags, on the emulator: exit status 0 (the samples
    return the first failing status) and no failure line. They are not stored here (CANN's licence)."""
    src = Path(os.environ["XLOSS_OPS_NN_DIR"]) / rel
    exe = _build(src, tmp_path / src.stem, True, CANN_FLAGS, werror=False)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "failed" not in res.stdout, res.stdout[-2000:] + res.stderr


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


def test_fused_linear_online_max_sum_sample(samples):
    """ours, in the vendor sample's style: FLOAT16 host data in op::fp16_t, one shard [6, 12) of 6 rows."""
    got = samples["aclnn_fused_linear_online_max_sum_sample"]
    x = (0.25 * (np.arange(20) % 5) - 0.5).astype(np.float16).reshape(5, 4)
    w = (0.125 * ((3 * np.arange(24)) % 7) - 0.25).astype(np.float16).reshape(6, 4)
    t = np.array([7, 2, 11, 6, 12])
    want = ref.flce.fused_linear_online_max_sum(x.astype(np.float64), w.astype(np.float64), t, 6, 12)
    np.testing.assert_allclose(got["logitsMaxLocalOut"], want.logits_max_local, rtol=1e-6)
    np.testing.assert_allclose(got["sumExpLogitsLocalOut"], want.sum_exp_logits_local, rtol=1e-6)
    np.testing.assert_allclose(got["predictedLogitsLocalOut"], want.predicted_logits_local, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got["targetMaskOut"], want.target_mask)
    np.testing.assert_array_equal(got["maskedTargetOut"], want.masked_target)
    np.testing.assert_allclose(got["vocabParallelLogitsOutOptional"],
                               want.vocab_parallel_logits.astype(np.float16).reshape(-1), rtol=0, atol=0)


def test_fused_cross_entropy_loss_with_max_sum_sample(samples):
    """ours, in the vendor sample's style: non-NULL inputOptional/weightOptional (ignored, as the op does)."""
    got = samples["aclnn_fused_cross_entropy_loss_with_max_sum_sample"]
    m, se, p = np.array([1.5, 0.25, 2.0]), np.array([2.5, 4.0, 1.25]), np.array([-0.5, 0.0, -1.75])
    vpl = np.array([1.5, 0.5, -1.0, 0.0, 0.25, -0.25, 0.125, 0.0, 2.0, -2.0, 1.0, 0.5]).reshape(3, 4)
    loss, sm = ref.flce.fused_cross_entropy_loss_with_max_sum(m, se, p, vocab_parallel_logits=vpl)
    np.testing.assert_allclose(got["lossOut"], loss, rtol=1e-6)
    np.testing.assert_allclose(got["softMaxOutOptional"], sm.reshape(-1), rtol=1e-6)


#: ops-nn's aclnnSoftmaxCrossEntropyWithLogits sample. Its two outputs' device buffers are sized from int16 host
#: vectors (std::vector<int16_t>, the only such lines) while their tensors describe ACL_FLOAT: each buffer holds half
#: of its tensor (loss 32 of 64 bytes, backprop 128 of 256)
SCE_SAMPLE = "activation/softmax_cross_entropy_with_logits/examples/test_aclnn_softmax_cross_entropy_with_logits.cpp"
#: linked beside the sample, which prints only the status: the emulator's message for it, at exit
RECENT_MESSAGE = ('#include <cstdio>\n#include "acl/acl_rt.h"\n'
                  "__attribute__((destructor)) static void recent() {\n"
                  "    const char *m = aclGetRecentErrMsg();\n"
                  '    std::fprintf(stderr, "recent: %s\\n", m ? m : "");\n}\n')


def _sce_sample() -> str:
    return (Path(os.environ["XLOSS_OPS_NN_DIR"]) / SCE_SAMPLE).read_text()


@needs_ops_nn
def test_vendor_softmax_cross_entropy_sample_as_published_is_refused_for_its_short_output_buffers(tmp_path):
    """As published, unchanged: the emulator checks that every operand's storage lies in the block aclrtMalloc
    gave (ours: CANN's op_api cannot see allocations), so phase one refuses the loss tensor (64 bytes over a
    32-byte block) with 161002 and the sample returns that status. CANN itself would accept the call and write
    float32 results: aclrtMalloc pads a block to ALIGN_UP(size, 32) + 32 bytes (the aclrtMallocAlign32 page), so
    loss's 64 bytes fit its 64-byte block but backprop's 256 run 96 bytes past its 160."""
    src, hook = tmp_path / "sce.cpp", tmp_path / "recent.cpp"
    src.write_text(_sce_sample())
    hook.write_text(RECENT_MESSAGE)
    exe = tmp_path / "sce"
    res = subprocess.run(["g++", "-std=c++17", *CANN_FLAGS, "-x", "c++", str(src), str(hook), "-o", str(exe), "-x",
                          "none", *LINK], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 161002 % 256, res.stdout + res.stderr
    assert "aclnnSoftmaxCrossEntropyWithLogitsGetWorkspaceSize failed. ERROR: 161002" in res.stdout, res.stdout
    assert re.search(r"recent: aclnnSoftmaxCrossEntropyWithLogits: loss storage \(\S+, 64 bytes\) does not lie in "
                     r"live device memory", res.stderr), res.stderr


@needs_ops_nn
def test_vendor_softmax_cross_entropy_sample_prints_what_cann_computes(tmp_path):
    """The sample with its two int16 host vectors as float (their tensors' dtype; the one change, on exactly those
    two lines): what CANN would compute and print for the published one (above). Features all 1 and labels all 2
    over 4 classes: loss 8 ln 4 per row. The sample prints loss twice: its first 16 bytes as int8 (its
    PrintOutResult reads int8_t) and its 16 values as float."""
    text = _sce_sample()
    assert text.count("std::vector<int16_t>") == 2
    src = tmp_path / "sce_float_outputs.cpp"
    src.write_text(text.replace("std::vector<int16_t>", "std::vector<float>"))
    exe = _build(src, tmp_path / "sce_float_outputs", True, CANN_FLAGS, werror=False)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    loss, _ = ref_ce.softmax_cross_entropy_with_logits(np.ones((16, 4)), np.full((16, 4), 2.0))
    got = dict(re.findall(r"^result\[(\d+)\] is: (\S+)$", res.stdout, re.M))
    np.testing.assert_allclose([float(got[str(i)]) for i in range(16)], loss, rtol=0, atol=5e-7)  # %f: 6 places
    raw = dict(re.findall(r"^mean result\[(\d+)\] is: (-?\d+)$", res.stdout, re.M))
    np.testing.assert_array_equal([int(raw[str(i)]) for i in range(16)],
                                  loss.astype(np.float32).view(np.int8)[:16])
