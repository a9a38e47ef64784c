"""Running a validated call: pick the backend for the request, run, and mark the caller's buffers."""

from __future__ import annotations

from . import registry
from .containers import mark_written


def run(args, backend, *outs) -> None:
    """Run ``args`` on the backend chosen for its request; ``outs`` are the caller's out= buffers
    (bumped for autograd, as an in-place torch op would be)."""
    registry.resolve(backend, args.request()).run(args)
    mark_written(*outs)
