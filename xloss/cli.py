"""The ``xloss`` command: ``xloss backends`` (and the subcommands other modules add)."""

from __future__ import annotations

import argparse
import json
import sys

from . import registry
from .kernels import KERNELS


def _caps_json(caps):
    return {"dtypes": sorted(caps.dtypes), "reductions": sorted(caps.reductions),
            "variants": {k: sorted(v, key=str) for k, v in caps.variants.items()},
            "max_elements": caps.max_elements, "fixed": dict(caps.fixed), "notes": caps.notes}


def cmd_backends(args) -> int:
    infos = registry.list_backends()
    if args.json:
        print(json.dumps([{"name": i.name, "available": i.available, "reason": i.reason,
                           "description": i.description, "info": dict(i.info),
                           "capabilities": {k: _caps_json(c) for k, c in i.capabilities.items()}}
                          for i in infos], indent=2))
        return 0
    for i in infos:
        status = "available" if i.available else f"UNAVAILABLE: {i.reason}"
        print(f"{i.name}  [{status}]")
        if i.description:
            print(f"    {i.description}")
        for key, value in i.info.items():
            print(f"    {key}: {value}")
        for kernel in KERNELS:
            caps = i.capabilities.get(kernel)
            print(f"    {kernel:<33} {caps.describe() if caps else '-'}")
        print()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xloss", description="xloss: loss kernels over CPU and vendor-ABI backends")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("backends", help="list registered backends, their library and declared capabilities")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_backends)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
