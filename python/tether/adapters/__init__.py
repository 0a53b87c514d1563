"""Device adapters: one package per wire protocol, found by type name in `PORT_TYPES`."""

from __future__ import annotations

from typing import Any

from tether.adapters.dynamixel.config import DynamixelPortConfig

#: Port `type` in the host configuration -> the config class that reads that port's table.
PORT_TYPES: dict[str, type[Any]] = {"dynamixel": DynamixelPortConfig}

__all__ = ["PORT_TYPES"]
