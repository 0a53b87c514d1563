"""Pure decisions of a DYNAMIXEL robot move: no I/O, no clock, no protocol units.

Every function here takes decoded records in SI units (radians, rad/s, decoded hardware error
names) and returns a value; the adapter (`move.py`) does the bus reads and writes around them
and the tests table them (`tests/adapters/test_dynamixel_decide.py`).

- `plan(targets, ...)`: the goals of a move, every one checked against its joint's limits, from
  a fresh read-back (a relative move adds its deltas to the measured positions). Raises
  `MoveRefused` for a move that can never run; the adapter then sends nothing.
- `reconcile(preimage, sent, read_back, move=...)`: after a crash or a lost status, one of
  - `Recovered`: every goal is the target, nothing is staged, torque is on and the arm has
    arrived (a relative move only when its goals differ from the ones the pre-image saw), and
    no operator stopped the robot after the attempt began;
  - `Neutralise(staged, reason)`: nothing this attempt sent can have acted yet: the writes still
    staged (REG_WRITE waiting for an ACTION) are to be replaced by each joint's current goal,
    then `confirm` decides on the read-back after them;
  - `Unknown(reason, details)`: neither can be proved; an operator decides.
- `confirm(before, after)`: after the journaled neutralising writes, `ConfirmedAbsent` when the
  read-back shows nothing staged and every goal, torque and error as before, else `Unknown`.
- `changed_since(evidence, read_back)`: the differences that matter to an operator's decision
  between the read-back an evidence document holds and a fresh one (empty: unchanged).

The rules, in order (each is a test row's expectation, `test_dynamixel_decide.py`):
1. a hardware error on any joint: Unknown `hardware_error` (a re-issue is refused too);
2. the attempt logged its REG_WRITEs and its ACTION, the goals are known and attributable,
   every goal reads as the target and nothing is staged: torque off on a joint (a power cycle,
   a torque-off stop) is Unknown (`device_state_lost_or_moved`); still
   moving after the settle wait is `settle_timeout`; settled away from it `not_settled`;
   otherwise Recovered, unless an operator stopped the robot after the attempt began
   (`stopped_by_operator`: the goals may be a later move's, run after the resume) or the
   host's shutdown stop cut it (`stopped_at_shutdown`: a later move's, run after the restart);
3. nothing effectful (REG_WRITE, ACTION) sent by the attempt: Neutralise (`nothing_sent`); the
   attempt's setup WRITEs (`SETUP`: Profile Velocity, a limp joint's goal set to where it
   stands, Torque Enable) and neutralising writes
   (`NEUTRALISING`) are logged but do not count: they commit no goal;
4. a relative move: Unknown `relative_move_ambiguous` (a second run would add its delta again);
5. no pre-image: Unknown `no_preimage`;
6. torque as in the pre-image and every goal staged or unchanged: Neutralise
   (`staged_not_actioned`), unless the attempt logged its REG_WRITEs and its ACTION and a goal
   reads unchanged without being staged (its ACTION may have run, and a later move driven the
   goal back to where the pre-image saw it: a re-issue would move the arm a second time);
   otherwise Unknown `device_state_lost_or_moved`, or `settle_timeout` when the attempt's own
   stop came after its settle timeout.
In 2 and 6 an operator's stop after the attempt began names the reason `stopped_by_operator`
(`stopped_on_session_lapse` when the session watchdog made that stop, `cancelled_by_planner` when a
planner's Cancel did: `Move.stop_reason`),
and the attempt's own logged stop after its settle timeout (a hold rewrites the goals, a
torque-off leaves them) names `settle_timeout`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Instructions that can commit a move's goals (the log holds every command, durable before
#: sending; only these count as "the attempt sent its move").
EFFECTFUL = ("reg_write", "action")
#: The WRITEs an attempt sends before its pre-image (speed limit, torque on). They are in the
#: sent log like every effectful frame, but they stage and commit no goal: repeating them is
#: harmless, so they never make a move "sent" or "committed" (rules 2, 3).
SETUP = ("profile_velocity", "hold_goal", "torque_enable")
#: The neutralising writes of a reconcile or a re-issue proof (each joint's current goal).
NEUTRALISING = ("neutralise_reg_write", "neutralise_action")
#: Instructions of the attempt's own safe-stop (logged before they are sent).
STOPS = ("stop_hold", "stop_torque_off")

#: The reason of a move the host's own shutdown stop cut short.
SHUTDOWN_REASON = "stopped_at_shutdown"

REASONS = (
    "hardware_error",
    "device_state_lost_or_moved",
    "settle_timeout",
    "not_settled",
    "stopped_by_operator",
    SHUTDOWN_REASON,
    "stopped_on_session_lapse",
    "cancelled_by_planner",
    "robot_latched",
    "relative_move_ambiguous",
    "no_preimage",
    "neutralise_failed",
)


@dataclass(frozen=True)
class Joint:
    """One joint as read back, decoded: positions in rad, velocity in rad/s (None: not read)."""

    position: float
    goal: float
    moving: bool
    torque_on: bool
    staged: bool  # Registered Instruction: a REG_WRITE waits for an ACTION
    errors: tuple[str, ...] = ()
    velocity: float | None = None


@dataclass(frozen=True)
class ReadBack:
    """Every joint of a robot by name, with the wall time it was read."""

    joints: Mapping[str, Joint]
    read_at_ms: int | None = None

    @classmethod
    def from_si(cls, doc: Mapping[str, Any]) -> ReadBack:
        """The SI document `move.si_read_back` writes (evidence, guards) as a record."""
        joints: dict[str, Joint] = {}
        for name, j in (doc.get("joints") or {}).items():
            velocity = j.get("velocity_rad_s")
            joints[str(name)] = Joint(
                position=float(j["position_rad"]),
                goal=float(j["goal_rad"]),
                moving=bool(j["moving"]),
                torque_on=bool(j["torque_on"]),
                staged=bool(j["staged_write"]),
                errors=tuple(j.get("hardware_errors") or ()),
                velocity=None if velocity is None else float(velocity),
            )
        read_at = doc.get("read_at_ms")
        return cls(joints, int(read_at) if isinstance(read_at, int) else None)


@dataclass(frozen=True)
class Preimage:
    """The read-back an attempt recorded before its first effectful command, and its goals."""

    read_back: ReadBack
    goals: Mapping[str, float]


@dataclass(frozen=True)
class Sent:
    """One logged effectful command of the attempt (`cause`: why the attempt stopped itself)."""

    instruction: str
    joint: str | None = None
    cause: str | None = None


@dataclass(frozen=True)
class Move:
    """What reconciliation needs to know about the move besides the device."""

    relative: bool
    #: Absolute targets in rad (None for a relative move: its goals are in the pre-image).
    targets: Mapping[str, float] | None
    #: How close to its goal a joint has arrived (rad).
    tolerance: float
    #: One position step of the device (rad): two goals closer than half of it are equal.
    resolution: float
    #: An operator stopped the robot after the attempt began.
    stopped_by_operator: bool = False
    #: The reason that stop names (`tether.devices.latch.stop_reason`): `stopped_by_operator`,
    #: `stopped_on_session_lapse` when the session watchdog made it, `cancelled_by_planner` for
    #: a Cancel.
    stop_reason: str = "stopped_by_operator"
    #: The host itself safe-stopped the robot as it shut down after the attempt began (no
    #: operator's stop): the reason a move that stands short of its goals is parked with.
    stopped_at_shutdown: bool = False


@dataclass(frozen=True)
class Recovered:
    read_back: ReadBack


@dataclass(frozen=True)
class Unknown:
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Neutralise:
    """Replace each staged write by its joint's current goal (rad), then `confirm`."""

    staged: Mapping[str, float]
    reason: str  # the guard's reason once confirmed: nothing_sent | staged_not_actioned


@dataclass(frozen=True)
class ConfirmedAbsent:
    neutralised: tuple[str, ...]


class MoveRefused(ValueError):
    """A move that can never run (`code`: `limit_violation`, `unknown_joint`)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def _rad(value: float) -> str:
    """A radian value for a message: four decimals, or four significant digits and an
    exponent when it is huge (a target of 1e308 is not printed in 309 digits)."""
    return f"{value:+.4f}" if abs(value) < 1e6 else f"{value:+.4g}"


def _same(a: float, b: float, resolution: float) -> bool:
    return abs(a - b) <= resolution / 2


def _check_value(name: str, value: float, limits: Mapping[str, tuple[float, float]]) -> None:
    """A move's value for joint `name`: of a configured joint, and finite (`MoveRefused`)."""
    if name not in limits:
        raise MoveRefused("unknown_joint", f"no joint {name!r}", joint=name)
    if not math.isfinite(value):
        raise MoveRefused("limit_violation", f"joint {name}: {value!r} is not finite")


def plan(
    targets: Mapping[str, float],
    *,
    relative: bool,
    limits: Mapping[str, tuple[float, float]],
    present: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Goals in rad by joint: the targets, or the measured positions plus the deltas; every one
    inside `[min, max]` of its joint. Raises `MoveRefused` (nothing may be sent)."""
    goals: dict[str, float] = {}
    for name, value in sorted(targets.items()):
        _check_value(name, value, limits)
        if relative:
            if present is None or name not in present:
                raise MoveRefused("unknown_joint", f"joint {name!r} was not read", joint=name)
            goal = present[name] + value
        else:
            goal = value
        low, high = limits[name]
        if not low <= goal <= high:
            shown, bound = _rad(goal), _rad(low if goal < low else high)
            if shown == bound:  # just past it: enough digits to show by how much
                shown = f"{goal:+.17g}"
            start = ""
            if relative and present is not None:
                start = f" (from {_rad(present[name])} rad by {_rad(value)} rad)"
            raise MoveRefused(
                "limit_violation",
                f"joint {name}: goal {shown} rad{start} is outside its limits "
                f"[{_rad(low)}, {_rad(high)}] rad",
                joint=name,
                goal_rad=round(goal, 6),
                min_rad=low,
                max_rad=high,
            )
        goals[name] = goal
    return goals


def check_deltas(targets: Mapping[str, float], limits: Mapping[str, tuple[float, float]]) -> None:
    """A relative move's deltas, checked before any read-back: each finite, and none larger
    than its joint's whole range (such a move leaves the limits from any position, so it can
    never run). Raises `MoveRefused`."""
    for name, value in sorted(targets.items()):
        _check_value(name, value, limits)
        low, high = limits[name]
        if abs(value) > high - low:
            raise MoveRefused(
                "limit_violation",
                f"joint {name}: a move by {_rad(value)} rad leaves its limits [{_rad(low)},"
                f" {_rad(high)}] rad from any position (they span {_rad(high - low)} rad)",
                joint=name,
                delta_rad=value,
                min_rad=low,
                max_rad=high,
            )


def _own_stop(sent: Sequence[Sent]) -> str | None:
    """`settle_timeout` when the attempt stopped itself because its settle timeout ran out."""
    causes = {s.cause for s in sent if s.instruction in STOPS}
    return "settle_timeout" if "settle_timeout" in causes else None


def hardware_errors(read_back: ReadBack) -> dict[str, list[str]]:
    """Joints reporting a hardware error, with the decoded errors."""
    return {name: list(j.errors) for name, j in sorted(read_back.joints.items()) if j.errors}


def reconcile(
    preimage: Preimage | None,
    sent: Sequence[Sent],
    read_back: ReadBack,
    *,
    move: Move,
) -> Recovered | Unknown | Neutralise:
    """The conclusion of a bound attempt from what it recorded and a settled read-back (the
    rules in the module docstring)."""
    joints = read_back.joints
    errors = hardware_errors(read_back)
    if errors:
        return Unknown("hardware_error", {"hardware_errors": errors})
    goals: Mapping[str, float] | None = preimage.goals if preimage is not None else move.targets
    if goals is not None and any(name not in joints for name in goals):
        missing = sorted(set(goals) - set(joints))
        return Unknown("device_state_lost_or_moved", {"missing": missing})
    attributable = not move.relative or (
        preimage is not None
        and goals is not None
        and any(
            not _same(preimage.read_back.joints[n].goal, g, move.resolution)
            for n, g in goals.items()
            if n in preimage.read_back.joints
        )
    )
    operator = move.stop_reason if move.stopped_by_operator else None
    shutdown = SHUTDOWN_REASON if move.stopped_at_shutdown else None
    instructions = {s.instruction for s in sent}
    committed = {"reg_write", "action"} <= instructions  # our goals were staged, then ACTION
    if (
        committed
        and goals is not None
        and attributable
        and all(
            _same(joints[n].goal, g, move.resolution) and not joints[n].staged
            for n, g in goals.items()
        )
    ):
        torque_off = sorted(n for n in goals if not joints[n].torque_on)
        if torque_off:
            # A torque-off stop leaves the goals as they were: its cause names the reason.
            return Unknown(
                operator or _own_stop(sent) or shutdown or "device_state_lost_or_moved",
                {"torque_off": torque_off},
            )
        moving = sorted(n for n in goals if joints[n].moving)
        if moving:
            return Unknown(operator or "settle_timeout", {"moving": moving})
        away = sorted(n for n, g in goals.items() if abs(joints[n].position - g) > move.tolerance)
        if away:
            return Unknown(operator or "not_settled", {"away": away})
        if operator or shutdown:
            # At the target, but an operator's stop or the host's shutdown stop cut this
            # attempt: the goals now in the device may be a later move's (one run after the
            # resume or the restart, to the same target), so they prove nothing of this one.
            # It stays the operator's to decide.
            return Unknown(operator or str(shutdown), {"at_target": sorted(goals)})
        return Recovered(read_back)

    staged = {n: j.goal for n, j in sorted(joints.items()) if j.staged}
    if not any(s.instruction in EFFECTFUL for s in sent):
        return Neutralise(staged, "nothing_sent")
    if move.relative:
        return Unknown("relative_move_ambiguous", {"attributable": attributable})
    if preimage is None or goals is None:
        return Unknown("no_preimage")
    before = preimage.read_back.joints
    torque_changed = sorted(
        n for n in goals if n in before and joints[n].torque_on != before[n].torque_on
    )
    moved = sorted(
        n
        for n in goals
        if not joints[n].staged
        and (n not in before or not _same(joints[n].goal, before[n].goal, move.resolution))
    )
    # After a logged REG_WRITE and ACTION, a goal that is not staged proves nothing by reading
    # as before: the ACTION may have committed it and a later move put it back. Only a goal
    # still staged shows that the ACTION never reached its joint.
    actioned = sorted(n for n in goals if not joints[n].staged) if committed else []
    if torque_changed or moved or actioned:
        causes = [s.cause for s in sent if s.instruction in STOPS and s.cause]
        reason = operator or _own_stop(sent) or shutdown or "device_state_lost_or_moved"
        details: dict[str, Any] = {"torque_changed": torque_changed, "goal_changed": moved}
        if actioned and not moved:
            details["unstaged_after_action"] = actioned
        if causes:
            details["stopped_after"] = causes[-1]
        return Unknown(reason, details)
    return Neutralise(staged, "staged_not_actioned")


def confirm(before: ReadBack, after: ReadBack, *, resolution: float) -> ConfirmedAbsent | Unknown:
    """After the neutralising writes: absent when nothing is staged and every goal, torque and
    error reads as `before` (the read-back `reconcile` decided on)."""
    errors = hardware_errors(after)
    if errors:
        return Unknown("hardware_error", {"hardware_errors": errors})
    problems: dict[str, str] = {}
    for name, old in sorted(before.joints.items()):
        new = after.joints.get(name)
        if new is None:
            problems[name] = "missing"
        elif new.staged:
            problems[name] = "still staged"
        elif not _same(new.goal, old.goal, resolution):
            problems[name] = f"goal {old.goal:+.4f} -> {new.goal:+.4f} rad"
        elif new.torque_on != old.torque_on:
            problems[name] = f"torque {'on' if old.torque_on else 'off'} -> " + (
                "on" if new.torque_on else "off"
            )
    if problems:
        return Unknown("neutralise_failed", {"joints": problems})
    return ConfirmedAbsent(tuple(n for n, j in sorted(before.joints.items()) if j.staged))


def changed_since(
    evidence: ReadBack, read_back: ReadBack, *, tolerance: float, resolution: float
) -> list[str]:
    """Differences that matter between an evidence read-back and a fresh one (empty: the
    device is as it was). Positions count beyond `tolerance`; velocity never does. A joint the
    evidence did not read (evidence taken while the device could not be read) is a change:
    nothing proves the device is as it was then."""
    diffs: list[str] = [
        f"{name} not read in the evidence, now at {new.position:+.4f} rad"
        for name, new in sorted(read_back.joints.items())
        if name not in evidence.joints
    ]
    for name, old in sorted(evidence.joints.items()):
        new = read_back.joints.get(name)
        if new is None:
            diffs.append(f"{name} missing")
            continue
        if not _same(old.goal, new.goal, resolution):
            diffs.append(f"{name} goal {old.goal:+.4f} -> {new.goal:+.4f} rad")
        for what, a, b in (
            ("staged write", old.staged, new.staged),
            ("torque", old.torque_on, new.torque_on),
            ("moving", old.moving, new.moving),
        ):
            if a != b:
                diffs.append(f"{name} {what} {a} -> {b}")
        if tuple(old.errors) != tuple(new.errors):
            diffs.append(f"{name} hardware errors {list(old.errors)} -> {list(new.errors)}")
        if abs(old.position - new.position) > tolerance:
            diffs.append(f"{name} position {old.position:+.4f} -> {new.position:+.4f} rad")
    return diffs
