"""`tether emulate <device> ...`: start one of the wire-protocol emulators."""

from __future__ import annotations

import importlib
import sys

#: Device name -> module with `main(argv) -> int`.
EMULATORS: dict[str, str] = {"dynamixel": "tether.emulators.dynamixel"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EMULATORS:
        print(f"usage: tether emulate {{{','.join(sorted(EMULATORS))}}} [options]", file=sys.stderr)
        return 2
    module = importlib.import_module(EMULATORS[argv[0]])
    code: int = module.main(argv[1:])
    return code
