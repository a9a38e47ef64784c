"""Vocabulary-parallel helpers over ``torch.distributed``: each rank holds a contiguous shard
``[start, start + V_r)`` of the vocabulary (those rows of ``weight`` and ``bias``). Every collective
goes through :class:`Collectives`, whose methods are no-ops without a group, so one process runs
the same code."""

from __future__ import annotations

import json
from functools import partialmethod

import torch
import torch.distributed as dist

from ..errors import UnsupportedRequestError, XLossError, XLossIndexError, XLossTypeError, XLossValueError


class Collectives:
    """The collectives the vocabulary-parallel FLCE uses, on ``group`` (None: one process)."""

    def __init__(self, group=None):
        self.group, self.world_size, self.rank = group, 1, 0
        if group is not None:
            if not dist.is_available() or not dist.is_initialized():
                raise XLossValueError("process_group was given but torch.distributed is not initialised "
                                      "(call torch.distributed.init_process_group first)")
            self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def _reduce(self, op: str, t: torch.Tensor) -> torch.Tensor:
        """In-place elementwise ``op`` over the ranks."""
        if self.active:
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=self.group)
        return t

    max_, sum_, min_ = partialmethod(_reduce, "MAX"), partialmethod(_reduce, "SUM"), partialmethod(_reduce, "MIN")

    def vocab_layout(self, local_rows: int, tokens: int, chunk: int = 0) -> tuple[int, int]:
        return self.agree(local_rows, [("tokens", tokens), ("chunk_size", chunk)])

    def agree(self, local_rows: int, settings, error: BaseException | None = None,
              weight_range: tuple[int, int, int] | None = None) -> tuple[int, int]:
        """``(start, global_vocab)`` of this rank's shard (the shards in rank order), from the call's first
        collective: an all-gather of every rank's rows, argument error, ``settings`` ((name, JSON-able value)
        pairs that must be equal on every rank) and ``weight_range`` (:func:`view_range`). Any rank's error,
        a disagreement or overlapping/gapped shards raise the same XLossError on every rank, so no rank is
        left waiting in a later collective or given a wrong result."""
        if not self.active:
            if error is not None:
                raise error
            return 0, local_rows
        every = [torch.zeros(_RECORD_BYTES // 8, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(every, _encode(local_rows, settings, error, weight_range), group=self.group)
        every = [_decode(e) for e in every]
        _raise_rank_error(every, error)
        _raise_disagreement(every, settings)
        _raise_bad_layout(every)
        rows = [e["rows"] for e in every]
        return sum(rows[: self.rank]), sum(rows)


# The first collective's record: JSON (data, never code) zero-padded to a fixed size (gloo aborts when
# ranks gather different sizes): the error (class, message), the rows, the weight range, the settings.
_RECORD_BYTES, _MESSAGE_CHARS = 4096, 512
_ERRORS = (XLossError, XLossValueError, XLossTypeError, XLossIndexError, UnsupportedRequestError)


def _encode(rows: int, settings, error, weight_range) -> torch.Tensor:
    failed = None if error is None else max(i for i, c in enumerate(_ERRORS) if isinstance(error, c))
    message = "" if error is None else str(error)[:_MESSAGE_CHARS]
    record = {"error": failed, "rows": rows, "range": list(weight_range or (-1, -1, -1)),
              "settings": [[name, json.dumps(value)] for name, value in settings]}
    while True:  # a long message gives way, never a setting
        raw = json.dumps({**record, "message": message}, ensure_ascii=False).encode()
        if len(raw) <= _RECORD_BYTES or not message:
            break
        message = message[: len(message) // 2]
    if len(raw) > _RECORD_BYTES:
        raise XLossValueError(f"the settings compared across ranks exceed {_RECORD_BYTES} bytes")
    return torch.frombuffer(bytearray(raw.ljust(_RECORD_BYTES, b"\0")), dtype=torch.int64).clone()


def _decode(rec: torch.Tensor) -> dict:
    try:
        return json.loads(rec.numpy().tobytes().rstrip(b"\0").decode())
    except ValueError:
        raise XLossValueError("vocabulary-parallel ranks run different versions of xloss (their first "
                              "collectives differ in format)") from None


def _raise_rank_error(every, error) -> None:
    failed = [r for r, e in enumerate(every) if e["error"] is not None]
    if failed:
        r, rest = failed[0], failed[1:]
        others = f" (and on rank{'s' * (len(rest) > 1)} {', '.join(map(str, rest))})" if rest else ""
        raise _ERRORS[every[r]["error"]](f"vocabulary-parallel call refused on rank {r}{others}: "
                                         f"{every[r]['message']}") from error


def _raise_disagreement(every, settings) -> None:
    if len({tuple(name for name, _ in e["settings"]) for e in every}) != 1:
        raise XLossValueError("vocabulary-parallel ranks run different versions of xloss (their first "
                              "collectives compare different settings)")
    seen = [[e["settings"][i][1] for e in every] for i in range(len(settings))]  # JSON: NaN == NaN, 1 != 1.0
    parts = [f"{name} ({', '.join(f'{json.loads(v)!r} on rank {r}' for r, v in enumerate(texts))})"
             for (name, _), texts in zip(settings, seen) if len(set(texts)) != 1]
    if parts:
        raise XLossValueError(f"vocabulary-parallel ranks disagree on {'; '.join(parts)}: every rank must pass the "
                              "same tokens, targets and settings (only weight and bias are per-rank shards)")


def _raise_bad_layout(every) -> None:
    """Shards that are views of one full weight must tile it in rank order, without overlap or gap."""
    ranges = [tuple(e["range"]) for e in every]
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
    if (base is None or base.ndim != 2 or weight.ndim != 2 or base.shape[1] != weight.shape[1]
            or weight.stride() != base.stride() or base.stride(0) <= 0):
        return None
    first, rest = divmod(weight.storage_offset() - base.storage_offset(), base.stride(0))
    ok = not rest and 0 <= first <= base.shape[0] - weight.shape[0]
    return (base.shape[0], first, weight.shape[0]) if ok else None


_groups: dict[str, object] = {}  # key -> process group, for the custom ops (a group cannot be an op argument)


def group_key(group) -> str | None:
    """What crosses into the FLCE ops for ``process_group``: None, or a key filed for the group (not while
    torch.compile traces: a traced side effect is not replayed in time, and :func:`group_of` finds it)."""
    key = None if group is None else f"<process group {id(group):#x}>"
    if key is not None and not torch.compiler.is_compiling():
        _groups[key] = group
    return key


def group_of(key: str | None):
    """Inverse of :func:`group_key` (inside the op bodies)."""
    if key is not None and key not in _groups:  # filed while torch.compile traced: torch's own groups
        _groups.update({group_key(g): g for g in dist.distributed_c10d._world.pg_map})
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
    """This rank's rows of a full-vocabulary ``tensor`` (weight (V, H) or bias (V)), per :func:`vocab_shard_range`,
    in ``process_group`` (None: the default group when one is initialised, as torch.distributed reads it)."""
    if process_group is None and dist.is_available() and dist.is_initialized():
        process_group = dist.group.WORLD
    coll = Collectives(process_group)
    return tensor[slice(*vocab_shard_range(tensor.shape[0], coll.world_size, coll.rank))]
