"""`tether stop` reports what each joint is, read back after the stop, and never moves the arm.

The emulator runs as its own process (`tether emulate dynamixel`) on a real pty; the state under
test is set up over the wire (a DxlBus) or through the emulator's control socket.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import EmulatorProcess, emulator_process, settled, write_config
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.driver import DxlBus
from tether.adapters.dynamixel.safety import ReadBack, stopped_state

#: Configured limits are +-1.5 rad; this Present Position is about 2.07 rad, outside them.
OUTSIDE = tables.radians_to_ticks(1.5) + 374


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[EmulatorProcess]:
    with emulator_process(tmp_path) as emu:
        yield emu


def powered(emu: EmulatorProcess, present: dict[int, int]) -> None:
    """Place shafts by hand, then hold each where it is (Goal first, so nothing moves)."""
    for dxl_id, ticks in present.items():
        emu.request(op="set_present", id=dxl_id, ticks=ticks)
    with DxlBus.open(emu.path, timeout_ms=400, lock_dir=None) as bus:
        for dxl_id, ticks in present.items():
            bus.write_field(dxl_id, tables.GOAL_POSITION, ticks)
            bus.write_field(dxl_id, tables.TORQUE_ENABLE, 1)


def driving_away(emu: EmulatorProcess, dxl_id: int) -> None:
    """Both servos powered where they stand, then servo ``dxl_id`` sent far away."""
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    with DxlBus.open(emu.path, timeout_ms=400, lock_dir=None) as bus:
        bus.write_field(dxl_id, tables.GOAL_POSITION, tables.CENTER_TICK + 1500)


def goal_writes(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The journal entries of WRITEs of Goal Position (a stop's holds)."""
    return [
        e
        for e in entries
        if e["instruction"] == "write" and e["address"] == tables.GOAL_POSITION.address
    ]


def stopped_with_a_silent_servo(
    emu: EmulatorProcess, config: Path, silent: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`tether stop --json` while servo ``silent`` answers nothing (exit 1: it is unknown):
    each joint's report by name, and the journal entries of the stop."""
    emu.request(op="fault", kind="drop_status", id=silent, count=100_000)
    before = len(emu.journal())
    done = stop(config, "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "KeyError" not in done.stdout
    return joints(done), emu.journal()[before:]


def stop(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "stop", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def stop_on_a_tty(config: Path, seconds: float = 120.0) -> tuple[int, str]:
    """`tether stop` with its stdout and stderr on a real terminal; (exit code, what it showed)."""
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "tether", "stop", "--config", str(config)]
    with subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave) as proc:
        os.close(slave)
        shown = bytearray()
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.1)
                if not ready:
                    if proc.poll() is not None:
                        break
                    continue
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: the command exited and closed the terminal
                    break
                if not data:
                    break
                shown += data
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            os.close(master)
    return code, shown.decode().replace("\r\n", "\n")


def joints(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    reports = json.loads(done.stdout)
    assert len(reports) == 1, reports
    return {j["joint"]: j for j in reports[0]["joints"]}


def test_stop_holds_an_arm_outside_its_limits_where_it_stands(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: OUTSIDE, 2: tables.CENTER_TICK})
    done = stop(config, "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    a = joints(done)["a"]
    assert (a["state"], a["torque"], a["hardware_error"]) == ("held", True, [])
    assert a["present_rad"] == a["goal_rad"] == round(tables.ticks_to_radians(OUTSIDE), 4)
    # The goal the stop wrote is where the shaft is, not the nearest configured limit.
    state = settled(partial(emu.request, op="snapshot", id=1))
    assert (state["goal_position"], state["present_position"]) == (OUTSIDE, OUTSIDE)
    writes = [e for e in emu.journal() if e["instruction"] == "write" and e["id"] == 1]
    assert writes[-1]["data"] == tables.encode(tables.GOAL_POSITION, OUTSIDE).hex()


def test_a_stop_whose_latch_cannot_be_written_still_holds_the_arm_and_says_so(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK + 300, 2: tables.CENTER_TICK})
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "latches").write_text("not a dir\n")  # no latch record can be made
    done = stop(config, "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)  # not durably latched: not ok
    (report,) = json.loads(done.stdout)
    assert "latch record could not be written" in report["latch_error"], report
    assert report["error"] is None
    # The frames went anyway: each joint held where it stands.
    assert {j["joint"]: j["state"] for j in report["joints"]} == {"a": "held", "b": "held"}
    holds = [e for e in emu.journal() if e["instruction"] == "write" and e["id"] == 1]
    assert (
        holds
        and holds[-1]["data"] == tables.encode(tables.GOAL_POSITION, tables.CENTER_TICK + 300).hex()
    )
    shown = stop(config)  # for a person: the same, in words
    assert "latched in this process only" in shown.stdout, shown.stdout


def test_a_hold_stop_reads_every_joint_at_once_writes_each_and_reads_all_back_at_once(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK + 300, 2: tables.CENTER_TICK - 200})
    before = len(emu.journal())
    done = stop(config, "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    frames = [(e["instruction"], e["id"], e["address"]) for e in emu.journal()[before:]]
    # The stop's own frames follow the connect's reads; a SYNC_READ appears once per servo
    # it reads (the journal has one entry per servo).
    start = frames.index(("sync_read", 1, tables.PRESENT_POSITION.address))
    # (After them the standalone CLI's exit reads the latched robot back, joint by joint.)
    assert frames[start : start + 6] == [
        ("sync_read", 1, tables.PRESENT_POSITION.address),
        ("sync_read", 2, tables.PRESENT_POSITION.address),
        ("write", 1, tables.GOAL_POSITION.address),
        ("write", 2, tables.GOAL_POSITION.address),
        ("sync_read", 1, tables.TORQUE_ENABLE.address),
        ("sync_read", 2, tables.TORQUE_ENABLE.address),
    ], frames
    report = joints(done)
    for name, dxl_id, ticks in (
        ("a", 1, tables.CENTER_TICK + 300),
        ("b", 2, tables.CENTER_TICK - 200),
    ):
        state = settled(partial(emu.request, op="snapshot", id=dxl_id))
        assert (state["goal_position"], state["present_position"]) == (ticks, ticks)
        assert report[name]["state"] == "held" and report[name]["torque"] is True
        assert report[name]["present_rad"] == report[name]["goal_rad"]
        assert report[name]["present_rad"] == round(tables.ticks_to_radians(ticks), 4)


def test_a_sync_read_a_servo_never_answers_falls_back_to_each_joints_own_read(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK + 100, 2: tables.CENTER_TICK + 150})
    # Servo 2 drops its status to every SYNC_READ (retries included): each joint is then
    # read on its own, so the stop still holds and reports both, read back from the device.
    emu.request(op="fault", kind="drop_status", instruction="sync_read", id=2, count=100)
    before = len(emu.journal())
    done = stop(config, "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = joints(done)
    assert (report["a"]["state"], report["b"]["state"]) == ("held", "held")
    assert report["b"]["present_rad"] == round(tables.ticks_to_radians(tables.CENTER_TICK + 150), 4)
    reads = [e for e in emu.journal()[before:] if e["instruction"] == "read"]
    assert {(e["id"], e["address"]) for e in reads} >= {
        (1, tables.PRESENT_POSITION.address),
        (2, tables.PRESENT_POSITION.address),
        (1, tables.TORQUE_ENABLE.address),
        (2, tables.TORQUE_ENABLE.address),
    }


def test_one_silent_servo_never_keeps_the_stop_from_the_others(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """Servo 2 answers nothing at all (not even PING): the stop's connect check failed on it
    and no frame went to servo 1, which drove on to its goal. Servo 1 is held where it stands,
    servo 2 (its present position unread, so no hold to send) is reported unknown, and the stop
    is not ok."""
    config = write_config(tmp_path, emu.path)
    driving_away(emu, 1)
    report, entries = stopped_with_a_silent_servo(emu, config, 2)
    assert report["a"]["state"] == "held", report
    assert report["b"]["state"] == "unknown" and report["b"]["error"], report
    holds = goal_writes(entries)
    assert [e["id"] for e in holds] == [1], holds  # servo 2's present was never read
    one = emu.request(op="snapshot", id=1)
    assert one["goal_position"] == one["present_position"], one


def test_a_silent_first_servo_delays_the_others_hold_by_one_exchange_not_by_its_retries(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """Servo 1 answers nothing, on a port with a long timeout and many read retries: servo 2,
    driving away, is held right after the one SYNC_READ of present positions (it answered
    it), not after servo 1's reads were retried: before, the stop retried that SYNC_READ and
    then servo 1's own READ, each `1 + read_retries` times, and servo 2 drove on for ~6 s
    here (and the connect check before it pinged servo 1 as often). Servo 1 is still tried on
    its own, with its retries, and reported unknown."""
    config = write_config(tmp_path, emu.path)
    config.write_text(
        config.read_text().replace("timeout_ms = 400", "timeout_ms = 400\nread_retries = 4")
    )
    driving_away(emu, 2)
    report, entries = stopped_with_a_silent_servo(emu, config, 1)
    assert (report["a"]["state"], report["b"]["state"]) == ("unknown", "held"), report
    hold = goal_writes(entries)[0]
    assert hold["id"] == 2
    waited = (hold["t_ms"] - entries[0]["t_ms"]) / 1000
    assert waited < 1.5, f"servo 2 held {waited:.1f} s after the stop's first frame"
    reads = [e for e in entries if e["instruction"] == "read" and e["id"] == 1]
    assert len(reads) >= 5, reads  # servo 1 still had its read retries, after the hold
    two = emu.request(op="snapshot", id=2)
    assert two["goal_position"] == two["present_position"], two


def test_a_torque_off_servo_reports_limp(emu: EmulatorProcess, tmp_path: Path) -> None:
    config = write_config(tmp_path, emu.path)  # policy "hold"; both servos start torque off
    powered(emu, {1: tables.CENTER_TICK})
    done = stop(config, "--json")
    assert done.returncode == 1  # "hold" asked for held; joint b is limp
    report = joints(done)
    assert (report["a"]["state"], report["b"]["state"]) == ("held", "limp")
    assert (report["b"]["torque"], report["b"]["hardware_error"]) == (False, [])
    assert emu.request(op="snapshot", id=2)["torque_enable"] == 0  # a stop never powers a joint


def test_a_hardware_error_reports_limp_with_the_decoded_error(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK + 100})
    emu.request(op="fault", kind="alert", id=2, value=0x20)  # overload: the servo drops torque
    done = stop(config, "--json")
    assert done.returncode == 1
    b = joints(done)["b"]
    assert (b["state"], b["torque"], b["hardware_error"]) == ("limp", False, ["overload"])
    assert joints(done)["a"]["state"] == "held"
    code, shown = stop_on_a_tty(config)
    assert code == 1, shown
    lines = shown.splitlines()
    assert lines[0] == "arm (safe_stop hold, via direct): NOT in the state its policy asks"
    line_a, line_b = (next(x for x in lines if x.startswith(f"  {n} ")) for n in "ab")
    assert "held" in line_a and "torque on" in line_a and "+0.0000 rad" in line_a
    assert "limp" in line_b and "torque off" in line_b and "hardware error: overload" in line_b
    assert "{" not in shown and "Traceback" not in shown


@pytest.mark.parametrize(("name", "hint"), [("UNKNOWN", "(configured: arm)"), ("amr", "'arm'?")])
def test_stop_of_an_unknown_robot_is_one_line_and_sends_nothing(
    emu: EmulatorProcess, tmp_path: Path, name: str, hint: str
) -> None:
    done = stop(write_config(tmp_path, emu.path), "--robot", name)
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"tether stop: unknown_robot: no robot {name!r} in ")
    assert done.stderr.rstrip().endswith(hint)
    assert emu.journal() == []


@pytest.mark.parametrize(
    ("policy", "read_back", "hold_confirmed", "state"),
    [
        ("any", None, False, "unknown"),
        ("torque off", ReadBack(0, 0, 2048, 2048), False, "limp"),
        ("hardware error, torque dropped", ReadBack(0, 0x20, 2048, 2048), True, "limp"),
        # An error the servo does not shut down on (input voltage): powered and holding.
        ("hardware error, torque kept", ReadBack(1, 0x01, 2048, 2048), True, "held"),
        ("hold confirmed", ReadBack(1, 0, 2100, 2048), True, "held"),
        ("goal within tolerance", ReadBack(1, 0, 2060, 2048), False, "held"),
        ("goal elsewhere", ReadBack(1, 0, 2500, 2048), False, "moving"),
    ],
)
def test_stopped_state_is_decided_from_the_read_back(
    policy: str, read_back: ReadBack | None, hold_confirmed: bool, state: str
) -> None:
    assert stopped_state(read_back, hold_confirmed=hold_confirmed, tolerance_ticks=20) == state


def test_a_robot_named_twice_is_stopped_once(emu: EmulatorProcess, tmp_path: Path) -> None:
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    done = stop(config, "--robot", "arm", "--robot", "arm", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["robot"] for r in json.loads(done.stdout)] == ["arm"]


def test_a_mistake_in_serve_is_said_and_the_stop_goes_and_move_names_the_file(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """A stop does not use `[serve]`: a misspelled key there is a warning naming the file (as
    one in a robot's table is), never silence, and the robot is stopped. `tether move`, which
    uses it, refuses the file, naming it as every other command does."""
    config = write_config(tmp_path, emu.path)
    config.write_text(config.read_text() + "[serve]\nwrkers = 2\n")
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    done = stop(config, "--json")
    assert done.returncode == 0, done.stderr
    [warning] = done.stderr.splitlines()
    assert warning.startswith(f"tether stop: warning: unknown_key: {config}: serve: "), warning
    assert "a stop does not use [serve], so it went" in warning
    assert [r["robot"] for r in json.loads(done.stdout)] == ["arm"]
    move = subprocess.run(
        [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot", "arm",
         "--joint", "a=0.1", "--activity", "m1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert move.returncode == 2
    assert move.stderr.startswith(f"tether move: unknown_key: {config}: serve: "), move.stderr
    # A [serve] value the URL parser itself refuses is a warning too, after the stop.
    config.write_text(config.read_text().replace("wrkers = 2", 'live_origins = ["http://[::1"]'))
    done = stop(config, "--json")
    assert done.returncode == 0, done.stderr
    [warning] = done.stderr.splitlines()
    assert "warning: bad_live_origins" in warning, warning


def test_a_mistake_in_the_host_file_still_stops_through_the_process_owning_the_port(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """No `tether serve` runs: `tether host serve` owns the port (as a standalone `tether
    move` would). A host file with a misspelled key (or no TOML at all) used to send nothing
    (exit 2) while the arm drove on; the stop now goes through the process its port's lock
    names, with the configuration that process loaded, after a warning naming its pid. A
    robot no owner has is reported, nothing sent to it."""
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    typo = tmp_path / "typo.toml"
    typo.write_text(config.read_text().replace("safe_stop = ", "safe_sotp = ", 1))
    cut = tmp_path / "cut.toml"
    cut.write_text(config.read_text().replace("[robots.arm]", "[robots.arm", 1))
    # A torn header right after [host] ended nothing: it was read as part of [host].
    torn = tmp_path / "torn.toml"
    torn.write_text(
        config.read_text().replace("[operators.alice]", "[operators.bob\n[operators.alice]", 1)
    )
    assert "[operators.bob\n" in torn.read_text()
    argv = [sys.executable, "-m", "tether", "host", "serve", "--config", str(config), "--json"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as host:
        try:
            assert host.stdout is not None
            ready = [json.loads(host.stdout.readline()) for _ in range(2)]
            assert "socket" in ready[1], ready
            before = len(emu.journal())
            done = stop(typo, "--json")
            assert done.returncode == 0, (done.stdout, done.stderr)
            warning = done.stderr.strip().splitlines()
            assert len(warning) == 1 and "warning: unknown_key" in warning[0], warning
            assert f"pid {host.pid}" in warning[0], warning
            assert [(r["robot"], r["via"], r["ok"]) for r in json.loads(done.stdout)] == [
                ("arm", "owner", True)
            ]
            holds = goal_writes(emu.journal()[before:])
            assert sorted(e["id"] for e in holds) == [1, 2], holds
            after_host = stop(torn, "--json")
            assert after_host.returncode == 0, (after_host.stdout, after_host.stderr)
            assert "warning: bad_toml" in after_host.stderr
            syntax = stop(cut, "--robot", "arm", "--robot", "nosuch", "--json")
            assert syntax.returncode == 1, (syntax.stdout, syntax.stderr)
            assert "warning: bad_toml" in syntax.stderr
            got = {r["robot"]: r for r in json.loads(syntax.stdout)}
            assert got["arm"]["ok"] and got["arm"]["via"] == "owner", got
            assert got["nosuch"]["error"].startswith("not_owned: "), got
        finally:
            host.terminate()
            host.communicate(timeout=60)
    # With nobody owning the port, nothing is sent (as before): exit 2.
    assert "the process that owns its ports now" in done.stderr, done.stderr
    refused = stop(typo)
    assert refused.returncode == 2 and "unknown_key" in refused.stderr, refused


@pytest.mark.parametrize("read_retries", [0, 1])
def test_a_silent_servo_on_a_port_of_few_read_retries_is_reported_unknown(
    emu: EmulatorProcess, tmp_path: Path, read_retries: int
) -> None:
    """With `read_retries = 1` the stop's second pass over unread joints left the silent one
    without a report: a KeyError, and the whole robot said NOT STOPPED after its other joint
    was held. Each silent joint is reported unknown, each other one held."""
    config = write_config(tmp_path, emu.path)
    text = config.read_text().replace(
        "timeout_ms = 400", f"timeout_ms = 200\nread_retries = {read_retries}"
    )
    config.write_text(text)
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    emu.request(op="fault", kind="drop_status", id=2, count=100_000)
    before = len(emu.journal())
    done = stop(config, "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    report = joints(done)
    assert (report["a"]["state"], report["b"]["state"]) == ("held", "unknown"), report
    assert "KeyError" not in done.stdout + done.stderr
    reads = [e for e in emu.journal()[before:] if e["instruction"] == "read" and e["id"] == 2]
    assert len(reads) == 2 * (1 + read_retries), reads  # its hold's reads, its read-back's


def test_one_lost_status_in_a_stops_connect_check_still_stops(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """A stop pings each servo once; a servo that answered its PING and then lost one READ's
    status was taken for Status Return Level 0 (an identity refusal): nothing was sent. Only
    the PING goes unretried: the READ after it is retried, and the stop goes."""
    config = write_config(tmp_path, emu.path)
    powered(emu, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
    emu.request(op="fault", kind="drop_status", instruction="read", id=1, count=1)
    done = stop(config, "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = joints(done)
    assert (report["a"]["state"], report["b"]["state"]) == ("held", "held"), report


def test_a_servo_set_up_wrong_never_lets_a_stop_past_another_joints_identity(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """Servo 1 in a time-based profile (a set-up refusal, which a stop goes past), servo 2
    answering as another model than configured (an identity refusal, which no frame goes
    past): the set-up check of servo 1 came first and the stop wrote a goal to servo 2, whose
    identity was never checked. Every identity is checked first: nothing is sent."""
    config = write_config(tmp_path, emu.path)
    text = config.read_text()
    at = text.index("id = 2")
    config.write_text(text[:at] + "model = 1060\n" + text[at:])
    with DxlBus.open(emu.path, timeout_ms=400, lock_dir=None) as bus:
        bus.write_field(1, tables.DRIVE_MODE, 4)
    before = len(emu.journal())
    done = stop(config, "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "model_mismatch" in done.stdout, done.stdout
    sent = [e for e in emu.journal()[before:] if e["instruction"] not in ("ping", "read")]
    assert sent == [], sent


def test_a_hung_owner_never_holds_back_the_stop_through_another(
    emu: EmulatorProcess, tmp_path: Path
) -> None:
    """Two host files share a state dir, each robot owned by its `tether host serve`; one of
    them hangs (SIGSTOP: a Ctrl-Z'd shell job). A stop through a broken copy of the other's
    file asked the owners one after the other, each with a 10 s timeout, so the hung one could
    hold the other robot's stop back by 10 s while it drove on. They are asked at once: the
    other robot is held and the command ends within the hung owner's short identity wait."""
    other_dir = tmp_path / "left"
    other_dir.mkdir()
    with emulator_process(other_dir) as other:
        arm = write_config(tmp_path, emu.path)
        left = write_config(other_dir, other.path)
        state = arm.read_text().split('state_dir = "', 1)[1].split('"', 1)[0]
        text = left.read_text().replace(str(other_dir / "state"), state)
        left.write_text(
            text.replace("[robots.arm]", "[robots.left]").replace("robots.arm.", "robots.left.")
        )
        powered(other, {1: tables.CENTER_TICK, 2: tables.CENTER_TICK})
        hosts = []
        for config in (arm, left):
            argv = [sys.executable, "-m", "tether", "host", "serve", "--config", str(config)]
            proc = subprocess.Popen([*argv, "--json"], stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            assert "socket" in json.loads([proc.stdout.readline() for _ in range(2)][1])
            hosts.append(proc)
        try:
            os.kill(hosts[0].pid, signal.SIGSTOP)
            broken = other_dir / "broken.toml"
            broken.write_text(left.read_text() + "\n[robots.left\n")
            started = time.monotonic()
            done = stop(broken, "--robot", "left", "--json")
            took = time.monotonic() - started
            assert done.returncode == 0, (done.stdout, done.stderr)
            reports = json.loads(done.stdout)
            assert [(r["robot"], r["ok"]) for r in reports] == [("left", True)], reports
            assert took < 8, f"the stop took {took:.1f} s behind the hung owner"
        finally:
            os.kill(hosts[0].pid, signal.SIGCONT)
            for proc in hosts:
                proc.terminate()
                proc.communicate(timeout=60)
