"""Replay files are data with limits (issue 23): only regular files of bounded size are read, every
case is checked (structure, arguments, memory) before any is built, cases are built one at a time,
and anything malformed or invalid is one CaseFileError line with exit status 2, never a backend
FAIL or a traceback; labels reach the terminal with their control characters escaped."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xloss import cli
from xloss.conformance import DESCRIPTORS, casefile, large
from xloss.conformance.casefile import CaseFileError, case_to_json, load_cases


def _main(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_refusal(capsys, path, message):
    with pytest.raises(CaseFileError, match=message):
        load_cases(path)
    code, out, err = _main(capsys, "check", "--replay", str(path), "--backend", "reference")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (out, err)
    assert "FAIL" not in out


def _file(tmp_path, cases, name="case.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"format": casefile.FORMAT, "backend": "reference", "cases": cases}))
    return path


def _bce_case(**kwargs):
    case = DESCRIPTORS["bce_grad"].edge_cases("float32", "clamp")[5]
    obj = case_to_json(case)
    obj["kwargs"].update(kwargs)
    return obj


def test_a_symlink_to_a_device_is_refused(tmp_path, capsys):
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    _one_line_refusal(capsys, link, "not a regular file")


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "xloss.cli", "check", "--replay", str(fifo), "--backend",
                          "reference"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("label, text, message", [
    ("deep nesting", '{"format": "xloss-cases/1", "cases": ' + "[" * 200000 + "]" * 200000 + "}", "nested too deeply"),
    ("5000-digit integer", '{"format": "xloss-cases/1", "cases": [' + "9" * 5000 + "]}", "not a case file"),
])
def test_malformed_json_is_one_line(tmp_path, capsys, label, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    _one_line_refusal(capsys, path, message)


@pytest.mark.parametrize("label, kwargs, message", [
    ("bad reduction", {"reduction": "total"}, "reduction must be one of"),
    ("NaN grad", {"grad": {"float": "nan"}}, "grad must be finite"),
    ("huge integer eps", {"eps": 10**4000}, "invalid arguments for bce_grad"),
])
def test_invalid_arguments_are_a_case_file_error_not_a_fail(tmp_path, capsys, label, kwargs, message):
    _one_line_refusal(capsys, _file(tmp_path, [_bce_case(**kwargs)]), message)


def test_every_case_is_sized_before_any_is_built(tmp_path, capsys, monkeypatch):
    rung = large.rungs("bce_grad")[-1]  # 2^24+ elements: about 200 MB per case in float32
    obj = {"kernel": "bce_grad", "mode": "clamp", "dtype": "float32", "label": "", "ladder": {"rung": rung, "seed": 0}}
    path = _file(tmp_path, [dict(obj, ladder={"rung": rung, "seed": s}) for s in range(200)])
    built = []
    real_build = large.build
    monkeypatch.setattr(large, "build", lambda *a, **k: built.append(a) or real_build(*a, **k))
    cases, _ = load_cases(path)
    assert len(cases) == 200 and not built  # nothing built by loading
    # a case that cannot fit in memory is refused, naming it, before anything is built or run
    monkeypatch.setattr(casefile, "available_bytes", lambda: 500 << 20)
    small = {"kernel": "bce_grad", "mode": "clamp", "dtype": "float32", "label": "",
             "ladder": {"rung": large.rungs("bce_grad")[0], "seed": 0}}
    path = _file(tmp_path, [small, obj], "two.json")
    with pytest.raises(CaseFileError, match=r"case 1: checking it needs about \d+ bytes of memory"):
        load_cases(path)
    code, out, err = _main(capsys, "check", "--replay", str(path), "--backend", "reference")
    assert code == 2 and "case 1: checking it needs" in err and "replaying" not in out
    assert not built


def test_cases_are_built_one_at_a_time(tmp_path):
    rung = large.rungs("bce_grad")[0]
    obj = {"kernel": "bce_grad", "mode": "clamp", "dtype": "float32", "label": "", "ladder": {"rung": rung, "seed": 1}}
    cases, _ = load_cases(_file(tmp_path, [obj, _bce_case()]))
    first = cases.build(0)
    np.testing.assert_array_equal(first.kwargs["x"], large.build("bce_grad", "float32", "clamp", rung, 1).kwargs["x"])
    assert cases[1].kwargs["x"].dtype == np.float32 and cases.kernel(1) == "bce_grad"


def test_labels_are_printed_with_control_characters_escaped(tmp_path, capsys):
    obj = _bce_case()
    obj["label"] = "evil \x1b[2J\x1b]0;title\x07 label"
    code, out, err = _main(capsys, "check", "--replay", str(_file(tmp_path, [obj])), "--backend", "reference")
    assert code == 0, out + err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "evil \\x1b[2J\\x1b]0;title\\x07 label" in out
