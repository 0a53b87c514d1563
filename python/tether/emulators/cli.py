"""`tether emulate <device> ...`: start one of the wire-protocol emulators."""

from __future__ import annotations

import importlib
import sys

from tether import _exit

#: Device name -> module with `main(argv) -> int`.
EMULATORS: dict[str, str] = {"dynamixel": "tether.emulators.dynamixel"}
#: The codes `tether emulate` documents (a test checks them against `tether._exit`).
EXIT_CODES = (_exit.OK, _exit.USAGE)

_USAGE = f"usage: tether emulate {{{','.join(sorted(EMULATORS))}}} [options]"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(_USAGE)
        print("\nRun a device emulator on a pty; `tether emulate DEVICE --help` lists its flags.")
        print("\ndevices:")
        for name in sorted(EMULATORS):
            print(f"  {name}")
        print("\nexit codes: 0 stopped (Ctrl-C); 2 usage (see `tether --help`).")
        return _exit.OK
    if not argv or argv[0] not in EMULATORS:
        given = f": unknown device {argv[0]!r}" if argv else ": name a device"
        print(f"tether emulate: usage{given}; {_USAGE}", file=sys.stderr)
        return _exit.USAGE
    module = importlib.import_module(EMULATORS[argv[0]])
    code: int = module.main(argv[1:])
    return code
