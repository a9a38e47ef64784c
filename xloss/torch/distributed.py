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
        """``(start, global_vocab)`` of this rank's shard, the shards lying in rank order, with only
        the token count and chunk size compared (:meth:`agree` compares every setting)."""
        return self.agree(local_rows, [("tokens", tokens), ("chunk_size", chunk)])

    def agree(self, local_rows: int, settings, error: BaseException | None = None,
              weight_range: tuple[int, int, int] | None = None) -> tuple[int, int]:
        """``(start, global_vocab)`` of this rank's shard, the shards lying in rank order, from the
        call's first collective: one all-gather of every rank's rows, its argument error if it had
        one, and ``settings`` — (name, value) pairs (int, float, bool, str or None; a checksum is
        an int) that must be equal on every rank. Any rank's argument error, any disagreement, and
        shards that are views of one full weight laid out with overlaps or gaps
        (``weight_range``: (rows of the full weight, first row, rows)) raise the same
        :class:`~xloss.XLossError` on every rank, so that no rank is left waiting in a later
        collective, aborted by the backend's mismatch check, or given a wrong result."""
        if not self.active:
            if error is not None:
                raise error
            return 0, local_rows
        import torch.distributed as dist

        mine = _encode(local_rows, settings, error, weight_range)
        every = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine, group=self.group)
        _raise_rank_error(every, error)
        _raise_disagreement(every, settings)
        _raise_bad_layout(every)
        rows = [int(e[_ROWS]) for e in every]
        return sum(rows[: self.rank]), sum(rows)


# The first collective's record, int64 slots: the argument error (class code, then its message as
# UTF-8 bytes), this rank's rows, the weight's place in a full weight it is a view of, then each
# setting in _SLOTS slots (an int; a float's bits; a string's UTF-8 bytes; None).
_MSG = 64  # slots: 512 bytes of message
_SLOTS = 3  # per setting: a string of up to 23 bytes
_ERROR, _ROWS, _RANGE = 0, 1 + _MSG, 2 + _MSG
_HEAD = _RANGE + 3
_KIND_NONE, _KIND_INT, _KIND_FLOAT, _KIND_STR = range(4)
_MAX_SETTINGS = 24  # the record has one length on every rank (gloo aborts on a size mismatch)


def _error_classes():
    from ..errors import UnsupportedRequestError, XLossError, XLossIndexError, XLossTypeError

    return (XLossError, XLossValueError, XLossTypeError, XLossIndexError, UnsupportedRequestError)


def _text_slots(text: str, n: int) -> list[int]:
    raw = text.encode("utf-8")[: 8 * n]
    raw = raw + b"\0" * (8 * n - len(raw))
    return [int.from_bytes(raw[8 * i: 8 * i + 8], "little", signed=True) for i in range(n)]


def _slots_text(slots) -> str:
    raw = b"".join(int(v).to_bytes(8, "little", signed=True) for v in slots)
    return raw.rstrip(b"\0").decode("utf-8", "replace")


def _encode(rows: int, settings, error, weight_range) -> torch.Tensor:
    if len(settings) > _MAX_SETTINGS:
        raise XLossValueError(f"at most {_MAX_SETTINGS} settings can be compared across ranks")
    rec = [0] * (_HEAD + 1 + _SLOTS * _MAX_SETTINGS)
    if error is not None:
        classes = _error_classes()
        rec[_ERROR] = 1 + max(i for i, c in enumerate(classes) if isinstance(error, c))
        rec[1:1 + _MSG] = _text_slots(str(error), _MSG)
    rec[_ROWS] = rows
    rec[_RANGE:_RANGE + 3] = weight_range or (-1, -1, -1)
    rec[_HEAD] = len(settings)
    for i, (_, value) in enumerate(settings):
        at = _HEAD + 1 + _SLOTS * i
        if value is None:
            rec[at:at + _SLOTS] = [_KIND_NONE, 0, 0]
        elif isinstance(value, str):
            rec[at:at + _SLOTS] = [_KIND_STR, *_text_slots(value, _SLOTS - 1)]
        elif isinstance(value, float):
            rec[at:at + _SLOTS] = [_KIND_FLOAT, int(torch.tensor(value, dtype=torch.float64).view(torch.int64)), 0]
        else:
            rec[at:at + _SLOTS] = [_KIND_INT, int(value), 0]
    return torch.tensor(rec, dtype=torch.int64)


def _decode(rec: torch.Tensor, i: int):
    kind, *slots = (int(v) for v in rec[_HEAD + 1 + _SLOTS * i: _HEAD + 1 + _SLOTS * (i + 1)])
    if kind == _KIND_NONE:
        return None
    if kind == _KIND_STR:
        return _slots_text(slots)
    if kind == _KIND_FLOAT:
        return float(torch.tensor(slots[0], dtype=torch.int64).view(torch.float64))
    return slots[0]


def _raise_rank_error(every, error) -> None:
    failed = [r for r, e in enumerate(every) if int(e[_ERROR])]
    if not failed:
        return
    r = failed[0]
    cls = _error_classes()[int(every[r][_ERROR]) - 1]
    others = f" (and on rank{'s' * (len(failed) > 2)} {', '.join(map(str, failed[1:]))})" if failed[1:] else ""
    raise cls(f"vocabulary-parallel call refused on rank {r}{others}: "
              f"{_slots_text(every[r][1:1 + _MSG].tolist())}") from error


def _raise_disagreement(every, settings) -> None:
    if len({int(e[_HEAD]) for e in every}) != 1 or len({e.numel() for e in every}) != 1:
        raise XLossValueError("vocabulary-parallel ranks run different versions of xloss (their first "
                              "collectives differ in length)")
    parts = []
    for i, (name, _) in enumerate(settings):
        seen = [_decode(e, i) for e in every]
        if len(set(seen)) != 1:
            parts.append(f"{name} ({', '.join(f'{v!r} on rank {r}' for r, v in enumerate(seen))})")
    if parts:
        raise XLossValueError(f"vocabulary-parallel ranks disagree on {'; '.join(parts)}: every rank must pass the "
                              "same tokens, targets and settings (only weight and bias are per-rank shards)")


def _raise_bad_layout(every) -> None:
    """Shards that are views of one full weight must tile it in rank order, without overlap or gap."""
    ranges = [tuple(int(v) for v in e[_RANGE:_RANGE + 3]) for e in every]
    if any(full < 0 for full, _, _ in ranges) or len({full for full, _, _ in ranges}) != 1:
        return  # not every shard is a view of a full weight of one size: the rank order is the layout
    for r in range(1, len(ranges)):
        prev_stop, start = ranges[r - 1][1] + ranges[r - 1][2], ranges[r][1]
        if start != prev_stop:
            what = "overlaps" if start < prev_stop else "leaves a gap after"
            shown = ", ".join(f"rank {q}: rows [{a}, {a + n})" for q, (_, a, n) in enumerate(ranges))
            raise XLossValueError(f"vocabulary-parallel weight shards must tile the vocabulary in rank order; rank "
                                  f"{r}'s shard {what} rank {r - 1}'s ({shown} of a ({ranges[0][0]}, H) weight): "
                                  "take each rank's rows with xloss.torch.shard_vocab(weight)")


def view_range(weight: torch.Tensor) -> tuple[int, int, int] | None:
    """(rows of the full weight, first row, rows) when ``weight`` is a block of whole rows of a larger
    2-D tensor (``full[a:b]``, as :func:`shard_vocab` makes), else None."""
    base = weight._base
    if base is None or base.ndim != 2 or weight.ndim != 2 or base.shape[1] != weight.shape[1]:
        return None
    if weight.stride() != base.stride() or base.stride(0) <= 0:
        return None
    first, rest = divmod(weight.storage_offset() - base.storage_offset(), base.stride(0))
    if rest or not 0 <= first <= base.shape[0] - weight.shape[0]:
        return None
    return base.shape[0], first, weight.shape[0]


_groups: dict[str, object] = {}  # key -> process group, for the custom ops (a group cannot be an op argument)


def group_key(group) -> str | None:
    """What crosses into the FLCE ops for ``process_group``: None, or a key filed for the group."""
    if group is None:
        return None
    key = _key(group)
    if not torch.compiler.is_compiling():  # a traced side effect would not be replayed in time: group_of finds it
        _groups[key] = group
    return key


def _key(group) -> str:
    return f"<process group {id(group):#x}>"


def group_of(key: str | None):
    """Inverse of :func:`group_key` (inside the op bodies)."""
    if key is not None and key not in _groups:  # filed while torch.compile traced (not replayed): torch's groups
        from torch.distributed import distributed_c10d as c10d

        _groups.update({_key(group): group for group in c10d._world.pg_map})
    return None if key is None else _groups[key]


def vocab_shard_range(vocab_size: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of rank's contiguous shard when ``vocab_size`` rows are split as evenly as
    possible over ``world_size`` ranks (the first ``vocab_size % world_size`` ranks get one more)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise XLossValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}")
    base, extra = divmod(vocab_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def default_group(group):
    """``group``, or for None the default (WORLD) group when torch.distributed is initialised, as
    torch.distributed's own functions read ``group=None``; None outside a process group."""
    if group is not None:
        return group
    import torch.distributed as dist

    return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None


def shard_vocab(tensor: torch.Tensor, process_group=None) -> torch.Tensor:
    """This rank's rows of a full-vocabulary ``tensor`` (weight (V, H) or bias (V)), per :func:`vocab_shard_range`,
    in ``process_group`` (None: the default group, as in torch.distributed; the whole tensor outside one)."""
    coll = Collectives(default_group(process_group))
    start, stop = vocab_shard_range(tensor.shape[0], coll.world_size, coll.rank)
    return tensor[start:stop]
