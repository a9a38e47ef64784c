"""Case files are data, and CLI mistakes are one line with exit status 2 (issue 14)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from xloss import cli
from xloss.backends.ft78ne_shim import abi as ft78ne_abi
from xloss.conformance import DESCRIPTORS, large
from xloss.conformance.casefile import CaseFileError, case_to_json, load_cases, save_cases


def _case_file(tmp_path, **meta):
    case = DESCRIPTORS["bce_grad"].edge_cases("float32", "clamp")[5]
    return save_cases(tmp_path / "case.json", [case], **meta)


def _main(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("meta, message", [
    (dict(backend="subprocess:run", options={"args": "touch PWNED"}), "not a registered backend"),
    (dict(backend="os:system"), "not a registered backend"),
    (dict(backend="cpu", options={"args": "touch PWNED"}), "does not accept options args"),
    (dict(backend="cpu", options={"args": ["touch", "PWNED"]}), "must be a string, number or boolean"),
    (dict(backend="reference", options={"lib": "./libevil.so"}), "may not name a library"),
])
def test_a_case_file_never_names_code_to_run(tmp_path, capsys, meta, message):
    path = _case_file(tmp_path, **meta)
    code, out, err = _main(capsys, "check", "--replay", str(path))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "PWNED").exists()


def test_a_library_in_the_case_file_is_never_loaded_from_it(tmp_path, capsys):
    # without --lib the replay refuses (the backend's default is not what failed), naming the library
    path = _case_file(tmp_path, backend="reference", library=str(tmp_path / "libport.so"))
    code, out, err = _main(capsys, "check", "--replay", str(path))
    assert code == 2 and f"recorded with library {tmp_path / 'libport.so'}: pass --lib" in err, out + err
    # with --lib, the library given is the one loaded, and the recorded one is shown
    emulator = str(ft78ne_abi.EMULATOR)
    path = _case_file(tmp_path, backend="ft78ne", library=str(tmp_path / "libport.so"))
    code, out, err = _main(capsys, "check", "--replay", str(path), "--lib", emulator)
    assert code == 1 and "does not support eps_mode='clamp'" in out, out + err  # the case is the reference's
    assert f"recorded with library {tmp_path / 'libport.so'}; it is not loaded from the file; using {emulator}" in out


def test_replay_runs_the_backend_of_the_command_line(tmp_path, capsys):
    path = _case_file(tmp_path, backend="subprocess:run", options={"args": "x"})
    code, out, err = _main(capsys, "check", "--replay", str(path), "--backend", "reference", "--repeat", "2")
    assert code == 0, out + err
    assert "backend reference (options from the command line: none)" in out and "2 runs agree" in out


def _raw(tmp_path, obj):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return p


def _valid():
    case = DESCRIPTORS["bce_grad"].edge_cases("float32", "clamp")[5]
    return {"format": "xloss-cases/1", "backend": "reference", "cases": [case_to_json(case)]}


def _with(update):
    obj = _valid()
    update(obj)
    return obj


BAD = [
    ("not JSON", "{", "not JSON"),
    ("wrong format", {"format": "other", "cases": []}, "not an xloss case file"),
    ("unknown top-level key", _with(lambda o: o.update(module="os")), "unknown key 'module'"),
    ("no cases", _with(lambda o: o.update(cases=[])), "cases must be a list"),
    ("unknown kernel", _with(lambda o: o["cases"][0].update(kernel="system")), "kernel must be one of"),
    ("bad dtype", _with(lambda o: o["cases"][0].update(dtype="object")), "dtype must be one of"),
    ("unknown argument", _with(lambda o: o["cases"][0]["kwargs"].update(backend="cpu")), "takes no argument"),
    ("object array", _with(lambda o: o["cases"][0]["kwargs"]["x"].update(dtype="object")), "dtype must be one of"),
    ("size mismatch", _with(lambda o: o["cases"][0]["kwargs"]["x"].update(shape=[1000])), "does not hold 1000"),
    ("negative shape", _with(lambda o: o["cases"][0]["kwargs"]["x"].update(shape=[-1])), "non-negative"),
    ("bad base64", _with(lambda o: o["cases"][0]["kwargs"]["x"].update(array="!!!!!!==")), "base64"),
    ("nested value", _with(lambda o: o["cases"][0]["kwargs"].update(eps={"call": "x"})), "a value must be"),
    ("option not a scalar", _with(lambda o: o.update(options={"args": ["a"]})), "option 'args'"),
    ("bad ladder", _with(lambda o: o["cases"].__setitem__(0, {"kernel": "bce_grad", "mode": "clamp",
                                                               "dtype": "float32", "ladder": {"rung": "x",
                                                                                             "seed": 0}})),
     "ladder must be"),
]


@pytest.mark.parametrize("label, obj, message", BAD, ids=[b[0] for b in BAD])
def test_invalid_case_files_are_refused_with_one_line(tmp_path, capsys, label, obj, message):
    path = _raw(tmp_path, obj)
    with pytest.raises(CaseFileError, match=message):
        load_cases(path)
    code, out, err = _main(capsys, "check", "--replay", str(path), "--backend", "reference")
    assert code == 2 and message.split("'")[0] in err and len(err.strip().splitlines()) == 1, err


def test_a_valid_case_file_and_a_ladder_case_load(tmp_path):
    cases, meta = load_cases(_raw(tmp_path, _valid()))
    assert cases[0].kwargs["x"].dtype == np.float32 and meta == {"backend": "reference"}
    rung = large.rungs("nll_loss_grad")[0]
    obj = _with(lambda o: o["cases"].__setitem__(0, {"kernel": "nll_loss_grad", "mode": None, "dtype": "float32",
                                                     "label": "", "ladder": {"rung": rung, "seed": 3}}))
    cases, _ = load_cases(_raw(tmp_path, obj))
    again = large.build("nll_loss_grad", "float32", None, rung, 3)
    np.testing.assert_array_equal(cases[0].kwargs["self"], again.kwargs["self"])


@pytest.mark.parametrize("argv, message", [
    (["check", "--backend", "cpuu"], "no backend named 'cpuu'"),
    (["check", "--backend", "ft78ne", "--option", "memry=x"], "unknown option(s) memry"),
    (["check", "--backend", "cpu", "--option", "memry=x"], "does not accept options memry=x"),
    (["check", "--backend", "cpu", "--lib", "/tmp/libx.so"], "does not accept --lib (it takes no library)"),
    (["check", "--backend", "reference", "--lib", "/tmp/libx.so"], "does not accept --lib"),
    (["check", "--backend", "reference", "--kernels", "focall"], "unknown kernel 'focall'"),
    (["check", "--backend", "reference", "--option", "noequals"], "--option takes KEY=VALUE"),
    (["bench", "--backends", "cpuu"], "no backend named 'cpuu'"),
    (["bench", "--sizes", "4X"], "'4X' is not a size"),
    (["bench", "--sizes", "0"], "'0' is not a size"),
    (["bench", "--sizes", "1x2x3x4"], "is not a size"),
])
def test_cli_mistakes_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = _main(capsys, *argv)
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_the_installed_command_exits_2_without_a_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "xloss.cli", "check", "--backend", "cpuu"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "cpuu" in out.stderr


def test_replay_files_get_unique_names_and_absolute_library_paths(tmp_path, monkeypatch):
    from xloss.conformance.report import write_failures
    from xloss.conformance.runner import TargetResult

    monkeypatch.chdir(tmp_path)
    case = case_to_json(DESCRIPTORS["bce_grad"].edge_cases("float32", "clamp")[5])
    r = TargetResult("bce_grad", "float32", "clamp", True, "fail", 1, message="m", case=case)
    first = write_failures([r], "f", "ft78ne", "lib/libport.so:other.so")
    second = write_failures([r], "f", "ft78ne", "lib/libport.so")
    a, b = first[("bce_grad", "float32", "clamp")], second[("bce_grad", "float32", "clamp")]
    assert a != b and (tmp_path / "f").resolve() == __import__("pathlib").Path(a).parent
    meta = json.loads(open(a).read())
    assert meta["library"] == f"{tmp_path / 'lib/libport.so'}:{tmp_path / 'other.so'}"


def test_a_port_without_error_reporting_is_flagged():
    from xloss.conformance.report import error_reporting_note

    assert "does not report errors" in error_reporting_note({"error reporting": "no (no status helpers)"})
    assert error_reporting_note({"error reporting": "yes"}) == "" and error_reporting_note({}) == ""

