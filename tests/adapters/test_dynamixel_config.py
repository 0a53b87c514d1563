"""Host configuration: identity, limits in radians -> ticks, safe-stop policy, hashed credential."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import (
    hash_credential,
    load_config,
    parse_config,
    verify_credential,
)
from tether.errors import HostConfigError

CREDENTIAL = hash_credential("open sesame")

GOOD = f"""
[host]
state_dir = "/tmp/tether-test-state"

[operator]
credential = "{CREDENTIAL}"

[ports.bus]
type = "dynamixel"
usb_serial = "FT6Z5XYZ"
vid_pid = "0403:6014"
baudrate = 1000000

[robots.arm]
port = "bus"
safe_stop = "torque_off"
speed = 2.0
first_motion_speed = 0.25

[[robots.arm.joints]]
name = "shoulder"
id = 1
min = -1.5
max = 1.5
model = 1030

[[robots.arm.joints]]
name = "elbow"
id = 2
min = -0.5
max = 2
"""


def code_of(text: str) -> str:
    with pytest.raises(HostConfigError) as info:
        parse_config(text)
    return str(getattr(info.value, "code", ""))


def test_a_good_configuration_loads(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(GOOD)
    cfg = load_config(path)
    port = cfg.ports["bus"]
    assert (port.usb_serial, port.vid_pid, port.baudrate, port.url) == (
        "FT6Z5XYZ",
        "0403:6014",
        1000000,
        None,
    )
    arm = cfg.robot("arm")
    assert arm.safe_stop == "torque_off" and arm.ids == [1, 2]
    shoulder = arm.joint("shoulder")
    assert shoulder.min_ticks == tables.radians_to_ticks(-1.5) == 2048 - 978
    assert shoulder.max_ticks == 2048 + 978
    assert arm.first_motion_velocity < arm.velocity
    assert tables.ticks_per_second(arm.first_motion_velocity) <= 0.25 / (2 * math.pi) * 4096
    assert cfg.verify_operator("open sesame") and not cfg.verify_operator("guess")
    assert not cfg.verify_operator(None)


def test_limits_are_checked_in_ticks() -> None:
    joint = parse_config(GOOD).robot("arm").joint("elbow")
    joint.check_ticks(joint.min_ticks)
    with pytest.raises(HostConfigError) as info:
        joint.check_ticks(joint.max_ticks + 1)
    assert getattr(info.value, "code", None) == "limit_violation"


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (("min = -1.5", "min = 1.6"), "bad_limit"),
        (("max = 1.5", "max = 4.0"), "bad_limit"),
        (("id = 2", "id = 1"), "duplicate_joint"),
        (("id = 2", "id = 300"), "bad_id"),
        (('safe_stop = "torque_off"', 'safe_stop = "yolo"'), "bad_safe_stop"),
        (('port = "bus"', 'port = "nope"'), "unknown_port"),
        (('type = "dynamixel"', 'type = "canbus"'), "unknown_port_type"),
        (('vid_pid = "0403:6014"', 'vid_pid = "banana"'), "bad_vid_pid"),
        ((f'credential = "{CREDENTIAL}"', 'credential = "hunter2"'), "plain_credential"),
        (("first_motion_speed = 0.25", "first_motion_speed = 3.0"), "bad_speed"),
        (("baudrate = 1000000", 'baudrate = "fast"'), "wrong_type"),
        (("[ports.bus]", "[ports.bus"), "bad_toml"),
    ],
)
def test_bad_configurations_are_refused_with_a_code(edit: tuple[str, str], code: str) -> None:
    assert edit[0] in GOOD
    assert code_of(GOOD.replace(edit[0], edit[1], 1)) == code


def test_a_port_needs_some_identity() -> None:
    text = GOOD.replace('usb_serial = "FT6Z5XYZ"\nvid_pid = "0403:6014"\n', "")
    assert code_of(text) == "no_identity"


def test_credentials_are_salted_hashes() -> None:
    a, b = hash_credential("x"), hash_credential("x")
    assert a != b and a.startswith("scrypt$")
    assert verify_credential("x", a) and verify_credential("x", b)
    assert not verify_credential("y", a)
    assert not verify_credential("x", "scrypt$garbage")
    with pytest.raises(HostConfigError):
        hash_credential("")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(HostConfigError) as info:
        load_config(tmp_path / "missing.toml")
    assert getattr(info.value, "code", None) == "unreadable"


def test_radians_become_ticks_in_one_place() -> None:
    # Only tables.py knows the ticks-per-radian factor; limits, absolute and relative plans
    # all go through radians_to_tick_delta.
    root = Path(tables.__file__).parents[2]
    ours = [
        *root.glob("adapters/dynamixel/*.py"),
        *root.glob("emulators/*.py"),
        *root.glob("operator/*.py"),
        *root.glob("physical/robot_move*.py"),
    ]
    users = sorted(
        str(p.relative_to(root))
        for p in ours
        if "TICKS_PER_REV" in p.read_text() or "math.pi" in p.read_text()
    )
    assert users == ["adapters/dynamixel/tables.py"]
    assert tables.radians_to_ticks(math.pi / 2) == tables.CENTER_TICK + 1024
    assert tables.radians_to_tick_delta(-math.pi / 2) == -1024


def test_a_relative_plan_adds_the_delta_in_ticks_and_checks_limits() -> None:
    from tether.adapters.dynamixel.move import plan_relative
    from tether.physical.robot_move import KIND_RELATIVE, MoveRequest

    arm = parse_config(GOOD).robot("arm")
    elbow = arm.joint("elbow")
    request = MoveRequest.from_dict(
        {"kind": KIND_RELATIVE, "robot": "arm", "targets": {"elbow": math.pi / 8}}
    )
    start = tables.CENTER_TICK
    assert plan_relative(arm, request, {elbow.id: start}) == {elbow.id: start + 256}
    with pytest.raises(HostConfigError) as info:
        plan_relative(arm, request, {elbow.id: elbow.max_ticks})
    assert getattr(info.value, "code", None) == "limit_violation"
