"""Fixtures the DYNAMIXEL tests share (`_dxl_fixtures`): a two-servo emulator on a real pty
(shafts moving 20x faster than real time) and a host configuration naming it. A test file that
needs another bus defines its own `emulator` fixture, which takes precedence. `family` is the
robot_move family on that configuration (its adapter closed after the test)."""

from _dxl_fixtures import config, emulator, family

__all__ = ["config", "emulator", "family"]
