"""How the fused linear-cross-entropy cuts its work: tokens into chunks, the vocabulary into blocks
(the defaults and the measurements behind them: docs/torch-ecosystem.md, "Chunk sizes")."""

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
    """Tokens per chunk for hidden size H and (this shard's) vocabulary V: H, at least 448, with the
    chunk's logits clamped to [2**20, 2**26] elements."""
    vocab = max(vocab, 1)
    elements = min(max(vocab * max(hidden, MIN_CHUNK_TOKENS), LOGITS_MIN_ELEMENTS), LOGITS_MAX_ELEMENTS)
    return max(1, _round_down(elements // vocab, 64))


def default_half_chunk_size(vocab: int) -> int:
    """Tokens per chunk on the native 16-bit path for the (global) vocabulary V: 2**26 logits."""
    return max(1, _round_down(LOGITS_MAX_ELEMENTS // max(vocab, 1), 64))


def default_vocab_chunk_size(chunk: int, hidden: int, vocab: int) -> int:
    """Vocabulary rows per kernel call: ``rows × max(chunk, H)`` near 2**23, at least 256 rows."""
    rows = max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(chunk, hidden, 1))
    return max(1, min(vocab, _round_down(rows, 64)))


def _positive(value, name: str, what: str) -> int:
    n = checks.integer(value, name)
    if n < 1:
        raise XLossValueError(f"{name} must be a positive number of {what}; got {n}")
    return n


def resolve_sizes(chunk_size, vocab_chunk_size, hidden: int, vocab: int, half: bool = False) -> tuple[int, int]:
    """The (token chunk, vocabulary block) a call uses: the given ones checked, or the defaults
    (``half``: the native 16-bit path's chunk)."""
    chunk = ((default_half_chunk_size(vocab) if half else default_chunk_size(hidden, vocab)) if chunk_size is None
             else _positive(chunk_size, "chunk_size", "tokens"))
    return chunk, (default_vocab_chunk_size(chunk, hidden, vocab) if vocab_chunk_size is None
                   else _positive(vocab_chunk_size, "vocab_chunk_size", "vocabulary rows"))


def spans(total: int, step: int):
    """``(start, stop)`` pairs covering ``range(total)`` in steps of ``step`` (the last one shorter)."""
    return [(s, min(s + step, total)) for s in range(0, total, step)]


def even_spans(total: int, step: int, multiple: int = 1):
    """As many spans as :func:`spans` makes, of near-equal sizes, each at most ``step`` and where it allows
    a multiple of ``multiple`` (the last one shorter): a ragged tail chunk costs a pass over the weight."""
    if total <= 0:
        return []
    size = -(-total // -(-total // step))
    return spans(total, min(step, -(-size // multiple) * multiple))
