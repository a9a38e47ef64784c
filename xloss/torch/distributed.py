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

import json

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

    def _reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        """In-place elementwise ``op`` (MAX, SUM, MIN) over the ranks."""
        if self.active:
            import torch.distributed as dist

            dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=self.group)
        return t

    def max_(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, "MAX")

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, "SUM")

    def min_(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, "MIN")

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
        every = [_decode(e) for e in every]
        _raise_rank_error(every, error)
        _raise_disagreement(every, settings)
        _raise_bad_layout(every)
        rows = [e["rows"] for e in every]
        return sum(rows[: self.rank]), sum(rows)


# The first collective's record: JSON (data, never code) in a fixed number of int64 slots, zero-padded,
# since gloo aborts when ranks gather different sizes. It holds the argument error (class, message), this
# rank's rows, the weight's place in a full weight it is a view of, and the settings as (name, JSON text).
_RECORD_BYTES = 4096
_MESSAGE_CHARS = 512


def _error_classes():
    from ..errors import UnsupportedRequestError, XLossError, XLossIndexError, XLossTypeError

    return (XLossError, XLossValueError, XLossTypeError, XLossIndexError, UnsupportedRequestError)


def _encode(rows: int, settings, error, weight_range) -> torch.Tensor:
    failed = None if error is None else max(i for i, c in enumerate(_error_classes()) if isinstance(error, c))
    message = "" if error is None else str(error)[:_MESSAGE_CHARS]
    record = {"error": failed, "rows": rows, "range": list(weight_range or (-1, -1, -1)),
              "settings": [[name, json.dumps(value)] for name, value in settings]}
    raw = json.dumps({**record, "message": message}, ensure_ascii=False).encode()
    while len(raw) > _RECORD_BYTES and message:  # a long message gives way, never a setting
        message = message[: len(message) // 2]
        raw = json.dumps({**record, "message": message}, ensure_ascii=False).encode()
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
    if not failed:
        return
    r = failed[0]
    cls = _error_classes()[every[r]["error"]]
    others = f" (and on rank{'s' * (len(failed) > 2)} {', '.join(map(str, failed[1:]))})" if failed[1:] else ""
    raise cls(f"vocabulary-parallel call refused on rank {r}{others}: {every[r]['message']}") from error


def _raise_disagreement(every, settings) -> None:
    if len({tuple(name for name, _ in e["settings"]) for e in every}) != 1:
        raise XLossValueError("vocabulary-parallel ranks run different versions of xloss (their first "
                              "collectives compare different settings)")
    parts = []
    for i, (name, _) in enumerate(settings):
        seen = [e["settings"][i][1] for e in every]  # JSON texts: NaN equals NaN, 1 differs from 1.0
        if len(set(seen)) != 1:
            parts.append(f"{name} ({', '.join(f'{json.loads(v)!r} on rank {r}' for r, v in enumerate(seen))})")
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
