"""Host configuration: identity, limits in radians -> ticks, safe-stop policy, hashed credential."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import hash_credential, load_config, parse_config
from tether.errors import HostConfigError, TetherError

CREDENTIAL = hash_credential("open sesame")

GOOD = f"""
[host]
state_dir = "/tmp/tether-test-state"

[operators.ann]
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
    path.write_text(GOOD.replace("/tmp/tether-test-state", str(tmp_path / "state")))
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
    # +-1.5 rad lies between ticks (+-977.87 from the centre): the limits are the ticks
    # inside them, never the nearest ones past them (978: +-1.500233 rad).
    assert (shoulder.min_ticks, shoulder.max_ticks) == (2048 - 977, 2048 + 977)
    assert -1.5 <= tables.ticks_to_radians(shoulder.min_ticks) < -1.498
    assert 1.498 < tables.ticks_to_radians(shoulder.max_ticks) <= 1.5
    assert arm.first_motion_velocity < arm.velocity
    assert tables.ticks_per_second(arm.first_motion_velocity) <= 0.25 / (2 * math.pi) * 4096
    assert cfg.verify_operator("open sesame") == "ann"
    assert cfg.verify_operator("guess") is None and cfg.verify_operator(None) is None


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
        # Slower than one Profile Velocity unit (0.024 rad/s): it was sent as one unit, faster.
        (("first_motion_speed = 0.25", "first_motion_speed = 0.005"), "bad_speed"),
        (("speed = 2.0", "speed = 0.01"), "bad_speed"),
        (("baudrate = 1000000", 'baudrate = "fast"'), "wrong_type"),
        (("baudrate = 1000000", "baudrate = 12345"), "out_of_range"),
        (("baudrate = 1000000", "baudrate = 5760"), "out_of_range"),
        (("[ports.bus]", "[ports.bus"), "bad_toml"),
        # Hex as int() reads it, but no adapter ever reports it so.
        (('vid_pid = "0403:6014"', 'vid_pid = "+403:6014"'), "bad_vid_pid"),
        (('vid_pid = "0403:6014"', 'vid_pid = "0_03:6014"'), "bad_vid_pid"),
        # Names a report prints one per line, and gRPC health joins with '/'.
        (("[robots.arm]", '[robots."arm\\nshoulder  held"]'), "bad_name"),
        (("[robots.arm]", '[robots."arm/1"]'), "bad_name"),
        (("[robots.arm]", '[robots." arm"]'), "bad_name"),
        (("[ports.bus]", '[ports."bus\\u001b[31m"]'), "bad_name"),
        # [remote] is read strictly by every command, not only where the bridge loads.
        (
            (
                "[ports.bus]",
                '[remote]\naddress = "127.0.0.1:1"\ntoken_file = "t"\nbogus_key = 1\n[ports.bus]',
            ),
            "unknown_key",
        ),
        (
            ("[ports.bus]", '[remote]\naddress = "127.0.0.1:1"\ntoken_file = ""\n[ports.bus]'),
            "empty_value",
        ),
        (
            (
                "[ports.bus]",
                '[remote]\naddress = "127.0.0.1:1"\ntoken_file = "t"\ntimeout_s = "x"\n[ports.bus]',
            ),
            "wrong_type",
        ),
        # One device under two [ports] tables: a stop latched through one would not hold
        # the moves sent through the other.
        (
            (
                "baudrate = 1000000",
                'baudrate = 1000000\n[ports.again]\nusb_serial = "FT6Z5XYZ"\nvid_pid = "0403:6014"',
            ),
            "duplicate_port",
        ),
        # The same adapter's serial number under another vid:pid is the same adapter.
        (
            (
                "baudrate = 1000000",
                'baudrate = 1000000\n[ports.again]\nusb_serial = "FT6Z5XYZ"',
            ),
            "duplicate_port",
        ),
        # Limits narrower than one tick: no position lies within them (a goal there was sent
        # as the tick outside).
        (("min = -1.5\nmax = 1.5", "min = 0.0001\nmax = 0.0002"), "bad_limit"),
        # [remote] paths as every host.toml path: no shell variable, no `~user` of no user;
        # its timeout a number of seconds in (0, 3600].
        (
            (
                "[ports.bus]",
                '[remote]\naddress = "127.0.0.1:1"\ntoken_file = "$HOME/t"\n[ports.bus]',
            ),
            "unexpanded_variable",
        ),
        (
            (
                "[ports.bus]",
                '[remote]\naddress = "127.0.0.1:1"\ntoken_file = "~nosuchuser9/t"\n[ports.bus]',
            ),
            "bad_path",
        ),
        (
            (
                "[ports.bus]",
                '[remote]\naddress = "127.0.0.1:1"\ntoken_file = "t"\ntimeout_s = nan\n[ports.bus]',
            ),
            "bad_remote",
        ),
        # A [tls] path of `~user` of no user: a traceback (RuntimeError), exit 70, in every
        # command, `tether stop` too.
        (
            ("[ports.bus]", '[tls]\ncert = "~nosuchuser9/c.pem"\nkey = "k.pem"\n[ports.bus]'),
            "bad_path",
        ),
    ],
)
def test_bad_configurations_are_refused_with_a_code(edit: tuple[str, str], code: str) -> None:
    assert edit[0] in GOOD
    assert code_of(GOOD.replace(edit[0], edit[1], 1)) == code


def message_of(text: str) -> str:
    with pytest.raises(HostConfigError) as info:
        parse_config(text)
    return str(info.value)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        # The values given (and which of them is a default), not only the rule.
        (("speed = 2.0", "speed = -1.5"), "got speed = -1.5, first_motion_speed = 0.25"),
        (("speed = 2.0", "speed = nan"), "got speed = nan"),
        (
            ("speed = 2.0\nfirst_motion_speed = 0.25", "speed = 0.01"),
            "speed 0.01 rad/s is slower than a DYNAMIXEL can be limited to (0.0240 rad/s",
        ),
        (
            ("speed = 2.0\nfirst_motion_speed = 0.25", "speed = -1"),
            "first_motion_speed = -1 (its default: 0.3, or speed if lower)",
        ),
        (("speed = 2.0", "speed = 1000.0"), "got speed = 1000,"),
        # Unset, the first motion's speed is at most the robot's: no error for a slow robot.
        (("first_motion_speed = 0.25", ""), None),
        (("id = 2", "id = 1"), "joint id 1 is given twice"),
        (('name = "elbow"', 'name = "shoulder"'), "joint name 'shoulder' is given twice"),
        (("baudrate = 1000000", "baudrate = 1000000\ntimeout_ms = 0"), "timeout_ms 0 is not"),
        (("baudrate = 1000000", "baudrate = 1000000\nread_retries = 11"), "read_retries 11"),
        (("min = -1.5", "min = -90"), "min -90, max 1.5 rad leave the one-turn range"),
        (("min = -1.5", "min = -90"), "radians, not degrees"),
        (("max = 1.5", "max = 3.1416"), "-3.1416..3.1401 rad"),
        (('name = "elbow"', 'name = ""'), "bad_joint_name"),
        (('name = "elbow"', 'name = "el=bow"'), "without '='"),
        (('usb_serial = "FT6Z5XYZ"', 'usb_serial = ""'), "empty_value"),
    ],
)
def test_a_refusal_says_which_value_is_wrong(edit: tuple[str, str], said: str | None) -> None:
    assert edit[0] in GOOD
    text = GOOD.replace(edit[0], edit[1], 1)
    if said is None:
        assert parse_config(text.replace("speed = 2.0", "speed = 0.2")).robots
        return
    assert said in message_of(text), message_of(text)


def test_a_port_needs_some_identity() -> None:
    text = GOOD.replace('usb_serial = "FT6Z5XYZ"\nvid_pid = "0403:6014"\n', "")
    assert code_of(text) == "no_identity"


def test_credentials_are_salted_argon2id_hashes() -> None:
    from tether.devices.credentials import CredentialError

    a, b = hash_credential("x"), hash_credential("x")
    assert a != b and a.startswith("$argon2id$") and b.startswith("$argon2id$")
    with pytest.raises(CredentialError):
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
        *root.glob("families/robot_move/*.py"),
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
    from tether.families.robot_move.request import KIND_RELATIVE, MoveRequest

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


TOLERANCE_IN_TICKS = ("speed = 2.0", "speed = 2.0\ntolerance_ticks = 20")


@pytest.mark.parametrize(
    ("edit", "table", "key", "meant"),
    [
        (("speed = 2.0", "sped = 0.1"), "robots.arm", "sped", "speed"),
        (
            ("first_motion_speed", "first_motion_sped"),
            "robots.arm",
            "first_motion_sped",
            "first_motion_speed",
        ),
        (
            ('safe_stop = "torque_off"', 'safe_stp = "torque_off"'),
            "robots.arm",
            "safe_stp",
            "safe_stop",
        ),
        (("max = 2", "mxa = 2"), "robots.arm.joints[1]", "mxa", "max"),
        (("min = -1.5", "minimum = -1.5"), "robots.arm.joints[0]", "minimum", "min"),
        (("baudrate = 1000000", "baudrat = 1000000"), "ports.bus", "baudrat", "baudrate"),
        (("state_dir =", "stat_dir ="), "host", "stat_dir", "state_dir"),
        (("credential =", "credentials ="), "operators.ann", "credentials", "credential"),
        (("[robots.arm]\n", "[robot.arm]\n"), "the top level", "robot", "robots"),
        (TOLERANCE_IN_TICKS, "robots.arm", "tolerance_ticks", "tolerance"),
    ],
)
def test_an_unknown_or_misspelled_key_names_the_nearest_valid_one(
    edit: tuple[str, str], table: str, key: str, meant: str
) -> None:
    assert edit[0] in GOOD
    with pytest.raises(HostConfigError) as info:
        parse_config(GOOD.replace(edit[0], edit[1], 1))
    err = info.value
    assert err.code == "unknown_key"
    assert (err.details["table"], err.details["key"], err.details["suggestion"]) == (
        table,
        key,
        meant,
    )
    assert f"{table}: unknown key `{key}`; did you mean `{meant}`?" in err.message
    assert meant in err.details["valid"]


def test_a_key_close_to_nothing_lists_the_valid_keys() -> None:
    with pytest.raises(HostConfigError) as info:
        parse_config(GOOD.replace("speed = 2.0", "speed = 2.0\nbanana = 1", 1))
    assert info.value.code == "unknown_key" and info.value.details["suggestion"] is None
    assert "did you mean" not in info.value.message
    assert "(valid: first_motion_speed, joints, port, safe_stop, speed, tolerance)" in str(
        info.value
    )


def test_configuration_is_in_si_units() -> None:
    from tether.adapters.dynamixel import config

    tables_keys = (
        config.TOP_KEYS,
        config.HOST_KEYS,
        config.OPERATOR_KEYS,
        config.PORT_KEYS,
        config.ROBOT_KEYS,
        config.JOINT_KEYS,
    )
    assert not [k for keys in tables_keys for k in keys if "tick" in k]
    arm = parse_config(GOOD.replace("speed = 2.0", "speed = 2.0\ntolerance = 0.05", 1)).robot("arm")
    assert (arm.tolerance_rad, arm.tolerance_ticks) == (0.05, tables.radians_to_tick_delta(0.05))
    assert parse_config(GOOD).robot("arm").tolerance_ticks == 20  # the default, 0.03 rad
    assert code_of(GOOD.replace("speed = 2.0", "speed = 2.0\ntolerance = 1.0", 1)) == (
        "bad_tolerance"
    )


def test_the_strict_readers_codes_are_listed() -> None:
    from tether import _config
    from tether.adapters.dynamixel import config

    assert set(_config.CODES) <= set(config.ERROR_CODES)


def toml_blocks(text: str) -> list[str]:
    return [block.split("```", 1)[0] for block in text.split("```toml\n")[1:]]


def test_the_documented_examples_load() -> None:
    from tether.adapters.dynamixel import config

    readme = Path(__file__).parents[2] / "README.md"
    examples = toml_blocks(readme.read_text()) + toml_blocks(config.__doc__ or "")
    assert len(examples) >= 2
    for example in examples:
        assert parse_config(example).robots


def test_a_misspelled_speed_refuses_the_move_before_any_byte(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tether.emulators.dynamixel import DynamixelEmulator

    with DynamixelEmulator([1, 2]) as emulator:
        text = GOOD.replace('usb_serial = "FT6Z5XYZ"\nvid_pid = "0403:6014"\n', "")
        text = text.replace("[ports.bus]\n", f'[ports.bus]\nurl = "{emulator.path}"\n')
        text = text.replace("/tmp/tether-test-state", str(tmp_path / "state"))
        path = tmp_path / "host.toml"
        path.write_text(text.replace("speed = 2.0", "sped = 0.1", 1))
        argv = ["move", "--config", str(path), "--robot", "arm", "--activity", "m1"]
        done = subprocess.run(
            [sys.executable, "-m", "tether", *argv, "--joint", "shoulder=0.2"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "unknown key `sped`; did you mean `speed`?" in done.stdout
        assert "Traceback" not in done.stderr
        assert emulator.journal == []  # the port was never even pinged
        stopped = subprocess.run(
            [sys.executable, "-m", "tether", "stop", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stopped.returncode == 2
        assert stopped.stderr.count("\n") == 1 and "did you mean `speed`?" in stopped.stderr


def test_two_ports_naming_one_device_by_two_paths_are_refused(tmp_path: Path) -> None:
    """The same device under two [ports] tables (its path, or a link to it): each opened it,
    and a robot latched through one was moved through the other."""
    device = tmp_path / "ttyUSB0"
    device.write_text("")
    (tmp_path / "by-id").symlink_to(device)
    base = GOOD.replace('usb_serial = "FT6Z5XYZ"\nvid_pid = "0403:6014"', f'url = "{device}"')
    for other in (device, tmp_path / "by-id"):
        text = base + f'\n[ports.again]\nurl = "{other}"\n'
        assert code_of(text) == "duplicate_port"
        assert "ports.bus names the same device" in message_of(text)
    assert parse_config(base + f'\n[ports.again]\nurl = "{tmp_path / "ttyUSB1"}"\n')


def test_a_goal_at_a_limit_between_two_ticks_is_the_tick_inside_it() -> None:
    """A goal of +1.5 rad (the configured max) was commanded as the nearest tick, +1.500233
    rad: past the limit. It is the last tick inside it; past the limit is refused."""
    from tether.adapters.dynamixel.move import plan_absolute
    from tether.families.robot_move.request import MoveRequest

    robot = parse_config(GOOD).robot("arm")
    KIND = "physical_ai.robot_move.absolute"
    at_max = MoveRequest.from_dict({"kind": KIND, "robot": "arm", "targets": {"shoulder": 1.5}})
    (ticks,) = plan_absolute(robot, at_max).values()
    assert ticks == 2048 + 977 and tables.ticks_to_radians(ticks) <= 1.5
    past = MoveRequest.from_dict({"kind": KIND, "robot": "arm", "targets": {"shoulder": 1.5005}})
    with pytest.raises(TetherError) as info:
        plan_absolute(robot, past)
    assert info.value.code == "limit_violation"


def test_a_host_file_reached_through_a_link_has_the_same_state(tmp_path: Path) -> None:
    """Through a link a host.toml had a state dir of its own (beside the link): a stop latched
    through one path held nothing the moves through the other read."""
    real = tmp_path / "real"
    real.mkdir()
    text = GOOD.replace('state_dir = "/tmp/tether-test-state"', 'state_dir = "state"')
    (real / "host.toml").write_text(text)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (elsewhere / "host.toml").symlink_to(real / "host.toml")
    direct = load_config(real / "host.toml")
    linked = load_config(elsewhere / "host.toml")
    assert Path(linked.state_dir) == Path(direct.state_dir) == real / "state"
