"""Device types, keyed by the `type` of a port in the host configuration.

A device type is one object that brings what is specific to its protocol: the keys and
validation of its port and joint tables, its robot configuration (unit conversion from the
configuration's SI units), opening a bus (codec and transport), connecting a robot (identity),
the read-back, the safe-stop and REBOOT. The generic host (`tether.devices.host`) calls only
these. Entries are dotted paths, loaded on first use, so nothing generic imports a protocol
package; a new device type is a new folder under `tether/adapters/` plus one line here.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, Final, Protocol

from tether._config import HostConfigError, Table, nearest

#: type name -> "module:attribute" of its `DeviceType`.
DEVICE_TYPES: Final[dict[str, str]] = {
    "dynamixel": "tether.adapters.dynamixel.config:DEVICE_TYPE",
}


class Bus(Protocol):
    """An open bus, as the generic host holds it."""

    def close(self) -> None: ...


class StopReport(Protocol):
    """A robot's safe-stop report."""

    @property
    def ok(self) -> bool: ...
    def as_dict(self) -> dict[str, Any]: ...


class DeviceType(Protocol):
    """What a device type brings (see the module docstring)."""

    name: str
    #: Keys of a `[ports.NAME]` table besides the generic ones (type, url, usb_serial, vid_pid).
    port_keys: tuple[str, ...]
    #: Keys of a joint table besides the generic ones (name, id, min, max).
    joint_keys: tuple[str, ...]

    def port_config(
        self, name: str, table: Table, url: str | None, usb_serial: str | None, vid_pid: str | None
    ) -> Any:
        """The port's configuration (it satisfies `tether.devices.ports.PortLocator`)."""
        ...

    def robot_config(self, spec: Any, joint_tables: list[Table]) -> Any:
        """The robot's configuration, from its generic `RobotSpec` (SI units) and joint tables."""
        ...

    def open_bus(self, port: Any, *, lock_dir: Path | None, socket_path: str | None) -> Any:
        """Open the port exclusively, under the identity lock when `lock_dir` is given."""
        ...

    def set_gate(self, bus: Any, gate: Any) -> None:
        """Make every effectful frame on `bus` pass `gate(ids)` (a context manager) first."""
        ...

    def connect(self, bus: Any, robot: Any, *, for_stop: bool = False) -> Any:
        """Check the robot's devices answer as configured; its identity (`as_dict()`). With
        ``for_stop``, each device is asked once (no read retries): a stop goes on without a
        device that does not answer, and must not wait out its retries first."""
        ...

    def lost(self, bus: Any) -> bool:
        """Whether the bus's adapter went away under it (unplugged, hung up, EIO): no frame
        will pass it again; its port must be opened anew."""
        ...

    def read_state(self, bus: Any, robot: Any) -> dict[str, Any]:
        """A fresh read-back of every joint, with its read time."""
        ...

    def si_state(self, robot: Any, state: dict[str, Any]) -> dict[str, Any]:
        """A read-back in SI units, per joint name."""
        ...

    def safe_stop(self, bus: Any, robot: Any) -> StopReport:
        """Apply the robot's safe-stop policy and report what each joint is afterwards."""
        ...

    def stopped_report(self, bus: Any, robot: Any) -> StopReport:
        """What each joint is, from a read-back only (a latched robot at shutdown)."""
        ...

    def reboot(self, bus: Any, robot: Any, joint_ids: list[int], *, operator: str) -> None:
        """Reboot these joints (torque drops; the operator confirmed the arm is supported)."""
        ...

    def stop_failure(self, robot: Any, error: str) -> StopReport:
        """The report of a robot that could not be reached for a stop."""
        ...


_LOADED: dict[str, DeviceType] = {}


def device_type(name: str, *, where: str = "ports") -> DeviceType:
    """The device type registered under `name` (an `unknown_port_type` error otherwise)."""
    if name not in DEVICE_TYPES:
        suggestion = nearest(name, DEVICE_TYPES)
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        raise HostConfigError(
            "unknown_port_type",
            f"{where}: type {name!r} is not one of {sorted(DEVICE_TYPES)}{hint}",
            details={"type": name, "suggestion": suggestion},
        )
    if name not in _LOADED:
        module, _, attr = DEVICE_TYPES[name].partition(":")
        _LOADED[name] = getattr(import_module(module), attr)
    return _LOADED[name]


__all__ = ["DEVICE_TYPES", "Bus", "DeviceType", "StopReport", "device_type"]
