"""How the fused linear-cross-entropy cuts its work: tokens into chunks, the vocabulary into blocks.

Token chunk (``chunk_size``). The transient the chunk costs is its logits, ``chunk × V``
float32. The default makes that about the size of the weight gradient the call must hold anyway
(``V × H``): ``chunk_size = H`` tokens, but never fewer than ``MIN_CHUNK_TOKENS`` (448), and
clamped so the chunk's logits hold between 2**20 elements (smaller chunks only add per-chunk
overhead) and 2**26 elements (256 MiB). Why not smaller: every chunk streams the weight twice
(logits, ``dx``) and reads and writes the (V, H) weight-gradient accumulator once, and below a
few hundred tokens the GEMMs lose rate. Measured on the reference machine (2-core AMD Zen 4,
2026-11-26, float32, interleaved): at BT 2048, H 1024, V 32000, chunks of at most 1024 / 512 /
448 tokens ran 1.16× / 1.11× / 1.08× autograd at 0.35 / 0.26 / 0.25 of its peak memory; at H 256
(BT 4096), 448-token chunks were 8-12% faster than 256-token ones. Why not larger: peak memory
grows with the chunk, and at ``chunk = H`` the whole call peaks near 2× the weight gradient
instead of 3 × BT × V floats. The number of chunks is kept and their sizes evened out
(:func:`even_spans`), so the actual chunk is often a little smaller.

16-bit operands on the native path (:mod:`.flce_native`) hold a chunk's logits in float32 (never
rounded to 16 bits) and round G once into the first half of that storage: the default chunk is as
many tokens as fit 2**26 logits (256 MiB), so that typical batches are one chunk and the weight
gradient comes from one GEMM (rounded once; more chunks cost a second GEMM per chunk to carry
each partial in float32, and a float32 weight-gradient accumulator).

Vocabulary block (``vocab_chunk_size``). The backend kernel is called per (chunk, block)
with that block's rows of ``weight``: the kernel's outputs (``chunk × H`` and
``block × H``) and its G tile (``chunk × block``) are then bounded by the block, not by V.
The default keeps ``block × max(chunk, H)`` near 2**23 elements (32 MiB of float32) and the
block at least 256 rows (narrower blocks starve the GEMMs). Fewer, larger calls matter on a
loaded CPU: each call hands the cores between PyTorch's OpenMP pool and the backend's own
(Numba's), and each hand-over costs a spin-wait.
"""

from __future__ import annotations

from ..errors import XLossValueError
from . import _checks as checks

MIN_CHUNK_TOKENS = 448
LOGITS_MIN_ELEMENTS = 1 << 20
LOGITS_MAX_ELEMENTS = 1 << 26
BLOCK_ELEMENTS = 1 << 23
MIN_BLOCK_ROWS = 256


def _round_down(n: int, multiple: int) -> int:
    return n - n % multiple if n >= multiple else n


def default_chunk_size(hidden: int, vocab: int) -> int:
    """Tokens per chunk for hidden size H and (this shard's) vocabulary V: see the module docstring."""
    vocab = max(vocab, 1)
    elements = min(max(vocab * max(hidden, MIN_CHUNK_TOKENS), LOGITS_MIN_ELEMENTS), LOGITS_MAX_ELEMENTS)
    return max(1, _round_down(elements // vocab, 64))


def default_half_chunk_size(vocab: int) -> int:
    """Tokens per chunk on the native 16-bit path for the (global) vocabulary V: see the module docstring."""
    return max(1, _round_down(LOGITS_MAX_ELEMENTS // max(vocab, 1), 64))


def default_vocab_chunk_size(chunk: int, hidden: int, vocab: int) -> int:
    """Vocabulary rows per kernel call: see the module docstring."""
    rows = max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(chunk, hidden, 1))
    return max(1, min(vocab, _round_down(rows, 64)))


def resolve_sizes(chunk_size, vocab_chunk_size, hidden: int, vocab: int, half: bool = False) -> tuple[int, int]:
    """The (token chunk, vocabulary block) a call uses: the given ones checked, or the defaults
    (``half``: the native 16-bit path's chunk)."""
    if chunk_size is None:
        chunk = default_half_chunk_size(vocab) if half else default_chunk_size(hidden, vocab)
    else:
        chunk = checks.integer(chunk_size, "chunk_size")
        if chunk < 1:
            raise XLossValueError(f"chunk_size must be a positive number of tokens; got {chunk}")
    if vocab_chunk_size is None:
        block = default_vocab_chunk_size(chunk, hidden, vocab)
    else:
        block = checks.integer(vocab_chunk_size, "vocab_chunk_size")
        if block < 1:
            raise XLossValueError(f"vocab_chunk_size must be a positive number of vocabulary rows; got {block}")
    return chunk, block


def spans(total: int, step: int):
    """``(start, stop)`` pairs covering ``range(total)`` in steps of ``step`` (the last one shorter)."""
    return [(s, min(s + step, total)) for s in range(0, total, step)]


def even_spans(total: int, step: int, multiple: int = 1):
    """As many spans as :func:`spans` makes, of near-equal sizes: each at most ``step`` and, where
    ``step`` allows, a multiple of ``multiple`` (the last one shorter). A ragged tail chunk of a
    few tokens costs nearly a full pass over the weight for little work."""
    if total <= 0:
        return []
    pieces = -(-total // step)
    size = -(-total // pieces)
    size = min(step, -(-size // multiple) * multiple)
    return spans(total, size)
