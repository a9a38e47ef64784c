"""The house rules, checked with the whole suite: ruff over the Python (rules in pyproject.toml) and
clang-format over every tracked C/C++ file (/.clang-format). Both tools come with the test extra."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name):
    # the test extra's console scripts sit beside this interpreter, on PATH or not (an unactivated venv)
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: it is part of the test extra (pip install '.[test]')")
    return path


def _tracked(*patterns):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def test_python_follows_the_ruff_rules():
    res = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]


def test_c_sources_follow_clang_format():
    files = _tracked("*.c", "*.h", "*.cpp")
    assert len(files) > 40  # the emulators, ports, examples and C tests
    res = subprocess.run([_tool("clang-format"), "--dry-run", "--Werror", *files], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode == 0, ("run: git ls-files '*.c' '*.h' '*.cpp' | xargs clang-format -i\n"
                                 + res.stderr[-6000:])
