"""FT78NE/MT7004 staged calls under interrupts that land anywhere in the caller's wait (issue 26).

An interrupt inside ``threading.Event.wait`` could leave the event's lock released twice; the core's
worker then died in ``done.set()`` ("release unlocked lock") and every later call on that core waited
forever. Two attacks, each in a child process with a deadline (a hang ends it with the stacks):

* an interrupt at every line the calling thread runs in the staging protocol and in the threading
  primitives it waits on, one call per line (:mod:`interrupt_every_line`): deterministic;
* a storm of real SIGINTs (``os.kill``) at random sub-millisecond to millisecond intervals across
  ``memory`` × ``private_bytes`` × core masks (:mod:`sigint_storm`).

After each, the next call must finish, be right, and leave no private block allocated. The default
suite runs one configuration of each briefly; ``-m slow`` runs them all.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
EVERY_LINE = ["private:4096:0x0F", "private:2048:0x01", "private:4096:0xFF", "private:65536:0x0F"]
STORM = ["private:4096:0x0F", "private:2048:0x01", "private:4096:0xFF", "private:-:0x0F", "shared:-:0x0F",
         "shared:-:0x01"]


def _run(script: str, *args: str, timeout: float) -> str:
    p = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{script} {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}"
    return p.stdout


def test_an_interrupt_at_any_line_of_the_wait_leaves_the_core_usable():
    out = _run("interrupt_every_line.py", EVERY_LINE[0], "400", "10", timeout=120)
    assert "every next call finished" in out


def test_sigint_storm_leaves_every_core_usable():
    out = _run("sigint_storm.py", "1.0", "10", STORM[0], STORM[4], timeout=120)
    assert out.count("right=True") == 2


@pytest.mark.slow
@pytest.mark.parametrize("spec", EVERY_LINE)
def test_an_interrupt_at_any_line_every_configuration(spec):
    _run("interrupt_every_line.py", spec, "700", "10", timeout=240)


@pytest.mark.slow
def test_sigint_storm_every_configuration():
    out = _run("sigint_storm.py", "4.0", "10", *STORM, timeout=240)
    assert out.count("right=True") == len(STORM)
