"""`xloss bench` refuses bad arguments and unusable output paths in one line before measuring
anything, and a run cut short keeps what it measured in its JSON."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from xloss import bench, cli
from xloss.bench import outputs
from xloss.errors import XLossValueError

TINY = ["bench", "--kernels", "bce", "--sizes", "2k", "--backends", "cpu", "--no-compile", "--no-progress"]


@pytest.mark.parametrize("args, match", [
    (["--max-call", "nan"], "--max-call takes a positive, finite number of seconds; got nan"),
    (["--max-call", "-1"], "--max-call takes a positive, finite number of seconds; got -1.0"),
    (["--max-call", "inf"], "--max-call takes a positive, finite number"),
    (["--budget", "0"], "--budget takes a positive, finite number of seconds; got 0.0"),
    (["--repeat", "0"], "--repeat takes a positive number of rounds"),
    (["--threshold", "-0.1"], "--threshold takes a fraction at least 0"),
    (["--sizes", "999999999G"], "size '999999999G' needs about"),
    (["--sizes", "lots"], "'lots' is not a size"),
    (["--backends", "cpuu"], "no backend named 'cpuu'"),
    (["--json", "/nonexistent/dir/r.json"], "--json: folder /nonexistent/dir does not exist"),
])
def test_bad_arguments_fail_up_front_in_one_line(args, match, capsys):
    assert cli.main(TINY + args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert match in err and "\n" not in err and "Traceback" not in err
    assert captured.out == ""  # nothing was measured


def test_output_paths_are_checked_before_the_run(tmp_path, capsys):
    assert cli.main(TINY + ["--csv", str(tmp_path)]) == 2
    assert f"--csv: {tmp_path} is a directory" in capsys.readouterr().err
    if os.path.exists("/dev/full"):
        assert cli.main(TINY + ["--json", "/dev/full"]) == 2
        assert "--json: cannot write /dev/full: No space left on device" in capsys.readouterr().err
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        if not os.access(readonly, os.W_OK):  # (root may write anyway)
            assert cli.main(TINY + ["--plot", str(readonly / "p.png")]) == 2
            assert "--plot: cannot write in" in capsys.readouterr().err
    finally:
        readonly.chmod(0o700)


def test_outputs_write_whole_files(tmp_path):
    p = outputs.check(tmp_path / "r.json", "--json")
    outputs.write_text(p, "first")
    outputs.write_text(p, "second")
    assert p.read_text() == "second"
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would have made it, not mkstemp's 0600
    p.chmod(0o640)
    outputs.write_text(p, "third")
    assert p.stat().st_mode & 0o777 == 0o640
    with pytest.raises(XLossValueError, match="is a directory"):
        outputs.check(tmp_path, "--csv")


def test_interrupted_run_returns_what_it_measured(monkeypatch):
    """Ctrl-C during the second cell: the result, and the last write of it, hold the first cell."""
    real = bench._kernel_cell
    seen = []

    def second_cell_interrupted(kernel, *args):
        if kernel == "nll_loss_grad":
            raise KeyboardInterrupt
        return real(kernel, *args)

    monkeypatch.setattr(bench, "_kernel_cell", second_cell_interrupted)
    monkeypatch.setattr(bench.machine, "copy_bandwidth", lambda: 1e10)
    monkeypatch.setattr(bench.machine, "gemm_peak", lambda torch, dtype: (1e11, "torch"))
    cfg = bench.BenchConfig(kernels=["bce", "nll"], backends=["cpu"], sizes=["2k", "16x10"], repeat=2,
                            compile=False)
    result = bench.run(cfg, progress=False, on_cell=lambda r: seen.append(json.loads(json.dumps(r, default=str))))
    assert result["interrupted"] and [c["kernel"] for c in result["cells"]] == ["bce_grad"]
    assert seen[-1]["interrupted"] and len(seen[-1]["cells"]) == 1


def test_a_failing_cell_is_recorded_and_the_run_goes_on(monkeypatch):
    real = bench._kernel_cell

    def bce_fails(kernel, *args):
        if kernel == "bce_grad":
            raise MemoryError("cannot allocate")
        return real(kernel, *args)

    monkeypatch.setattr(bench, "_kernel_cell", bce_fails)
    monkeypatch.setattr(bench.machine, "copy_bandwidth", lambda: 1e10)
    monkeypatch.setattr(bench.machine, "gemm_peak", lambda torch, dtype: (1e11, "torch"))
    result = bench.run(bench.BenchConfig(kernels=["bce", "nll"], backends=["cpu"], sizes=["2k", "16x10"], repeat=2,
                                         compile=False), progress=False)
    assert result["cells"][0]["error"] == "MemoryError: cannot allocate"
    assert result["cells"][1]["results"] and not result["interrupted"]


@pytest.mark.slow  # a fresh interpreter importing torch, then a cell's budget: ~10 s quiet, a minute at load 15
def test_sigint_leaves_a_json_with_the_cells_measured(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "xloss.cli", "bench", "--kernels", "bce", "lm_step", "--sizes", "2k", "64x16x100",
           "--backends", "cpu", "--no-compile", "--no-progress", "--budget", "40", "--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and json.loads(out.read_text())["cells"]:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    saved = json.loads(out.read_text())
    assert saved["interrupted"] and saved["cells"][0]["kernel"] == "bce_grad" and saved["cells"][0]["results"]
    assert "INTERRUPTED" in stdout and "bce_grad grad, size 2k" in stdout
