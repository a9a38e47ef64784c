"""What the two test files of the manual's softmax cross-entropy pages share (test_softmax_ce_ports.py: the forward
pages; test_softmax_ce_grad_ports.py: the sparse page's gradient): the backend on three cores, the run over some
rows' declared targets, and a seeded-bug test's tail (the smallest failing input saved, replayed against the buggy
port and the correct one, and its row in the table of findings). Loaded with ``port_harness.load_module``.
"""

from __future__ import annotations

import numpy as np

import xloss
from xloss import cli
from xloss.conformance import runner
from xloss.conformance import targets as declared_targets
from xloss.conformance.casefile import case_from_json
from xloss.conformance.report import write_failures

SEED = 0
CORE_MASK = 0x07  # the _s calls on three cores: most row counts do not split evenly
REPLAY_NUMEL = 100_000  # the largest failing input a replay file is expected to hold


def mt7004(lib, **options):
    return xloss.backend("mt7004", lib=str(lib), core_mask=CORE_MASK, **options)


def run(backend, kernels, max_examples: int, dtypes=None, **kw):
    """(the declared targets of ``kernels``, in ``dtypes`` if given; {target: result}), each target run unshrunk
    (enough to know which targets fail)."""
    todo = [t for t in declared_targets(backend) if t[0] in kernels and (dtypes is None or t[1] in dtypes)]
    return todo, {t: runner.run_target(backend, *t, max_examples=max_examples, seed=SEED, shrink=False, **kw)
                  for t in todo}


def numel(case_json) -> int:
    case = case_from_json(case_json)
    return max((v.size for v in case.kwargs.values() if isinstance(v, np.ndarray)), default=0)


def replay_the_smallest_failure(variant, must, results, lib, correct_lib, folder, port_findings) -> None:
    """Of the targets ``must`` (all failing in ``results``), the one with the smallest failing input: its input is
    saved in ``folder``, fails ``xloss check --replay`` against ``lib`` (in a child process, as a user runs it) and
    passes against ``correct_lib`` (in this process: a child costs ~2 s of CPU); its row goes to ``port_findings``."""
    smallest = min(must, key=lambda t: numel(results[t].case))
    r = results[smallest]
    assert numel(r.case) <= REPLAY_NUMEL  # a replay file holds it
    saved = write_failures([r], folder, "mt7004", str(lib))
    path = saved[next(iter(saved))]
    options = ["--option", f"core_mask={CORE_MASK}"]
    assert cli.main(["check", "--replay", str(path), "--backend", "mt7004", "--lib", str(lib), *options]) == 1
    assert cli.main(["check", "--replay", str(path), "--backend", "mt7004", "--lib", str(correct_lib), *options,
                     "--in-process"]) == 0
    port_findings.append(dict(vendor="ft78ne", port=variant, target=smallest, first_failure=r.found_at,
                              examples=r.examples, seconds=r.seconds,
                              sweep_seconds=sum(x.seconds for x in results.values())))
