"""Host configuration (TOML): ports by device identity, robots, joint ids and limits, safe-stop
policy and the hashed operator credential.

Every table is read strictly (`tether._config.Table`): an unknown or misspelled key is an
`unknown_key` error naming the key and the nearest valid one, so no setting (a speed, a limit)
is ever silently replaced by its default. Values are in SI units: radians, rad/s, and
milliseconds for the serial timeout; protocol units (ticks) never appear here. Limits and the
arrival tolerance are converted to ticks once, through `tables`; everything after loading works
in ticks. Example:

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
tolerance = 0.03                     # radians: how close to its goal a joint has arrived

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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether._config import HostConfigError, Table, nearest
from tether.adapters.dynamixel import tables

SAFE_STOP_POLICIES = ("hold", "torque_off")

#: The keys each table accepts (anything else is `unknown_key`).
TOP_KEYS = ("host", "operator", "ports", "robots")
HOST_KEYS = ("state_dir",)
OPERATOR_KEYS = ("credential",)
PORT_KEYS = ("type", "url", "usb_serial", "vid_pid", "baudrate", "timeout_ms", "read_retries")
ROBOT_KEYS = ("port", "joints", "safe_stop", "speed", "first_motion_speed", "tolerance")
JOINT_KEYS = ("name", "id", "min", "max", "model")

#: Default arrival tolerance, radians (about 20 ticks of an X-series servo).
DEFAULT_TOLERANCE = 0.03
MAX_TOLERANCE = 0.3

#: Every `.code` a HostConfigError can carry (stable; listed for callers and drift tests).
ERROR_CODES: tuple[str, ...] = (
    "bad_id",
    "bad_limit",
    "bad_safe_stop",
    "bad_speed",
    "bad_toml",
    "bad_tolerance",
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
    "unknown_key",
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

    KEYS = PORT_KEYS

    @classmethod
    def from_table(cls, name: str, table: Table) -> DynamixelPortConfig:
        where = table.where
        url = table.optional_text("url")
        usb_serial = table.optional_text("usb_serial")
        vid_pid = table.optional_text("vid_pid")
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
        baudrate = table.integer("baudrate", 57600)
        timeout_ms = table.integer("timeout_ms", 50)
        read_retries = table.integer("read_retries", 2)
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
    tolerance_rad: float = DEFAULT_TOLERANCE

    def joint_by_id(self, dxl_id: int) -> JointConfig:
        for joint in self.joints:
            if joint.id == dxl_id:
                return joint
        raise config_error(
            "unknown_joint", f"robot {self.name} has no joint with id {dxl_id}", id=dxl_id
        )

    def joint(self, name: str) -> JointConfig:
        for joint in self.joints:
            if joint.name == name:
                return joint
        names = [j.name for j in self.joints]
        raise config_error(
            "unknown_joint",
            f"robot {self.name} has no joint {name!r}{_did_you_mean(name, names)}",
            joint=name,
            suggestion=nearest(name, names),
        )

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
            raise config_error(
                "unknown_robot",
                f"no robot {name!r} in {self.path}{_did_you_mean(name, self.robots)}",
                robot=name,
                suggestion=nearest(name, self.robots),
                configured=sorted(self.robots),
            ) from None

    def verify_operator(self, secret: str | None) -> bool:
        """True when `secret` matches the stored credential hash (never when none is set)."""
        if not secret or self.operator_credential is None:
            return False
        return verify_credential(secret, self.operator_credential)


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    known = sorted(known)
    suggestion = nearest(name, known)
    if suggestion is not None:
        return f"; did you mean {suggestion!r}?"
    return f" (configured: {', '.join(known) or 'none'})"


def _joint(robot: str, index: int, raw: Any) -> JointConfig:
    table = Table(raw, f"robots.{robot}.joints[{index}]", JOINT_KEYS)
    where = table.where
    name = table.text("name")
    dxl_id = table.integer("id")
    if not 0 <= dxl_id <= 252:
        raise config_error("bad_id", f"{where}: id {dxl_id} is not 0..252")
    lo = table.number("min")
    hi = table.number("max")
    try:
        lo_t, hi_t = tables.radians_to_ticks(lo), tables.radians_to_ticks(hi)
    except ValueError as exc:
        raise config_error("bad_limit", f"{where}: {exc}") from exc
    if not lo < hi:
        raise config_error("bad_limit", f"{where}: min {lo} is not below max {hi}")
    if lo_t < 0 or hi_t > tables.MAX_TICK:
        raise config_error("bad_limit", f"{where}: limits leave the one-turn range of the servo")
    model = table.optional_integer("model")
    return JointConfig(name, dxl_id, lo, hi, lo_t, hi_t, model)


def _robot(name: str, raw: Any, ports: dict[str, DynamixelPortConfig]) -> RobotConfig:
    table = Table(raw, f"robots.{name}", ROBOT_KEYS)
    where = table.where
    port = table.text("port")
    if port not in ports:
        raise config_error(
            "unknown_port",
            f"{where}: port {port!r} is not declared{_did_you_mean(port, ports)}",
            port=port,
            suggestion=nearest(port, ports),
        )
    joints = tuple(_joint(name, i, t) for i, t in enumerate(table.array("joints")))
    if not joints:
        raise config_error("no_joints", f"{where}: at least one joint is required")
    ids = [j.id for j in joints]
    names = [j.name for j in joints]
    if len(set(ids)) != len(ids) or len(set(names)) != len(names):
        raise config_error("duplicate_joint", f"{where}: joint ids and names must be unique")
    safe_stop = table.text("safe_stop", "hold")
    if safe_stop not in SAFE_STOP_POLICIES:
        raise config_error(
            "bad_safe_stop", f"{where}: safe_stop {safe_stop!r} not in {SAFE_STOP_POLICIES}"
        )
    speed = table.number("speed", 1.5)
    first = table.number("first_motion_speed", 0.3)
    if not (0 < first <= speed < 50):
        raise config_error("bad_speed", f"{where}: need 0 < first_motion_speed <= speed < 50 rad/s")
    tolerance = table.number("tolerance", DEFAULT_TOLERANCE)
    if not 0 <= tolerance <= MAX_TOLERANCE:
        raise config_error(
            "bad_tolerance", f"{where}: tolerance {tolerance} rad is not 0..{MAX_TOLERANCE}"
        )
    return RobotConfig(
        name,
        port,
        joints,
        safe_stop,
        tables.profile_velocity_for(speed),
        tables.profile_velocity_for(first),
        abs(tables.radians_to_tick_delta(tolerance)),
        tolerance,
    )


def default_state_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "tether" if runtime else Path(f"/tmp/tether-{os.getuid()}")


def parse_config(text: str, path: Path = Path("<memory>")) -> HostConfig:
    """Validate a TOML host configuration; every table is read strictly."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise config_error("bad_toml", f"{path}: {exc}") from exc
    doc = Table(raw, "", TOP_KEYS)
    host = doc.table("host", HOST_KEYS)
    state_dir = Path(host.text("state_dir", str(default_state_dir())))
    from tether.adapters import PORT_TYPES  # the registry imports this module

    ports: dict[str, DynamixelPortConfig] = {}
    for name, raw_port in doc.mapping("ports").items():
        where = f"ports.{name}"
        if not isinstance(raw_port, dict):
            raise config_error("wrong_type", f"{where} is not a table")
        kind = raw_port.get("type", "dynamixel")
        if not isinstance(kind, str):
            raise config_error("wrong_type", f"{where}: `type` must be a string", key="type")
        if kind not in PORT_TYPES:
            raise config_error(
                "unknown_port_type",
                f"{where}: type {kind!r} is not one of {sorted(PORT_TYPES)}",
                type=kind,
            )
        config_class = PORT_TYPES[kind]
        ports[name] = config_class.from_table(name, Table(raw_port, where, config_class.KEYS))
    robots = {name: _robot(name, t, ports) for name, t in doc.mapping("robots").items()}
    seen: dict[tuple[str, int], str] = {}
    for robot in robots.values():
        for joint in robot.joints:
            other = seen.setdefault((robot.port, joint.id), robot.name)
            if other != robot.name:
                raise config_error(
                    "duplicate_joint",
                    f"id {joint.id} on port {robot.port} used by {other} and {robot.name}",
                )
    credential = doc.table("operator", OPERATOR_KEYS).optional_text("credential")
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
