"""`tether stop`: safe-stop and latch every configured device, through the owning host when
there is one (generic: `tether.devices.cli`)."""

from __future__ import annotations

from tether.devices.cli import stop_main


def main(argv: list[str]) -> int:
    return stop_main(argv)
