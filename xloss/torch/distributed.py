"""Vocabulary-parallel helpers over ``torch.distributed``.

Each rank holds a contiguous shard ``[start, start + V_r)`` of the vocabulary: those rows of
the output projection ``weight`` (and ``bias``). The fused linear-cross-entropy then needs,
per token, three all-reduces over the group (see :mod:`xloss.torch.flce_chunks`): the MAX of
the row maxima, and one SUM of the stacked (rescaled sum of exponentials, target logit,
smoothing term) — the target logit lives on one rank and is 0 on the others (the kernel route of
:mod:`xloss.torch.flce_max_sum` stacks two: the rescaled sum and the predicted logit rebased to the
global maximum, CANN's Megatron all-reduce). The partial input gradients are summed over ranks
once. Everything goes through :class:`Collectives`, whose methods are no-ops without a group, so
the single-process path is the same code.
"""

from __future__ import annotations

import torch

from ..errors import XLossValueError


class Collectives:
    """The collectives the vocabulary-parallel FLCE uses, on ``group`` (None: one process)."""

    def __init__(self, group=None):
        self.group = group
        self.world_size, self.rank = 1, 0
        if group is not None:
            import torch.distributed as dist

            if not dist.is_available() or not dist.is_initialized():
                raise XLossValueError("process_group was given but torch.distributed is not initialised "
                                      "(call torch.distributed.init_process_group first)")
            self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def _all_reduce(self, t: torch.Tensor, op) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(t, op=op, group=self.group)
        return t

    def max_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place elementwise MAX over the ranks."""
        if not self.active:
            return t
        import torch.distributed as dist

        return self._all_reduce(t, dist.ReduceOp.MAX)

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place elementwise SUM over the ranks."""
        if not self.active:
            return t
        import torch.distributed as dist

        return self._all_reduce(t, dist.ReduceOp.SUM)

    def min_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place elementwise MIN over the ranks."""
        if not self.active:
            return t
        import torch.distributed as dist

        return self._all_reduce(t, dist.ReduceOp.MIN)

    def vocab_layout(self, local_rows: int, tokens: int, chunk: int = 0) -> tuple[int, int]:
        """``(start, global_vocab)`` of this rank's shard, the shards lying in rank order. One
        all-gather of (rows, tokens, chunk), which also checks that every rank passed the same
        number of tokens and the same chunk size (mismatched calls would otherwise hang or
        fail in a later collective)."""
        if not self.active:
            return 0, local_rows
        import torch.distributed as dist

        mine = torch.tensor([local_rows, tokens, chunk], dtype=torch.int64)
        every = [torch.zeros(3, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=self.group)
        rows = [int(e[0]) for e in every]
        for i, what in ((1, "tokens"), (2, "chunk_size")):
            seen = [int(e[i]) for e in every]
            if len(set(seen)) != 1:
                raise XLossValueError(f"{what} differs between ranks ({seen}); vocabulary parallelism needs the "
                                      "same tokens, targets and settings on every rank")
        return sum(rows[: self.rank]), sum(rows)


_groups: dict[str, object] = {}  # key -> process group, for the custom ops (a group cannot be an op argument)


def group_key(group) -> str | None:
    """What crosses into the FLCE ops for ``process_group``: None, or a key filed for the group."""
    if group is None:
        return None
    key = f"<process group {id(group):#x}>"
    _groups.setdefault(key, group)
    return key


def group_of(key: str | None):
    """Inverse of :func:`group_key` (inside the op bodies)."""
    return None if key is None else _groups[key]


def vocab_shard_range(vocab_size: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of rank's contiguous shard when ``vocab_size`` rows are split as evenly as
    possible over ``world_size`` ranks (the first ``vocab_size % world_size`` ranks get one more)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise XLossValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}")
    base, extra = divmod(vocab_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def shard_vocab(tensor: torch.Tensor, process_group=None) -> torch.Tensor:
    """This rank's rows of a full-vocabulary ``tensor`` (weight (V, H) or bias (V)), per :func:`vocab_shard_range`."""
    coll = Collectives(process_group)
    start, stop = vocab_shard_range(tensor.shape[0], coll.world_size, coll.rank)
    return tensor[start:stop]
