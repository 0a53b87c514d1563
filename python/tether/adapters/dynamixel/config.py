"""Host configuration (TOML): ports by device identity, robots, joint ids and limits, safe-stop
policy and the hashed operator credential.

Limits are written in radians and converted to raw ticks here, once, through
`tables.radians_to_ticks`; everything after loading works in ticks. Example:

```toml
[host]
state_dir = "/run/tether"            # identity locks and control sockets

[operator]
credential = "scrypt$16384$8$1$..."  # `tether host hash-credential` prints one

[ports.arm_bus]
type = "dynamixel"
usb_serial = "FT6Z5XYZ"              # preferred: USB serial number / VID:PID
vid_pid = "0403:6014"
url = "/dev/ttyUSB0"                 # or a path / pyserial URL (emulator: the pty path)
baudrate = 57600

[robots.arm]
port = "arm_bus"
safe_stop = "hold"                   # "hold" (torque on, goal := present) or "torque_off"
speed = 1.5                          # rad/s, Profile Velocity of ordinary moves
first_motion_speed = 0.3             # rad/s after a reconnect or an operator re-issue

[[robots.arm.joints]]
name = "shoulder"
id = 1
min = -1.5                           # radians
max = 1.5
model = 1030                         # optional: expected PING model number
```
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether._config import HostConfigError
from tether.adapters.dynamixel import tables

SAFE_STOP_POLICIES = ("hold", "torque_off")

#: Every `.code` a HostConfigError can carry (stable; listed for callers and drift tests).
ERROR_CODES: tuple[str, ...] = (
    "bad_id",
    "bad_limit",
    "bad_safe_stop",
    "bad_speed",
    "bad_toml",
    "bad_vid_pid",
    "duplicate_joint",
    "empty_credential",
    "limit_violation",
    "missing_key",
    "no_identity",
    "no_joints",
    "out_of_range",
    "plain_credential",
    "unknown_joint",
    "unknown_port",
    "unknown_port_type",
    "unknown_robot",
    "unreadable",
    "wrong_type",
)


def config_error(code: str, message: str, **details: Any) -> HostConfigError:
    """A HostConfigError carrying a stable snake_case `.code` (one of `ERROR_CODES`)."""
    if code not in ERROR_CODES:
        raise ValueError(f"unlisted config error code {code!r}")
    return HostConfigError(code, message, details=details)


def _get(
    table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = ...
) -> Any:
    if key not in table:
        if default is ...:
            raise config_error("missing_key", f"{where}: `{key}` is required")
        return default
    value = table[key]
    # bool is an int subclass: a `true` is never a number here.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise config_error(
            "wrong_type", f"{where}: `{key}` has the wrong type ({type(value).__name__})"
        )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


@dataclass(frozen=True)
class DynamixelPortConfig:
    """One DYNAMIXEL bus: how to find the adapter and how to talk on it."""

    name: str
    url: str | None
    usb_serial: str | None
    vid_pid: str | None
    baudrate: int = 57600
    timeout_ms: int = 50
    read_retries: int = 2

    @classmethod
    def from_table(cls, name: str, table: dict[str, Any]) -> DynamixelPortConfig:
        where = f"ports.{name}"
        url = _get(table, "url", str, where, None)
        usb_serial = _get(table, "usb_serial", str, where, None)
        vid_pid = _get(table, "vid_pid", str, where, None)
        if url is None and usb_serial is None and vid_pid is None:
            raise config_error("no_identity", f"{where}: give usb_serial/vid_pid or url")
        if vid_pid is not None:
            parts = vid_pid.split(":")
            if len(parts) != 2 or not all(len(p) == 4 for p in parts):
                raise config_error(
                    "bad_vid_pid", f"{where}: vid_pid {vid_pid!r} is not 'vvvv:pppp'"
                )
            try:
                int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                raise config_error(
                    "bad_vid_pid", f"{where}: vid_pid {vid_pid!r} is not hex"
                ) from None
        baudrate = _get(table, "baudrate", int, where, 57600)
        timeout_ms = _get(table, "timeout_ms", int, where, 50)
        read_retries = _get(table, "read_retries", int, where, 2)
        if baudrate <= 0 or not 1 <= timeout_ms <= 10_000 or not 0 <= read_retries <= 10:
            raise config_error(
                "out_of_range", f"{where}: baudrate/timeout_ms/read_retries out of range"
            )
        return cls(
            name,
            url,
            usb_serial,
            vid_pid.lower() if vid_pid else None,
            baudrate,
            timeout_ms,
            read_retries,
        )


@dataclass(frozen=True)
class JointConfig:
    name: str
    id: int
    min_rad: float
    max_rad: float
    min_ticks: int
    max_ticks: int
    model: int | None = None

    def check_ticks(self, ticks: int) -> None:
        """Refuse a goal outside the configured limits (before anything is sent)."""
        if not self.min_ticks <= ticks <= self.max_ticks:
            raise config_error(
                "limit_violation",
                f"joint {self.name} (id {self.id}): goal {ticks} ticks outside "
                f"[{self.min_ticks}, {self.max_ticks}]",
            )


@dataclass(frozen=True)
class RobotConfig:
    name: str
    port: str
    joints: tuple[JointConfig, ...]
    safe_stop: str
    velocity: int
    first_motion_velocity: int
    tolerance_ticks: int

    def joint_by_id(self, dxl_id: int) -> JointConfig:
        for joint in self.joints:
            if joint.id == dxl_id:
                return joint
        raise config_error("unknown_joint", f"robot {self.name} has no joint with id {dxl_id}")

    def joint(self, name: str) -> JointConfig:
        for joint in self.joints:
            if joint.name == name:
                return joint
        raise config_error("unknown_joint", f"robot {self.name} has no joint {name!r}")

    @property
    def ids(self) -> list[int]:
        return [j.id for j in self.joints]


@dataclass(frozen=True)
class HostConfig:
    path: Path
    state_dir: Path
    ports: dict[str, DynamixelPortConfig]
    robots: dict[str, RobotConfig]
    operator_credential: str | None

    def robot(self, name: str) -> RobotConfig:
        try:
            return self.robots[name]
        except KeyError:
            raise config_error("unknown_robot", f"no robot {name!r} in {self.path}") from None

    def verify_operator(self, secret: str | None) -> bool:
        """True when `secret` matches the stored credential hash (never when none is set)."""
        if not secret or self.operator_credential is None:
            return False
        return verify_credential(secret, self.operator_credential)


def _joint(robot: str, index: int, table: Any) -> JointConfig:
    where = f"robots.{robot}.joints[{index}]"
    if not isinstance(table, dict):
        raise config_error("wrong_type", f"{where} is not a table")
    name = _get(table, "name", str, where)
    dxl_id = _get(table, "id", int, where)
    if not 0 <= dxl_id <= 252:
        raise config_error("bad_id", f"{where}: id {dxl_id} is not 0..252")
    lo = float(_get(table, "min", (int, float), where))
    hi = float(_get(table, "max", (int, float), where))
    try:
        lo_t, hi_t = tables.radians_to_ticks(lo), tables.radians_to_ticks(hi)
    except ValueError as exc:
        raise config_error("bad_limit", f"{where}: {exc}") from exc
    if not lo < hi:
        raise config_error("bad_limit", f"{where}: min {lo} is not below max {hi}")
    if lo_t < 0 or hi_t > tables.MAX_TICK:
        raise config_error("bad_limit", f"{where}: limits leave the 0..4095 tick range of one turn")
    model = _get(table, "model", int, where, None)
    return JointConfig(name, dxl_id, lo, hi, lo_t, hi_t, model)


def _robot(name: str, table: Any, ports: dict[str, DynamixelPortConfig]) -> RobotConfig:
    where = f"robots.{name}"
    if not isinstance(table, dict):
        raise config_error("wrong_type", f"{where} is not a table")
    port = _get(table, "port", str, where)
    if port not in ports:
        raise config_error("unknown_port", f"{where}: port {port!r} is not declared")
    raw_joints = _get(table, "joints", list, where)
    joints = tuple(_joint(name, i, t) for i, t in enumerate(raw_joints))
    if not joints:
        raise config_error("no_joints", f"{where}: at least one joint is required")
    ids = [j.id for j in joints]
    names = [j.name for j in joints]
    if len(set(ids)) != len(ids) or len(set(names)) != len(names):
        raise config_error("duplicate_joint", f"{where}: joint ids and names must be unique")
    safe_stop = _get(table, "safe_stop", str, where, "hold")
    if safe_stop not in SAFE_STOP_POLICIES:
        raise config_error(
            "bad_safe_stop", f"{where}: safe_stop {safe_stop!r} not in {SAFE_STOP_POLICIES}"
        )
    speed = float(_get(table, "speed", (int, float), where, 1.5))
    first = float(_get(table, "first_motion_speed", (int, float), where, 0.3))
    if not (0 < first <= speed < 50):
        raise config_error("bad_speed", f"{where}: need 0 < first_motion_speed <= speed < 50 rad/s")
    tolerance = _get(table, "tolerance_ticks", int, where, 20)
    if not 0 <= tolerance <= 200:
        raise config_error("out_of_range", f"{where}: tolerance_ticks {tolerance} not 0..200")
    return RobotConfig(
        name,
        port,
        joints,
        safe_stop,
        tables.profile_velocity_for(speed),
        tables.profile_velocity_for(first),
        tolerance,
    )


def default_state_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "tether" if runtime else Path(f"/tmp/tether-{os.getuid()}")


def parse_config(text: str, path: Path = Path("<memory>")) -> HostConfig:
    """Validate a TOML host configuration."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise config_error("bad_toml", f"{path}: {exc}") from exc
    host = _get(doc, "host", dict, "host", {})
    state_dir = Path(_get(host, "state_dir", str, "host", str(default_state_dir())))
    ports: dict[str, DynamixelPortConfig] = {}
    for name, table in _get(doc, "ports", dict, "ports", {}).items():
        if not isinstance(table, dict):
            raise config_error("wrong_type", f"ports.{name} is not a table")
        kind = _get(table, "type", str, f"ports.{name}", "dynamixel")
        from tether.adapters import PORT_TYPES  # the registry imports this module

        if kind not in PORT_TYPES:
            raise config_error(
                "unknown_port_type",
                f"ports.{name}: type {kind!r} is not one of {sorted(PORT_TYPES)}",
            )
        ports[name] = PORT_TYPES[kind].from_table(name, table)
    robots = {
        name: _robot(name, t, ports) for name, t in _get(doc, "robots", dict, "robots", {}).items()
    }
    seen: dict[tuple[str, int], str] = {}
    for robot in robots.values():
        for joint in robot.joints:
            other = seen.setdefault((robot.port, joint.id), robot.name)
            if other != robot.name:
                raise config_error(
                    "duplicate_joint",
                    f"id {joint.id} on port {robot.port} used by {other} and {robot.name}",
                )
    operator = _get(doc, "operator", dict, "operator", {})
    credential = _get(operator, "credential", str, "operator", None)
    if credential is not None and not credential.startswith("scrypt$"):
        raise config_error(
            "plain_credential", "operator.credential must be a hash (tether host hash-credential)"
        )
    return HostConfig(path, state_dir, ports, robots, credential)


def load_config(path: str | os.PathLike[str]) -> HostConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise config_error("unreadable", f"{p}: {exc.strerror}") from exc
    return parse_config(text, p)


_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def hash_credential(secret: str) -> str:
    """A salted scrypt hash to store in the configuration instead of the secret."""
    if not secret:
        raise config_error("empty_credential", "the operator credential must not be empty")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        secret.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )
    enc = base64.urlsafe_b64encode
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${enc(salt).decode()}${enc(digest).decode()}"


def verify_credential(secret: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        expected = base64.urlsafe_b64decode(digest)
        actual = hashlib.scrypt(
            secret.encode(),
            salt=base64.urlsafe_b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)
