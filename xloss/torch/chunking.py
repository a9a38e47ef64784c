"""How the fused linear-cross-entropy cuts its work: tokens into chunks, the vocabulary into blocks.

Token chunk (``chunk_size``). The transient the chunk costs is its logits, ``chunk × V``
float32, so the chunk should be as small as the GEMMs allow. The default is ``CHUNK_TOKENS``
(448) tokens, clamped so the chunk's logits hold between 2**20 elements (smaller chunks only add
per-chunk overhead) and 2**26 elements (256 MiB). On the reference machine (2-core AMD Zen 4,
PyTorch's MKL/oneDNN GEMMs, 2026-11-26) the three products of a chunk ran at full rate from about
384 tokens up (logits and ``dx`` have M = tokens, ``dW`` has K = tokens and accumulates inside the
GEMM), and 256-token chunks lost 5-10% whatever H was. The earlier default of H tokens was 1.5%
faster at H = 1024, V = 32000, BT 2048 (within noise), at 0.35 of autograd's peak memory against
0.25 now. At H = 256 it was 10% slower. The number of chunks is kept and their sizes evened out
(:func:`even_spans`), so the actual chunk is often a little smaller.

16-bit operands on the native path (:mod:`.flce_native`) hold a chunk's logits in the operand
dtype and turn them into G in place, two bytes per logit: the default chunk is then as many
tokens as fit 2**26 logits (128 MiB), so that typical batches are one chunk and the weight
gradient comes from one GEMM (rounded once; more chunks cost a second GEMM per chunk to carry
each partial in float32).

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

CHUNK_TOKENS = 448
LOGITS_MIN_ELEMENTS = 1 << 20
LOGITS_MAX_ELEMENTS = 1 << 26
BLOCK_ELEMENTS = 1 << 23
MIN_BLOCK_ROWS = 256


def _round_down(n: int, multiple: int) -> int:
    return n - n % multiple if n >= multiple else n


def default_chunk_size(hidden: int, vocab: int) -> int:
    """Tokens per chunk for (this shard's) vocabulary V: see the module docstring. ``hidden`` stays in
    the signature for callers of the earlier, H-based default; the default no longer depends on it."""
    vocab = max(vocab, 1)
    elements = min(max(vocab * CHUNK_TOKENS, LOGITS_MIN_ELEMENTS), LOGITS_MAX_ELEMENTS)
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

