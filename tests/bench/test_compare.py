"""`xloss bench --compare OLD.json [NEW.json]` on synthetic runs: the verdict of each
implementation follows its interval and the threshold, the exit status says whether anything got
slower, and a file that is not a saved run is refused in one line."""

import json

import pytest

from xloss import cli
from xloss.bench import compare, stats


def _runs(synthetic, new_times):
    make_cell, make_run = synthetic
    old = make_run([make_cell("bce_grad", "grad", "2k", {"torch": 0.010, "xloss:cpu": 0.004, "xloss:reference": 0.02},
                              seed=1)])
    new = make_run([make_cell("bce_grad", "grad", "2k", new_times, seed=2)])
    return old, new


def test_verdicts_on_synthetic_runs(synthetic):
    # xloss:cpu 30% slower, the reference 30% faster, torch unchanged; an implementation only in the new run
    old, new = _runs(synthetic, {"torch": 0.010, "xloss:cpu": 0.0052, "xloss:reference": 0.014, "torch.compile": 0.005})
    entries = {e["implementation"]: e for e in compare.compare(old, new)}
    assert entries["xloss:cpu"]["verdict"] == stats.SLOWER and entries["xloss:cpu"]["ci_low"] > 1
    assert entries["xloss:cpu"]["ratio"] == pytest.approx(1.3, rel=0.05)
    assert entries["xloss:reference"]["verdict"] == stats.FASTER and entries["xloss:reference"]["ci_high"] < 1
    assert entries["torch"]["verdict"] == stats.SAME
    assert entries["torch.compile"]["verdict"] == "only in new"
    assert compare.exit_status(list(entries.values())) == compare.REGRESSED


def test_a_small_change_is_the_same_under_the_threshold(synthetic):
    old, new = _runs(synthetic, {"torch": 0.010, "xloss:cpu": 0.0041, "xloss:reference": 0.02})
    entries = compare.compare(old, new, threshold=0.05)
    assert {e["verdict"] for e in entries} == {stats.SAME}
    assert compare.exit_status(entries) == compare.OK
    # with no threshold, a 2.5% change the intervals resolve is reported
    cpu = next(e for e in compare.compare(old, new, threshold=0.0) if e["implementation"] == "xloss:cpu")
    assert cpu["verdict"] in (stats.SLOWER, stats.SAME) and cpu["ratio"] > 1


def test_cli_compare_two_files_exit_status_and_table(synthetic, tmp_path, capsys):
    old, new = _runs(synthetic, {"torch": 0.010, "xloss:cpu": 0.0052, "xloss:reference": 0.02})
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "same.json").write_text(json.dumps(old))
    assert cli.main(["bench", "--compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 1
    out = capsys.readouterr().out
    assert "bce_grad grad, size 2k, float32" in out and "new/old [95% CI]" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("xloss:cpu"))
    old_cpu = next(r for r in old["cells"][0]["results"] if r["implementation"] == "xloss:cpu")
    assert line.split()[1] == f"{old_cpu['median_s'] * 1e3:.2f}"  # the old median in the column's unit (ms)
    assert line.split()[-1] == "slower"
    assert cli.main(["bench", "--compare", str(tmp_path / "old.json"), str(tmp_path / "same.json")]) == 0


@pytest.mark.parametrize("content, match", [
    ("{not json", "is not JSON"),
    ('{"cells": []}', "not a saved xloss bench run"),
    ('{"schema": 2, "cells": [{"results": [{"implementation": "x", "wall_samples_s": []}]}]}',
     "'x' has no per-sample times"),
])
def test_not_a_saved_run_is_refused_in_one_line(tmp_path, capsys, content, match):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["bench", "--compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err


def test_compare_takes_one_or_two_files(tmp_path, capsys):
    assert cli.main(["bench", "--compare", "a", "b", "c"]) == 2
    assert "OLD.json and optionally NEW.json" in capsys.readouterr().err
    assert cli.main(["bench", "--compare", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
