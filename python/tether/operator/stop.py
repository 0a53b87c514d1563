"""`tether stop`: safe-stop every configured device, through the owning host when there is one."""

from __future__ import annotations

from tether.adapters.dynamixel.hostcli import stop_main


def main(argv: list[str]) -> int:
    return stop_main(argv)
