"""The default chunk sizes of the fused linear-cross-entropy (xloss.torch.chunking)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import xloss
from xloss.torch import chunking


@pytest.mark.parametrize("hidden,vocab", [(1024, 32000), (4096, 128256), (768, 50257), (64, 1000), (16, 50),
                                          (8192, 256000), (1, 1), (256, 32000)])
def test_default_chunk_keeps_the_logits_near_the_weight_size_within_the_clamps(hidden, vocab):
    chunk = chunking.default_chunk_size(hidden, vocab)
    logits = chunk * vocab
    assert chunk >= 1
    assert logits <= chunking.LOGITS_MAX_ELEMENTS
    # at least the floor (up to the rounding to a multiple of 64 tokens), at most the weight's size
    # or the token floor's logits
    assert logits >= min(chunking.LOGITS_MIN_ELEMENTS, chunking.LOGITS_MAX_ELEMENTS) - 64 * vocab
    tokens = max(hidden, chunking.MIN_CHUNK_TOKENS)
    assert logits <= max(vocab * tokens, chunking.LOGITS_MIN_ELEMENTS)
    if chunking.LOGITS_MIN_ELEMENTS <= vocab * tokens <= chunking.LOGITS_MAX_ELEMENTS:
        assert tokens - 64 < chunk <= tokens


def test_the_issue_target_shape_uses_two_chunks_of_1024_tokens():
    chunk = chunking.default_chunk_size(1024, 32000)
    assert chunk == 1024
    assert chunking.even_spans(2048, chunk, 16) == [(0, 1024), (1024, 2048)]
    assert chunking.even_spans(1927, chunk, 16) == [(0, 976), (976, 1927)]  # every 17th token ignored
    assert chunking.default_vocab_chunk_size(chunk, 1024, 32000) == 8192
    # a small hidden size gets the token floor, not H tokens
    assert chunking.default_chunk_size(256, 32000) == chunking.MIN_CHUNK_TOKENS


def test_vocabulary_block_is_bounded_and_never_exceeds_the_shard():
    for chunk, hidden, vocab in [(1024, 1024, 32000), (64, 16, 37), (4096, 8192, 256000), (8, 4, 3)]:
        block = chunking.default_vocab_chunk_size(chunk, hidden, vocab)
        assert 1 <= block <= vocab
        assert block * max(chunk, hidden) <= max(chunking.BLOCK_ELEMENTS, chunking.MIN_BLOCK_ROWS * max(chunk, hidden))


def test_resolve_sizes_checks_what_the_caller_gives():
    assert chunking.resolve_sizes(7, 5, 16, 100) == (7, 5)
    with pytest.raises(xloss.XLossValueError, match="chunk_size"):
        chunking.resolve_sizes(0, None, 16, 100)
    with pytest.raises(xloss.XLossTypeError, match="vocab_chunk_size"):
        chunking.resolve_sizes(8, 2.5, 16, 100)


def test_spans_cover_the_range_with_a_short_last_span():
    assert chunking.spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunking.spans(0, 4) == []


@given(st.integers(0, 5000), st.integers(1, 3000), st.sampled_from([1, 16, 64]))
def test_even_spans_make_as_many_pieces_of_at_most_the_step(total, step, multiple):
    got = chunking.even_spans(total, step, multiple)
    assert len(got) == len(chunking.spans(total, step))  # no more pieces (GEMM passes over the weight)
    assert [a for a, _ in got] == [0] + [b for _, b in got[:-1]] if got else total == 0
    assert not got or got[-1][1] == total
    sizes = [b - a for a, b in got]
    assert all(0 < s <= step for s in sizes)
    assert all(s == sizes[0] for s in sizes[:-1])
    assert len(sizes) < 2 or sizes[0] % multiple == 0 or sizes[0] == step  # a multiple where the step allows
    if len(sizes) > 1:  # near-equal: the tail is not a sliver of a few tokens
        assert sizes[-1] >= sizes[0] - len(sizes) * (multiple + 1)
