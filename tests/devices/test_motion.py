"""The generic first-motion policy (`tether.devices.motion`): one place decides what a first
motion is and what speed cap applies; the device type only converts the speed."""

from __future__ import annotations

import pytest
from tether.devices.config import JointSpec, RobotSpec
from tether.devices.motion import FIRST_MOTION_REASONS, FirstMotion, MotionLimit


def spec(name: str = "arm") -> RobotSpec:
    joint = JointSpec("a", 1, -1.0, 1.0)
    return RobotSpec(name, "bus", "dynamixel", (joint,), "hold", 2.0, 0.5, 0.03)


def test_first_until_a_move_completes_then_capped_again_after_each_reset() -> None:
    policy = FirstMotion()
    arm, other = spec("arm"), spec("other")
    assert policy.limit(arm) == MotionLimit(True, 0.5, "connect")
    policy.moved("arm")
    assert policy.limit(arm) == MotionLimit(False, 2.0)
    assert policy.limit(other).first  # per robot
    for reason in ("resume", "reboot", "connect", "reissue"):
        policy.reset("arm", reason=reason)
        assert policy.limit(arm) == MotionLimit(True, 0.5, reason)
        policy.moved("arm")
        assert not policy.limit(arm).first
    # A re-issue is capped whatever moved before it.
    assert policy.limit(arm, reissue=True) == MotionLimit(True, 0.5, "reissue")
    policy.moved("other")
    policy.reset(reason="connect")  # every robot
    assert policy.limit(arm).first and policy.limit(other).first
    assert set(FIRST_MOTION_REASONS) == {"connect", "resume", "reboot", "reissue"}


def test_an_unknown_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="reason"):
        FirstMotion().reset("arm", reason="power_cycle")
