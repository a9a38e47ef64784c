"""Shared test configuration: bounded hypothesis runs with no deadline (Numba compiles on first call)."""

import os
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The repository's measuring tools (benchmarks/peak_memory.py) are not installed with the package.
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.append(str(BENCHMARKS))

settings.register_profile(
    "default",
    max_examples=int(os.environ.get("XLOSS_MAX_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.load_profile("default")

# A shell starting pytest in the background (`pytest &` without job control) hands it SIGINT ignored,
# and Python then keeps it ignored: the interrupt tests would see no KeyboardInterrupt at all.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _outside_the_source_tree(tmp_path, monkeypatch):
    """Run every test from a scratch folder: a subprocess started with ``python -c`` or ``-m`` puts
    its working directory on sys.path, and from the repository root it would import the source
    ``xloss/`` folder (whose subpackages live in sibling folders) instead of the installed package;
    files a test writes by relative path land here too, not in the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session", autouse=True)
def _draws_ignore_the_checkout():
    """Hypothesis draws from the seed alone, as in CI: an editable checkout is "local code" to
    hypothesis, whose literals it would mix into the draws (xloss/conformance/draws.py)."""
    from xloss.conformance.draws import seed_only

    with seed_only():
        yield


# -- the table of seeded port bugs (rows from tests/ports' port_findings, via the test reports) --

_PORT_FINDINGS: list[dict] = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        _PORT_FINDINGS.extend(value for key, value in report.user_properties if key == "port_finding")


def pytest_terminal_summary(terminalreporter):
    if not _PORT_FINDINGS:
        return
    tr = terminalreporter
    tr.section("seeded port bugs found by xloss check")
    head = ("vendor", "port", "first failing target", "found at example", "harness examples", "target s", "sweep s")
    found = sorted(_PORT_FINDINGS, key=lambda f: (f["vendor"], f["port"]))  # xdist workers report in any order
    rows = [head] + [(f["vendor"], f["port"], " ".join(f["target"]),
                      str(f["first_failure"]), str(f["examples"]), f"{f['seconds']:.2f}",
                      f"{f['sweep_seconds']:.1f}") for f in found]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        tr.write_line("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


# -- the order the test files run in: the heavy ones first -------------------------------------------------


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Files with slow tests first (the most first), then the others, largest first. CI runs each file
    on one xdist worker (``--dist loadfile``) in collection order (``--no-loadscope-reorder``), a worker
    taking the next file as it runs dry: with the long files first, the last ones handed out are short
    and the two workers end together. (xdist's own order, by test count alone, left the files of one or
    two long tests, the sanitizer and storm runs, for the end, one worker running them while the other
    idled.) Within a file the order is unchanged; so is the order of files of the same weight."""
    weight: dict[str, list[int]] = {}
    for item in items:
        w = weight.setdefault(item.nodeid.split("::", 1)[0], [0, 0])
        w[0] += item.get_closest_marker("slow") is not None
        w[1] += 1
    items.sort(key=lambda item: [-n for n in weight[item.nodeid.split("::", 1)[0]]])
