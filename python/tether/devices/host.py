"""The generic device host: owns the configured ports, answers other processes, stops safely.

The host is the one owner of its ports (exclusive open and an identity lock,
`tether.devices.ports`); every protocol-specific call goes through the robot's device type
(`tether.devices.registry`). It owns:
- the control channel (`tether.devices.control`): `stop`, `state`, `identity`, `resume`,
  `reboot` and whatever an adapter adds with `add_handler`;
- the stop latch (`tether.devices.latch`): an operator's stop latches the robot durably in one
  lock with its safe-stop, every effectful frame on the robot's bus passes the latch under the
  same lock, and only an operator's `resume` clears it (it survives a restart);
- safe-stop on exit: `close()` applies each connected robot's policy before releasing its port
  (a latched robot was stopped and nothing was sent to it since: it is only read back);
  `serve_until_signal()` returns on SIGTERM and SIGINT so the caller's `close()` runs;
- the first-motion speed limit (`tether.devices.motion`): a connect, resume or reboot makes the
  next move a first motion; the move path asks `motion_limit` before each move (SI, rad/s; the
  device type converts it) and reports a completed one with `motion_done`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from tether._args import STOP_SIGNALS
from tether._coded import CodedError
from tether._dirs import usable_dir
from tether._priority import stop_priority
from tether._proc import wait_for_signal
from tether.devices.config import HostConfig
from tether.devices.control import ControlServer, send_request, socket_path_for
from tether.devices.latch import OPERATOR_STOP, MotionStopped, StopLatch  # noqa: F401
from tether.devices.motion import FirstMotion, MotionLimit
from tether.devices.ports import owner_socket_of
from tether.devices.registry import DeviceType, StopReport
from tether.transport import DeviceSetupError, PortLost, TransportTimeout

log = logging.getLogger(__name__)


class HostRefusal(CodedError):
    """The host refused an operator request (`reboot_unconfirmed`, `unknown_joint`)."""


class DeviceHost:
    """Owns the buses of the robots it connects. Single owner; close() always safe-stops."""

    def __init__(self, config: HostConfig[Any], *, socket_path: str | None = None) -> None:
        """`socket_path`: the control socket (default `<state_dir>/host-<pid>.sock`; the
        daemon's is `<state_dir>/serve.sock`). Every port lock this host takes names it."""
        usable_dir(config.state_dir, what="host.state_dir")  # private, before anything in it
        self.config = config
        self.buses: dict[str, Any] = {}
        self.identities: dict[str, Any] = {}
        self.socket_path = socket_path or socket_path_for(
            config.state_dir / f"host-{os.getpid()}.sock"
        )
        self.latch = StopLatch(config.state_dir)
        self.first_motion = FirstMotion()
        self._server: ControlServer | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._overrides: dict[str, Callable[[dict[str, Any]], Any]] = {}
        #: One lock per port, held while it is opened or dropped (`connect`, `forget_lost`):
        #: a connect that waits on one port's devices holds up no other port.
        self._port_locks: dict[str, threading.RLock] = {}
        self._port_locks_guard = threading.Lock()

    # --- ownership ---

    def device_type(self, robot_name: str) -> DeviceType:
        return self.config.device_type(robot_name)

    def _robots_on(self, port: str) -> list[str]:
        return sorted(n for n, s in self.config.specs.items() if s.port == port)

    def _gate(self, port: str) -> Callable[[list[int]], Any]:
        specs = self.config.specs

        @contextmanager
        def gate(ids: list[int]) -> Iterator[None]:
            wanted = set(ids)
            robots = [
                name
                for name in self._robots_on(port)
                if 0xFE in wanted or any(j.id in wanted for j in specs[name].joints)
            ]
            with self.latch.permit(robots):
                yield

        return gate

    def connect(self, robot_name: str, *, for_stop: bool = False) -> Any:
        """Open the robot's port (once per port), check the robot's devices, serve control.
        ``for_stop``: each device is asked once (`DeviceType.connect`)."""
        robot = self.config.robot(robot_name)
        spec = self.config.spec(robot_name)
        dtype = self.device_type(robot_name)
        with self._port_lock(spec.port):
            if spec.port not in self.buses:
                bus = dtype.open_bus(
                    self.config.ports[spec.port],
                    lock_dir=self.config.state_dir,
                    socket_path=self.socket_path,
                )
                dtype.set_gate(bus, self._gate(spec.port))
                self.buses[spec.port] = bus
            identity = dtype.connect(self.buses[spec.port], robot, for_stop=for_stop)
            self.identities[robot_name] = identity
            self.first_motion.reset(robot_name, reason="connect")
        self.serve_control()
        return identity

    def connect_for_stop(self, robot_name: str) -> bool:
        """Open the robot's port for a stop; whether the robot is connected (`connect`). When
        some of its devices do not answer in time (a servo silent, `TransportTimeout`), the
        port stays open with the robot not connected, so the stop's frames still reach the
        devices that do answer (each one that does not is reported as such): a stop is never
        held back by the one device it cannot reach. A device that answers as another one
        (`DeviceIdentityError`, but for one set up wrong: `DeviceSetupError`, stopped all the
        same) or a port that does not open is refused as `connect` refuses
        it: no frame goes to a device not known to be the configured one."""
        try:
            self.connect(robot_name, for_stop=True)
        except TransportTimeout:
            if self.config.spec(robot_name).port not in self.buses:
                raise
            log.warning(
                "robot %s: a device did not answer its connect check; stopping it anyway",
                robot_name,
            )
            return False
        except DeviceSetupError as exc:
            # The configured device, set up so a move would not do what host.toml says: no
            # move runs on it (not connected), and a stop still goes to it.
            log.warning("robot %s: %s; stopping it anyway", robot_name, exc)
            return False
        return True

    def _port_lock(self, port: str) -> threading.RLock:
        with self._port_locks_guard:
            return self._port_locks.setdefault(port, threading.RLock())

    def forget_lost(self) -> list[str]:
        """Close every port whose adapter went away (`DeviceType.lost`) and disconnect its
        robots, so the next use opens the port anew (a replugged adapter, a restarted
        emulator) and checks the devices again, instead of failing on the dead one for
        ever. The robots disconnected. Never waits: a port another thread is opening (a
        connect checking its devices) is left to it (a stop must not wait on a connect)."""
        dropped: list[str] = []
        for port, bus in list(self.buses.items()):
            robots = self._robots_on(port)
            if not robots or not self.device_type(robots[0]).lost(bus):
                continue
            lock = self._port_lock(port)
            if not lock.acquire(blocking=False):
                continue
            try:
                if port not in self.buses or self.buses[port] is not bus:
                    continue  # opened anew meanwhile
                del self.buses[port]
                try:
                    bus.close()  # releases the port's identity lock
                except Exception:  # the adapter is gone already: nothing to flush
                    pass
                for name in robots:
                    if self.identities.pop(name, None) is not None:
                        dropped.append(name)
            finally:
                lock.release()
        return dropped

    def serve_control(self) -> None:
        """Serve the control channel now (a connect does it too; once)."""
        if self._server is None:
            self._handlers.update(
                {
                    "stop": self._on_stop,
                    "state": self._on_state,
                    "identity": self._on_identity,
                    "resume": self._on_resume,
                    "reboot": self._on_reboot,
                }
            )
            for op, handler in self._overrides.items():
                self._handlers[op] = handler
            self._server = ControlServer(self.socket_path, self._handlers)

    def add_handler(self, op: str, handler: Callable[[dict[str, Any]], Any]) -> None:
        """Serve `op` on this host's control socket too (an adapter's own requests, or the
        daemon's: one given before the channel starts replaces a built-in op)."""
        self._handlers[op] = handler
        self._overrides[op] = handler

    def handler(self, op: str) -> Callable[[dict[str, Any]], Any] | None:
        """The handler this host serves `op` with on its control socket, or None."""
        return self._handlers.get(op)

    def _bus(self, robot_name: str) -> Any:
        """The open bus of `robot_name`'s port; `PortLost` (`port_lost`) when that port is not
        open now (lost, and not reopened yet)."""
        port = self.config.spec(robot_name).port
        bus = self.buses.get(port)
        if bus is None:
            raise PortLost(
                "port_lost",
                f"robot {robot_name} is not connected: its port {port!r} is not open (it was"
                " lost; it is opened again once it answers)",
                details={"robot": robot_name, "port": port},
            )
        return bus

    def bus_for(self, robot: Any) -> Any:
        """The bus of a connected robot. Reads always pass; every effectful frame on it passes
        the stop latch first (see `check_motion`)."""
        return self._bus(robot.name)

    def latched(self, robot_name: str) -> bool:
        """True while an operator's stop holds the robot (until `resume`)."""
        return self.latch.latched(robot_name)

    def check_motion(self, robot_name: str) -> None:
        """The move path's check before every effectful frame (under the stop's lock):
        `MotionStopped` while the robot is latched. The frame itself passes the same check
        again under the same lock on the bus, so a stop cannot land between check and send."""
        with self.latch.lock:
            self.latch.check([robot_name])

    def motion_limit(self, robot_name: str, *, reissue: bool = False) -> MotionLimit:
        """The speed limit of the robot's coming move (the one first-motion policy,
        `tether.devices.motion`): capped after a connect, resume, reboot or for a re-issue."""
        return self.first_motion.limit(self.config.spec(robot_name), reissue=reissue)

    def motion_done(self, robot_name: str) -> None:
        """A move of the robot completed: its next move is no longer a first motion."""
        self.first_motion.moved(robot_name)

    def reissue_proven(self, robot_name: str) -> None:
        """An operator's re-issue was proved on this host: the next move is a first motion."""
        self.first_motion.reset(robot_name, reason="reissue")

    # --- control requests ---

    def _on_stop(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        names = [request["robot"]] if request.get("robot") else list(self.identities)
        return [self.stop_report(name, latch=True) for name in names]

    def _on_state(self, request: dict[str, Any]) -> dict[str, Any]:
        name = str(request.get("robot"))
        robot = self.config.robot(name)
        return self.device_type(name).read_state(self._bus(name), robot)

    def _on_identity(self, request: dict[str, Any]) -> dict[str, Any]:
        return {name: ident.as_dict() for name, ident in self.identities.items()}

    def _on_resume(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.resume(str(request.get("robot")), operator=str(request.get("operator")))

    def _on_reboot(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.reboot(
            str(request.get("robot")),
            [str(j) for j in request.get("joints") or []],
            operator=str(request.get("operator")),
            arm_supported=bool(request.get("arm_supported")),
        )

    # --- operations ---

    def stop(self, robot_name: str, *, latch: bool = False, by: str = OPERATOR_STOP) -> StopReport:
        """Safe-stop one robot; `latch` (an operator's stop) keeps it stopped until resumed,
        recording `by` as who stopped it (`tether.devices.latch.SESSION_LAPSE` for the session
        watchdog). Runs at a stop's priority (`tether._priority.stop_priority`)."""
        robot = self.config.robot(robot_name)
        with stop_priority(), self.latch.stopping():
            if latch:
                self.latch.latch(robot_name, by=by)
            return self.device_type(robot_name).safe_stop(self._bus(robot_name), robot)

    def stop_report(
        self, robot_name: str, *, latch: bool = False, by: str = OPERATOR_STOP
    ) -> dict[str, Any]:
        """`stop`'s report as a document, saying so when the latch is held in memory only."""
        report = self.stop(robot_name, latch=latch, by=by).as_dict()
        return self.latch_noted(robot_name, report)

    def latch_noted(self, robot_name: str, report: dict[str, Any]) -> dict[str, Any]:
        """`report` of a stop of `robot_name`, not ok and with `latch_error` when its latch
        record could not be written (`StopLatch.unwritten`): the frames went, but the latch
        is not durable."""
        why = self.latch.unwritten(robot_name)
        if why is None:
            return report
        note = f"latched in this process only: the latch record could not be written ({why})"
        return {**report, "ok": False, "latch_error": note}

    def resume(self, robot_name: str, *, operator: str) -> dict[str, Any]:
        """Clear the robot's stop latch (recorded with the operator's name)."""
        self.config.robot(robot_name)
        with self.latch.lock:
            doc = self.latch.resume(robot_name, operator=operator)
            self.first_motion.reset(robot_name, reason="resume")
        return doc

    def reboot(
        self, robot_name: str, joints: list[str], *, operator: str, arm_supported: bool
    ) -> dict[str, Any]:
        """Reboot joints of a robot (every joint when none is named) and read it fresh.

        A reboot drops torque: refused (`reboot_unconfirmed`) unless the operator confirmed
        that the arm is supported. It is the operator's own act, so it passes the latch."""
        robot = self.config.robot(robot_name)
        spec = self.config.spec(robot_name)
        if not arm_supported:
            raise HostRefusal(
                "reboot_unconfirmed",
                f"a reboot drops torque on {robot_name}: confirm that the arm is supported "
                "(--arm-supported)",
                details={"robot": robot_name},
            )
        names = {j.name: j.id for j in spec.joints}
        unknown = [j for j in joints if j not in names]
        if unknown:
            raise HostRefusal(
                "unknown_joint",
                f"robot {robot_name} has no joint {unknown[0]!r} (joints: {', '.join(names)})",
                details={"robot": robot_name, "joint": unknown[0]},
            )
        ids = [names[j] for j in joints] if joints else list(names.values())
        dtype = self.device_type(robot_name)
        bus = self._bus(robot_name)
        with self.latch.stopping():
            dtype.reboot(bus, robot, ids, operator=operator)
            self.first_motion.reset(robot_name, reason="reboot")
        state = dtype.read_state(bus, robot)
        return {
            "robot": robot_name,
            "rebooted_ids": ids,
            "operator": operator,
            "state": state,
            "read_back": dtype.si_state(robot, state),
        }

    def release_ports(self) -> None:
        """Close every port and forget its robots, sending nothing: for a start refused after
        some robots were connected (a connect only reads), so that refusal sends no frame."""
        for port in list(self.buses):
            with self._port_lock(port):
                bus = self.buses.pop(port, None)
                if bus is not None:
                    try:
                        bus.close()  # releases the port's identity lock
                    except Exception:  # nothing to flush on a port we only read
                        pass
        self.identities.clear()

    def close(self) -> list[StopReport]:
        """Safe-stop every connected robot, then release every port (always)."""
        reports: list[StopReport] = []
        try:
            for name in list(self.identities):
                try:
                    if self.latch.latched(name):
                        # Stopped by an operator and nothing sent since: read back, send nothing.
                        dtype = self.device_type(name)
                        robot = self.config.robot(name)
                        reports.append(dtype.stopped_report(self._bus(name), robot))
                        continue
                    reports.append(self.stop(name))
                    # Why a move this stop cut stands where it does, for its reconcile.
                    self.latch.note_shutdown_stop(name)
                except Exception as exc:
                    reports.append(
                        self.device_type(name).stop_failure(
                            self.config.robot(name), f"{type(exc).__name__}: {exc}"
                        )
                    )
        finally:
            if self._server is not None:
                self._server.close()
                self._server = None
            for bus in self.buses.values():
                bus.close()
            self.buses.clear()
        return reports

    def serve_until_signal(self, done: threading.Event | None = None) -> None:
        """Wait for SIGTERM, SIGHUP or SIGINT (or `done`); the caller's `close()` then
        safe-stops."""
        done = done or threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            done.set()

        for sig in (*STOP_SIGNALS, signal.SIGINT):  # SIGHUP too: a closed ssh session
            signal.signal(sig, on_signal)
        wait_for_signal(done)

    def __enter__(self) -> DeviceHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- from any process: through the owner when one holds the port, else directly ---


def owner_socket(config: HostConfig[Any], port_name: str) -> str | None:
    """The control socket of the process owning `port_name`, or None when nobody owns it."""
    return owner_socket_of(config.state_dir, config.ports[port_name])


def stop_everything(
    config: HostConfig[Any], robots: list[str] | None = None
) -> list[dict[str, Any]]:
    """`tether stop`: safe-stop and latch each robot through its owner, or directly when nobody
    owns its port. Every named robot must be configured (an unknown name raises before
    anything is sent); a robot that cannot be reached gets a report with its `error`, and the
    others are still stopped."""
    names = robots or sorted(config.robots)
    for name in names:
        config.robot(name)
    reports: list[dict[str, Any]] = []
    for name in names:
        spec = config.spec(name)
        latched = False  # a failure's report says whether the latch was written first
        try:
            socket_path = owner_socket(config, spec.port)
            if socket_path is not None:
                for report in send_request(socket_path, {"op": "stop", "robot": name}):
                    reports.append({**report, "via": "owner"})
                continue
            with DeviceHost(config) as host:
                latch = host.latch
                with latch.stopping():
                    latch.latch(name)  # before the port is even opened: nothing moves after
                    latched = True
                    host.connect_for_stop(name)
                    reports.append({**host.stop_report(name), "via": "direct"})
        except Exception as exc:
            failed = config.device_type(name).stop_failure(
                config.robot(name), f"{type(exc).__name__}: {exc}"
            )
            reports.append({**failed.as_dict(), "via": None, "latched": latched})
    return reports


def _direct(config: HostConfig[Any], robot_name: str) -> DeviceHost:
    host = DeviceHost(config)
    try:
        host.connect(robot_name)
    except BaseException:
        host.close()
        raise
    return host


def fresh_state(config: HostConfig[Any], robot_name: str) -> dict[str, Any]:
    """A fresh read-back of a robot: through its owner when one holds the port, else directly."""
    spec = config.spec(robot_name)
    socket_path = owner_socket(config, spec.port)
    if socket_path is not None:
        state: dict[str, Any] = send_request(socket_path, {"op": "state", "robot": robot_name})
        return state
    dtype = config.device_type(robot_name)
    bus = dtype.open_bus(config.ports[spec.port], lock_dir=config.state_dir, socket_path=None)
    try:
        return dtype.read_state(bus, config.robot(robot_name))
    finally:
        bus.close()


def resume_robot(config: HostConfig[Any], robot_name: str, *, operator: str) -> dict[str, Any]:
    """Clear a robot's stop latch: through its owner when one runs, else in the state dir."""
    spec = config.spec(robot_name)
    socket_path = owner_socket(config, spec.port)
    if socket_path is not None:
        doc: dict[str, Any] = send_request(
            socket_path, {"op": "resume", "robot": robot_name, "operator": operator}
        )
        return doc
    return StopLatch(config.state_dir).resume(robot_name, operator=operator)


def reboot_robot(
    config: HostConfig[Any],
    robot_name: str,
    joints: list[str],
    *,
    operator: str,
    arm_supported: bool,
) -> dict[str, Any]:
    """Reboot a robot's joints through its owner, or directly (and close: the port is released
    without a safe-stop write beyond the policy's)."""
    spec = config.spec(robot_name)
    request = {
        "op": "reboot",
        "robot": robot_name,
        "joints": joints,
        "operator": operator,
        "arm_supported": arm_supported,
    }
    socket_path = owner_socket(config, spec.port)
    if socket_path is not None:
        doc: dict[str, Any] = send_request(socket_path, request, timeout=30.0)
        return doc
    if not arm_supported:  # refused before the port is opened
        DeviceHost(config).reboot(robot_name, joints, operator=operator, arm_supported=False)
    with _direct(config, robot_name) as host:
        host.identities.clear()  # a reboot leaves torque off: no safe-stop write after it
        return host.reboot(robot_name, joints, operator=operator, arm_supported=True)


def last_operator_stop(config: HostConfig[Any], robot_name: str) -> int | None:
    """When an operator last stopped `robot_name` (wall ms), or None."""
    return StopLatch(config.state_dir).last_stop_ms(robot_name)


def last_shutdown_stop(config: HostConfig[Any], robot_name: str) -> int | None:
    """When this host last safe-stopped `robot_name` as it shut down (wall ms), or None."""
    return StopLatch(config.state_dir).last_shutdown_stop_ms(robot_name)


__all__ = [
    "DeviceHost",
    "HostRefusal",
    "fresh_state",
    "last_operator_stop",
    "last_shutdown_stop",
    "owner_socket",
    "reboot_robot",
    "resume_robot",
    "stop_everything",
]
