"""xloss.torch is optional: ``import xloss`` does not import torch; the subpackage exports its API."""

import subprocess
import sys

import xloss.torch as xt


def test_import_xloss_does_not_import_torch(tmp_path):
    code = ("import sys, xloss; assert 'torch' not in sys.modules and 'xloss.torch' not in sys.modules, "
            "sorted(m for m in sys.modules if 'torch' in m)")
    # cwd: not the repository root, whose xloss/ folder would shadow the installed package
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_public_names():
    for name in ("sigmoid_focal_loss", "SigmoidFocalLoss", "binary_cross_entropy", "BCELoss", "nll_loss", "NLLLoss",
                 "fused_linear_cross_entropy", "FusedLinearCrossEntropyLoss", "default_chunk_size", "shard_vocab",
                 "vocab_shard_range"):
        assert name in xt.__all__ and callable(getattr(xt, name))


def test_peak_memory_counts_known_allocations():
    import numpy as np
    import torch
    from peak_memory import track_peak_memory

    with track_peak_memory() as peak:
        a = torch.empty(1000, 1000, dtype=torch.float32)  # 4 MB
        b = torch.empty(500, 1000, dtype=torch.float32)  # +2 MB: the peak
        del a
        c = torch.empty(200, 1000, dtype=torch.float32)  # freed 4 MB, so no new peak
        n = np.ones((100, 1000))  # 0.8 MB through NumPy
        del b, c, n
    assert peak.torch_bytes == 6_000_000
    assert 800_000 <= peak.numpy_bytes < 810_000
    assert peak.bytes == peak.torch_bytes + peak.numpy_bytes
