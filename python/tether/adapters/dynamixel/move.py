"""The DYNAMIXEL adapter of `physical_ai.robot_move`: read, plan, stage, commit, reconcile.

The decisions are pure functions of decoded SI records (`decide`); this module does the bus
reads and writes around them and converts ticks to radians at the edge (`tables`).

Execute (one attempt; the operation id is already bound, durably, before this runs):
1. A fresh read-back of every joint, then the goals are planned from it and checked against
   the configured limits (a relative move adds its deltas to the measured positions): a move
   that can never run raises `MoveRefused` before any byte is written.
2. Profile Velocity is set to the speed limit the generic host's first-motion policy gives
   (`DeviceHost.motion_limit`: slow after a connect, resume, reboot or for an operator's
   re-issue; converted here from rad/s) and torque enabled; then the device state is read and
   stored as the attempt's pre-image, durably.
3. REG_WRITE of Goal Position on every joint, then one broadcast ACTION (no status exists
   for it).
Every effectful frame of a move (the WRITEs of step 2, every REG_WRITE and ACTION, the
neutralising ones of a reconcile or a re-issue proof) goes through one path,
`_send_logged`: the fence floor and the stop latch are checked, the frame's digest is appended
durably to the operation's sent log, then the frame is sent.
4. Present Position / Moving are read back until the arm settles (or the settle timeout), as
   live progress in radians.
Any failure after step 1 runs the robot's safe-stop in a `finally`, its writes logged with the
cause (`hardware_error`, `settle_timeout`, `not_reached`, `error`) before they are sent; a
joint of the robot that reports a hardware error mid-move (its status's Alert bit; a joint the
move does not command included) ends the read-back at once, so the safe-stop holds the other
joints where they are; a completed move ends
without a stop (the arm holds its goal, torque on, whatever the stop policy).

Reconcile (after a crash or a lost status) reads the device, waits for it to stand still (at
most the settle timeout), and applies `decide.reconcile`: Recovered, Unknown, or Neutralise;
after the neutralising writes (journaled, then read back) `decide.confirm` gives
ConfirmedAbsent (the port lock and that read-back are the retry guard) or Unknown.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from tether import _core
from tether._crash import crash_point
from tether.adapters.dynamixel import decide, tables
from tether.adapters.dynamixel.config import HostConfig, RobotConfig
from tether.adapters.dynamixel.host import (
    RobotHost,
    last_operator_stop,
    read_state,
)
from tether.adapters.dynamixel.safety import safe_stop
from tether.devices.host import last_shutdown_stop
from tether.devices.latch import STOP_REASONS
from tether.errors import HostConfigError
from tether.families.robot_move.journal import Operation, now_ms
from tether.families.robot_move.request import (
    Conclusion,
    ConfirmedAbsent,
    MoveRequest,
    Recovered,
    Unknown,
)
from tether.operations import JournalError
from tether.transport import DeviceError

#: The crash points of a move and of a re-issue proof (`TETHER_CRASH_AT=<name>`, the one
#: crash-injection mechanism, `tether._crash`).
CRASH_POINTS = ("after_preimage", "after_reg_write", "after_action", "after_readback")
PROOF_CRASH_POINTS = ("proof.after_neutralise", "proof.after_fence_floor")

ProgressFn = Callable[[dict[str, Any]], None]
#: How often a move waiting for its robot to come to rest reads it back.
AT_REST_POLL_S = 0.05

PRESENT_VELOCITY = tables.BY_NAME["present_velocity"]
#: One position step of an X-series servo, in radians (goal equality is within half of it).
RESOLUTION_RAD = tables.ticks_to_radians(tables.CENTER_TICK + 1)
#: Unknown-conclusions of a move still settling are reconciled again after this long.
SETTLE_RETRY_MS = 1000


class MoveNotReached(DeviceError):
    """The arm did not arrive at its goals: code `hardware_error` (a joint reported one while
    the arm moved), `settle_timeout` (still moving when the settle timeout ran out) or
    `not_reached` (settled elsewhere: blocked, or torque lost)."""


class MoveRefused(HostConfigError):
    """A move that can never run (`limit_violation`, `unknown_joint`), refused before any byte
    is sent, or one a servo refused before its ACTION went (`DEVICE_REFUSALS`: nothing of it
    moved the arm); it ends as a failed result and is never retried."""


#: The status errors of a servo that refuse the frame for what it says, so the same frame is
#: refused again (e-Manual, Protocol 2.0 "Error"): an attempt whose frame draws one before its
#: ACTION ends as a failed result instead of being retried. A CRC error (noise on the line)
#: and a result failure are not among them.
DEVICE_REFUSALS = frozenset({"instruction", "data_range", "data_length", "data_limit", "access"})


class ReissueRefused(DeviceError):
    """The adapter cannot prove that no earlier attempt can still act, so a re-issue may not
    run; code `hardware_error`, `device_not_idle`, `not_repeatable`, `neutralise_failed` or
    `robot_latched`."""


class FencedOut(DeviceError):
    """A command of an attempt under the move's fence floor; code `fenced_out` (the device owner
    refuses commands from an older fence)."""


# --- the edge: raw registers to SI records ---


def velocity_rad_s(raw: int) -> float:
    """A Present Velocity / Profile Velocity raw value as rad/s (signed)."""
    return tables.ticks_per_second(raw) * RESOLUTION_RAD


def profile_velocity(speed_rad_s: float) -> int:
    """A speed limit in rad/s (the generic host's `MotionLimit`) as Profile Velocity."""
    return tables.profile_velocity_for(speed_rad_s)


def profile_speed_rad_s(profile_velocity: int) -> float:
    """A raw Profile Velocity as rad/s."""
    return round(velocity_rad_s(profile_velocity), 6)


def decoded_errors(bits: int) -> tuple[str, ...]:
    """Hardware Error Status as names; a bit without a name is still an error."""
    named = tables.hardware_errors(bits)
    known = {b for b, n in tables.HARDWARE_ERROR_BITS.items() if n in named}
    extra = [f"bit_{b}" for b in range(8) if bits & (1 << b) and b not in known]
    return (*named, *extra)


def read_joints(bus: Any, robot: RobotConfig) -> dict[str, Any]:
    """A fresh read-back of every joint (raw registers, Present Velocity included)."""
    state = read_state(bus, robot)
    for dxl_id, value in bus.sync_read_field(PRESENT_VELOCITY, robot.ids).items():
        state["joints"][str(dxl_id)]["present_velocity"] = value
    return state


def _joint_record(j: dict[str, Any]) -> decide.Joint:
    velocity = j.get("present_velocity")
    return decide.Joint(
        position=tables.ticks_to_radians(int(j["present_position"])),
        goal=tables.ticks_to_radians(int(j["goal_position"])),
        moving=bool(j["moving"]),
        torque_on=bool(j["torque_enable"]),
        staged=bool(j["registered_instruction"]),
        errors=decoded_errors(int(j["hardware_error_status"])),
        velocity=None if velocity is None else velocity_rad_s(int(velocity)),
    )


def decode(robot: RobotConfig, state: dict[str, Any]) -> decide.ReadBack:
    """A raw read-back as the decoded record the decisions take (joints by name, SI units)."""
    joints = {
        robot.joint_by_id(dxl_id).name: _joint_record(j)
        for dxl_id, j in sorted(_joints(state).items())
    }
    return decide.ReadBack(joints, state.get("read_at_ms"))


def si_document(robot: RobotConfig, read_back: decide.ReadBack) -> dict[str, Any]:
    """A decoded read-back as the SI document evidence and guards hold (`ReadBack.from_si`)."""
    joints: dict[str, Any] = {}
    for name, j in read_back.joints.items():
        joints[name] = {
            "id": robot.joint(name).id,
            "position_rad": round(j.position, 6),
            "goal_rad": round(j.goal, 6),
            "velocity_rad_s": None if j.velocity is None else round(j.velocity, 6),
            "moving": j.moving,
            "torque_on": j.torque_on,
            "staged_write": j.staged,
            "hardware_errors": list(j.errors),
        }
    return {"robot": robot.name, "read_at_ms": read_back.read_at_ms, "joints": joints}


def si_read_back(robot: RobotConfig, state: dict[str, Any]) -> dict[str, Any]:
    """A raw read-back in SI units (rad, rad/s), per joint name, with its read time and decoded
    hardware errors: what evidence shows an operator."""
    return si_document(robot, decode(robot, state))


def changed_since(before: dict[str, Any], after: dict[str, Any], tolerance: int) -> list[str]:
    """`decide.changed_since` over two raw read-backs (joints named by id; `tolerance` in
    ticks, converted here)."""

    def record(state: dict[str, Any]) -> decide.ReadBack:
        joints = {str(k): _joint_record(v) for k, v in (state.get("joints") or {}).items()}
        return decide.ReadBack(joints, state.get("read_at_ms"))

    return decide.changed_since(
        record(before),
        record(after),
        tolerance=tolerance * RESOLUTION_RAD,
        resolution=RESOLUTION_RAD,
    )


# --- planning ---


def _limits(robot: RobotConfig) -> dict[str, tuple[float, float]]:
    return {j.name: (j.min_rad, j.max_rad) for j in robot.joints}


def _refused(exc: decide.MoveRefused) -> MoveRefused:
    return MoveRefused(exc.code, exc.message, details=exc.details)


def plan_goals(
    robot: RobotConfig, request: MoveRequest, state: dict[str, Any] | None
) -> dict[int, int]:
    """Goals in ticks by id, planned in radians by `decide.plan` from a fresh read-back
    (`state`; None only for an absolute move); raises `MoveRefused` before anything is sent."""
    for name, _ in request.targets:
        try:
            robot.joint(name)  # an unknown joint is refused with the nearest configured name
        except HostConfigError as exc:
            raise MoveRefused(exc.code, exc.message, details=exc.details) from None
    present = None
    if state is not None:
        present = {name: j.position for name, j in decode(robot, state).joints.items()}
    try:
        goals = decide.plan(
            dict(request.targets),
            relative=request.relative,
            limits=_limits(robot),
            present=present,
        )
    except decide.MoveRefused as exc:
        raise _refused(exc) from None
    out: dict[int, int] = {}
    for name, rad in goals.items():
        joint = robot.joint(name)
        # Within its limits in radians (`decide.plan`): the nearest tick, or the last one
        # inside the limit where the nearest lies past it (a limit between two ticks).
        out[joint.id] = min(max(tables.radians_to_ticks(rad), joint.min_ticks), joint.max_ticks)
    return out


def plan_absolute(robot: RobotConfig, request: MoveRequest) -> dict[int, int]:
    """An absolute move's goals in ticks, every one inside its joint's limits."""
    return plan_goals(robot, request, None)


def plan_relative(
    robot: RobotConfig, request: MoveRequest, present: dict[int, int]
) -> dict[int, int]:
    """A relative move's goals in ticks from measured present positions (ticks by id)."""
    joints = {
        str(i): {
            "present_position": p,
            "goal_position": p,
            "moving": 0,
            "torque_enable": 0,
            "registered_instruction": 0,
            "hardware_error_status": 0,
        }
        for i, p in present.items()
    }
    return plan_goals(robot, request, {"robot": robot.name, "joints": joints})


def check_request(robot: RobotConfig, request: MoveRequest) -> None:
    """Everything about a request that can be refused without the device: every joint is
    configured, an absolute move's targets are inside the limits, and a relative move's deltas
    are finite and within the limits' span (its goals are checked from a fresh read-back
    before any byte is sent, in `execute`)."""
    if request.relative:
        for name, _ in request.targets:
            robot.joint(name)
        try:
            decide.check_deltas(dict(request.targets), _limits(robot))
        except decide.MoveRefused as exc:
            raise _refused(exc) from None
    else:
        plan_absolute(robot, request)


def _joints(state: dict[str, Any]) -> dict[int, dict[str, int]]:
    return {int(k): v for k, v in state["joints"].items()}


def _by_name(robot: RobotConfig, ticks: dict[int, int]) -> dict[str, float]:
    return {
        robot.joint_by_id(i).name: round(tables.ticks_to_radians(t), 6)
        for i, t in sorted(ticks.items())
    }


class DynamixelMoveAdapter:
    """Executes and reconciles robot moves on the robots a `RobotHost` has connected."""

    def __init__(
        self,
        config: HostConfig,
        host: RobotHost,
        *,
        progress: ProgressFn | None = None,
        settle_timeout_s: float = 30.0,
        fence: int | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self.progress = progress or (lambda content: None)
        #: Keeps the attempt's lease while it waits without progress (`_at_rest`).
        self.heartbeat = heartbeat or (lambda: None)
        self.settle_timeout_s = settle_timeout_s
        #: The catalog fence of the attempt this adapter acts for (None: standalone use); a
        #: command under the move's fence floor is refused before it is logged or sent.
        self.fence = fence

    # --- helpers ---

    def _at_rest(self, bus: Any, robot: RobotConfig, fresh: dict[str, Any]) -> dict[str, Any]:
        """``fresh``, or a later read-back once no joint moves. A robot moving before a move
        sent anything moves under a command no move of this host is running (the robot's lock
        is held): a killed move's whose attempt is not reconciled yet, say. This move waits
        for it to stop (heartbeating), up to the settle timeout, and plans from where it
        stopped; still moving then, it is refused (`robot_moving`: nothing was sent). A stop
        meanwhile refuses it as a latched robot's move."""
        deadline = time.monotonic() + self.settle_timeout_s
        while any(j["moving"] for j in _joints(fresh).values()):
            if time.monotonic() > deadline:
                moving = sorted(
                    robot.joint_by_id(i).name for i, j in _joints(fresh).items() if j["moving"]
                )
                raise MoveRefused(
                    "robot_moving",
                    f"robot {robot.name} was still moving ({', '.join(moving)}) under a command"
                    f" of no move of this host {self.settle_timeout_s:g} s after this move was"
                    " to start: nothing was sent",
                    details={"robot": robot.name, "moving": moving},
                )
            self.heartbeat()
            time.sleep(AT_REST_POLL_S)
            self.host.check_motion(robot.name)
            fresh = read_joints(bus, robot)
        return fresh

    def _send_logged(
        self,
        op: Operation,
        attempt: int,
        instruction: str,
        frame: bytes,
        send: Callable[[], None],
        **info: Any,
    ) -> None:
        """The one path of a move's effectful frames (every WRITE, REG_WRITE and ACTION it
        sends, its own safe-stop aside): the fence floor and the stop latch are checked, then
        the frame's digest is appended durably to the operation's sent log, then it is sent."""
        self._check_fence(op)
        self.host.check_motion(op.request.robot)  # the stop latch (tether.devices.latch)
        op.log_sent(
            {
                "attempt": attempt,
                "instruction": instruction,
                "t_ms": now_ms(),
                "digest": "sha256:" + hashlib.sha256(frame).hexdigest(),
                **info,
            }
        )
        send()

    def _write_logged(
        self,
        op: Operation,
        attempt: int,
        bus: Any,
        robot: RobotConfig,
        dxl_id: int,
        field: tables.Field,
        value: int,
        instruction: str,
        **info: Any,
    ) -> None:
        """WRITE one register through the journaled path (`instruction` names it in the sent
        log: `profile_velocity`, `hold_goal`, `torque_enable`; never a move's commit,
        `decide.SETUP`)."""
        data = tables.encode(field, value)
        frame = _core.dxl_write(dxl_id, field.address, data)
        send = partial(bus.write_field, dxl_id, field, value)
        self._send_logged(
            op,
            attempt,
            instruction,
            frame,
            send,
            id=dxl_id,
            joint=self._joint_name(robot, dxl_id),
            **info,
        )

    def _check_fence(self, op: Operation) -> None:
        """Refuse an attempt under the move's fence floor before it sends anything."""
        if self.fence is not None and self.fence < op.fence_floor():
            raise FencedOut(
                "fenced_out",
                f"attempt with fence {self.fence} is under the floor {op.fence_floor()} of "
                f"{op.id}: nothing sent",
                details={"fence": self.fence, "floor": op.fence_floor()},
            )

    def _log_stop(self, op: Operation, attempt: int, cause: str, entry: dict[str, Any]) -> None:
        """One write of the attempt's own safe-stop, logged with its cause before it is sent
        (never refused: a stop always goes out)."""
        op.log_sent({"attempt": attempt, "t_ms": now_ms(), "cause": cause, **entry})

    def _settle(
        self, robot: RobotConfig, goals: dict[int, int] | None, *, moving_here: bool = False
    ) -> dict[str, Any]:
        """Read back until every joint stopped or the settle timeout ran out; publish progress
        (in radians) while goals are known; return the last read-back (`timed_out` set when
        the timeout ran out). `moving_here`: the motion is this attempt's own, so a joint whose
        status raises its Alert bit (a hardware error, its torque off) ends the read-back at
        once (`alert` set) for the attempt's safe-stop to hold the others; a reconcile only
        watches a device come to rest."""
        bus = self.host.bus_for(robot)
        ids = sorted(goals) if goals else robot.ids
        # A move watches every joint of its robot for a hardware error that appears while it
        # runs (a joint outside the move dropping under load, too); one already reported
        # before it began is the device's state, not news.
        watched = sorted(robot.ids) if moving_here else ids
        faulted = bus.stats.alerts.intersection(watched)
        deadline = time.monotonic() + self.settle_timeout_s
        start = bus.sync_read_field(tables.PRESENT_POSITION, ids)
        while True:
            # Moving first: once it reads 0 the Present Position read after it is the final one
            # (the other order could publish a last fraction from just before arrival).
            moving = bus.sync_read_field(tables.MOVING, watched)
            if moving_here and bus.stats.alerts.intersection(watched) - faulted:
                # A joint reports a hardware error (its torque is off): the others must not
                # drive on to their goals, so the move ends now and its safe-stop holds them.
                state = read_joints(bus, robot)
                state["alert"] = True
                return state
            if goals:
                present = bus.sync_read_field(tables.PRESENT_POSITION, ids)
                total = sum(abs(goals[i] - start[i]) for i in ids) or 1
                left = sum(abs(goals[i] - present[i]) for i in ids)
                self.progress(
                    {
                        "robot": robot.name,
                        "fraction": round(max(0.0, 1 - left / total), 4),
                        "joints": {
                            robot.joint_by_id(i).name: {
                                "present_rad": round(tables.ticks_to_radians(present[i]), 4),
                                "goal_rad": round(tables.ticks_to_radians(goals[i]), 4),
                                "moving": bool(moving[i]),
                            }
                            for i in ids
                        },
                    }
                )
            if not any(moving.values()):
                return read_joints(bus, robot)
            if time.monotonic() > deadline:
                state = read_joints(bus, robot)
                state["timed_out"] = True
                return state
            time.sleep(0.02)

    def _reached(self, robot: RobotConfig, goals: dict[int, int], state: dict[str, Any]) -> bool:
        joints = _joints(state)
        return (
            not state.get("timed_out")
            and not state.get("alert")
            and all(
                joints[i]["moving"] == 0
                and joints[i]["torque_enable"] == 1
                and abs(joints[i]["present_position"] - g) <= robot.tolerance_ticks
                for i, g in goals.items()
            )
        )

    def _result(
        self,
        op: Operation,
        attempt: int,
        robot: RobotConfig,
        goals: dict[int, int],
        state: dict[str, Any],
        how: str,
    ) -> dict[str, Any]:
        read_back = si_read_back(robot, state)
        return {
            "operation_id": op.id,
            "attempt": attempt,
            "robot": robot.name,
            "outcome": how,
            "goals": _by_name(robot, goals),
            "final": {n: j["position_rad"] for n, j in read_back["joints"].items()},
            "read_back": read_back,
            "read_at_ms": state["read_at_ms"],
        }

    def _port_ids(self, robot: RobotConfig) -> list[int]:
        """Every configured joint id on `robot`'s bus (all robots sharing the port)."""
        return sorted(
            {j.id for r in self.config.robots.values() if r.port == robot.port for j in r.joints}
        )

    def _staged_others(self, bus: Any, robot: RobotConfig, goals: dict[int, int]) -> dict[int, int]:
        """Joints on `robot`'s bus outside `goals` whose Registered Instruction is 1, mapped to
        their current Goal Position (a broadcast ACTION would commit their staged writes)."""
        others = [i for i in self._port_ids(robot) if i not in goals]
        if not others:
            return {}
        flagged = bus.sync_read_field(tables.REGISTERED_INSTRUCTION, others)
        return {i: bus.read_field(i, tables.GOAL_POSITION) for i in others if flagged[i] == 1}

    def _joint_name(self, robot: RobotConfig, dxl_id: int) -> str:
        """The joint's name, also of another robot on the same bus."""
        for r in [robot, *self.config.robots.values()]:
            if r.port == robot.port:
                for j in r.joints:
                    if j.id == dxl_id:
                        return j.name
        return str(dxl_id)

    def _stage_goal(
        self,
        op: Operation,
        attempt: int,
        bus: Any,
        robot: RobotConfig,
        dxl_id: int,
        goal: int,
        what: str,
    ) -> None:
        """REG_WRITE one Goal Position, its digest logged durably before the frame goes out."""
        data = tables.encode(tables.GOAL_POSITION, goal)
        frame = _core.dxl_reg_write(dxl_id, tables.GOAL_POSITION.address, data)
        send = partial(bus.reg_write, dxl_id, tables.GOAL_POSITION.address, data)
        self._send_logged(
            op,
            attempt,
            what,
            frame,
            send,
            id=dxl_id,
            joint=self._joint_name(robot, dxl_id),
            goal_rad=round(tables.ticks_to_radians(goal), 6),
        )

    def _neutralise(
        self, op: Operation, attempt: int, bus: Any, robot: RobotConfig, staged: dict[int, int]
    ) -> None:
        """Replace each staged write by its joint's current goal, then one ACTION (each frame
        logged before it is sent); nothing is sent when nothing is staged."""
        for dxl_id, current in sorted(staged.items()):
            self._stage_goal(op, attempt, bus, robot, dxl_id, current, "neutralise_reg_write")
        if staged:
            self._send_logged(
                op, attempt, "neutralise_action", _core.dxl_action(), bus.action, id=0xFE
            )

    # --- execute ---

    def plan(self, request: MoveRequest) -> tuple[RobotConfig, dict[int, int] | None]:
        robot = self.config.robot(request.robot)
        return robot, None if request.relative else plan_absolute(robot, request)

    def execute(
        self, op: Operation, attempt: int, request: MoveRequest, *, reissue: bool = False
    ) -> dict[str, Any]:
        """Run one attempt (see the module docstring); `reissue`: an operator's re-issue, a
        first motion whatever the host's policy says otherwise."""
        robot = self.config.robot(request.robot)
        bus = self.host.bus_for(robot)
        # A latched robot refuses the move before the bus is touched (`MotionStopped`, as its
        # first frame would be refused): nothing is read or sent, so there is nothing for the
        # stop policy to stop, and the bus stays free for the stop itself.
        self.host.check_motion(robot.name)
        # Before any byte: a fresh read-back of a robot at rest, and every goal planned from it
        # inside the limits.
        fresh = self._at_rest(bus, robot, read_joints(bus, robot))
        # A joint that reports a hardware error has its torque off: none of the robot's joints
        # moves until it is cleared (a reboot), as a re-issue would be refused.
        errors = decide.hardware_errors(decode(robot, fresh))
        if errors:
            said = "; ".join(f"{j}: {', '.join(e)}" for j, e in errors.items())
            raise MoveRefused(
                "hardware_error",
                f"robot {robot.name} reports a hardware error ({said}): nothing was sent; check"
                f" the arm, then clear it with `tether operator reboot {robot.name}`",
                details={"robot": robot.name, "hardware_errors": errors},
            )
        goals = plan_goals(robot, request, fresh)
        self._check_fence(op)
        # The generic host decides the speed limit (a first motion after a connect, resume,
        # reboot or re-issue); this device type only converts it to its Profile Velocity.
        limit = self.host.motion_limit(robot.name, reissue=reissue)
        velocity = profile_velocity(limit.speed_rad_s)
        stop = True  # the stop policy applies unless the move completes
        cause = "error"
        acted = False  # whether this attempt's ACTION went: its goals may then be running
        try:
            ids = sorted(goals)
            for dxl_id in ids:
                self._write_logged(
                    op,
                    attempt,
                    bus,
                    robot,
                    dxl_id,
                    tables.PROFILE_VELOCITY,
                    velocity,
                    "profile_velocity",
                    speed_rad_s=limit.speed_rad_s,
                    first_motion=limit.first,
                )
                joint = _joints(fresh)[dxl_id]
                if (
                    not joint["torque_enable"]
                    and joint["goal_position"] != joint["present_position"]
                ):
                    # A limp joint moved by hand since its last goal: Torque Enable would drive
                    # it back to that old goal before this move is even staged. Its goal
                    # becomes where it stands first, so turning torque on moves nothing.
                    present = int(joint["present_position"])
                    self._write_logged(
                        op, attempt, bus, robot, dxl_id, tables.GOAL_POSITION, present, "hold_goal"
                    )
                self._write_logged(
                    op, attempt, bus, robot, dxl_id, tables.TORQUE_ENABLE, 1, "torque_enable"
                )
            state = read_joints(bus, robot)  # the pre-image, after torque is on
            op.record_preimage(
                attempt,
                {
                    "state": state,
                    "goals": {str(i): g for i, g in goals.items()},
                    "first_motion": limit.first,
                    "first_motion_reason": limit.reason,
                    "speed_rad_s": limit.speed_rad_s,
                    "profile_velocity": velocity,
                },
            )
            crash_point("after_preimage")
            # The broadcast ACTION below commits every staged write on the bus: a write left
            # staged by an abandoned move (of this or another robot on the port) must not ride
            # along, so it is replaced by the joint's current goal first.
            for dxl_id, current in self._staged_others(bus, robot, goals).items():
                self._stage_goal(op, attempt, bus, robot, dxl_id, current, "neutralise_reg_write")
            for dxl_id, goal in sorted(goals.items()):
                self._stage_goal(op, attempt, bus, robot, dxl_id, goal, "reg_write")
            crash_point("after_reg_write")
            acted = True
            self._send_logged(op, attempt, "action", _core.dxl_action(), bus.action, id=0xFE)
            crash_point("after_action")
            final = self._settle(robot, goals, moving_here=True)
            crash_point("after_readback")
            if not self._reached(robot, goals, final):
                cause = (
                    "hardware_error"
                    if final.get("alert")
                    else "settle_timeout"
                    if final.get("timed_out")
                    else "not_reached"
                )
                where = si_read_back(robot, final)["joints"]
                raise MoveNotReached(
                    cause,
                    f"robot {robot.name} did not arrive at its goals"
                    + (f" within {self.settle_timeout_s} s" if final.get("timed_out") else "")
                    + f": {where}",
                    details={"robot": robot.name, "read_back": where},
                )
            stop = False
            self.host.motion_done(robot.name)
            return self._result(op, attempt, robot, goals, final, "completed")
        except FencedOut:
            # A newer attempt governs the device now: this one neither sends nor stops it.
            stop = False
            raise
        except DeviceError as exc:
            code = getattr(exc, "code", "")
            if acted or type(exc) is not DeviceError or code not in DEVICE_REFUSALS:
                raise
            # A servo refused a frame of this move before its ACTION: none of its goals was
            # committed, and the same frame would be refused again (a goal past the servo's
            # own limits: `data_limit`). Failed, not retried; what it staged is replaced by
            # the next move before that one's ACTION, and the stop policy applies below.
            raise MoveRefused(
                code,
                f"robot {robot.name}: the servo refused the move before it started ({exc});"
                " nothing moved toward its goals, and it is not retried",
                details={"robot": robot.name, "id": getattr(exc, "details", {}).get("id")},
            ) from exc
        finally:
            if stop:
                safe_stop(bus, robot, log=partial(self._log_stop, op, attempt, cause))

    # --- reconcile ---

    def _stop_reason(self, robot: RobotConfig, op: Operation, attempt: int) -> str:
        """The reason of the stop that cut `attempt`: the one its first conclusion named
        (`_note_concluded`), else the latch's now (the latest stop of the robot)."""
        concluded = op.entry.proof(_concluded(attempt)) if attempt else None
        first = (concluded or {}).get("reason")
        if first in STOP_REASONS:
            return str(first)
        return self.host.latch.stop_reason(robot.name)

    @staticmethod
    def _note_concluded(
        op: Operation,
        attempt: int,
        reason: str,
        move: decide.Move,
        *,
        settling: bool,
        read_back: dict[str, Any],
    ) -> None:
        """Keep when a reconcile first concluded `attempt` Unknown for `reason`, and final (not
        a move still settling): no stop after it cut the attempt (`_stops_during`), one that did
        before it (`move`'s) still counts, and a stop's reason stays the one that cut it (a
        later stop, of another move, a session's lapse, the host's shutdown, never renames
        it). The first one stands."""
        if not attempt or settling:
            return
        doc = {
            "for_attempt": attempt,
            "recorded_at_ms": now_ms(),
            "reason": reason,
            "operator_stop": move.stopped_by_operator,
            "shutdown_stop": move.stopped_at_shutdown,
            # Where its motion had got to (`_evidence`'s `reached_read_back`): a later move of
            # the robot never changes how far this one went.
            "read_back": read_back,
        }
        _record_first(op, _concluded(attempt), doc)

    def reconcile(self, op: Operation, request: MoveRequest) -> Conclusion:
        robot = self.config.robot(request.robot)
        bus = self.host.bus_for(robot)
        attempts = op.attempts()
        attempt = attempts[-1] if attempts else 0
        # No attempt began (killed between the bind and the first marker): nothing was read
        # or sent under this operation.
        pre = op.preimage(attempt) if attempt else None
        sent = [s for s in op.sent() if s.get("attempt") == attempt]
        goals: dict[int, int] | None = None
        if pre is not None:
            goals = {int(k): int(v) for k, v in pre["goals"].items()}
        elif not request.relative:
            goals = plan_absolute(robot, request)
        state = read_joints(bus, robot)
        if any(j["moving"] for j in _joints(state).values()):
            state = self._settle(robot, goals)  # decided on a device standing still
        preimage = None
        if pre is not None and goals is not None:
            preimage = decide.Preimage(decode(robot, pre["state"]), _by_name(robot, goals))
        operator_stop, shutdown_stop = _stops_during(self.config, robot, op, attempt)
        move = decide.Move(
            relative=request.relative,
            targets=None if request.relative or goals is None else _by_name(robot, goals),
            tolerance=robot.tolerance_rad,
            resolution=RESOLUTION_RAD,
            stopped_by_operator=operator_stop,
            stop_reason=self._stop_reason(robot, op, attempt),
            stopped_at_shutdown=shutdown_stop,
        )
        records = [
            decide.Sent(str(s.get("instruction")), s.get("joint"), s.get("cause")) for s in sent
        ]
        before = decode(robot, state)
        checks: dict[str, Any] = {
            "attempt": attempt,
            "preimage": pre is not None,
            "sent": len(sent),
            "hardware_error": decide.hardware_errors(before),
        }
        conclusion = decide.reconcile(preimage, records, before, move=move)
        if isinstance(conclusion, decide.Recovered):
            assert goals is not None
            return Recovered(self._result(op, attempt, robot, goals, state, "recovered"))
        if isinstance(conclusion, decide.Unknown):
            checks.update(conclusion.details)
            settling = conclusion.reason in ("settle_timeout", "not_settled") and not sent_stop(
                records
            )
            self._note_concluded(
                op,
                attempt,
                conclusion.reason,
                move,
                settling=settling,
                read_back=si_read_back(robot, state),
            )
            return Unknown(
                self._evidence(op, request, robot, goals, state, conclusion.reason, checks),
                SETTLE_RETRY_MS if settling else 0,
            )
        parked = _parked(attempt)
        if self.host.latched(robot.name) or op.entry.proof(parked) is not None:
            # Stopped by an operator: nothing is sent (the latch refuses it) and the move is
            # parked for an operator's decision. It stays parked after the robot is resumed
            # (the journal keeps that this attempt was parked): a resume lets the robot move
            # again, it decides no parked move, so none runs by itself a reconcile later.
            # An operator's re-issue runs it as a new attempt, which this does not hold.
            # The reason the first park recorded (the stop that parked it), else the latch's.
            # A move that never read or sent a frame under any attempt was latched out before
            # it began: `robot_latched` (the stop was another's), with the latch's own reason
            # beside it, never that stop's reason as if this move were the one stopped.
            prior = op.entry.proof(parked) or {}
            reason = prior.get("reason")
            latch = self.host.latch.stop_reason(robot.name)
            if reason not in (*STOP_REASONS, LATCHED_BEFORE_START, DEVICE_UNREADABLE):
                began = any(op.preimage(a) is not None for a in attempts) or bool(op.sent())
                reason = latch if began else LATCHED_BEFORE_START
            if reason == LATCHED_BEFORE_START:
                checks["latch_reason"] = latch
            if not prior:  # the first park stands (`_record_first`: a replay is a no-op)
                _record_first(
                    op,
                    parked,
                    {"reason": reason, "attempt": attempt, "read_back": si_read_back(robot, state)},
                )
            return Unknown(self._evidence(op, request, robot, goals, state, reason, checks))
        joints = _joints(state)
        staged = {
            robot.joint(n).id: joints[robot.joint(n).id]["goal_position"] for n in conclusion.staged
        }
        # Other joints on the bus are neutralised too: the ACTION below would commit them.
        staged.update(self._staged_others(bus, robot, dict.fromkeys(robot.ids, 0)))
        self._neutralise(op, attempt, bus, robot, staged)
        after = read_joints(bus, robot)
        confirmed = decide.confirm(before, decode(robot, after), resolution=RESOLUTION_RAD)
        if isinstance(confirmed, decide.Unknown):
            checks.update(confirmed.details)
            checks["neutralised"] = False
            return Unknown(
                self._evidence(op, request, robot, goals, after, confirmed.reason, checks)
            )
        return ConfirmedAbsent(self._guard(bus, robot, conclusion.reason, sorted(staged), after))

    def prove_reissue(
        self, op: Operation, request: MoveRequest, fence_floor: int
    ) -> dict[str, Any]:
        """The adapter's proof that no earlier attempt of `op` can still act, taken while this
        host owns the port exclusively; recorded in the journal as the next attempt's re-issue
        proof. Refused (`ReissueRefused`) for a relative move, a joint with a hardware error or
        in motion, or staged writes that do not read back neutralised.

        1. Every staged write on the bus is neutralised (REG_WRITE of the current goal, one
           ACTION, each logged before it is sent) and read back with nothing staged.
        2. The last ACTION is accounted for: never sent, or sent by an absolute move, whose
           repetition ends in the same pose.
        3. The fence floor is raised: this adapter refuses every command of an attempt under
           it, so an older attempt cannot send anything after the proof.
        A proof taken before a crash is used again only when the device still reports no
        hardware error and stands still.
        """
        robot = self.config.robot(request.robot)
        if request.relative:
            raise ReissueRefused(
                "not_repeatable", "a relative move cannot be re-issued; mark it done or abandon it"
            )
        if self.host.latched(robot.name):  # this host's latch: its record, or its memory
            raise ReissueRefused(
                "robot_latched",
                f"robot {robot.name} is stopped (latched): resume it first, then re-issue",
            )
        bus = self.host.bus_for(robot)
        state = read_joints(bus, robot)
        before = decode(robot, state)
        errors = decide.hardware_errors(before)
        if errors:
            raise ReissueRefused(
                "hardware_error",
                f"a re-issue is refused while a joint reports a hardware error: {errors}",
                details={"hardware_errors": errors},
            )
        if any(j.moving for j in before.joints.values()):
            raise ReissueRefused("device_not_idle", "the arm is moving; re-issue needs it idle")
        number = op.next_attempt()
        existing = op.reissue_proof(number)
        if existing is not None:
            return existing  # a proof taken before a crash: the floor already stands
        # The floor first: from here on no older attempt sends anything, so what is read back
        # below stays true.
        floor = op.raise_fence_floor(fence_floor)
        crash_point("proof.after_fence_floor")
        joints = _joints(state)
        staged = {i: j["goal_position"] for i, j in joints.items() if j["registered_instruction"]}
        staged.update(self._staged_others(bus, robot, dict.fromkeys(joints, 0)))
        fence, self.fence = self.fence, None  # the proof's own frames are the host's
        try:
            self._neutralise(op, number, bus, robot, staged)
        finally:
            self.fence = fence
        crash_point("proof.after_neutralise")
        self.host.reissue_proven(robot.name)  # the re-issued move is a first motion
        after = read_joints(bus, robot)
        others = self._staged_others(bus, robot, dict.fromkeys(_joints(after), 0))
        confirmed = decide.confirm(before, decode(robot, after), resolution=RESOLUTION_RAD)
        if others or isinstance(confirmed, decide.Unknown):
            raise ReissueRefused(
                "neutralise_failed",
                "staged writes did not read back neutralised; nothing re-issued",
            )
        last = op.attempts()[-1] if op.attempts() else 0
        actions = [
            s for s in op.sent() if s.get("attempt") == last and s.get("instruction") == "action"
        ]
        proof = {
            "reason": "operator_reissue",
            "for_attempt": number,
            "port_lock": bus.identity.key,
            "owner_pid": os.getpid(),
            "neutralised_ids": sorted(staged),
            "read_back": si_read_back(robot, after),
            "last_action": {
                "attempt": last,
                "sent": bool(actions),
                "t_ms": actions[-1].get("t_ms") if actions else None,
                "accounted_by": "absolute_move_repeats_to_the_same_pose"
                if actions
                else "never_sent",
            },
            "fence_floor": floor,
        }
        return op.record_reissue_proof(number, proof)

    def _guard(
        self,
        bus: Any,
        robot: RobotConfig,
        reason: str,
        neutralised: list[int],
        state: dict[str, Any],
    ) -> dict[str, Any]:
        return {
            "reason": reason,
            "port_lock": bus.identity.key,
            "owner_pid": os.getpid(),
            "neutralised_ids": neutralised,
            "read_back": si_read_back(robot, state),
        }

    def _evidence(
        self,
        op: Operation,
        request: MoveRequest,
        robot: RobotConfig,
        goals: dict[int, int] | None,
        state: dict[str, Any],
        reason: str,
        checks: dict[str, Any],
    ) -> dict[str, Any]:
        bus = self.host.bus_for(robot)
        read_back = si_read_back(robot, state)
        attempts = op.attempts()
        pre = op.preimage(attempts[-1]) if attempts else None
        commanded = _by_name(robot, goals or {})
        attempt = attempts[-1] if attempts else 0
        first = op.entry.proof(_concluded(attempt)) or op.entry.proof(_parked(attempt)) or {}
        return {
            "operation_id": op.id,
            "reason": reason,
            "read_back": read_back,
            # The read-back when this attempt was first concluded or parked: how far its own
            # motion got (the robot may have moved for another operation since).
            "reached_read_back": first.get("read_back") or read_back,
            "staged": commanded,
            "preimage": None
            if pre is None
            else {
                "read_back": si_read_back(robot, pre["state"]),
                "goals_rad": _by_name(
                    robot, {int(k): int(v) for k, v in (pre.get("goals") or {}).items()}
                ),
                "profile_speed_rad_s": profile_speed_rad_s(int(pre["profile_velocity"])),
                "first_motion": pre["first_motion"],
            },
            "hardware_errors": {
                n: j["hardware_errors"]
                for n, j in read_back["joints"].items()
                if j["hardware_errors"]
            },
            "command": request.as_dict(),
            "retry_class": request.retry_class.value,
            "sent": op.sent(),
            "last_status": {
                str(i): {"error": e, "at_ms": t} for i, (e, t) in sorted(bus.last_status.items())
            },
            "reconcile": checks,
            "commanded_vs_present": commanded_vs_present(commanded, read_back),
        }


def commanded_vs_present(
    commanded: dict[str, Any], read_back: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """What an operator reads a parked arm by: per joint of ``read_back`` (an SI read-back,
    `si_read_back`), its commanded target (``commanded``, by joint name; None where none),
    its goal and its present position, in radians."""
    return {
        n: {
            "commanded_rad": commanded.get(n),
            "goal_rad": j.get("goal_rad"),
            "present_rad": j.get("position_rad"),
        }
        for n, j in (read_back.get("joints") or {}).items()
    }


#: The park reason of a move whose robot was latched before it read or sent a frame.
LATCHED_BEFORE_START = "robot_latched"
#: The park reason of a move whose reconcile could not read its device (`park_unreadable`).
DEVICE_UNREADABLE = "device_unreadable"


def park_unreadable(config: HostConfig, op: Operation, robot: RobotConfig) -> None:
    """Keep, in the move's journal, that a reconcile parked it for an operator because its
    device could not be read (a dead bus, a port gone): its latest attempt is concluded
    (`concluded-N`, reason `DEVICE_UNREADABLE`: a stop after this cut nothing of it and never
    becomes its reason; one during it still counts) and parked (`parked-N`: once the device
    reads again, a reconcile that finds nothing ran keeps it parked, as a stop's park is; an
    operator's re-issue runs it, never a reconcile by itself). The first record of each
    stands."""
    attempts = op.attempts()
    attempt = attempts[-1] if attempts else 0
    if attempt:
        operator_stop, shutdown_stop = _stops_during(config, robot, op, attempt)
        doc = {
            "for_attempt": attempt,
            "recorded_at_ms": now_ms(),
            "reason": DEVICE_UNREADABLE,
            "operator_stop": operator_stop,
            "shutdown_stop": shutdown_stop,
        }
        _record_first(op, _concluded(attempt), doc)
    _record_first(op, _parked(attempt), {"reason": DEVICE_UNREADABLE, "attempt": attempt})


def _stops_during(
    config: HostConfig, robot: RobotConfig, op: Operation, attempt: int
) -> tuple[bool, bool]:
    """Whether an operator's stop, and whether the host's own stop at its shutdown, came while
    `attempt` was in flight: after it began, and before a reconcile first concluded it Unknown
    for another reason (`_concluded`: a later stop cut nothing of it and never becomes its
    reason). A stop that counted when it was concluded (its flag in that record) still does:
    the latch keeps only the latest stop. Where both came and no reconcile concluded it between
    them, the first one cut it: an operator's stop after the shutdown's (a `tether stop`
    before the move is run again) cut nothing of it."""
    concluded = op.entry.proof(_concluded(attempt)) if attempt else None
    marker = op.entry.marker(attempt) if attempt else None
    began = int((marker or {}).get("started_at_ms", 0))
    stopped_at = last_operator_stop(config, robot.name)
    shut_at = last_shutdown_stop(config, robot.name)

    def during(flag: str, at: int | None) -> bool:
        if concluded is not None and concluded.get(flag) is True:
            return True
        if at is None or at < began:
            return False
        return concluded is None or at <= int(concluded.get("recorded_at_ms", 0))

    operator_stop = during("operator_stop", stopped_at)
    shutdown_stop = during("shutdown_stop", shut_at)
    if operator_stop and shutdown_stop and concluded is None:
        operator_stop = (stopped_at or 0) <= (shut_at or 0)
    return operator_stop, shutdown_stop


def _record_first(op: Operation, name: str, doc: dict[str, Any]) -> None:
    """Record the proof `name` unless one is recorded: the first one stands."""
    if op.entry.proof(name) is not None:
        return
    try:
        op.entry.record_proof(name, doc)
    except JournalError as exc:  # another reconcile recorded it first: it stands
        if exc.code != "proof_conflict":
            raise


def _concluded(attempt: int) -> str:
    """The journal proof naming when a reconcile first concluded `attempt` Unknown for a
    reason of its own (`DynamixelMoveAdapter._note_concluded`)."""
    return f"concluded-{attempt}"


def _parked(attempt: int) -> str:
    """The journal proof naming the first park of `attempt` for an operator (its reason, and
    the read-back it was parked on)."""
    return f"parked-{attempt}"


def sent_stop(records: list[decide.Sent]) -> bool:
    """Whether the attempt stopped itself (its safe-stop is in the sent log)."""
    return any(r.instruction in decide.STOPS for r in records)
