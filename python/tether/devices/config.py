"""The host configuration's generic part: host, operators, ports by identity, robots, joints.

Read strictly (`tether._config.Table`): an unknown or misspelled key is `unknown_key`, naming
the key and the nearest valid one. Values are SI units (radians, rad/s); protocol units never
appear. Each port names its device `type` (`tether.devices.registry`); the device type adds
and validates its own port and joint keys and builds the robot configuration its adapter uses.

```toml
[host]
state_dir = "/var/lib/tether"              # identity locks, control sockets, stop latches

[operators.alice]                      # `tether operator hash --name alice` prints this table
credential = "$argon2id$v=19$m=65536,t=3,p=4$LyzAADDajCkQAo1ryr085g$wKvlE51/7tBJ08o6kaCwtktilmssZKMiIYr11PHdg24"
role = "operator"                      # or "observer" (reads only)

[planners.ci]                          # `tether operator hash --name ci --role planner`
token = "$argon2id$v=19$m=65536,t=3,p=4$aoC3srP1VuoUtRTjLL6jkw$ou8oC+QZQ3rEkFC8H5s3iPNKtUvIVnqI0X+lQz0tY+g"
role = "planner"                       # submits, watches, stops, reads; or "observer"

[tls]                                  # network listeners off loopback need it
cert = "tls/host.pem"                  # relative paths are relative to this file
key = "tls/host.key"                   # owned by the daemon's uid, mode 0600

[ports.arm_bus]
type = "dynamixel"
usb_serial = "FT6Z5XYZ"                # or vid_pid = "0403:6014", or url = "/dev/ttyUSB0"

[robots.arm]
port = "arm_bus"
safe_stop = "hold"                     # or "torque_off"
speed = 1.5                            # rad/s
first_motion_speed = 0.3               # rad/s: first move after a (re)connect, re-issue, resume
tolerance = 0.03                       # rad

[[robots.arm.joints]]
name = "shoulder"
id = 1
min = -1.5                             # rad
max = 1.5
```
"""  # noqa: E501 (the example hash is one TOML string)

from __future__ import annotations

import hashlib
import os
import re
import stat
import string
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from tether import _dirs, _listen
from tether._config import HostConfigError, Table, clipped, nearest
from tether.devices import credentials
from tether.devices.registry import DeviceType, device_type

SAFE_STOP_POLICIES: Final = ("hold", "torque_off")
#: The principals' and listeners' tables (`_planners`, `_tls`); [serve] is tether.serve's,
#: [remote] the bridge's (`tether.adapters.grpc.bridge`, read when its family loads).
AUTH_KEYS: Final = ("planners", "tls")
TOP_KEYS: Final = ("host", "operators", "ports", "robots", "serve", "remote", *AUTH_KEYS)
#: The `[remote]` table's keys (the gRPC bridge's: `tether.adapters.grpc.bridge` reads it
#: whole; every command that reads the configuration checks its keys, types and paths).
REMOTE_KEYS: Final = ("address", "token_file", "ca", "timeout_s", "client_cert", "client_key")
HOST_KEYS: Final = ("state_dir",)
OPERATOR_KEYS: Final = ("credential", "role")
PLANNER_KEYS: Final = ("token", "role")
TLS_KEYS: Final = ("cert", "key", "client_ca")
PORT_KEYS: Final = ("type", "url", "usb_serial", "vid_pid")
ROBOT_KEYS: Final = ("port", "joints", "safe_stop", "speed", "first_motion_speed", "tolerance")
JOINT_KEYS: Final = ("name", "id", "min", "max")
DEFAULT_TYPE: Final = "dynamixel"
DEFAULT_TOLERANCE: Final = 0.03
MAX_TOLERANCE: Final = 0.3

#: Every `.code` this module's HostConfigErrors carry (device types list their own).
ERROR_CODES: Final = (
    "bad_id",
    "bad_joint_name",
    "bad_limit",
    "bad_path",
    "bad_role",
    "bad_safe_stop",
    "bad_speed",
    "bad_toml",
    "bad_tolerance",
    "bad_vid_pid",
    "bad_name",
    "duplicate_joint",
    "duplicate_port",
    "duplicate_principal",
    "missing_key",
    "no_identity",
    "no_joints",
    "old_credential_format",
    "plain_credential",
    "unknown_joint",
    "unknown_key",
    "unknown_port",
    "unknown_port_type",
    "unknown_robot",
    "unreadable",
    "weak_credential",
    "excessive_credential_cost",
    "wrong_type",
    "empty_value",
    "legacy_state_dir",
    "unexpanded_variable",
    "bad_remote",
    "insecure_config",
)


def listed_config_error(
    codes: Iterable[str], code: str, message: str, **details: Any
) -> HostConfigError:
    """A HostConfigError whose `.code` is one of `codes` (a device type lists its own)."""
    if code not in codes:
        raise ValueError(f"unlisted config error code {code!r}")
    return HostConfigError(code, message, details=details)


def config_error(code: str, message: str, **details: Any) -> HostConfigError:
    """A HostConfigError with a listed `.code` (one of `ERROR_CODES`)."""
    return listed_config_error(ERROR_CODES, code, message, **details)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    known = sorted(known)
    suggestion = nearest(name, known)
    if suggestion is not None:
        return f"; did you mean {suggestion!r}?"
    return f" (configured: {', '.join(known) or 'none'})"


@dataclass(frozen=True)
class JointSpec:
    """A joint as configured, in SI units."""

    name: str
    id: int
    min_rad: float
    max_rad: float


@dataclass(frozen=True)
class RobotSpec:
    """The generic part of a robot: its port, joints and SI limits and speeds, stop policy."""

    name: str
    port: str
    type: str
    joints: tuple[JointSpec, ...]
    safe_stop: str
    speed: float
    first_motion_speed: float
    tolerance: float


R = TypeVar("R")


@dataclass(frozen=True)
class HostConfig(Generic[R]):
    """A validated host configuration. `robots` hold each device type's robot configuration;
    `specs` their generic part."""

    path: Path
    state_dir: Path
    ports: dict[str, Any]
    robots: dict[str, R]
    operators: dict[str, credentials.Principal] = field(default_factory=dict)
    specs: dict[str, RobotSpec] = field(default_factory=dict)
    planners: dict[str, credentials.Principal] = field(default_factory=dict)
    tls: _listen.TlsConfig | None = None

    def robot(self, name: str) -> R:
        try:
            return self.robots[name]
        except KeyError:
            raise config_error(
                "unknown_robot",
                f"no robot {clipped(name)!r} in {self.path}{did_you_mean(name, self.robots)}",
                robot=clipped(name),
                suggestion=nearest(name, self.robots),
                configured=sorted(self.robots),
            ) from None

    def spec(self, name: str) -> RobotSpec:
        self.robot(name)
        return self.specs[name]

    def device_type(self, robot_name: str) -> DeviceType:
        return device_type(self.spec(robot_name).type)

    def limiter(self) -> credentials.RateLimiter:
        return credentials.RateLimiter(self.state_dir / "auth" / "failures.json")

    @property
    def principals(self) -> dict[str, credentials.Principal]:
        """Every principal: the operators and the planners (their names never collide)."""
        return {**self.operators, **self.planners}

    def authenticator(self) -> credentials.Authenticator:
        """The one lookup over every principal, rate-limited in this state dir. Only the
        daemon calls it, on its own configuration; a CLI never verifies a credential."""
        return credentials.Authenticator(self.principals, self.limiter())

    def authenticate(self, secret: str | None, *, role: str = "operator") -> str:
        """The name of the principal `secret` belongs to, holding `role` (`observer`: any
        role, since every role reads); rate-limited; `CredentialError`."""
        roles = credentials.roles_for("read") if role == "observer" else (role,)
        return self.authenticator().authenticate(secret, roles=roles).name

    def verify_operator(self, secret: str | None) -> str | None:
        """The operator's name when `secret` is a valid credential, else None."""
        try:
            return self.authenticate(secret)
        except credentials.CredentialError:
            return None


def default_state_dir() -> Path:
    """`tether._dirs.default_state_dir`: never a guessable shared `/tmp` path."""
    return _dirs.default_state_dir()


def _principals(doc: Table, table_name: str) -> dict[str, credentials.Principal]:
    """`[operators.NAME]` or `[planners.NAME]`: a hashed credential or token and a role."""
    hash_key, allowed = credentials.TABLES[table_name]
    keys = OPERATOR_KEYS if table_name == "operators" else PLANNER_KEYS
    out: dict[str, credentials.Principal] = {}
    for name, raw in doc.mapping(table_name).items():
        check_name("principal", name)
        table = Table(raw, f"{table_name}.{name}", keys)
        stored = table.text(hash_key)
        role = table.text("role", allowed[0])
        if role not in allowed:
            raise config_error(
                "bad_role",
                f"{table.where}: role {role!r} is not one of {allowed}",
                role=role,
            )
        hint = f"`tether operator hash --name {name} --role {role}`"
        if not stored.startswith("$") and not stored.startswith("scrypt$"):
            raise config_error(
                "plain_credential", f"{table.where}: {hash_key} must be a hash ({hint})"
            )
        try:
            cost = credentials.stored_cost(stored, where=f"{table.where}.{hash_key}")
        except credentials.CredentialError as exc:
            raise config_error(exc.code, exc.message, principal=name) from None
        out[name] = credentials.Principal(name, role, stored, cost, table_name)
    return out


def _operators(doc: Table) -> dict[str, credentials.Principal]:
    return _principals(doc, "operators")


def _planners(
    doc: Table, operators: dict[str, credentials.Principal]
) -> dict[str, credentials.Principal]:
    planners = _principals(doc, "planners")
    for name in sorted(set(planners) & set(operators)):
        raise config_error(
            "duplicate_principal",
            f"{name!r} is both [operators.{name}] and [planners.{name}]: a decision records "
            "the principal's name, so each name is one principal",
            principal=name,
        )
    return planners


def _tls(doc: Table, path: Path) -> _listen.TlsConfig | None:
    """The `[tls]` table: file paths only (the listener checks the key's owner and mode, and
    loads them, when it starts). `client_ca` (optional): the PEM roots every client must
    present a certificate of (mutual TLS)."""
    if "tls" not in doc:
        return None
    table = doc.table("tls", TLS_KEYS)
    # Each non-empty (`empty_value`): an empty path would name the config's own directory.
    cert, key = (config_relative(path, table.path(k)) for k in ("cert", "key"))
    ca = table.path("client_ca") if "client_ca" in table else None
    client_ca = None if ca is None else config_relative(path, ca)
    return _listen.TlsConfig(cert=cert, key=key, client_ca=client_ca)


def check_name(what: str, name: str) -> None:
    """A robot's, a port's or a principal's name (a table's key): 1 to 64 printable
    characters, without edge spaces or '/' (`bad_name`): it is printed in reports one per
    line, recorded as who decided or stopped, and joined with '/' (gRPC health's
    `RobotControl/<name>`, an operator's `PRINCIPAL/ID`)."""
    if not name or len(name) > 64 or not name.isprintable() or name != name.strip() or "/" in name:
        raise config_error(
            "bad_name",
            f"{what} name {clipped(name)!r} must be 1 to 64 printable characters, without"
            " '/' or edge spaces",
            key=name,
        )


def _check_remote(doc: Table, path: Path) -> None:
    """The `[remote]` table's shape, whoever reads the configuration (its address, TLS files and
    token are the bridge's to check when it loads): no unknown key, each of its type, no empty
    path, no path a shell would have to expand, a timeout in (0, 3600] s. A command that never
    drives the bridge still refuses a mistake there."""
    if "remote" not in doc:
        return
    table = doc.table("remote", REMOTE_KEYS)
    table.text("address")
    config_relative(path, table.path("token_file"))
    for key in ("ca", "client_cert", "client_key"):
        if key in table:
            config_relative(path, table.path(key))
    timeout = table.number("timeout_s", 10.0)
    if not 0 < timeout <= 3600:  # NaN too
        raise config_error(
            "bad_remote", f"remote.timeout_s {timeout} is not in (0, 3600]", value=timeout
        )


def _device_key(url: str | None, usb_serial: str | None, vid_pid: str | None) -> tuple[str, str]:
    """What a port's device is known by: its serial number, else its vid:pid alone, else its
    URL (a path as it resolves: two links to one device are one)."""
    if usb_serial is not None:  # a serial number names one adapter, whatever vid:pid is said
        return ("usb_serial", usb_serial)
    if vid_pid is not None:
        return ("vid_pid", vid_pid)
    assert url is not None
    return ("url", os.path.realpath(url) if url.startswith("/") else url)


def _ports(doc: Table, path: Path) -> dict[str, Any]:
    ports: dict[str, Any] = {}
    devices: dict[tuple[str, str], str] = {}
    for name, raw in doc.mapping("ports").items():
        where = f"ports.{name}"
        check_name("port", name)
        if not isinstance(raw, dict):
            raise config_error("wrong_type", f"{where} is not a table")
        kind = raw.get("type", DEFAULT_TYPE)
        if not isinstance(kind, str):
            raise config_error("wrong_type", f"{where}: `type` must be a string", key="type")
        dtype = device_type(kind, where=where)
        table = Table(raw, where, (*PORT_KEYS, *dtype.port_keys))
        url, usb_serial, vid_pid = (
            table.path(k) if k in table else None for k in ("url", "usb_serial", "vid_pid")
        )  # each non-empty when given (`empty_value`: a template's unset variable)
        if url is not None:
            url = device_url(path, url)
        if url is None and usb_serial is None and vid_pid is None:
            raise config_error("no_identity", f"{where}: give usb_serial/vid_pid or url")
        if vid_pid is not None:
            parts = vid_pid.split(":")
            if len(parts) != 2 or not all(len(p) == 4 for p in parts):
                raise config_error(
                    "bad_vid_pid", f"{where}: vid_pid {vid_pid!r} is not 'vvvv:pppp'"
                )
            if not all(c in string.hexdigits for c in vid_pid.replace(":", "")):
                raise config_error("bad_vid_pid", f"{where}: vid_pid {vid_pid!r} is not hex")
            vid_pid = vid_pid.lower()
        device = _device_key(url, usb_serial, vid_pid)
        other = devices.setdefault(device, name)
        if other != name:
            # Two tables for one device would each open it, and a stop latched through one
            # would not hold the moves sent through the other.
            raise config_error(
                "duplicate_port",
                f"{where}: ports.{other} names the same device ({device[0]} {device[1].strip()}):"
                " give each device one [ports] table (its robots all name it)",
                key=name,
            )
        ports[name] = (kind, dtype.port_config(name, table, url, usb_serial, vid_pid))
    return ports


def _joint(robot: str, index: int, raw: Any, extra: tuple[str, ...]) -> tuple[JointSpec, Table]:
    table = Table(raw, f"robots.{robot}.joints[{index}]", (*JOINT_KEYS, *extra))
    where = table.where
    joint_id = table.integer("id")
    if joint_id < 0:
        raise config_error("bad_id", f"{where}: id {joint_id} is negative")
    lo, hi = table.number("min"), table.number("max")
    if not lo < hi:
        raise config_error("bad_limit", f"{where}: min {lo} is not below max {hi}")
    name = table.text("name")
    if not name or len(name) > 64 or "=" in name or not name.isprintable() or name != name.strip():
        raise config_error(
            "bad_joint_name",
            f"{where}: joint name {clipped(name)!r} must be 1 to 64 printable characters,"
            " without '=' (`tether move --joint NAME=RADIANS`) or edge spaces",
        )
    return JointSpec(name, joint_id, lo, hi), table


#: A robot's joint speed limit (rad/s) unless it sets `speed`, the one of its first motion
#: after a connect or a resume unless it sets `first_motion_speed` (never above its `speed`),
#: and the bound of both.
DEFAULT_SPEED = 1.5
DEFAULT_FIRST_MOTION_SPEED = 0.3
MAX_SPEED = 50.0
#: How a `bad_speed` refusal names a default it took.
_DEFAULT_SAID: Final = {
    "speed": f" (its default, {DEFAULT_SPEED:g})",
    "first_motion_speed": f" (its default: {DEFAULT_FIRST_MOTION_SPEED:g}, or speed if lower)",
}


def _robot(name: str, raw: Any, ports: dict[str, Any]) -> tuple[RobotSpec, list[Table]]:
    table = Table(raw, f"robots.{name}", ROBOT_KEYS)
    where = table.where
    port = table.text("port")
    if port not in ports:
        raise config_error(
            "unknown_port",
            f"{where}: port {port!r} is not declared{did_you_mean(port, ports)}",
            port=port,
            suggestion=nearest(port, ports),
        )
    kind = ports[port][0]
    extra = device_type(kind).joint_keys
    read = [_joint(name, i, t, extra) for i, t in enumerate(table.array("joints"))]
    joints = tuple(j for j, _ in read)
    if not joints:
        raise config_error("no_joints", f"{where}: at least one joint is required")
    ids = [j.id for j in joints]
    names = [j.name for j in joints]
    for what, values in (("id", ids), ("name", names)):
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            raise config_error(
                "duplicate_joint",
                f"{where}: joint {what} {twice!r} is given twice: joint ids and names must be"
                " unique",
            )
    safe_stop = table.text("safe_stop", "hold")
    if safe_stop not in SAFE_STOP_POLICIES:
        raise config_error(
            "bad_safe_stop", f"{where}: safe_stop {safe_stop!r} not in {SAFE_STOP_POLICIES}"
        )
    speed = table.number("speed", DEFAULT_SPEED)
    first = table.number("first_motion_speed", min(DEFAULT_FIRST_MOTION_SPEED, speed))
    if not (0 < first <= speed < MAX_SPEED):
        given = ", ".join(
            f"{k} = {v:g}{'' if k in table else _DEFAULT_SAID[k]}"
            for k, v in (("speed", speed), ("first_motion_speed", first))
        )
        raise config_error(
            "bad_speed",
            f"{where}: need 0 < first_motion_speed <= speed < {MAX_SPEED:g} rad/s, got {given}",
        )
    tolerance = table.number("tolerance", DEFAULT_TOLERANCE)
    if not 0 <= tolerance <= MAX_TOLERANCE:
        raise config_error(
            "bad_tolerance", f"{where}: tolerance {tolerance} rad is not 0..{MAX_TOLERANCE}"
        )
    spec = RobotSpec(name, port, kind, joints, safe_stop, speed, first, tolerance)
    return spec, [t for _, t in read]


C = TypeVar("C", bound=HostConfig[Any])


def parse_config(
    text: str,
    path: Path = Path("<memory>"),
    *,
    factory: type[C] = HostConfig,  # type: ignore[assignment]
) -> C:
    """Validate a TOML host configuration; every table is read strictly. `factory` is the
    configuration class to build (a device type's own subclass)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise config_error("bad_toml", f"{path}: {exc}") from exc
    if isinstance(raw.get("operator"), dict):
        raise config_error(
            "old_credential_format",
            f"{path}: [operator] credential is the old single-credential format; run "
            "`tether operator hash --name NAME` and put the [operators.NAME] table it prints "
            "in its place",
        )
    doc = Table(raw, "", TOP_KEYS)
    host = doc.table("host", HOST_KEYS)
    legacy = [] if "state_dir" in host else _dirs.legacy_state_dirs()
    for old in legacy[:1]:  # a safety record left behind is never skipped silently
        raise config_error(
            "legacy_state_dir",
            f"{path}: host.state_dir is unset, and {old} (where an earlier Tether kept it"
            f" by default) holds stop latches or a daemon's lock; its default is now"
            f' {default_state_dir()}: set [host] state_dir = "{old}" to keep using it,'
            " or move its contents there",
            path=str(old),
        )
    state_dir = config_relative(path, host.path("state_dir", str(default_state_dir())))
    operators = _operators(doc)
    planners = _planners(doc, operators)
    tls = _tls(doc, path)
    _check_remote(doc, path)
    typed_ports = _ports(doc, path)
    specs: dict[str, RobotSpec] = {}
    robots: dict[str, Any] = {}
    for name, raw_robot in doc.mapping("robots").items():
        check_name("robot", name)
        spec, joint_tables = _robot(name, raw_robot, typed_ports)
        specs[name] = spec
        robots[name] = device_type(spec.type).robot_config(spec, joint_tables)
    seen: dict[tuple[str, int], str] = {}
    for spec in specs.values():
        for joint in spec.joints:
            other = seen.setdefault((spec.port, joint.id), spec.name)
            if other != spec.name:
                raise config_error(
                    "duplicate_joint",
                    f"id {joint.id} on port {spec.port} used by {other} and {spec.name}",
                )
    ports = {name: cfg for name, (_, cfg) in typed_ports.items()}
    return factory(path, state_dir, ports, robots, operators, specs, planners=planners, tls=tls)


def load_config(
    path: str | os.PathLike[str],
    *,
    factory: type[C] = HostConfig,  # type: ignore[assignment]
    insecure_ok: bool = False,
) -> C:
    """The host configuration at `path`. A file others may change is refused
    (`insecure_config`, `check_config_file`) unless `insecure_ok` (`tether stop`, which says
    so and stops anyway)."""
    p = Path(path)
    text = read_config_text(p)
    if not insecure_ok:
        check_config_file(p)
    try:
        return parse_config(text, p, factory=factory)
    except HostConfigError as exc:
        raise in_file(exc, p) from None


def config_digest(path: str | os.PathLike[str]) -> str | None:
    """The SHA-256 of the host file's bytes, or None where it cannot be read (a configuration
    given in memory): what tells a daemon's loaded configuration from the file as it is now."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def check_config_file(p: Path) -> None:
    """Refuse a host file others may change (`insecure_config`): writable by its group or by
    everyone, or owned by a user other than this one or root. Whoever may write it may add an
    operator's credential, widen a limit or raise a speed."""
    try:
        st = p.stat()  # a link's target: the file read
    except OSError:
        return  # read already, or refused as `unreadable`
    if st.st_mode & 0o022:
        who = "everyone" if st.st_mode & 0o002 else "its group"
        raise config_error(
            "insecure_config",
            f"{p}: writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): whoever may write"
            f" it may add an operator or widen a limit; chmod go-w {p}",
            path=str(p),
        )
    if st.st_uid not in (os.getuid(), 0):
        raise config_error(
            "insecure_config",
            f"{p}: owned by uid {st.st_uid}, neither this user ({os.getuid()}) nor root: its"
            " owner may add an operator or widen a limit",
            path=str(p),
        )


def config_relative(path: Path, value: str) -> Path:
    """A path setting of the configuration at `path`: `~` expanded, and a relative one taken
    from the configuration file's directory (as `[tls]` paths are), never from the working
    directory: each command that reads the file must find the same state (a stop latch made
    from one directory must hold for a move started from another). The directory is the
    file's own, links resolved: the file reached through a link is the same file, with the
    same state (through a link it had a state dir of its own, where a stop latch held
    nothing the other path's moves read)."""
    base = Path.cwd() if path.name == "<memory>" else path.resolve().parent
    return path_setting(base, value, where=path)


def path_setting(base: Path, value: str, *, where: str | Path) -> Path:
    """`value`, a path setting (of the configuration file, or the key, `where` names: its
    refusals begin with it) whose directory is `base`: `~`
    expanded (`bad_path` for `~user` of no user), a shell variable refused
    (`unexpanded_variable`), a relative path taken from `base`."""
    _no_variable(where, value)
    try:
        given = Path(value).expanduser()
    except RuntimeError:  # `~user` of no user
        raise config_error(
            "bad_path", f"{where}: {value!r}: no such user's home directory for '~'"
        ) from None
    return given if given.is_absolute() else base / given


_VARIABLE = re.compile(r"\$(\{?)[A-Za-z_]")


def _no_variable(path: str | Path, value: str) -> None:
    """Refuse a path holding a shell variable (`$HOME/...`, `${X}`): host.toml expands none
    (`~` only), and such a path named a directory literally called `$HOME` beside the file
    (`unexpanded_variable`)."""
    if _VARIABLE.search(value):
        raise config_error(
            "unexpanded_variable",
            f"{path}: {value!r}: host.toml expands no environment variable (only a leading"
            " ~); write the path out",
            value=value,
        )


def device_url(path: Path, url: str) -> str:
    """A port's `url` as the device layer opens it: a scheme URL (`socket://`, `rfc2217://`)
    as given; a path with `~` expanded and, when relative, taken from the configuration
    file's directory (`config_relative`), never from the working directory: `tether stop` run
    from `/` (a service's) must reach the same bus as from the file's directory."""
    if "://" in url:
        return url
    return str(config_relative(path, url))


def read_config_text(p: Path) -> str:
    """The text of the configuration file `p`: `unreadable` when it cannot be read, `bad_toml`
    when it is not UTF-8 (TOML is UTF-8 only), each naming the file."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise config_error("unreadable", f"{p}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise config_error(
            "bad_toml",
            f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}): TOML files are"
            " UTF-8; save it as UTF-8",
        ) from None


#: A TOML table header line: ``[name]`` or ``[[name]]``, a comment after it.
_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]*?)\s*\]\]?\s*(?:#.*)?$")


def _host_part(text: str) -> str:
    """The lines of a host file that is not TOML (a mistake anywhere in it) that hold its
    `[host]` table: the keys before the first header, and the tables `host` and `host.*`.
    Parsed alone, they name the state dir whose daemon `tether stop` asks, when they are TOML
    themselves; a mistake in them fails the parse (nothing is sent)."""
    kept: list[str] = []
    keep = True  # the top-level keys, before any header
    for line in text.splitlines():
        if line.lstrip().startswith("["):  # a header, or a torn one (`[operators.bob`)
            header = _HEADER.match(line)
            name = header.group(1).strip('"') if header else ""
            keep = name == "host" or name.startswith("host.")
        if keep:
            kept.append(line)
    return "\n".join(kept)


def state_dir_of_file(path: Path) -> Path | None:
    """The state dir a host file names, read from its `[host]` table alone when the file as a
    whole is refused (a misspelled key elsewhere, or no TOML at all: caught mid-edit), so a
    stop or a status can still find the processes that own its robots; None when even that
    table cannot be read for certain."""
    try:
        text = read_config_text(path)
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raw = tomllib.loads(_host_part(text))  # a file being edited: its [host] alone
        host = Table(raw.get("host", {}), "host", HOST_KEYS)
        return config_relative(path, host.path("state_dir", str(default_state_dir())))
    except (HostConfigError, tomllib.TOMLDecodeError):
        return None


def in_file(exc: HostConfigError, p: Path) -> HostConfigError:
    """`exc`, its message naming the configuration file first (once) and its details the file
    (`file`): a person with several host files sees which one is wrong."""
    where = str(p)
    if not exc.message.startswith(where + ":"):
        exc.message = f"{where}: {exc.message}"
        exc.args = (exc.code, exc.message)
    exc.details.setdefault("file", where)
    return exc


#: The environment variable naming the host configuration file for processes given no
#: `--config`: `tether worker` and the robot families' `families_from_env` factories.
CONFIG_ENV = "TETHER_HOST_CONFIG"


__all__ = [
    "CONFIG_ENV",
    "ERROR_CODES",
    "SAFE_STOP_POLICIES",
    "HostConfig",
    "JointSpec",
    "RobotSpec",
    "config_error",
    "config_relative",
    "default_state_dir",
    "did_you_mean",
    "in_file",
    "load_config",
    "parse_config",
    "read_config_text",
]
