"""The robot_move adapter in-process against the emulator thread: every fault injection has
its expected outcome; limits and credentials are refused before anything is sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import GOALS, TARGETS, settled, target_actions, write_config
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.host import RobotHost, stop_everything
from tether.adapters.dynamixel.move import (
    DynamixelMoveAdapter,
    ReissueRefused,
    read_joints,
    si_read_back,
)
from tether.adapters.dynamixel.worker import run_move
from tether.devices.host import resume_robot
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.errors import DeviceSetupError, HostConfigError, OperatorRejection
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import (
    KIND_ABSOLUTE,
    KIND_RELATIVE,
    MoveRequest,
    Recovered,
    RetryClass,
    Unknown,
    operation_id,
)
from tether.operator.decisions import resolve
from tether.runtime import ArtifactStore


@pytest.fixture
def store(config: HostConfig) -> MoveStore:
    """The journal `tether move` uses: <state_dir>/moves/robot_move."""
    return MoveStore(config.state_dir / "moves" / "robot_move")


def request(targets: dict[str, float] | None = None) -> MoveRequest:
    return MoveRequest.from_dict(
        {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": targets or TARGETS}
    )


def journal(emulator: DynamixelEmulator) -> list[dict[str, Any]]:
    return [asdict(e) for e in emulator.journal]


def move(
    config: HostConfig,
    activity: str,
    targets: dict[str, float] | None = None,
    progress: Any = None,
    settle_timeout_s: float = 10,
    lease_ms: int = 300,
) -> dict[str, Any]:
    """`tether move`'s run: one Activity of the local Host, with a short lease (by default)."""
    return run_move(
        config,
        request(targets),
        world="local",
        activity=activity,
        lease_ms=lease_ms,
        settle_timeout_s=settle_timeout_s,
        timeout_s=60,
        progress=progress or (lambda content: None),
    )


def op_of(store: MoveStore, activity: str) -> Any:
    return store.get(operation_id_for(ActivityKey("local", KIND_ABSOLUTE, activity)))


def test_a_clean_move_publishes_progress_and_lands(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    seen: list[dict[str, Any]] = []
    out = move(config, "op-1", progress=seen.append)
    assert (out["status"], out["conclusion"], out["attempts"]) == ("done", "executed", 1)
    assert seen and seen[-1]["fraction"] == 1.0
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}
    names = [e.instruction for e in emulator.journal]
    assert names.index("action") > max(i for i, n in enumerate(names) if n == "reg_write")
    op = op_of(store, "op-1")
    assert op is not None and op.request.retry_class is RetryClass.ABSOLUTE_IDEMPOTENT
    preimage = op.preimage(1)
    arm = config.robot("arm")
    assert preimage is not None and preimage["profile_velocity"] == arm.first_motion_velocity
    assert emulator.snapshot(1)["profile_velocity"] == arm.first_motion_velocity


def test_a_servo_in_velocity_mode_takes_no_move_and_is_still_stopped(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """Servo 2 set to velocity control by another tool: a move would write goal positions it
    ignores (its Profile Velocity...), so the move is refused at connect, before any write,
    and is recorded nowhere; a stop still goes to both servos."""
    emulator.servos[2].set(tables.OPERATING_MODE, 1)
    with pytest.raises(DeviceSetupError) as info:
        move(config, "op-v")
    assert getattr(info.value, "code", None) == "operating_mode"
    assert op_of(store, "op-v") is None
    assert [e.instruction for e in emulator.journal if e.executed and e.instruction not in
            ("ping", "read", "sync_read")] == []  # fmt: skip
    before = len(emulator.journal)
    reports = stop_everything(config, None)
    assert [r["robot"] for r in reports] == ["arm"], reports
    holds = [e.id for e in emulator.journal[before:] if e.instruction == "write"]
    assert holds == [1, 2], holds


def test_a_goal_the_servo_refuses_fails_the_move_once_and_is_not_retried(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """Servo 2 refuses the move's REG_WRITE (a Data Limit Error: its goal past a limit the
    servo holds). The refusal is the servo's answer, not a lost frame: the move fails on its
    first attempt naming it, with no ACTION sent and the arm held by the stop policy. It used
    to be reconciled as absent and retried, re-enabling torque, until `tether move` gave up
    (exit 4 after 51 attempts in 2 minutes)."""
    emulator.inject(Fault("refuse", instruction="reg_write", id=2, value=6, count=1000))
    out = move(config, "op-r")
    assert (out["status"], out["code"], out["attempts"]) == ("failed", "data_limit", 1), out
    assert "refused the move before it started" in out["error"], out
    names = [e.instruction for e in emulator.journal]
    assert "action" not in names and names.count("reg_write") <= 2, names
    assert [e.executed for e in emulator.journal if e.instruction == "reg_write" and e.id == 2] == [
        False
    ]
    failed = op_of(store, "op-r").failed()
    assert failed is not None and failed["code"] == "data_limit", failed
    for dxl_id in (1, 2):  # held where they stand: the stop policy ran
        snap = emulator.snapshot(dxl_id)
        assert snap["goal_position"] == snap["present_position"], snap


def test_an_earlier_move_never_concluded_is_said_before_this_run_moves_it(
    emulator: DynamixelEmulator,
    config: HostConfig,
    store: MoveStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A move admitted and never run to its end (an earlier `tether move` that gave up
    waiting) is run by the next `tether move` of the world, first: the arm went to its goals
    with nothing said (a reviewer saw an elbow drive to an old +0.3 rad while asking for
    -1.0). It is now named before anything is sent."""
    from tether.adapters.dynamixel.worker import data_dir_of
    from tether.families.robot_move.family import intent, robot_move_family
    from tether.runtime import Host
    from tether.serve.config import host_name_for

    data, name = data_dir_of(config), host_name_for(config)
    data.mkdir(parents=True, exist_ok=True)
    family = robot_move_family(config, data / "robot_move", host_name=name)
    # A move of robot "left", which another host file sharing this state dir names: this
    # run's worker claimed it too and concluded it unknown ("no robot 'left'"). It is left to
    # a process of that file, untouched and unannounced.
    theirs = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "left", "targets": {"j": 0.1}})
    with Host(data, [family], workers=0, observe=False, host_name=name) as host:
        host.create_world("local")
        host.commit_tick("local", [intent("op-old", request({"a": 0.3, "b": 0.1}))])
        host.commit_tick("local", [intent("op-left", theirs)])
    with caplog.at_level("WARNING", logger="tether.move"):
        out = move(config, "op-new")
    assert out["status"] == "done", out
    said = [r.getMessage() for r in caplog.records if r.name == "tether.move"]
    assert len(said) == 1 and "op-old" in said[0] and "run first" in said[0], said
    assert "op-left" not in said[0]
    old = op_of(store, "op-old")
    assert old is not None and old.result() is not None  # it ran, as it was admitted to
    assert op_of(store, "op-left") is None  # never bound: no attempt of this file took it
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    try:
        left = catalog.get(ActivityKey("local", KIND_ABSOLUTE, "op-left"))
    finally:
        catalog.close()
    assert left is not None and left.attempt_count == 0 and left.result is None, left


def test_limits_are_refused_before_anything_is_sent(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    with pytest.raises(HostConfigError) as info:
        move(config, "op-x", {"a": 1.6, "b": 0.0})
    assert getattr(info.value, "code", None) == "limit_violation"
    assert emulator.journal == [] and op_of(store, "op-x") is None


def test_lost_reg_write_status_is_confirmed_absent_then_runs_once(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.inject(Fault("drop_status", instruction="reg_write", id=2))
    out = move(config, "op-2")
    # execute in doubt -> the lease lapses -> reconcile: ConfirmedAbsent -> one fresh attempt
    assert (out["status"], out["conclusion"]) == ("done", "executed")
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}
    op = op_of(store, "op-2")
    assert op is not None and op.attempts() == [1, 2] and op.guard(2) is not None


def test_corrupt_and_noisy_read_backs_are_retried(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.inject(Fault("corrupt_crc", count=2, instruction="sync_read"))
    emulator.inject(Fault("noise", count=3, instruction="read"))
    # A lease its retried reads cannot outrun on a loaded machine (each bad answer costs a
    # read's timeout): a lost lease parks the move, which is not what this test is about.
    assert move(config, "op-3", lease_ms=5_000)["status"] == "done"
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}


def test_alert_mid_move_stops_safely_and_parks(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.speed_scale = 0.5

    def on_progress(content: dict[str, Any]) -> None:
        if not emulator.snapshot(1)["hardware_error_status"]:
            emulator.inject(Fault("alert", id=1, value=0x20))

    out = move(config, "op-4", progress=on_progress)
    assert (out["status"], out["reason"], out["revision"]) == (
        "awaiting_decision",
        "hardware_error",
        1,
    )
    state = settled(lambda: emulator.snapshot(2))
    assert state["goal_position"] == state["present_position"]  # held where it was
    # Parked: a new run does nothing.
    before = len(emulator.journal)
    assert move(config, "op-4")["status"] == "awaiting_decision"
    assert len(emulator.journal) == before


def test_a_hardware_error_on_one_joint_holds_the_others_at_once(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """The other joints do not drive on to their goals after one joint's hardware error: the
    read-back ends on the Alert bit and the safe-stop holds them where they are."""
    emulator.speed_scale = 0.5
    targets = {"a": 0.5, "b": -1.2}
    goal = tables.radians_to_ticks(-1.2)
    start = emulator.snapshot(2)["present_position"]
    distance = abs(goal - start)
    assert distance > 600  # ticks: far enough that a late hold would show

    def on_progress(content: dict[str, Any]) -> None:
        if not emulator.snapshot(1)["hardware_error_status"]:
            emulator.inject(Fault("alert", id=1, value=0x20))

    out = move(config, "op-hw", targets, progress=on_progress)
    assert (out["status"], out["reason"]) == ("awaiting_decision", "hardware_error")
    state = settled(lambda: emulator.snapshot(2))
    assert state["torque_enable"] == 1 and state["goal_position"] == state["present_position"]
    # Held early: joint 2 covered well under half its way (it drove the whole way before).
    assert abs(state["present_position"] - start) < distance / 2, (start, state, goal)
    causes = {s.get("cause") for s in op_of(store, "op-hw").sent()}
    assert "hardware_error" in causes, causes


def test_a_hardware_error_on_a_joint_outside_the_move_holds_the_moving_one(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """A joint the move does not command faults mid-move (it drops, limp): the moving joint
    is held where it is, not driven on to its goal."""
    emulator.speed_scale = 0.5
    goal = tables.radians_to_ticks(1.2)
    start = emulator.snapshot(1)["present_position"]
    distance = abs(goal - start)
    assert distance > 600

    def on_progress(content: dict[str, Any]) -> None:
        if not emulator.snapshot(2)["hardware_error_status"]:
            emulator.inject(Fault("alert", id=2, value=0x20))

    out = move(config, "op-hw-other", {"a": 1.2}, progress=on_progress)
    assert (out["status"], out["reason"]) == ("awaiting_decision", "hardware_error")
    state = settled(lambda: emulator.snapshot(1))
    assert abs(state["present_position"] - start) < distance / 2, (start, state, goal)
    causes = {s.get("cause") for s in op_of(store, "op-hw-other").sent()}
    assert "hardware_error" in causes, causes


def test_a_parked_move_reconciled_again_with_nothing_changed_keeps_its_evidence(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """The periodic reconcile of a parked move names the evidence it holds while the device
    reads the same (the catalog then keeps the revision an operator is deciding on), and
    writes new evidence once something that matters changed."""
    from tether.activities import Evidence
    from tether.adapters.dynamixel.worker import data_dir_of
    from tether.families.robot_move.family import robot_move_family
    from tether.runtime import AttemptContext
    from tether.runtime import Unknown as RuntimeUnknown

    emulator.speed_scale = 0.5

    def on_progress(content: dict[str, Any]) -> None:
        if not emulator.snapshot(1)["hardware_error_status"]:
            emulator.inject(Fault("alert", id=1, value=0x20))

    assert move(config, "op-again", progress=on_progress)["status"] == "awaiting_decision"
    data = data_dir_of(config)
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    key = ActivityKey("local", KIND_ABSOLUTE, "op-again")
    try:
        record = catalog.get(key)
    finally:
        catalog.close()
    assert record is not None and record.evidence is not None
    held = record.evidence.evidence
    family = robot_move_family(config, data / "robot_move", settle_timeout_s=10)

    def reconcile() -> Any:
        ctx = AttemptContext(
            key=key,
            operation_id=operation_id_for(key),
            fence=record.fence + 1,
            attempt=record.attempt_count + 1,
            may_execute=False,
            artifacts=ArtifactStore(data / "artifacts"),
            renew=lambda: None,
            evidence=held,
        )
        wanted = {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS}
        return family.adapter.reconcile(ctx, wanted)

    try:
        same = reconcile()
        assert isinstance(same, RuntimeUnknown) and same.evidence == held, same
        emulator.power_cycle()  # the error is cleared, torque is off: a new state
        changed = reconcile()
        assert isinstance(changed, RuntimeUnknown), changed
        assert changed.evidence != held and isinstance(changed.evidence, Evidence)
    finally:
        family.adapter.close()  # type: ignore[attr-defined]


def test_an_exception_cannot_skip_the_safe_stop(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.speed_scale = 0.5

    def boom(content: dict[str, Any]) -> None:
        raise RuntimeError("planner crashed")

    op = store.bind("op-5", request())
    op.start_attempt(1, {})
    with RobotHost(config) as host:
        host.connect("arm")
        adapter = DynamixelMoveAdapter(config, host, progress=boom)
        with pytest.raises(RuntimeError):
            adapter.execute(op, 1, request())
        for dxl_id, goal in GOALS.items():
            state = settled(partial(emulator.snapshot, dxl_id))
            assert state["goal_position"] == state["present_position"] != goal


def test_reboot_between_moves_is_reconnected_with_a_slow_first_motion(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    assert move(config, "op-6")["status"] == "done"
    emulator.power_cycle()
    assert emulator.snapshot(1)["torque_enable"] == 0
    assert move(config, "op-7", {"a": 0.0, "b": 0.0})["status"] == "done"
    state = emulator.snapshot(1)
    assert state["torque_enable"] == 1 and state["goal_position"] == tables.CENTER_TICK
    assert state["profile_velocity"] == config.robot("arm").first_motion_velocity


def test_resolve_refuses_a_missing_credential_before_reading_anything(
    config: HostConfig, tmp_path: Path
) -> None:
    def must_not_review(record: Any) -> Any:
        raise AssertionError("the device was reviewed without a credential")

    catalog = Catalog.open("sqlite:///" + str(tmp_path / "catalog.db"))
    try:
        for credential in (None, "", "wrong"):
            with pytest.raises(OperatorRejection) as info:
                resolve(
                    catalog,
                    ArtifactStore(tmp_path / "artifacts"),
                    "w/physical_ai.robot_move.absolute/op-9",
                    decision="done",
                    revision=1,
                    operator="al",
                    credential=credential,
                    verify_credential=config.verify_operator,
                    review=must_not_review,
                )
            assert getattr(info.value, "code", None) == "credential_refused"
    finally:
        catalog.close()


def test_operation_ids_are_namespaced() -> None:
    a = operation_id(KIND_ABSOLUTE, "w1", "x")
    assert a != operation_id(KIND_ABSOLUTE, "w2", "x")
    assert a != operation_id("physical_ai.robot_move.relative", "w1", "x")


def test_a_stale_staged_write_never_rides_along_with_the_action(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    # An abandoned move left a REG_WRITE staged on joint b; the next move only moves joint a.
    stale = emulator.servos[2]
    stale.staged = (tables.GOAL_POSITION.address, tables.encode(tables.GOAL_POSITION, 3000))
    stale.set(tables.REGISTERED_INSTRUCTION, 1)
    assert move(config, "op-10", {"a": 0.2})["status"] == "done"
    state = emulator.snapshot(2)
    assert state["goal_position"] == tables.CENTER_TICK and state["registered_instruction"] == 0
    assert emulator.snapshot(1)["goal_position"] == tables.radians_to_ticks(0.2)


EFFECTFUL = {"write", "reg_write", "action", "sync_write", "reboot"}


def relative(targets: dict[str, float]) -> MoveRequest:
    return MoveRequest.from_dict({"kind": KIND_RELATIVE, "robot": "arm", "targets": targets})


def test_a_relative_move_past_a_limit_is_a_recorded_failure_with_no_byte_sent(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    # The arm stands at +1.0 rad (moved by hand, torque off); +0.8 rad more is past +1.5.
    emulator.set_present(1, tables.radians_to_ticks(1.0))
    key = ActivityKey("local", KIND_RELATIVE, "nudge")
    for _ in range(2):  # a second run finds the recorded failure: nothing runs again
        out = run_move(
            config,
            relative({"a": 0.8}),
            world="local",
            activity="nudge",
            lease_ms=300,
            settle_timeout_s=10,
            timeout_s=60,
            progress=lambda content: None,
        )
        assert (out["status"], out["outcome"], out["code"]) == (
            "failed",
            "refused",
            "limit_violation",
        )
        assert "goal +1.80" in out["error"] and "tick" not in out["error"]
        assert out["attempts"] == 1
    assert not [e for e in emulator.journal if e.instruction in EFFECTFUL]
    op = store.get(operation_id_for(key))
    assert op is not None and op.attempts() == [1] and op.sent() == []
    failed = op.failed()
    assert failed is not None and failed["code"] == "limit_violation"
    assert emulator.snapshot(1)["torque_enable"] == 0  # never touched


def test_a_relative_move_inside_the_limits_runs_from_the_measured_pose(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.set_present(1, tables.radians_to_ticks(1.0))
    out = run_move(
        config,
        relative({"a": 0.3}),
        world="local",
        activity="nudge-ok",
        lease_ms=300,
        settle_timeout_s=10,
        timeout_s=60,
        progress=lambda content: None,
    )
    assert (out["status"], out["conclusion"], out["attempts"]) == ("done", "executed", 1)
    assert emulator.snapshot(1)["goal_position"] == tables.radians_to_ticks(1.0) + (
        tables.radians_to_tick_delta(0.3)
    )


def torque_off_config(tmp_path: Path, emulator: DynamixelEmulator) -> HostConfig:
    path = write_config(tmp_path, emulator.path)
    path.write_text(path.read_text().replace('safe_stop = "hold"', 'safe_stop = "torque_off"'))
    return load_config(path)


def test_torque_off_applies_to_stops_and_faults_not_to_a_completed_move(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    config = torque_off_config(tmp_path, emulator)
    assert move(config, "op-t")["status"] == "done"
    for dxl_id, goal in GOALS.items():
        state = emulator.snapshot(dxl_id)
        assert state["torque_enable"] == 1 and state["goal_position"] == goal  # not limp
    assert not [
        e
        for e in emulator.journal
        if e.instruction == "write" and e.address == 64 and e.data == "00"
    ]
    # A stop applies the policy.
    [report] = stop_everything(config, ["arm"])
    assert report["ok"] and {j["state"] for j in report["joints"]} == {"limp"}
    resume_robot(config, "arm", operator="alice")  # the stop latched the robot
    # So does a shutdown of a port owner (its close) ...
    assert move(config, "op-t2", {"a": 0.0, "b": 0.0})["status"] == "done"
    assert emulator.snapshot(1)["torque_enable"] == 1
    with RobotHost(config) as host:
        host.connect("arm")
    assert emulator.snapshot(1)["torque_enable"] == 0
    # ... and a fault: an arm that cannot arrive in time goes limp and is parked.
    emulator.speed_scale = 0.02
    out = run_move(
        config,
        request(),
        world="local",
        activity="op-t3",
        lease_ms=300,
        settle_timeout_s=0.3,
        timeout_s=60,
        progress=lambda content: None,
    )
    assert (out["status"], out["reason"]) == ("awaiting_decision", "settle_timeout")
    assert {emulator.snapshot(i)["torque_enable"] for i in GOALS} == {0}


def test_an_arm_that_does_not_arrive_in_time_parks_with_settle_timeout(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    emulator.speed_scale = 0.02  # a crawl: 0.5 rad takes far longer than the 0.3 s allowed
    out = run_move(
        config,
        request(),
        world="local",
        activity="slow",
        lease_ms=300,
        settle_timeout_s=0.3,
        timeout_s=60,
        progress=lambda content: None,
    )
    assert (out["status"], out["reason"], out["attempts"]) == (
        "awaiting_decision",
        "settle_timeout",
        2,  # the execute attempt, then the reconcile that parked it
    )
    for dxl_id, goal in GOALS.items():  # held where it stood (the hold policy), short of goal
        state = settled(partial(emulator.snapshot, dxl_id))
        assert state["goal_position"] == state["present_position"] != goal
    op = op_of(store, "slow")
    assert op is not None and op.attempts() == [1]
    stops = [s for s in op.sent() if s["instruction"] == "stop_hold"]
    assert {s["joint"] for s in stops} == {"a", "b"}
    assert {s["cause"] for s in stops} == {"settle_timeout"}
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}


@contextmanager
def arrived(
    config: HostConfig, store: MoveStore, name: str
) -> Iterator[tuple[Any, RobotHost, DynamixelMoveAdapter]]:
    """A move's attempt 1 executed to its end on a connected host, its result not recorded
    (a worker killed after the arm arrived): (its operation, the host, the adapter)."""
    op = store.bind(name, request())
    op.start_attempt(1, {})
    with RobotHost(config) as host:
        host.connect("arm")
        adapter = DynamixelMoveAdapter(config, host, settle_timeout_s=10)
        adapter.execute(op, 1, request())  # completed; result not recorded
        yield op, host, adapter


def test_recovered_needs_torque_a_power_cycled_arm_at_its_goal_is_unknown(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """The move ran and the arm arrived, then the servos lost power before the result was
    recorded: at the goal but limp, which is not the move's outcome."""
    with arrived(config, store, "op-pc") as (op, _host, adapter):
        emulator.power_cycle()  # goal = present = the target, torque off
        assert emulator.snapshot(1)["goal_position"] == GOALS[1]
        conclusion = adapter.reconcile(op, request())
        assert isinstance(conclusion, Unknown)
        assert conclusion.evidence["reason"] == "device_state_lost_or_moved"
        assert conclusion.evidence["reconcile"]["torque_off"] == ["a", "b"]
        # With torque back on (the operator's reboot and enable), the same read-back recovers.
        for dxl_id in GOALS:
            emulator.servos[dxl_id].set(tables.TORQUE_ENABLE, 1)
        assert isinstance(adapter.reconcile(op, request()), Recovered)


def test_a_stop_after_a_move_parked_never_becomes_its_reason(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """A move parked for a cause of its own (a power loss after it arrived) keeps that reason
    when a later, unrelated stop comes: an operator's stop and resume, or the host's own
    shutdown stop. Each used to relabel it (`stopped_by_operator`, `stopped_at_shutdown`) on
    the next periodic reconcile, a false account and a new revision under a deciding
    operator."""
    with arrived(config, store, "op-later-stop") as (op, host, adapter):
        emulator.power_cycle()  # then power was lost
        first = adapter.reconcile(op, request())
        assert isinstance(first, Unknown)
        assert first.evidence["reason"] == "device_state_lost_or_moved"
        time.sleep(0.01)  # the stops below come after that conclusion, on the wall clock
        host.stop("arm", latch=True)
        host.resume("arm", operator="alice")
        after_stop = adapter.reconcile(op, request())
        assert isinstance(after_stop, Unknown)
        assert after_stop.evidence["reason"] == "device_state_lost_or_moved"
        host.latch.note_shutdown_stop("arm")
        after_shutdown = adapter.reconcile(op, request())
        assert isinstance(after_shutdown, Unknown)
        assert after_shutdown.evidence["reason"] == "device_state_lost_or_moved"


def test_a_stop_that_counted_when_the_move_was_concluded_still_counts_after_a_later_one(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """A stop before the first conclusion counted (the move was still in flight) even though
    a hardware error outranked it as the reason then; a later stop and resume (the latch keeps
    only the latest stop's time) must not make it stop counting once the error is gone."""
    with arrived(config, store, "op-stop-kept") as (op, host, adapter):
        time.sleep(0.01)
        host.stop("arm", latch=True)  # before any reconcile: it counts
        host.resume("arm", operator="alice")
        emulator.inject(Fault("alert", id=1, value=0x20))
        first = adapter.reconcile(op, request())
        assert isinstance(first, Unknown) and first.evidence["reason"] == "hardware_error"
        time.sleep(0.01)
        host.stop("arm", latch=True)  # after the conclusion: the latest stop now
        host.resume("arm", operator="alice")
        emulator.power_cycle()  # the error is cleared, torque off
        later = adapter.reconcile(op, request())
        assert isinstance(later, Unknown)
        assert later.evidence["reason"] == "stopped_by_operator"


def test_the_read_back_measures_velocity_in_rad_per_s(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    emulator.speed_scale = 1.0
    arm = config.robot("arm")
    with RobotHost(config) as host:
        host.connect("arm")
        bus = host.bus_for(arm)
        bus.write_field(1, tables.PROFILE_VELOCITY, arm.velocity)
        bus.write_field(1, tables.TORQUE_ENABLE, 1)
        bus.write_field(1, tables.GOAL_POSITION, tables.radians_to_ticks(1.4))
        time.sleep(0.2)
        moving = si_read_back(arm, read_joints(bus, arm))["joints"]["a"]
        assert moving["moving"] is True
        assert abs(moving["velocity_rad_s"] - 2.0) < 0.1  # the configured speed, 2 rad/s
        still = si_read_back(arm, read_joints(bus, arm))["joints"]["b"]
        assert still["velocity_rad_s"] == 0.0


def test_a_reissue_proof_is_refused_while_any_joint_reports_a_hardware_error(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """Also a proof taken before a crash is not used again once a joint reports an error."""
    op = store.bind("op-re", request())
    op.start_attempt(1, {})
    with RobotHost(config) as host:
        host.connect("arm")
        adapter = DynamixelMoveAdapter(config, host)
        emulator.inject(Fault("alert", id=2, value=0x20))
        with pytest.raises(ReissueRefused) as info:
            adapter.prove_reissue(op, request(), 5)
        assert info.value.code == "hardware_error"
        assert op.reissue_proof(2) is None and op.fence_floor() == 0
        emulator.power_cycle()  # error cleared: the proof is taken
        proof = adapter.prove_reissue(op, request(), 5)
        assert proof["fence_floor"] == 5 and proof["read_back"]["joints"]["b"]["torque_on"] is False
        emulator.inject(Fault("alert", id=1, value=0x04))  # and the error comes back
        with pytest.raises(ReissueRefused) as info:
            adapter.prove_reissue(op, request(), 5)
        assert info.value.code == "hardware_error"


def test_a_reissue_proof_is_refused_on_a_latched_robot_and_sends_nothing(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    op = store.bind("op-latched", request())
    op.start_attempt(1, {})
    with RobotHost(config) as host:
        host.connect("arm")
        host.stop("arm", latch=True)
        before = len(emulator.journal)
        with pytest.raises(ReissueRefused) as info:
            DynamixelMoveAdapter(config, host).prove_reissue(op, request(), 5)
        assert info.value.code == "robot_latched"
        assert len(emulator.journal) == before  # nothing read or sent
        assert op.reissue_proof(2) is None and op.fence_floor() == 0


def _moving_by_itself(emulator: DynamixelEmulator, dxl_id: int, goal: int, velocity: int) -> None:
    """The shaft drives to ``goal`` under a command no move of this host sent (a killed move's
    goal still in the servo, say)."""
    with emulator._lock:
        servo = emulator.servos[dxl_id]
        servo.set(tables.PROFILE_VELOCITY, velocity)
        servo.set(tables.TORQUE_ENABLE, 1)
        servo.set(tables.GOAL_POSITION, goal)


def test_a_move_waits_for_a_robot_moving_under_another_command_to_come_to_rest(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """Started on a robot still moving (a killed move's motion, before its attempt was
    reconciled), a move sends nothing until the robot is at rest, and plans from there."""
    _moving_by_itself(emulator, 1, 3000, velocity=5)
    out = move(config, "on-the-move")
    assert (out["status"], out["conclusion"]) == ("done", "executed")
    preimage = op_of(store, "on-the-move").preimage(1)
    assert preimage is not None
    assert not any(j["moving"] for j in preimage["state"]["joints"].values())
    assert target_actions(journal(emulator), GOALS) == {1: 1, 2: 1}


def test_a_move_is_refused_while_a_joint_it_does_not_command_reports_a_hardware_error(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    """A joint in a hardware error has its torque off. A move of the other joints ran to
    `done` beside it (only an error appearing during the move ended one, and a re-issue was
    refused in the same state): it is refused before any byte, naming the joint and its
    error, until a reboot clears it."""
    emulator.inject(Fault("alert", id=2, value=0x04))  # joint b: overheating
    before = len(emulator.journal)
    out = move(config, "beside-an-error", {"a": 0.5})
    assert out["status"] == "failed" and out.get("code") == "hardware_error", out
    assert "b: overheating" in out["error"], out
    effectful = [
        e
        for e in list(emulator.journal)[before:]
        if e.instruction not in ("sync_read", "read", "ping")
    ]
    assert effectful == []
    emulator.power_cycle()  # cleared: the next move runs
    again = move(config, "after-the-reboot", {"a": 0.5})
    assert (again["status"], again["conclusion"]) == ("done", "executed"), again


def test_a_robot_still_moving_after_the_settle_timeout_refuses_the_move(
    emulator: DynamixelEmulator, config: HostConfig, store: MoveStore
) -> None:
    _moving_by_itself(emulator, 1, 4000, velocity=1)
    before = len(emulator.journal)
    out = move(config, "never-at-rest", settle_timeout_s=0.5)
    assert out["status"] == "failed" and out.get("code") == "robot_moving", out
    effectful = [
        e
        for e in list(emulator.journal)[before:]
        if e.instruction not in ("sync_read", "read", "ping")
    ]
    assert effectful == []
