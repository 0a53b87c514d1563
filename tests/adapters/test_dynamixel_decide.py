"""The pure decisions of a DYNAMIXEL move (`tether.adapters.dynamixel.decide`), tabled.

`reconcile` then `confirm` run over the full product of six facts about an attempt (staged,
committed, moving, arrived, power-cycled, hardware error), for absolute and relative moves. Each
row's device read-back and sent log are built from the facts the way a real servo would end up;
its expected conclusion is computed by `expected`, written from the facts alone (never from the
read-back the function sees). `plan`, `confirm` and `changed_since` get tables of their own."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest
from tether.adapters.dynamixel import decide
from tether.adapters.dynamixel.decide import Joint, Move, Preimage, ReadBack, Sent

RES = 2 * math.pi / 4096  # one position step of an X-series servo
TOL = 0.03
START = {"a": 0.0, "b": 0.0}  # where the arm stands, and its goals, in the pre-image
TARGET = {"a": 0.5, "b": -0.3}
FACTS = ("staged", "committed", "moving", "arrived", "power_cycled", "hardware_error")


def preimage() -> Preimage:
    joints = {n: Joint(START[n], START[n], False, True, False) for n in START}
    # A relative move's goals are the measured start plus its deltas: the same targets here.
    return Preimage(ReadBack(joints, 1), dict(TARGET))


def setup_writes() -> list[Sent]:
    return [Sent(what, n) for n in START for what in decide.SETUP]


def scenario(facts: dict[str, bool]) -> tuple[list[Sent], ReadBack]:
    """The sent log and the read-back a servo pair shows after these facts, in this order:
    REG_WRITEs (staged), the ACTION (committed), motion, a power cycle, a hardware error. The
    log opens with the attempt's setup WRITEs (Profile Velocity, Torque Enable on each joint),
    journaled before its pre-image like every effectful frame."""
    sent: list[Sent] = setup_writes()
    if facts["staged"]:
        sent += [Sent("reg_write", "a"), Sent("reg_write", "b")]
    if facts["committed"]:
        sent.append(Sent("action"))
    joints = {}
    for name in START:
        applied = facts["staged"] and facts["committed"]
        goal = TARGET[name] if applied else START[name]
        flagged = facts["staged"] and not facts["committed"]
        if facts["arrived"]:
            position = TARGET[name]
        elif facts["moving"] or applied:
            position = (START[name] + TARGET[name]) / 2  # under way, or stopped short
        else:
            position = START[name]
        torque = True
        if facts["power_cycled"]:  # RAM wiped: torque off, staged write gone, goal = present
            torque, flagged, goal = False, False, position
        errors: tuple[str, ...] = ()
        if facts["hardware_error"] and name == "b":
            errors, torque = ("overload",), False
        joints[name] = Joint(position, goal, facts["moving"], torque, flagged, errors)
    return sent, ReadBack(joints, 2)


def expected(facts: dict[str, bool], relative: bool) -> tuple[str, str | None]:
    """The conclusion from the facts alone (the rules of the decide module, restated)."""
    if facts["hardware_error"]:
        return ("unknown", "hardware_error")
    ours_applied = facts["staged"] and facts["committed"]
    goal_is_target = ours_applied and (not facts["power_cycled"] or facts["arrived"])
    if goal_is_target:
        if facts["power_cycled"]:
            return ("unknown", "device_state_lost_or_moved")  # at its goal, torque off
        if facts["moving"]:
            return ("unknown", "settle_timeout")
        if not facts["arrived"]:
            return ("unknown", "not_settled")
        return ("recovered", None)
    if not facts["staged"] and not facts["committed"]:
        return ("absent", "nothing_sent")
    if relative:
        return ("unknown", "relative_move_ambiguous")
    if facts["power_cycled"]:
        return ("unknown", "device_state_lost_or_moved")
    return ("absent", "staged_not_actioned")


def neutralised(read_back: ReadBack, staged: dict[str, float]) -> ReadBack:
    """The read-back after REG_WRITE of each staged joint's current goal and one ACTION."""
    joints = {
        n: replace(j, staged=False, goal=staged.get(n, j.goal)) for n, j in read_back.joints.items()
    }
    return ReadBack(joints, 3)


ROWS = [
    (dict(zip(FACTS, values, strict=True)), relative)
    for values in itertools.product((False, True), repeat=len(FACTS))
    for relative in (False, True)
]


def row_id(row: tuple[dict[str, bool], bool]) -> str:
    facts, relative = row
    on = [k for k, v in facts.items() if v] or ["nothing"]
    return ("relative:" if relative else "absolute:") + "+".join(on)


@pytest.mark.parametrize("row", ROWS, ids=[row_id(r) for r in ROWS])
def test_reconcile_then_confirm_over_every_combination(row: tuple[dict[str, bool], bool]) -> None:
    facts, relative = row
    sent, read_back = scenario(facts)
    move = Move(
        relative=relative,
        targets=None if relative else dict(TARGET),
        tolerance=TOL,
        resolution=RES,
    )
    conclusion = decide.reconcile(preimage(), sent, read_back, move=move)
    got: tuple[str, str | None]
    if isinstance(conclusion, decide.Neutralise):
        flagged = facts["staged"] and not facts["committed"] and not facts["power_cycled"]
        assert dict(conclusion.staged) == (dict(START) if flagged else {})
        after = decide.confirm(
            read_back, neutralised(read_back, dict(conclusion.staged)), resolution=RES
        )
        assert isinstance(after, decide.ConfirmedAbsent), after
        assert after.neutralised == (("a", "b") if flagged else ())
        got = ("absent", conclusion.reason)
    elif isinstance(conclusion, decide.Recovered):
        assert conclusion.read_back == read_back
        got = ("recovered", None)
    else:
        got = ("unknown", conclusion.reason)
    assert got == expected(facts, relative)


def test_the_table_covers_every_conclusion() -> None:
    seen = {expected(f, r) for f, r in ROWS}
    assert seen == {
        ("unknown", "hardware_error"),
        ("unknown", "device_state_lost_or_moved"),
        ("unknown", "settle_timeout"),
        ("unknown", "not_settled"),
        ("unknown", "relative_move_ambiguous"),
        ("recovered", None),
        ("absent", "nothing_sent"),
        ("absent", "staged_not_actioned"),
    }
    assert len(ROWS) == 2**6 * 2


def move(**kw: Any) -> Move:
    return Move(
        **{"relative": False, "targets": dict(TARGET), "tolerance": TOL, "resolution": RES, **kw}
    )


def test_an_operators_stop_names_the_reason() -> None:
    # Stopped mid-move and held short of the target: the goals were rewritten by the hold.
    sent, read_back = scenario(dict.fromkeys(FACTS, False) | {"staged": True, "committed": True})
    held = ReadBack({n: replace(j, goal=j.position) for n, j in read_back.joints.items()}, 2)
    stopped = decide.reconcile(preimage(), sent, held, move=move(stopped_by_operator=True))
    assert stopped == decide.Unknown(
        "stopped_by_operator", {"torque_changed": [], "goal_changed": ["a", "b"]}
    )
    # The same read-back without a stop is what it looks like.
    plain = decide.reconcile(preimage(), sent, held, move=move())
    assert isinstance(plain, decide.Unknown) and plain.reason == "device_state_lost_or_moved"


def test_an_operators_or_the_shutdowns_stop_is_never_recovered_even_at_the_target() -> None:
    """Stopped mid-move, resumed, then a later move drove the arm to the same target: the
    read-back is what this attempt's arrival would be, yet proves nothing of it. It stays
    `stopped_by_operator` (an operator decides), never Recovered."""
    sent, read_back = scenario(
        dict.fromkeys(FACTS, False) | {"staged": True, "committed": True, "arrived": True}
    )
    assert decide.reconcile(preimage(), sent, read_back, move=move()) == decide.Recovered(read_back)
    stopped = decide.reconcile(preimage(), sent, read_back, move=move(stopped_by_operator=True))
    assert stopped == decide.Unknown("stopped_by_operator", {"at_target": ["a", "b"]})
    # The session watchdog's stop is as binding, and names itself.
    lapsed = move(stopped_by_operator=True, stop_reason="stopped_on_session_lapse")
    assert decide.reconcile(preimage(), sent, read_back, move=lapsed) == decide.Unknown(
        "stopped_on_session_lapse", {"at_target": ["a", "b"]}
    )
    # The host's shutdown stop too: a move run after the restart to the same target reached
    # it, and this one was parked as `stopped_at_shutdown` (it became SUCCEEDED by itself).
    cut = decide.reconcile(preimage(), sent, read_back, move=move(stopped_at_shutdown=True))
    assert cut == decide.Unknown("stopped_at_shutdown", {"at_target": ["a", "b"]})


def test_the_attempts_own_stop_after_its_settle_timeout_names_the_reason() -> None:
    sent, read_back = scenario(dict.fromkeys(FACTS, False) | {"staged": True, "committed": True})
    held = ReadBack({n: replace(j, goal=j.position) for n, j in read_back.joints.items()}, 2)
    stops = [Sent("stop_hold", n, "settle_timeout") for n in START]
    got = decide.reconcile(preimage(), sent + stops, held, move=move())
    assert isinstance(got, decide.Unknown) and got.reason == "settle_timeout"
    assert got.details["stopped_after"] == "settle_timeout"
    # A torque-off stop leaves the goals at the target: the same reason, from the log.
    limp = ReadBack({n: replace(j, torque_on=False) for n, j in read_back.joints.items()}, 2)
    offs = [Sent("stop_torque_off", n, "settle_timeout") for n in START]
    got = decide.reconcile(preimage(), sent + offs, limp, move=move())
    assert got == decide.Unknown("settle_timeout", {"torque_off": ["a", "b"]})
    blocked = [Sent("stop_hold", n, "not_reached") for n in START]
    got = decide.reconcile(preimage(), sent + blocked, held, move=move())
    assert isinstance(got, decide.Unknown) and got.reason == "device_state_lost_or_moved"


def test_no_preimage_after_effectful_frames_is_unknown() -> None:
    sent, read_back = scenario(dict.fromkeys(FACTS, False) | {"staged": True})
    got = decide.reconcile(None, sent, read_back, move=move())
    assert got == decide.Unknown("no_preimage")
    # Without a pre-image and with nothing sent, the move never ran.
    nothing, idle = scenario(dict.fromkeys(FACTS, False))
    assert decide.reconcile(None, nothing, idle, move=move()) == decide.Neutralise(
        {}, "nothing_sent"
    )


@pytest.mark.parametrize("row", ROWS, ids=[row_id(r) for r in ROWS])
def test_setup_and_neutralising_writes_never_count_as_a_sent_move(
    row: tuple[dict[str, bool], bool],
) -> None:
    """The same conclusion with the setup WRITEs in the log or not, and with a neutralising
    REG_WRITE/ACTION pair of an earlier reconcile appended: neither stages nor commits a goal,
    so neither is mistaken for a committed move."""
    facts, relative = row
    sent, read_back = scenario(facts)
    m = Move(
        relative=relative,
        targets=None if relative else dict(TARGET),
        tolerance=TOL,
        resolution=RES,
    )
    assert sent[: len(setup_writes())] == setup_writes()
    bare = sent[len(setup_writes()) :]
    with_neutralise = [*sent, Sent("neutralise_reg_write", "a"), Sent("neutralise_action")]
    got = decide.reconcile(preimage(), sent, read_back, move=m)
    assert decide.reconcile(preimage(), bare, read_back, move=m) == got
    assert decide.reconcile(preimage(), with_neutralise, read_back, move=m) == got


def test_a_crash_after_the_setup_writes_is_nothing_sent() -> None:
    """Profile Velocity and Torque Enable went out, then the attempt died before its pre-image:
    nothing can have moved toward the target, the move is neutralised (nothing staged) and
    confirmed absent, never taken for a committed or ambiguous move."""
    _, idle = scenario(dict.fromkeys(FACTS, False))
    got = decide.reconcile(None, setup_writes(), idle, move=move())
    assert got == decide.Neutralise({}, "nothing_sent")
    relative = Move(relative=True, targets=None, tolerance=TOL, resolution=RES)
    assert decide.reconcile(None, setup_writes(), idle, move=relative) == got
    assert isinstance(decide.confirm(idle, idle, resolution=RES), decide.ConfirmedAbsent)


def joint(**kw: Any) -> Joint:
    base: dict[str, Any] = {
        "position": 0.1,
        "goal": 0.1,
        "moving": False,
        "torque_on": True,
        "staged": False,
    }
    return Joint(**(base | kw))


@pytest.mark.parametrize(
    ("after", "outcome"),
    [
        (joint(), "absent"),
        (joint(staged=True), "neutralise_failed"),
        (joint(goal=0.1 + RES), "neutralise_failed"),
        (joint(goal=0.1 + RES / 4), "absent"),  # the same tick
        (joint(torque_on=False), "neutralise_failed"),
        (joint(errors=("overheating",)), "hardware_error"),
        (joint(position=0.2, moving=True), "absent"),  # only goals, flags and torque count
    ],
)
def test_confirm(after: Joint, outcome: str) -> None:
    before = ReadBack({"a": joint(staged=True)}, 1)
    got = decide.confirm(before, ReadBack({"a": after}, 2), resolution=RES)
    if outcome == "absent":
        assert got == decide.ConfirmedAbsent(("a",))
    else:
        assert isinstance(got, decide.Unknown) and got.reason == outcome


def test_confirm_refuses_a_joint_that_no_longer_answers() -> None:
    before = ReadBack({"a": joint(), "b": joint()}, 1)
    got = decide.confirm(before, ReadBack({"a": joint()}, 2), resolution=RES)
    assert got == decide.Unknown("neutralise_failed", {"joints": {"b": "missing"}})


@pytest.mark.parametrize(
    ("fresh", "changed"),
    [
        (joint(), []),
        (joint(position=0.1 + TOL / 2, velocity=0.4), []),  # within tolerance; speed ignored
        (joint(position=0.1 + 2 * TOL), ["a position +0.1000 -> +0.1600 rad"]),
        (joint(goal=0.3), ["a goal +0.1000 -> +0.3000 rad"]),
        (joint(staged=True), ["a staged write False -> True"]),
        (joint(torque_on=False), ["a torque True -> False"]),
        (joint(moving=True), ["a moving False -> True"]),
        (joint(errors=("overload",)), ["a hardware errors [] -> ['overload']"]),
    ],
)
def test_changed_since(fresh: Joint, changed: list[str]) -> None:
    evidence = ReadBack({"a": joint()}, 1)
    got = decide.changed_since(evidence, ReadBack({"a": fresh}, 2), tolerance=TOL, resolution=RES)
    assert got == changed
    assert decide.changed_since(evidence, ReadBack({}, 2), tolerance=TOL, resolution=RES) == [
        "a missing"
    ]


def test_evidence_that_read_nothing_is_never_as_the_device_is_now() -> None:
    """Evidence taken while the device could not be read (`device_unreadable`, no read-back):
    whatever the device reads now, nothing proves it is as it was, so a decision on that
    evidence is refused (`state_changed`) and the operator decides on the fresh read-back."""
    unread = ReadBack({}, None)
    got = decide.changed_since(
        unread,
        ReadBack({"a": joint(), "b": joint(position=-0.4)}, 2),
        tolerance=TOL,
        resolution=RES,
    )
    assert got == [
        "a not read in the evidence, now at +0.1000 rad",
        "b not read in the evidence, now at -0.4000 rad",
    ]
    partial = ReadBack({"a": joint()}, 1)  # a joint that did not answer then, and does now
    got = decide.changed_since(
        partial, ReadBack({"a": joint(), "b": joint()}, 2), tolerance=TOL, resolution=RES
    )
    assert got == ["b not read in the evidence, now at +0.1000 rad"]


LIMITS = {"a": (-1.0, 1.0), "b": (-0.5, 0.5)}


@pytest.mark.parametrize(
    ("targets", "relative", "present", "result"),
    [
        ({"a": 0.5}, False, None, {"a": 0.5}),
        ({"a": 1.0, "b": -0.5}, False, None, {"a": 1.0, "b": -0.5}),  # the limits are inside
        ({"a": 1.01}, False, None, "limit_violation"),
        ({"a": 0.2}, True, {"a": 0.7, "b": 0.0}, {"a": pytest.approx(0.9)}),
        ({"a": 0.4}, True, {"a": 0.7, "b": 0.0}, "limit_violation"),  # only from the pose
        ({"b": -0.2}, True, {"a": 0.0, "b": -0.4}, "limit_violation"),
        ({"c": 0.1}, False, None, "unknown_joint"),
        ({"a": 0.1}, True, None, "unknown_joint"),  # a relative move needs the read-back
        ({"a": math.nan}, False, None, "limit_violation"),
    ],
)
def test_plan_checks_every_goal_against_the_limits(
    targets: dict[str, float],
    relative: bool,
    present: dict[str, float] | None,
    result: Any,
) -> None:
    if isinstance(result, str):
        with pytest.raises(decide.MoveRefused) as info:
            decide.plan(targets, relative=relative, limits=LIMITS, present=present)
        assert info.value.code == result
        assert "tick" not in str(info.value)
    else:
        assert decide.plan(targets, relative=relative, limits=LIMITS, present=present) == result


def test_the_si_document_round_trips() -> None:
    doc = {
        "read_at_ms": 5,
        "joints": {
            "a": {
                "position_rad": 0.1,
                "goal_rad": 0.2,
                "velocity_rad_s": -0.5,
                "moving": True,
                "torque_on": True,
                "staged_write": False,
                "hardware_errors": ["overload"],
            }
        },
    }
    assert decide.ReadBack.from_si(doc) == ReadBack(
        {"a": Joint(0.1, 0.2, True, True, False, ("overload",), -0.5)}, 5
    )


def test_goals_driven_back_after_the_actions_log_are_never_read_as_not_actioned() -> None:
    """The attempt logged its REG_WRITEs and its ACTION, timed out and held; a later move then
    drove the arm back to exactly where this attempt's pre-image saw it. The goals read as
    before, yet the ACTION ran: a re-issue would move the arm a second time, so an operator
    decides. Only goals still staged show that the ACTION never reached them."""
    logged = [*setup_writes(), Sent("reg_write", "a"), Sent("reg_write", "b"), Sent("action")]
    back = ReadBack({n: Joint(START[n], START[n], False, True, False) for n in START}, 2)
    held = [*logged, *(Sent("stop_hold", n, "settle_timeout") for n in START)]
    assert decide.reconcile(preimage(), held, back, move=move()) == decide.Unknown(
        "settle_timeout",
        {
            "torque_changed": [],
            "goal_changed": [],
            "unstaged_after_action": ["a", "b"],
            "stopped_after": "settle_timeout",
        },
    )
    assert decide.reconcile(preimage(), logged, back, move=move()) == decide.Unknown(
        "device_state_lost_or_moved",
        {"torque_changed": [], "goal_changed": [], "unstaged_after_action": ["a", "b"]},
    )
    # The ACTION logged but never delivered: both REG_WRITEs still staged.
    staged = ReadBack({n: Joint(START[n], START[n], False, True, True) for n in START}, 2)
    assert decide.reconcile(preimage(), logged, staged, move=move()) == decide.Neutralise(
        dict(START), "staged_not_actioned"
    )
    # Without its ACTION logged the unchanged goals do prove it: nothing was committed.
    assert decide.reconcile(preimage(), logged[:-1], back, move=move()) == decide.Neutralise(
        {}, "staged_not_actioned"
    )


@pytest.mark.parametrize(("value", "shown"), [(1e308, "+1e+308"), (-3.5e12, "-3.5e+12")])
def test_a_huge_target_is_refused_in_a_readable_line(value: float, shown: str) -> None:
    with pytest.raises(decide.MoveRefused) as info:
        decide.plan({"a": value}, relative=False, limits=LIMITS, present=None)
    assert info.value.code == "limit_violation"
    assert f"goal {shown} rad" in str(info.value) and len(str(info.value)) < 120


def test_a_target_just_past_a_limit_shows_by_how_much() -> None:
    """Rounded to four decimals a target a hair past its limit would read as the limit itself
    ("+1.0000 is outside [-1.0000, +1.0000]"): it is shown with the digits that tell them apart."""
    high = LIMITS["a"][1]
    with pytest.raises(decide.MoveRefused) as info:
        decide.plan({"a": high + 1e-10}, relative=False, limits=LIMITS, present=None)
    said = str(info.value)
    assert f"goal {high + 1e-10:+.17g} rad" in said, said
    with pytest.raises(decide.MoveRefused) as info:
        decide.plan({"a": high + 0.5}, relative=False, limits=LIMITS, present=None)
    assert f"goal {high + 0.5:+.4f} rad" in str(info.value)  # far past it: four decimals
