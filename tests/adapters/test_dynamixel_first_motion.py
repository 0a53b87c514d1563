"""The first-motion speed limit is the generic host's: the first move after a connect, a resume
or a reboot (and an operator's re-issue) runs at `first_motion_speed`, the next at `speed`.
Observed in the emulator: the Profile Velocity each move wrote to the servos."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.host import RobotHost, stop_everything
from tether.adapters.dynamixel.move import DynamixelMoveAdapter
from tether.devices.host import reboot_robot, resume_robot
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest


class Moves:
    """Numbered absolute moves between two poses, each its own operation."""

    def __init__(self, config: HostConfig, emulator: DynamixelEmulator, root: Path) -> None:
        self.config = config
        self.emulator = emulator
        self.store = MoveStore(root)
        self.n = 0
        spec = config.spec("arm")
        self.slow = tables.profile_velocity_for(spec.first_motion_speed)
        self.fast = tables.profile_velocity_for(spec.speed)
        assert self.slow < self.fast

    def run(self, host: RobotHost, *, reissue: bool = False) -> int:
        """One move; the Profile Velocity the emulator's servos hold after it (both joints)."""
        self.n += 1
        pose = 0.4 if self.n % 2 else -0.4
        request = MoveRequest.from_dict(
            {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": {"a": pose, "b": -pose}}
        )
        op = self.store.bind(f"op-{self.n}", request)
        op.start_attempt(1, {})
        before = len(self.emulator.journal)
        DynamixelMoveAdapter(self.config, host, settle_timeout_s=10).execute(
            op, 1, request, reissue=reissue
        )
        written = {
            e.id: tables.decode(tables.PROFILE_VELOCITY, bytes.fromhex(e.data))
            for e in self.emulator.journal[before:]
            if e.instruction == "write" and e.address == tables.PROFILE_VELOCITY.address
        }
        held = {i: self.emulator.snapshot(i)["profile_velocity"] for i in (1, 2)}
        assert written == held, (written, held)
        assert len(set(held.values())) == 1
        (velocity,) = set(held.values())
        preimage = op.preimage(1)
        assert preimage is not None and preimage["profile_velocity"] == velocity
        assert preimage["first_motion"] is (velocity == self.slow)
        return velocity


def test_first_move_after_connect_resume_and_reboot_is_capped_the_next_is_not(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    moves = Moves(config, emulator, tmp_path / "ops")
    with RobotHost(config) as host:
        host.connect("arm")
        assert moves.run(host) == moves.slow  # after the connect
        assert moves.run(host) == moves.fast
        assert moves.run(host) == moves.fast

        # An operator's stop and resume, through this host (it owns the port).
        [report] = stop_everything(config, ["arm"])
        assert report["via"] == "owner" and report["ok"]
        resume_robot(config, "arm", operator="alice")
        assert host.motion_limit("arm").reason == "resume"
        assert moves.run(host) == moves.slow
        assert moves.run(host) == moves.fast

        # An operator's reboot (torque drops), through this host.
        reboot_robot(config, "arm", [], operator="alice", arm_supported=True)
        assert emulator.snapshot(1)["torque_enable"] == 0
        assert host.motion_limit("arm").reason == "reboot"
        assert moves.run(host) == moves.slow
        assert moves.run(host) == moves.fast

        # An operator's re-issue is a first motion whatever moved before it.
        assert moves.run(host, reissue=True) == moves.slow
        assert moves.run(host) == moves.fast
        host.identities.clear()  # a normal end: released without a stop

    # A reconnect (a new host process) starts slow again.
    with RobotHost(config) as host:
        host.connect("arm")
        assert host.motion_limit("arm").reason == "connect"
        assert moves.run(host) == moves.slow
        assert moves.run(host) == moves.fast


def test_a_move_that_did_not_complete_leaves_the_next_one_capped(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """Only a completed move clears the first motion: after a move stopped short (its settle
    timeout) the arm's pose is not the one planned, so the next move is slow again."""
    moves = Moves(config, emulator, tmp_path / "ops")
    with RobotHost(config) as host:
        host.connect("arm")
        emulator.speed_scale = 0.2
        request = MoveRequest.from_dict(
            {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": {"a": 1.2, "b": -1.2}}
        )
        op = moves.store.bind("op-short", request)
        op.start_attempt(1, {})
        with pytest.raises(Exception, match="did not arrive"):
            DynamixelMoveAdapter(config, host, settle_timeout_s=0.1).execute(op, 1, request)
        assert host.motion_limit("arm").first
        emulator.speed_scale = 20.0
        assert moves.run(host) == moves.slow
        assert moves.run(host) == moves.fast


def test_a_limp_joint_moved_by_hand_is_not_driven_back_when_torque_turns_on(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    moves = Moves(config, emulator, tmp_path / "ops")
    with RobotHost(config) as host:
        host.connect("arm")
        moves.run(host)
    # The close left joint 1 under its stop policy; make it limp, then move it by hand.
    emulator.servos[1].set(tables.TORQUE_ENABLE, 0)
    old_goal = emulator.snapshot(1)["goal_position"]
    by_hand = old_goal + 300
    emulator.set_present(1, by_hand)
    before = len(emulator.journal)
    with RobotHost(config) as host:
        host.connect("arm")
        moves.run(host)
    frames = [
        (e.instruction, e.address, e.data)
        for e in emulator.journal[before:]
        if e.id == 1 and e.instruction == "write"
    ]
    hold = (
        "write",
        tables.GOAL_POSITION.address,
        tables.encode(tables.GOAL_POSITION, by_hand).hex(),
    )
    torque_on = ("write", tables.TORQUE_ENABLE.address, "01")
    assert hold in frames and torque_on in frames
    assert frames.index(hold) < frames.index(torque_on)  # its goal is where it stands first
    # and the operations journal holds that write before the bytes went out.
    op = moves.store.get(f"op-{moves.n}")
    assert op is not None
    assert [s["instruction"] for s in op.sent() if s.get("id") == 1][:3] == [
        "profile_velocity",
        "hold_goal",
        "torque_enable",
    ]
