"""The DYNAMIXEL adapter of `physical_ai.robot_move`: stage, commit, read back, reconcile.

Execute (one attempt; the operation id is already bound, durably, before this runs):
1. Goals are planned in ticks and checked against the configured limits before any byte.
2. Profile Velocity is set (slow for a first motion after a reconnect or an operator
   re-issue) and torque enabled; then the device state is read and stored as the attempt's
   pre-image, durably.
3. REG_WRITE of Goal Position on every joint, then one broadcast ACTION (no status exists
   for it). Each effectful frame's digest is appended durably to `sent.jsonl` before it goes.
4. Present Position / Moving are read back until the arm settles, as live progress.
Any exception on the way runs the robot's safe-stop in a `finally` before it propagates.

Reconcile (after a crash or a lost status) reads the device and decides:
- Recovered: every Goal Position equals its target, nothing staged, and the arm settles there
  (for a relative move, only when some target differs from the goal the pre-image saw).
- ConfirmedAbsent: nothing effectful was sent; or the move is absolute, the pre-image exists,
  torque and hardware error are as before, and every joint either still has Registered
  Instruction 1 (staged, ACTION never executed) or its Goal Position is unchanged. Staged
  writes are first neutralised (REG_WRITE of the current Goal Position where Registered
  Instruction is 1, ACTION, read back); the port lock and that read-back are the retry guard.
- Unknown: anything else (REBOOT or power loss wiped the evidence, a hardware error, a relative
  move that may have run, an arm that does not settle). It is parked for an operator.
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
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, RobotConfig
from tether.adapters.dynamixel.host import RobotHost, last_operator_stop, read_state
from tether.adapters.dynamixel.safety import safe_stop
from tether.families.robot_move.journal import Operation, now_ms
from tether.families.robot_move.request import (
    Conclusion,
    ConfirmedAbsent,
    MoveRequest,
    Recovered,
    Unknown,
)
from tether.transport import DeviceError

#: The crash points of a move and of a re-issue proof (`TETHER_CRASH_AT=<name>`, the one
#: crash-injection mechanism, `tether._crash`).
CRASH_POINTS = ("after_preimage", "after_reg_write", "after_action", "after_readback")
PROOF_CRASH_POINTS = ("proof.after_neutralise", "proof.after_fence_floor")

ProgressFn = Callable[[dict[str, Any]], None]


class MoveNotReached(DeviceError):
    """The arm settled away from its goals (blocked, or torque lost); code `not_reached`."""


class ReissueRefused(DeviceError):
    """The adapter cannot prove that no earlier attempt can still act, so a re-issue may not
    run; code `hardware_error`, `device_not_idle`, `not_repeatable` or `neutralise_failed`."""


class FencedOut(DeviceError):
    """A command of an attempt under the move's fence floor; code `fenced_out` (the device owner
    refuses commands from an older fence)."""


def si_read_back(robot: RobotConfig, state: dict[str, Any]) -> dict[str, Any]:
    """A read-back in SI units (rad; rad/s for the profile speed), per joint name, with its
    read time and decoded hardware errors: what evidence shows an operator."""
    joints: dict[str, Any] = {}
    for dxl_id, j in sorted(_joints(state).items()):
        name = robot.joint_by_id(dxl_id).name
        joints[name] = {
            "id": dxl_id,
            "position_rad": round(tables.ticks_to_radians(j["present_position"]), 6),
            "goal_rad": round(tables.ticks_to_radians(j["goal_position"]), 6),
            "moving": bool(j["moving"]),
            "torque_on": bool(j["torque_enable"]),
            "staged_write": bool(j["registered_instruction"]),
            "hardware_errors": tables.hardware_errors(j["hardware_error_status"]),
        }
    return {"read_at_ms": state.get("read_at_ms"), "joints": joints}


def profile_speed_rad_s(profile_velocity: int) -> float:
    """A raw Profile Velocity as rad/s."""
    return round(tables.ticks_per_second(profile_velocity) * 2 * 3.141592653589793 / 4096, 6)


def changed_since(before: dict[str, Any], after: dict[str, Any], tolerance: int) -> list[str]:
    """The adapter's comparison of two read-backs: differences that matter (empty when the
    device is as it was when the evidence was taken)."""
    diffs: list[str] = []
    for dxl_id, old in before.get("joints", {}).items():
        new = after.get("joints", {}).get(dxl_id)
        if new is None:
            diffs.append(f"id {dxl_id} missing")
            continue
        for name in (
            "goal_position",
            "registered_instruction",
            "torque_enable",
            "hardware_error_status",
            "moving",
        ):
            if old.get(name) != new.get(name):
                diffs.append(f"id {dxl_id} {name} {old.get(name)} -> {new.get(name)}")
        if (
            abs(int(old.get("present_position", 0)) - int(new.get("present_position", 0)))
            > tolerance
        ):
            moved = f"{old.get('present_position')} -> {new.get('present_position')}"
            diffs.append(f"id {dxl_id} present_position {moved}")
    return diffs


def plan_absolute(robot: RobotConfig, request: MoveRequest) -> dict[int, int]:
    """Goals in ticks, every one inside its joint's limits; raises before anything is sent."""
    goals: dict[int, int] = {}
    for name, radians in request.targets:
        joint = robot.joint(name)
        ticks = tables.radians_to_ticks(radians)
        joint.check_ticks(ticks)
        goals[joint.id] = ticks
    return goals


def check_request(robot: RobotConfig, request: MoveRequest) -> None:
    """Everything about a request that can be refused before a byte is sent: every joint is
    configured, and an absolute move's targets are inside the limits (a relative move's can
    only be checked against the measured present position)."""
    if request.relative:
        for name, _ in request.targets:
            robot.joint(name)
    else:
        plan_absolute(robot, request)


def plan_relative(
    robot: RobotConfig, request: MoveRequest, present: dict[int, int]
) -> dict[int, int]:
    goals: dict[int, int] = {}
    for name, delta in request.targets:
        joint = robot.joint(name)
        ticks = present[joint.id] + tables.radians_to_tick_delta(delta)
        joint.check_ticks(ticks)
        goals[joint.id] = ticks
    return goals


def _joints(state: dict[str, Any]) -> dict[int, dict[str, int]]:
    return {int(k): v for k, v in state["joints"].items()}


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
    ) -> None:
        self.config = config
        self.host = host
        self.progress = progress or (lambda content: None)
        self.settle_timeout_s = settle_timeout_s
        #: The catalog fence of the attempt this adapter acts for (None: standalone use); a
        #: command under the move's fence floor is refused before it is logged or sent.
        self.fence = fence

    # --- helpers ---

    def _send_logged(
        self,
        op: Operation,
        attempt: int,
        instruction: str,
        frame: bytes,
        send: Callable[[], None],
        **info: Any,
    ) -> None:
        if self.fence is not None and self.fence < op.fence_floor():
            raise FencedOut(
                "fenced_out",
                f"attempt with fence {self.fence} is under the floor {op.fence_floor()} of "
                f"{op.id}: nothing sent",
                details={"fence": self.fence, "floor": op.fence_floor()},
            )
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

    def _settle(self, robot: RobotConfig, goals: dict[int, int]) -> dict[str, Any]:
        """Read back until every joint stopped; publish progress; return the last state."""
        bus = self.host.bus_for(robot)
        ids = sorted(goals)
        deadline = time.monotonic() + self.settle_timeout_s
        start = bus.sync_read_field(tables.PRESENT_POSITION, ids)
        while True:
            # Moving first: once it reads 0 the Present Position read after it is the final one
            # (the other order could publish a last fraction from just before arrival).
            moving = bus.sync_read_field(tables.MOVING, ids)
            present = bus.sync_read_field(tables.PRESENT_POSITION, ids)
            total = sum(abs(goals[i] - start[i]) for i in ids) or 1
            left = sum(abs(goals[i] - present[i]) for i in ids)
            self.progress(
                {
                    "robot": robot.name,
                    "fraction": round(max(0.0, 1 - left / total), 4),
                    "joints": {
                        str(i): {"present": present[i], "goal": goals[i], "moving": moving[i]}
                        for i in ids
                    },
                }
            )
            if not any(moving.values()):
                return read_state(bus, robot)
            if time.monotonic() > deadline:
                state = read_state(bus, robot)
                state["timed_out"] = True
                return state
            time.sleep(0.02)

    def _reached(self, robot: RobotConfig, goals: dict[int, int], state: dict[str, Any]) -> bool:
        joints = _joints(state)
        return not state.get("timed_out") and all(
            joints[i]["moving"] == 0
            and abs(joints[i]["present_position"] - g) <= robot.tolerance_ticks
            for i, g in goals.items()
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
        return {
            "operation_id": op.id,
            "attempt": attempt,
            "robot": robot.name,
            "outcome": how,
            "goals": {str(i): g for i, g in sorted(goals.items())},
            "final": {str(i): j["present_position"] for i, j in sorted(_joints(state).items())},
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

    def _stage_goal(
        self, op: Operation, attempt: int, bus: Any, dxl_id: int, goal: int, what: str
    ) -> None:
        """REG_WRITE one Goal Position, its digest logged durably before the frame goes out."""
        data = tables.encode(tables.GOAL_POSITION, goal)
        frame = _core.dxl_reg_write(dxl_id, tables.GOAL_POSITION.address, data)
        send = partial(bus.reg_write, dxl_id, tables.GOAL_POSITION.address, data)
        self._send_logged(op, attempt, what, frame, send, id=dxl_id, goal=goal)

    # --- execute ---

    def plan(self, request: MoveRequest) -> tuple[RobotConfig, dict[int, int] | None]:
        robot = self.config.robot(request.robot)
        return robot, None if request.relative else plan_absolute(robot, request)

    def execute(
        self, op: Operation, attempt: int, request: MoveRequest, *, first_motion: bool
    ) -> dict[str, Any]:
        robot, goals = self.plan(request)
        bus = self.host.bus_for(robot)
        completed = False
        try:
            ids = robot.ids if goals is None else sorted(goals)
            velocity = robot.first_motion_velocity if first_motion else robot.velocity
            for dxl_id in ids:
                bus.write_field(dxl_id, tables.PROFILE_VELOCITY, velocity)
                bus.write_field(dxl_id, tables.TORQUE_ENABLE, 1)
            state = read_state(bus, robot)  # measured present position, after torque is on
            if goals is None:
                goals = plan_relative(
                    robot, request, {i: j["present_position"] for i, j in _joints(state).items()}
                )
            op.record_preimage(
                attempt,
                {
                    "state": state,
                    "goals": {str(i): g for i, g in goals.items()},
                    "first_motion": first_motion,
                    "profile_velocity": velocity,
                },
            )
            crash_point("after_preimage")
            # The broadcast ACTION below commits every staged write on the bus: a write left
            # staged by an abandoned move (of this or another robot on the port) must not ride
            # along, so it is replaced by the joint's current goal first.
            for dxl_id, current in self._staged_others(bus, robot, goals).items():
                self._stage_goal(op, attempt, bus, dxl_id, current, "neutralise_reg_write")
            for dxl_id, goal in sorted(goals.items()):
                self._stage_goal(op, attempt, bus, dxl_id, goal, "reg_write")
            crash_point("after_reg_write")
            self._send_logged(op, attempt, "action", _core.dxl_action(), bus.action, id=0xFE)
            crash_point("after_action")
            final = self._settle(robot, goals)
            crash_point("after_readback")
            if not self._reached(robot, goals, final):
                raise MoveNotReached(
                    "not_reached",
                    f"robot {robot.name} settled away from its goals: {final['joints']}",
                    details={"robot": robot.name, "state": final},
                )
            completed = True
            return self._result(op, attempt, robot, goals, final, "completed")
        finally:
            if not completed:
                safe_stop(bus, robot)

    # --- reconcile ---

    def reconcile(self, op: Operation, request: MoveRequest) -> Conclusion:
        robot = self.config.robot(request.robot)
        bus = self.host.bus_for(robot)
        attempts = op.attempts()
        attempt = attempts[-1] if attempts else 0
        pre = op.preimage(attempt)
        sent = [s for s in op.sent() if s.get("attempt") == attempt]
        state = read_state(bus, robot)
        joints = _joints(state)
        goals: dict[int, int] | None = None
        if pre is not None:
            goals = {int(k): int(v) for k, v in pre["goals"].items()}
        elif not request.relative:
            goals = plan_absolute(robot, request)
        checks: dict[str, Any] = {
            "attempt": attempt,
            "preimage": pre is not None,
            "sent": len(sent),
        }
        hardware_error = {
            i: j["hardware_error_status"] for i, j in joints.items() if j["hardware_error_status"]
        }
        checks["hardware_error"] = hardware_error
        # A relative move's goals only prove it ran when they differ from the goals the
        # pre-image saw (a zero or cancelling delta leaves nothing to tell the runs apart).
        attributable = not request.relative or (
            pre is not None
            and goals is not None
            and any(_joints(pre["state"])[i]["goal_position"] != g for i, g in goals.items())
        )
        checks["attributable"] = attributable

        if (
            goals is not None
            and attributable
            and not hardware_error
            and all(
                joints[i]["goal_position"] == g and joints[i]["registered_instruction"] == 0
                for i, g in goals.items()
            )
        ):
            final = self._settle(robot, goals)
            if self._reached(robot, goals, final):
                return Recovered(self._result(op, attempt, robot, goals, final, "recovered"))
            checks["settled"] = False
            reason = "settle_timeout" if final.get("timed_out") else "not_settled"
            reason = self._stopped(robot, op, attempt) or reason
            return Unknown(self._evidence(op, request, robot, goals, final, reason, checks), 1000)

        effectful = [s for s in sent if s.get("instruction") in ("reg_write", "action")]
        if self.host.latched(robot.name):  # stopped by an operator: nothing runs until resumed
            stop = "stopped_by_operator"
            return Unknown(self._evidence(op, request, robot, goals, state, stop, checks))
        if not effectful and not hardware_error:
            return ConfirmedAbsent(self._guard(bus, "nothing_sent", [], state))

        if request.relative:
            return Unknown(
                self._evidence(op, request, robot, goals, state, "relative_move_ambiguous", checks)
            )
        if pre is None or goals is None:
            return Unknown(self._evidence(op, request, robot, goals, state, "no_preimage", checks))
        before = _joints(pre["state"])
        checks["torque_as_before"] = all(
            joints[i]["torque_enable"] == before[i]["torque_enable"] for i in goals
        )
        checks["staged_or_unchanged"] = all(
            joints[i]["registered_instruction"] == 1
            or joints[i]["goal_position"] == before[i]["goal_position"]
            for i in goals
        )
        if hardware_error or not checks["torque_as_before"] or not checks["staged_or_unchanged"]:
            reason = "hardware_error" if hardware_error else "device_state_lost_or_moved"
            if not hardware_error:
                reason = self._stopped(robot, op, attempt) or reason
            return Unknown(self._evidence(op, request, robot, goals, state, reason, checks))

        staged = {
            i: joints[i]["goal_position"]
            for i in sorted(goals)
            if joints[i]["registered_instruction"] == 1
        }
        # Other joints on the bus are neutralised too: the ACTION below would commit them.
        staged.update(self._staged_others(bus, robot, goals))
        for dxl_id, current in staged.items():
            self._stage_goal(op, attempt, bus, dxl_id, current, "neutralise_reg_write")
        if staged:
            self._send_logged(
                op, attempt, "neutralise_action", _core.dxl_action(), bus.action, id=0xFE
            )
        after = read_state(bus, robot)
        after_joints = _joints(after)
        if any(
            after_joints[i]["registered_instruction"] != 0
            or after_joints[i]["goal_position"] != joints[i]["goal_position"]
            for i in goals
        ):
            checks["neutralised"] = False
            return Unknown(
                self._evidence(op, request, robot, goals, after, "neutralise_failed", checks)
            )
        return ConfirmedAbsent(self._guard(bus, "staged_not_actioned", list(staged), after))

    def _stopped(self, robot: RobotConfig, op: Operation, attempt: int) -> str | None:
        """`stopped_by_operator` when an operator's stop of `robot` came after `attempt` began."""
        marker = op.entry.marker(attempt) if attempt else None
        began = int((marker or {}).get("started_at_ms", 0))
        stopped = last_operator_stop(self.config, robot.name)
        return "stopped_by_operator" if stopped is not None and stopped >= began else None

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
        """
        robot = self.config.robot(request.robot)
        if request.relative:
            raise ReissueRefused(
                "not_repeatable", "a relative move cannot be re-issued; mark it done or abandon it"
            )
        number = op.next_attempt()
        existing = op.reissue_proof(number)
        if existing is not None:
            return existing  # a proof taken before a crash: the floor already stands
        bus = self.host.bus_for(robot)
        state = read_state(bus, robot)
        joints = _joints(state)
        errors = {
            robot.joint_by_id(i).name: tables.hardware_errors(j["hardware_error_status"])
            for i, j in joints.items()
            if j["hardware_error_status"]
        }
        if errors:
            raise ReissueRefused(
                "hardware_error",
                f"a re-issue is refused while a joint reports a hardware error: {errors}",
                details={"hardware_errors": errors},
            )
        if any(j["moving"] for j in joints.values()):
            raise ReissueRefused("device_not_idle", "the arm is moving; re-issue needs it idle")
        # The floor first: from here on no older attempt sends anything, so what is read back
        # below stays true.
        floor = op.raise_fence_floor(fence_floor)
        crash_point("proof.after_fence_floor")
        staged = {i: j["goal_position"] for i, j in joints.items() if j["registered_instruction"]}
        staged.update(self._staged_others(bus, robot, {i: 0 for i in joints}))
        fence, self.fence = self.fence, None  # the proof's own frames are the host's
        try:
            for dxl_id, current in sorted(staged.items()):
                self._stage_goal(op, number, bus, dxl_id, current, "neutralise_reg_write")
            if staged:
                self._send_logged(
                    op, number, "neutralise_action", _core.dxl_action(), bus.action, id=0xFE
                )
        finally:
            self.fence = fence
        crash_point("proof.after_neutralise")
        after = read_state(bus, robot)
        others = self._staged_others(bus, robot, {i: 0 for i in _joints(after)})
        if others or any(
            j["registered_instruction"] or j["goal_position"] != joints[i]["goal_position"]
            for i, j in _joints(after).items()
        ):
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
            "read_back": after,
            "read_back_si": si_read_back(robot, after),
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
        self, bus: Any, reason: str, neutralised: list[int], state: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "reason": reason,
            "port_lock": bus.identity.key,
            "owner_pid": os.getpid(),
            "neutralised_ids": neutralised,
            "read_back": state,
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
        joints = _joints(state)
        attempts = op.attempts()
        pre = op.preimage(attempts[-1]) if attempts else None
        return {
            "operation_id": op.id,
            "reason": reason,
            "read_back": si_read_back(robot, state),
            "staged": {
                robot.joint_by_id(i).name: round(tables.ticks_to_radians(g), 6)
                for i, g in sorted((goals or {}).items())
            },
            "preimage": None
            if pre is None
            else {
                "read_back": si_read_back(robot, pre["state"]),
                "profile_speed_rad_s": profile_speed_rad_s(int(pre["profile_velocity"])),
                "first_motion": pre["first_motion"],
            },
            "hardware_errors": {
                robot.joint_by_id(i).name: tables.hardware_errors(j["hardware_error_status"])
                for i, j in sorted(joints.items())
                if j["hardware_error_status"]
            },
            "command": request.as_dict(),
            "retry_class": request.retry_class.value,
            "targets": {str(i): g for i, g in sorted((goals or {}).items())},
            "sent": op.sent(),
            "last_status": {
                str(i): {"error": e, "at_ms": t} for i, (e, t) in sorted(bus.last_status.items())
            },
            "reconcile": checks,
            "device_state": state,
            "commanded_vs_present": {
                str(i): {
                    "commanded": (goals or {}).get(i),
                    "goal": j["goal_position"],
                    "present": j["present_position"],
                }
                for i, j in sorted(joints.items())
            },
        }
