"""The ``cpu`` backend object: capabilities, availability, options, and dispatch to the kernels."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import threading
from dataclasses import dataclass

from ... import openmp
from ...backend import Backend, KernelCaps
from ...dtypes import FLOAT_DTYPES
from ...kernels.bce import FORWARD as BCE
from ...kernels.bce import ROW as BCE_GRAD
from ...kernels.bce_with_logits import ROW as BCE_WITH_LOGITS
from ...kernels.cross_entropy import DENSE as SOFTMAX_CROSS_ENTROPY
from ...kernels.cross_entropy import FORWARD as CROSS_ENTROPY
from ...kernels.cross_entropy import GRAD as CROSS_ENTROPY_GRAD
from ...kernels.cross_entropy import WITH_GRAD as CROSS_ENTROPY_WITH_GRAD
from ...kernels.flce import FLCE_GRAD, LOSS_WITH_MAX_SUM, ONLINE_MAX_SUM
from ...kernels.focal import ROW as FOCAL
from ...kernels.nll import FORWARD as NLL
from ...kernels.nll import ROW as NLL_GRAD
from . import threads as _threads

_ALL_DTYPES = tuple(FLOAT_DTYPES)  # float16, bfloat16 (widened in-kernel), float32, float64
_MIN_NUMBA = (0, 59)
_OPTIONS = ("threads", "blas", "flce_chunk_bytes")

_CAPS = {
    "focal_loss": KernelCaps.declare(
        "focal_loss", dtypes=_ALL_DTYPES,
        notes="half types widen to float32 in-kernel; sums accumulate in float64 per block"),
    "bce_grad": KernelCaps.declare("bce_grad", dtypes=_ALL_DTYPES, eps_mode=("clamp", "add")),
    "nll_loss_grad": KernelCaps.declare("nll_loss_grad", dtypes=_ALL_DTYPES),
    "fused_linear_cross_entropy_grad": KernelCaps.declare(
        "fused_linear_cross_entropy_grad", dtypes=_ALL_DTYPES,
        notes=("bfloat16: native bf16 GEMMs with float32 partials, G rounded once to bf16; float16: float32 "
               "products; one rounding at the end; memory bounded by flce_chunk_bytes")),
    "fused_linear_online_max_sum": KernelCaps.declare(
        "fused_linear_online_max_sum", dtypes=_ALL_DTYPES,
        notes="logits a vocabulary tile at a time (flce_chunk_bytes), statistics merged online in float32"),
    "fused_cross_entropy_loss_with_max_sum": KernelCaps.declare("fused_cross_entropy_loss_with_max_sum",
                                                                dtypes=_ALL_DTYPES),
    # binary cross entropy with logits (issue #30)
    "bce_with_logits": KernelCaps.declare(
        "bce_with_logits", dtypes=_ALL_DTYPES,
        notes="half types widen to float32 in-kernel; sums accumulate in float64 per block"),
    # NLL and BCE forward (issue #30)
    "nll_loss": KernelCaps.declare("nll_loss", dtypes=_ALL_DTYPES,
                                   notes="sums of exact float64 products per block, added in block order"),
    "binary_cross_entropy": KernelCaps.declare("binary_cross_entropy", dtypes=_ALL_DTYPES,
                                               notes="float32 logs for 16-bit and float32 data; float64 sums"),
}
# -- cross entropy (xloss/kernels/cross_entropy)
_CAPS["cross_entropy_loss"] = KernelCaps.declare(
    "cross_entropy_loss", dtypes=_ALL_DTYPES,
    notes="one pass per row (online max/sum in float32, float64 for float64); row terms reduced in float64")
_CAPS["cross_entropy_loss_grad"] = KernelCaps.declare("cross_entropy_loss_grad", dtypes=_ALL_DTYPES)
_CAPS["softmax_cross_entropy_with_logits"] = KernelCaps.declare("softmax_cross_entropy_with_logits",
                                                                 dtypes=_ALL_DTYPES)


@dataclass(frozen=True)
class NumbaKernel:
    """An implementation-table entry: ``<module>.<function>(args, backend)`` of this package, imported
    on first use (with every other kernel module, :func:`kernels`: Numba loads then) and launched under
    the backend's thread count, launch lock and SIGINT hold."""

    module: str
    function: str

    def __call__(self, backend, a) -> None:
        k = getattr(kernels()[self.module], self.function)
        with backend._thread_count():
            k(a, backend)


#: ``{row: function(backend, args)}``
IMPLEMENTATIONS = {
    FOCAL: NumbaKernel("focal", "run"),
    BCE_GRAD: NumbaKernel("bce", "run"),
    NLL_GRAD: NumbaKernel("nll", "run"),
    FLCE_GRAD: NumbaKernel("flce", "run"),
    ONLINE_MAX_SUM: NumbaKernel("vocab_parallel", "online_max_sum"),
    LOSS_WITH_MAX_SUM: NumbaKernel("vocab_parallel", "loss_with_max_sum"),
    # binary cross entropy with logits (issue #30)
    BCE_WITH_LOGITS: NumbaKernel("bce_with_logits", "run"),
    # NLL and BCE forward (issue #30)
    NLL: NumbaKernel("nll_forward", "run"),
    BCE: NumbaKernel("bce_forward", "run"),
}
# -- cross entropy (xloss/kernels/cross_entropy)
IMPLEMENTATIONS[CROSS_ENTROPY] = NumbaKernel("cross_entropy", "forward")
IMPLEMENTATIONS[CROSS_ENTROPY_GRAD] = NumbaKernel("cross_entropy", "backward")
IMPLEMENTATIONS[SOFTMAX_CROSS_ENTROPY] = NumbaKernel("cross_entropy", "dense")
# -- cross entropy, xloss's fused loss and gradient (xloss/kernels/cross_entropy)
_CAPS["cross_entropy_loss_with_grad"] = KernelCaps.declare(
    "cross_entropy_loss_with_grad", dtypes=_ALL_DTYPES,
    notes="one pass per row: exp(x - max) kept in a float32 row scratch (float64 for float64), the gradient "
          "written once, rounded once")
IMPLEMENTATIONS[CROSS_ENTROPY_WITH_GRAD] = NumbaKernel("cross_entropy_fused", "run")

_load_lock = threading.Lock()
_kernels = None
# Numba's workqueue threading layer (its fallback when no OpenMP or TBB runtime loads) must not be
# entered from two Python threads at once: it aborts. Under it, kernel launches are serialised.
_launch_lock = threading.RLock()


def _fresh_locks() -> None:
    """In a forked child: a thread that held these at the fork does not exist there."""
    global _load_lock, _launch_lock
    _load_lock = threading.Lock()
    _launch_lock = threading.RLock()


_threads.on_fork_child(_fresh_locks)


def _layer_is_threadsafe() -> bool:
    import numba

    try:
        return numba.threading_layer() != "workqueue"
    except ValueError:  # no parallel launch yet: the layer is unknown, so assume the unsafe one
        return False


@functools.cache
def _numba_problem() -> str | None:
    try:
        numba = importlib.import_module("numba")
    except Exception as exc:  # ImportError, or numba refusing this NumPy
        return f"numba is not importable ({type(exc).__name__}: {exc})"
    try:
        version = tuple(int(p) for p in numba.__version__.split(".")[:2])
    except ValueError:
        return None
    if version < _MIN_NUMBA:
        return f"numba {numba.__version__} is too old (need >= {'.'.join(map(str, _MIN_NUMBA))})"
    return _numba_settings_problem(numba)


# the module of each threading layer NUMBA_THREADING_LAYER can name (its own choices too: "safe" etc.)
_LAYER_MODULES = {"tbb": "tbbpool", "omp": "omppool", "workqueue": "workqueue"}


def _numba_settings_problem(numba) -> str | None:
    """What the environment set that leaves Numba unable to run the kernels: its compiler off, or
    a threading layer named that cannot load (every parallel kernel would fail at launch)."""
    if numba.config.DISABLE_JIT:
        return ("NUMBA_DISABLE_JIT is set: Numba's compiler is off and the cpu backend's kernels exist only "
                "compiled (unset NUMBA_DISABLE_JIT, or pass backend='reference')")
    layer = str(numba.config.THREADING_LAYER).lower()
    module = _LAYER_MODULES.get(layer)
    if module is not None:
        try:
            importlib.import_module(f"numba.np.ufunc.{module}")
        except Exception as exc:  # ImportError: e.g. libtbb.so missing
            return (f"NUMBA_THREADING_LAYER={layer} names a threading layer that cannot load here "
                    f"({type(exc).__name__}: {exc}); install it, or unset NUMBA_THREADING_LAYER to let Numba choose")
    return None


def kernels():
    """The kernel modules, imported on first use."""
    global _kernels
    if _kernels is None:
        with _load_lock:
            if _kernels is None:
                _threads.share_openmp_runtime()  # before anything loads Numba's threading layer
                modules = {k.module for k in IMPLEMENTATIONS.values() if isinstance(k, NumbaKernel)} | {"gemm"}
                # (importing them checks the disk cache)
                _kernels = {m: importlib.import_module(f".{m}", __package__) for m in sorted(modules)}
    return _kernels


class CpuBackend(Backend):
    implementations = IMPLEMENTATIONS

    def __init__(self, *, threads: int | None = None, blas: str = "auto", flce_chunk_bytes: int | None = None,
                 **unknown):
        if unknown:
            raise TypeError(f"the cpu backend takes options {', '.join(_OPTIONS)}; got {sorted(unknown)}")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None; got {threads!r}")
        if blas not in ("auto", "torch", "numpy"):
            raise ValueError(f"blas must be 'auto', 'torch' or 'numpy'; got {blas!r}")
        if flce_chunk_bytes is not None and (not isinstance(flce_chunk_bytes, int) or flce_chunk_bytes < 1):
            raise ValueError(f"flce_chunk_bytes must be a positive integer; got {flce_chunk_bytes!r}")
        opts = {k: v for k, v in (("threads", threads), ("blas", blas), ("flce_chunk_bytes", flce_chunk_bytes))
                if v is not None and not (k == "blas" and v == "auto")}
        super().__init__(name="cpu", description="fused, parallel, vectorized Numba kernels; FLCE products on "
                                                 "PyTorch's MKL/oneDNN or NumPy's BLAS", options=opts)
        self._threads = threads
        self._blas_choice = blas
        self._chunk_bytes = flce_chunk_bytes
        self._gemm = None

    # -- what it can do ----------------------------------------------------------------
    def capabilities(self):
        return _CAPS

    def availability(self):
        problem = _numba_problem()
        return (False, problem) if problem else (True, "")

    def info(self):
        facts = {"threads": "numba default" if self._threads is None else str(self._threads),
                 "blas": self._blas_choice}
        try:
            import numba

            _threads.share_openmp_runtime()  # (get_num_threads loads the threading layer)
            facts["numba"] = numba.__version__
            facts["numba threads"] = str(numba.get_num_threads())
            facts["numba threading layer"] = numba.threading_layer()
            facts["openmp wait policy"] = openmp.wait_policy()
            facts["openmp runtimes loaded"] = ", ".join(openmp.loaded_openmp_runtimes()) or "none"
            torch_there = importlib.util.find_spec("torch") is not None  # (without importing it)
            facts["blas in use"] = "torch" if self._blas_choice == "torch" or (
                self._blas_choice == "auto" and torch_there) else "numpy"
        except Exception as exc:  # info must never fail
            facts["error"] = f"{type(exc).__name__}: {exc}"
        return facts

    def gemm(self):
        if self._gemm is None:
            self._gemm = kernels()["gemm"].make(self._blas_choice)
        return self._gemm

    @contextlib.contextmanager
    def _thread_count(self):
        """The backend's thread count for the enclosed launches (Numba's setting is per thread),
        restored on every exit path: SIGINT is held for the call (see ``threads.py``). Launches
        are serialised when the threading layer is not thread-safe; in a child forked from a
        process running GNU OpenMP the kernels run serially (``threads.py``)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(_threads.sigint_held())
            if _threads.serial_only():
                _threads.use_serial_kernels()
                yield
                return
            if not _layer_is_threadsafe():
                stack.enter_context(_launch_lock)
            if self._threads is None:
                yield
                return
            import numba

            before = numba.get_num_threads()
            stack.callback(numba.set_num_threads, before)
            numba.set_num_threads(min(self._threads, numba.config.NUMBA_NUM_THREADS))
            yield

    def flce_row_passes(self):
        """The FLCE engine of ``xloss.torch`` (:class:`.flce_engine.Engine`): its row passes, launched
        under this backend's options, and the whole batch on PyTorch's GEMMs."""
        kernels()  # shares torch's OpenMP runtime before Numba's threading layer loads
        engine = importlib.import_module(".flce_engine", __package__)
        return engine.Engine(self, importlib.import_module(".flce_rows", __package__), self._thread_count)

    def flce_chunk_bytes(self) -> int:
        """The FLCE tile budget: the option, else the kernel's default."""
        return self._chunk_bytes or kernels()["flce"].DEFAULT_CHUNK_BYTES

