"""Running the suite in a child process, so a port that crashes, hangs or forks cannot take the report down.

The library under test is only ever loaded in a child (:func:`describe` asks one child what the
backend declares; :func:`run_isolated` runs the targets in children). A child makes itself the
leader of its own process group and talks to the parent over a pipe; every message carries its
pid. It announces each target before starting it and sends each case (pickled) *before* calling
the backend on it, so the parent always holds the case in flight, whatever happens next, and
each vendor-ABI call's text (:mod:`xloss.abi_log`) before making it, so a CRASH or HANG shows the
call as the library received it. ``xloss check --replay`` runs its cases in the same children
(:mod:`.replay`: :func:`child_backend`, :class:`Child`, :func:`await_loaded`, :func:`verdict`).

The parent waits for each message against a deadline (:func:`deadline_for`: ``--case-deadline``
seconds, scaled by the case's size); then, depending on what ended the wait:

* the child died (a segfault, an abort, ``exit`` in the library, a thread crashing after the call
  returned): ``crash`` for the target in flight, with the case in flight;
* the deadline passed: ``hang`` for the target and case in flight;
* a message came from another pid (the library forked, and the copy carried on into xloss):
  ``fail``, the library forked;
* a message could not be read (two processes wrote at once): ``fail`` likewise.

In every one of those cases, at the end of a run, and when the parent is interrupted, the
child's whole process group gets SIGKILL (a port that ignores SIGTERM, or a helper process it
started, cannot keep the check waiting); a fresh child takes the remaining targets.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from multiprocessing.connection import wait

from .. import abi_log
from ..errors import XLossError
from . import DESCRIPTORS
from .casefile import case_to_json
from .descriptor import Case
from .runner import CRASH, DRAWN, FAIL, HANG, LARGE, TargetResult, declared_caps, run_large, run_target, universe

#: seconds a case of up to :data:`DEADLINE_ELEMENTS` elements may take (the call, the oracle, the
#: repeats and configurations of a large case); ``xloss check --case-deadline`` changes it
DEFAULT_CASE_DEADLINE = 120.0
#: the deadline grows by one base deadline per this many elements of the case
DEADLINE_ELEMENTS = 1 << 20
#: seconds a child may take to start Python and import xloss before its first message
STARTUP_SECONDS = 300.0
#: the kernel name of the result that reports a library that crashed or hung while loading
LOADING = "(loading the library)"


class ChildSetupError(XLossError, RuntimeError):
    """The backend could not be made in the child (a bad option, an unavailable library): one line."""


def case_elements(case: Case) -> int:
    """The size a case's deadline scales with: its array elements, plus what the kernel forms that
    no array of the case holds (its descriptor's ``implied_elements``: FLCE's logits)."""
    n = sum(int(v.size) for v in case.kwargs.values() if hasattr(v, "size"))
    implied = DESCRIPTORS[case.kernel].implied_elements if case.kernel in DESCRIPTORS else None
    return n + (implied(case) if implied else 0)


def deadline_for(base: float, elements: int) -> float:
    """Seconds the parent waits for a case of ``elements`` elements: ``base`` per started
    :data:`DEADLINE_ELEMENTS`, at least ``base``."""
    return base * (1 + elements / DEADLINE_ELEMENTS)


# ---- the child ----------------------------------------------------------------------------------

def _own_process_group() -> None:
    """Lead a new process group (the parent kills it whole) and die with the parent (Linux)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Messenger:
    """Sends ``(kind, pid, payload)``; a process the library forked that gets back here says so and exits."""

    def __init__(self, conn):
        self.conn = conn
        self.pid = os.getpid()

    def __call__(self, kind: str, payload=None) -> None:
        if os.getpid() != self.pid:
            try:
                self.conn.send(("forked", os.getpid(), self.pid))
            finally:
                os._exit(0)
        self.conn.send((kind, self.pid, payload))


def _make_backend(name: str, options: dict, send):
    from .. import clib
    from .making import make_backend as make

    clib.PROBE_LOADS = False  # this process is the probe: a library that crashes here is reported as such
    send("loading")
    try:
        return make(name, options)  # a refused option or name: the command line's one-line error
    except XLossError as exc:
        send("setup-error", str(exc))
    except Exception as exc:
        send("setup-error", f"backend {name!r} could not be made: {type(exc).__name__}: {exc}")
    return None


def child_backend(name: str, options: dict, conn):
    """What a child does first: lead its own process group, make the backend (a refusal is sent as
    "setup-error"), and send each recorded ABI call's text as ``("abi", (first, text))`` before the
    library is called. Returns ``(send, backend)``; ``backend`` is None if it could not be made."""
    _own_process_group()
    send = _Messenger(conn)
    backend = _make_backend(name, options, send)
    abi_log.listen(lambda first, text: send("abi", (first, text)))
    return send, backend


def case_message(case: Case) -> tuple:
    """The "case" payload sent before ``case`` runs: its size (for the deadline) and the pickled case
    (a ladder case without its arrays: rebuilt from its rung, no need to send hundreds of MiB)."""
    elements = case_elements(case)
    if case.ladder is not None:
        case = Case(case.kernel, case.mode, case.dtype, {}, case.label, case.ladder)
    return elements, pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL)


def _describe_main(name, options, conn):
    send, backend = child_backend(name, options, conn)
    if backend is None:
        return
    from .report import declared_variants, variants_text

    ok, why = backend.availability()
    info = {str(k): v for k, v in dict(backend.info()).items()} if ok else {}
    caps = backend.capabilities() if ok else {}
    send("described", {"available": ok, "reason": why, "info": info, "variants_text": variants_text(caps),
                       "declared_variants": declared_variants(caps),
                       "configurations": [label for label, _ in backend.configurations()] if ok else []})


def _child_main(name, options, items, settings, conn):
    send, backend = child_backend(name, options, conn)
    if backend is None:
        return

    def on_case(case):
        send("case", case_message(case))

    for kernel, dtype, mode, group in items:
        declared = declared_caps(backend, kernel, dtype, mode) is not None
        send("start", (kernel, dtype, mode, declared, group))
        if group == DRAWN:
            r = run_target(backend, kernel, dtype, mode, max_examples=settings["max_examples"],
                           seed=settings["seed"], on_case=on_case, configurations=settings["configurations"])
        else:
            r = run_large(backend, kernel, dtype, mode, seed=settings["seed"], repeats=settings["repeats"],
                          on_case=on_case, configurations=settings["configurations"])
        send("result", r.to_json() if r is not None else None)
    send("done")


# ---- the parent -----------------------------------------------------------------------------------

def _signal_name(exitcode) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


class Child:
    """A child process in its own process group, its pipe, and what ended it."""

    def __init__(self, target, args):
        ctx = multiprocessing.get_context("spawn")
        self.receiver, sender = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=target, args=(*args, sender))
        self.proc.start()
        sender.close()
        try:  # the child does it too; whoever is first wins the race with an early kill
            os.setpgid(self.proc.pid, self.proc.pid)
        except OSError:
            pass

    def receive(self, seconds: float):
        """The next ``("message", kind, payload)``, or why none will come: ``("died", exit text)``,
        ``("timeout", None)``, ``("forked", pid)``, ``("corrupt", text)``."""
        end = time.monotonic() + seconds
        while True:
            if self.receiver.poll(0):
                try:
                    kind, pid, payload = self.receiver.recv()
                except EOFError:
                    return self._died()
                except Exception as exc:  # a torn message: two writers on the pipe
                    return "corrupt", f"{type(exc).__name__}: {exc}"
                if kind == "forked" or pid != self.proc.pid:
                    return "forked", pid
                return "message", kind, payload
            left = end - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready = wait([self.receiver, self.proc.sentinel], timeout=left)
            if self.proc.sentinel in ready and not self.receiver.poll(0):
                return self._died()  # (a helper process may still hold the pipe open: no EOF would come)

    def _died(self):
        self.proc.join(5)
        return "died", _signal_name(self.proc.exitcode)

    def kill(self) -> None:
        """SIGKILL to the child's whole process group (its helpers and forks included), then reap it."""
        pid = self.proc.pid
        try:  # the group outlives a child already reaped while a helper of it lives
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.join(10)
        self.receiver.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False


def _ended_loading(how: str, detail, name: str, base: float) -> TargetResult:
    if how == "died":
        status, msg = CRASH, f"loading backend {name!r} killed the check's child process ({detail})"
    elif how == "timeout":
        status, msg = HANG, f"loading backend {name!r} did not finish within {base:.0f} s"
    else:
        status, msg = FAIL, f"the library forked while loading (process {detail} carried on)"
    return TargetResult(LOADING, "-", None, True, status=status, message=msg + ": nothing else was checked")


class LoadFailure(Exception):
    """The library crashed, hung or forked while being loaded; ``result`` reports it."""

    def __init__(self, result: TargetResult):
        super().__init__(result.message)
        self.result = result


def await_loaded(child: Child, name: str, base: float):
    """The child's first message after its "loading" one (Python's start and imports get
    :data:`STARTUP_SECONDS`, loading the backend ``base``)."""
    got = child.receive(STARTUP_SECONDS)
    if got[:2] == ("message", "loading"):
        got = child.receive(base)
    if got[0] != "message":
        raise LoadFailure(_ended_loading(got[0], got[1], name, base))
    if got[1] == "setup-error":
        raise ChildSetupError(got[2])
    return got


def describe(name: str, options: dict, *, case_deadline: float = DEFAULT_CASE_DEADLINE) -> dict:
    """What ``xloss.backend(name, **options)`` says about itself (availability, info, declared
    variants, configurations), asked of a child. Raises :class:`ChildSetupError` (the backend
    refused) or :class:`LoadFailure` (loading the library crashed, hung or forked)."""
    with Child(_describe_main, (name, options)) as child:
        return await_loaded(child, name, case_deadline)[2]


def verdict(how: str, detail, case_msg, deadline: float, previous=None) -> tuple:
    """``(status, message, case)`` for the case in flight when a child stopped answering (``how``,
    ``detail``: what :meth:`Child.receive` returned; ``previous``: the case before the one in flight,
    and the seconds since the one in flight was sent)."""
    case = pickle.loads(case_msg[1]) if case_msg is not None else None
    where = f" [case: {case.label}]" if case is not None and case.label else ""
    if how == "died":
        status = CRASH
        msg = (f"the backend crashed the process ({detail}) on this input{where}" if case is not None else
               f"the backend crashed the process ({detail}) before the first case{where}")
        if previous is not None and previous[0] is not None:
            before = pickle.loads(previous[0][1])
            msg += (f"; this case had been running {previous[1]:.2f} s: if the crash came later from a thread or "
                    f"timer the previous call left behind, that call's case was [{before.label or 'drawn'}]")
    elif how == "timeout":
        status = HANG
        size = f" ({case_msg[0]} elements)" if case_msg is not None else ""
        msg = (f"no result within the deadline of {deadline:.1f} s for this case{size}{where}: the call did not "
               "return (the child's process group was killed)")
    elif how == "forked":
        status = FAIL
        msg = (f"the library forked: a second process (pid {detail}) came back from the call and carried on "
               f"running the check{where}; a library must not fork a copy of its caller")
    else:
        status = FAIL
        msg = (f"the check's pipe carried a torn message ({detail}): two processes wrote to it at once, so the "
               f"library forked a copy of its caller{where}")
    return status, msg, case


def _ended(how: str, detail, current: tuple, case_msg, deadline: float, previous=None, abi_calls=()) -> TargetResult:
    """The result of the target in flight when the child stopped answering (see :func:`verdict`;
    ``abi_calls``: the ABI calls the child sent for the case in flight)."""
    status, msg, case = verdict(how, detail, case_msg, deadline, previous)
    return TargetResult(*current[:4], status=status, group=current[4], message=msg,
                        case=case_to_json(case) if case is not None else None, abi_calls=list(abi_calls))


def abi_calls_after(calls: list, payload) -> list:
    """The ABI calls of the case in flight, given an ``("abi", (first, text))`` payload."""
    first, text = payload
    return [text] if first else [*calls, text]


def run_isolated(name: str, options: dict, *, kernels=None, max_examples=100, seed=0, on_result=None,
                 large_cases=True, repeats=3, configurations=True, case_deadline=DEFAULT_CASE_DEADLINE):
    """Like :func:`runner.run_suite` for the backend ``xloss.backend(name, **options)``, in child
    processes; ``case_deadline``: seconds per case of up to :data:`DEADLINE_ELEMENTS` elements (see
    :func:`deadline_for`). A library that crashes, hangs or forks while loading gives one result
    for :data:`LOADING`."""
    base = float(case_deadline)
    chosen = [t for t in universe() if not kernels or t[0] in kernels]
    remaining = [(*t, DRAWN) for t in chosen] + ([(*t, LARGE) for t in chosen] if large_cases else [])
    settings = {"max_examples": max_examples, "seed": seed, "repeats": repeats, "configurations": configurations}
    results = []

    def report(r):
        results.append(r)
        if on_result is not None:
            on_result(r)

    while remaining:
        with Child(_child_main, (name, options, list(remaining), settings)) as child:
            current, case_msg, wait_s, previous, sent = None, None, base, None, time.monotonic()
            calls = []
            try:
                got = await_loaded(child, name, base)
            except LoadFailure as exc:
                report(exc.result)
                return results
            while True:
                if got[0] != "message":
                    break
                kind, payload = got[1], got[2]
                if kind == "setup-error":
                    raise ChildSetupError(payload)
                if kind == "done":
                    remaining = []
                    break
                if kind == "start":
                    current, case_msg, wait_s, previous, calls = tuple(payload), None, base, None, []
                elif kind == "case":
                    previous, case_msg, sent, calls = case_msg, payload, time.monotonic(), []
                    wait_s = deadline_for(base, payload[0])
                elif kind == "abi":
                    calls = abi_calls_after(calls, payload)
                elif kind == "result" and current is not None:
                    remaining.remove(current[:3] + current[4:])
                    current, case_msg, wait_s, previous = None, None, base, None
                    if payload is not None:  # None: no large case applies
                        report(TargetResult(**payload))
                got = child.receive(wait_s)
            if not remaining:
                break
            if current is None:
                # it stopped between targets (a thread of the last one crashing late, say): the next target is blamed
                nxt = remaining[0]
                current = (*nxt[:3], True, nxt[3])
            report(_ended(got[0], got[1], current, case_msg, wait_s, (previous, time.monotonic() - sent), calls))
            remaining.remove(current[:3] + current[4:])
    return results

