"""The owning host: holds the ports of configured robots and answers other processes.

Exactly one process owns a port (see `driver`). While it does, other processes (the operator
CLI, `tether stop`) cannot open the port; they read the owner's control socket from the
identity lock file and send one JSON request per connection:

- `{"op": "stop", "robot": name | null}`: safe-stop (all robots on this host when null); the
  answer is each robot's `SafeStopReport`, read back from the device after the stop
- `{"op": "state", "robot": name}`: a fresh read-back of every joint
- `{"op": "identity"}`: the identity each connected robot answered at connect

Closing the host safe-stops every connected robot before releasing its port, in a `finally`.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, RobotConfig
from tether.adapters.dynamixel.driver import (
    DeviceIdentity,
    DxlBus,
    _coded,
    check_robot,
    is_locked,
    lock_path,
    read_owner,
    resolve_port,
)
from tether.adapters.dynamixel.safety import SafeStopReport, safe_stop
from tether.operations._durable import write_durable
from tether.transport import PortBusy, TransportError


def read_state(bus: DxlBus, robot: RobotConfig) -> dict[str, Any]:
    """A fresh read-back of every joint, with the wall time it was taken."""
    ids = robot.ids
    fields = (
        tables.PRESENT_POSITION,
        tables.GOAL_POSITION,
        tables.MOVING,
        tables.TORQUE_ENABLE,
        tables.REGISTERED_INSTRUCTION,
        tables.HARDWARE_ERROR_STATUS,
    )
    joints: dict[str, dict[str, int]] = {str(i): {} for i in ids}
    for f in fields:
        for dxl_id, value in bus.sync_read_field(f, ids).items():
            joints[str(dxl_id)][f.name] = value
    return {"robot": robot.name, "read_at_ms": int(time.time() * 1000), "joints": joints}


#: AF_UNIX paths are limited to about 108 bytes; longer ones move to a short name in /tmp.
_MAX_SOCKET_PATH = 100


def socket_path_for(path: Path) -> str:
    """`path`, or a short stand-in under the temp dir when `path` is too long to bind."""
    text = str(path)
    if len(text.encode()) <= _MAX_SOCKET_PATH:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"tether-{os.getuid()}" / f"{digest}.sock")


class ControlServer:
    """Serves control requests on a unix socket (one thread)."""

    def __init__(self, path: str, handlers: dict[str, Callable[[dict[str, Any]], Any]]) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(8)
        self._handlers = handlers
        self._thread = threading.Thread(target=self._serve, name="tether-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                try:
                    with conn.makefile("r") as reader:
                        request = json.loads(reader.readline())
                    handler = self._handlers[str(request.get("op"))]
                    reply = {"ok": True, "result": handler(request)}
                except Exception as exc:
                    reply = {
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}",
                        "code": getattr(exc, "code", None),
                    }
                try:
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    pass

    def close(self) -> None:
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def send_request(socket_path: str, request: dict[str, Any], timeout: float = 10.0) -> Any:
    """One request to an owner's control socket; its result, or a `TransportError`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(socket_path)
            sock.sendall((json.dumps(request) + "\n").encode())
            with sock.makefile("r") as reader:
                line = reader.readline()
    except OSError as exc:
        raise _coded(
            TransportError,
            "owner_no_answer",
            f"control socket {socket_path}: {exc.__class__.__name__}: {exc}",
            socket=socket_path,
        ) from exc
    if not line:
        raise _coded(
            TransportError,
            "owner_no_answer",
            f"control socket {socket_path}: closed without answering",
            socket=socket_path,
        )
    reply = json.loads(line)
    if not reply.get("ok"):
        raise _coded(
            TransportError,
            "owner_refused",
            f"the owner refused: {reply.get('error')}",
            socket=socket_path,
            device_code=reply.get("code"),
        )
    return reply.get("result")


def _stop_marker(config: HostConfig, robot_name: str) -> Path:
    return config.state_dir / "stops" / f"{hashlib.sha256(robot_name.encode()).hexdigest()[:32]}"


def record_operator_stop(config: HostConfig, robot_name: str) -> None:
    """Note, durably, that an operator stopped `robot_name` now (evidence of later moves names
    `stopped_by_operator`)."""
    path = _stop_marker(config, robot_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durable(
        path, json.dumps({"robot": robot_name, "at_ms": int(time.time() * 1000)}).encode()
    )


def last_operator_stop(config: HostConfig, robot_name: str) -> int | None:
    """When an operator last stopped `robot_name` (wall ms), or None."""
    try:
        return int(json.loads(_stop_marker(config, robot_name).read_bytes())["at_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def owner_socket(config: HostConfig, port_name: str) -> str | None:
    """The control socket of the process owning `port_name`, or None when nobody owns it."""
    identity = resolve_port(config.ports[port_name])
    path = lock_path(config.state_dir, identity.key)
    if not is_locked(path):
        return None
    socket_path = read_owner(path).get("socket")
    if not isinstance(socket_path, str):
        raise _coded(
            PortBusy, "port_owned", f"{identity.key} is owned by a process without a control socket"
        )
    return socket_path


class RobotHost:
    """Owns the buses of the robots it connects. Single owner; close() always safe-stops."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.buses: dict[str, DxlBus] = {}
        self.identities: dict[str, DeviceIdentity] = {}
        self.socket_path = socket_path_for(config.state_dir / f"host-{os.getpid()}.sock")
        self._server: ControlServer | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}

    def bus_for(self, robot: RobotConfig) -> DxlBus:
        return self.buses[robot.port]

    def connect(self, robot_name: str) -> DeviceIdentity:
        robot = self.config.robot(robot_name)
        if robot.port not in self.buses:
            self.buses[robot.port] = DxlBus.open_config(
                self.config.ports[robot.port],
                lock_dir=self.config.state_dir,
                socket_path=self.socket_path,
            )
        identity = check_robot(self.buses[robot.port], robot)
        self.identities[robot_name] = identity
        if self._server is None:
            self._handlers.update(
                {"stop": self._on_stop, "state": self._on_state, "identity": self._on_identity}
            )
            self._server = ControlServer(self.socket_path, self._handlers)
        return identity

    def add_handler(self, op: str, handler: Callable[[dict[str, Any]], Any]) -> None:
        """Serve `op` on this host's control socket too (an adapter's own requests)."""
        self._handlers[op] = handler

    def _on_stop(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        names = [request["robot"]] if request.get("robot") else list(self.identities)
        for name in names:
            record_operator_stop(self.config, name)
        return [self.stop(name).as_dict() for name in names]

    def _on_state(self, request: dict[str, Any]) -> dict[str, Any]:
        robot = self.config.robot(str(request.get("robot")))
        return read_state(self.bus_for(robot), robot)

    def _on_identity(self, request: dict[str, Any]) -> dict[str, Any]:
        return {name: ident.as_dict() for name, ident in self.identities.items()}

    def stop(self, robot_name: str) -> SafeStopReport:
        robot = self.config.robot(robot_name)
        return safe_stop(self.bus_for(robot), robot)

    def close(self) -> list[SafeStopReport]:
        reports: list[SafeStopReport] = []
        try:
            for name in list(self.identities):
                try:
                    reports.append(self.stop(name))
                except Exception as exc:
                    policy = self.config.robot(name).safe_stop
                    reports.append(
                        SafeStopReport(name, policy, error=f"{type(exc).__name__}: {exc}")
                    )
        finally:
            if self._server is not None:
                self._server.close()
                self._server = None
            for bus in self.buses.values():
                bus.close()
            self.buses.clear()
        return reports

    def __enter__(self) -> RobotHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_everything(config: HostConfig, robots: list[str] | None = None) -> list[dict[str, Any]]:
    """`tether stop`: safe-stop each robot through its owner, or directly when nobody owns it.

    Every named robot must be configured (an unknown name raises before anything is sent); a
    robot that cannot be reached gets a report with its `error`, and the others are still
    stopped.
    """
    names = robots or sorted(config.robots)
    chosen = [config.robot(name) for name in names]
    reports: list[dict[str, Any]] = []
    for robot in chosen:
        name = robot.name
        try:
            socket_path = owner_socket(config, robot.port)
            if socket_path is not None:
                for report in send_request(socket_path, {"op": "stop", "robot": name}):
                    reports.append({**report, "via": "owner"})
                continue
            with DxlBus.open_config(config.ports[robot.port], lock_dir=config.state_dir) as bus:
                record_operator_stop(config, name)
                reports.append({**safe_stop(bus, robot).as_dict(), "via": "direct"})
        except Exception as exc:
            failed = SafeStopReport(name, robot.safe_stop, error=f"{type(exc).__name__}: {exc}")
            reports.append({**failed.as_dict(), "via": None})
    return reports


def fresh_state(config: HostConfig, robot_name: str) -> dict[str, Any]:
    """A fresh read-back of a robot: through its owner when one holds the port, else directly."""
    robot = config.robot(robot_name)
    socket_path = owner_socket(config, robot.port)
    if socket_path is not None:
        state: dict[str, Any] = send_request(socket_path, {"op": "state", "robot": robot_name})
        return state
    with DxlBus.open_config(config.ports[robot.port], lock_dir=config.state_dir) as bus:
        return read_state(bus, robot)
