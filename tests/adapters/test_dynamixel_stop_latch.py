"""A stop is latched: it cancels a move in progress, nothing moves until an operator resumes.

The move runs as `tether move` does (`run_move`: one Activity of a local Host that owns the
port) against the emulator thread; the stop goes through the owner's control socket, as
`tether stop` sends it. The emulator's journal is the independent record of every frame.
"""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import CREDENTIAL, TARGETS
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.host import RobotHost
from tether.adapters.dynamixel.move import read_joints
from tether.adapters.dynamixel.worker import data_dir_of, run_move
from tether.devices.host import stop_everything
from tether.devices.latch import RECORD_BYTES, SESSION_LAPSE, MotionStopped, StopLatch
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest

from tests._serve import add_serve, daemon

#: Instructions that change a device (everything but PING, READ and SYNC_READ).
EFFECTFUL = ("write", "reg_write", "action", "sync_write", "reboot", "factory_reset")


def move(config: HostConfig, activity: str) -> dict[str, Any]:
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    return run_move(
        config,
        request,
        world="local",
        activity=activity,
        lease_ms=300,
        settle_timeout_s=10,
        timeout_s=30,
        progress=lambda content: None,
    )


def sync_reads_of_one_read_back(emulator: DynamixelEmulator, config: HostConfig) -> int:
    """How many SYNC_READ packets one full read-back (`read_joints`) sends, counted in the
    emulator's journal (one entry per addressed servo: counted for servo 1)."""
    with RobotHost(config) as host:
        host.connect("arm")
        before = len(emulator.journal)
        read_joints(host.bus_for(config.robot("arm")), config.robot("arm"))
        return sum(
            1 for e in emulator.journal[before:] if e.instruction == "sync_read" and e.id == 1
        )


def torque_writes(emulator: DynamixelEmulator) -> int:
    return sum(
        1
        for e in list(emulator.journal)
        if e.instruction == "write" and e.address == tables.TORQUE_ENABLE.address
    )


def operator(config: Path, *argv: str, secret: str | None = CREDENTIAL) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "--config", str(config), *argv]
        + (["--credential-stdin"] if secret is not None else []),
        input=f"{secret}\n" if secret is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done


def test_a_stop_while_the_move_reads_its_preimage_cancels_it_and_latches(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    # A move reads every joint before any byte (seven SYNC_READs, one per register), writes
    # Profile Velocity and Torque Enable, then reads its preimage. The emulator answers each of
    # the first eight SYNC_READs 400 ms late: the eighth is the preimage's first, and the stop
    # arrives while the move waits for it (the torque writes below come just before it).
    plan_reads = sync_reads_of_one_read_back(emulator, config)
    start = len(emulator.journal)  # (that read's host wrote its own safe-stop at its close)
    emulator.inject(Fault("delay", count=plan_reads + 1, instruction="sync_read", value=400))
    outcome: dict[str, Any] = {}
    mover = threading.Thread(target=lambda: outcome.update(move(config, "m1")))
    mover.start()
    deadline = time.monotonic() + 30
    while torque_writes(emulator) < 2:
        assert time.monotonic() < deadline and mover.is_alive(), "the move never enabled torque"
        time.sleep(0.002)
    reports = stop_everything(config)
    mover.join(timeout=60)
    assert not mover.is_alive()

    assert [r["via"] for r in reports] == ["owner"] and reports[0]["ok"] is True
    journal = list(emulator.journal)[start:]
    stop_writes = [
        i
        for i, e in enumerate(journal)
        if e.instruction == "write" and e.address == tables.GOAL_POSITION.address
    ]
    assert len(stop_writes) == 2  # the hold: Goal := Present on each joint, nothing else
    after = [e for e in journal[stop_writes[-1] + 1 :] if e.instruction in EFFECTFUL]
    assert after == []  # no REG_WRITE, no ACTION, not even a second stop, after the stop
    assert not any(e.instruction in ("reg_write", "action") for e in journal)
    assert outcome["status"] == "awaiting_decision"  # parked, never `ok`
    assert outcome["reason"] == "stopped_by_operator"
    for dxl_id in (1, 2):
        snap = emulator.snapshot(dxl_id)
        assert snap["registered_instruction"] == 0
        assert abs(snap["present_position"] - tables.CENTER_TICK) <= 2  # it never moved

    # The latch is durable: a new host (a restart) on the same state dir refuses to move it.
    assert StopLatch(config.state_dir).latched("arm")
    with RobotHost(config) as host:
        host.connect("arm")
        with pytest.raises(MotionStopped) as info:
            host.bus_for(config.robot("arm")).write_field(1, tables.GOAL_POSITION, 3000)
        assert info.value.code == "stopped_by_operator"
        with pytest.raises(MotionStopped):
            host.check_motion("arm")
    second = move(config, "m2")  # another move on the latched robot parks without a frame
    # Latched before it began: `robot_latched`, not the stop's reason as if it had been cut.
    assert second["status"] == "awaiting_decision" and second["reason"] == "robot_latched"
    assert not any(e.instruction in ("reg_write", "action") for e in emulator.journal)


def test_resume_needs_an_operator_credential_and_is_recorded(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    stop_everything(config)  # direct: nobody owns the port
    latch = StopLatch(config.state_dir)
    assert latch.latched("arm")
    path = tmp_path / "host.toml"
    with daemon(add_serve(path)):  # only `tether serve` verifies the credential
        refused = operator(path, "resume", "arm", secret="guess")
        assert refused.returncode == 1
        assert json.loads(refused.stdout)["code"] == "credential_refused"
        assert latch.latched("arm")
        unknown = operator(path, "resume", "amr")
        assert unknown.returncode == 2 and "did you mean 'arm'?" in unknown.stderr
        done = operator(path, "resume", "arm")
        assert done.returncode == 0, done.stdout + done.stderr
        record = json.loads(done.stdout)
        assert record["latched"] is False and record["resumed_by"] == "alice"
        assert CREDENTIAL not in done.stdout + done.stderr
        # Again: nothing is latched. It said a fresh resume and rewrote the record.
        again = operator(path, "resume", "arm")
        assert again.returncode == 0, again.stdout + again.stderr
        said = json.loads(again.stdout)
        assert said["not_latched"] is True and "resumed_by" not in said, said
        assert said["last_resumed_by"] == "alice"
        assert latch.state("arm")["resumed_at_ms"] == record["resumed_at_ms"]
    assert not latch.latched("arm")
    ok = move(config, "m3")
    assert (ok["status"], ok["conclusion"]) == ("done", "executed")


def _stop_with_mode(path: Path, state_dir: Path, mode: int) -> subprocess.CompletedProcess[str]:
    """`tether stop --config PATH --json` with the state dir at `mode` (0700 again after)."""
    state_dir.chmod(mode)
    try:
        return subprocess.run(
            [sys.executable, "-m", "tether", "stop", "--config", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        state_dir.chmod(0o700)


def test_tether_stop_goes_through_the_owner_when_the_state_dir_is_loose(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """A state dir others may write to is said first, never a reason not to stop: the stop
    reaches the arm through the daemon that owns it (its latch held in memory, as its report
    says, since its record cannot be trusted there)."""
    path = tmp_path / "host.toml"
    with daemon(add_serve(path)):
        before = len(emulator.journal)
        done = _stop_with_mode(path, config.state_dir, 0o777)
        assert "warning: insecure_directory" in done.stderr and "stopping anyway" in done.stderr
        [report] = json.loads(done.stdout)
        assert report["via"] == "owner" and "latched in this process only" in report["latch_error"]
        sent = [e.instruction for e in list(emulator.journal)[before:]]
        assert "write" in sent, sent  # the hold went to the arm


@pytest.mark.parametrize("loose", ["writable", "symlinked"])
def test_tether_stop_with_no_owner_stops_the_arm_when_the_state_dir_is_loose(
    emulator: DynamixelEmulator, tmp_path: Path, loose: str
) -> None:
    """With no daemon, a state dir others may write to was said ("stopping anyway") and then
    nothing was sent: the host's own check of the dir refused the direct stop. A symlinked
    state dir refused the stop outright, while moves went on. Both are said, then the arm is
    stopped and latched directly."""
    from _dxl_setup import write_config
    from tether.adapters.dynamixel.config import load_config

    path = write_config(tmp_path, emulator.path)
    config = load_config(path)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if loose == "symlinked":
        link = tmp_path / "state-link"
        link.symlink_to(config.state_dir)
        text = path.read_text().replace(str(config.state_dir), str(link))
        path.write_text(text)
    for servo in emulator.servos.values():  # powered, as after a move: a hold holds it
        servo.set(tables.TORQUE_ENABLE, 1)
    before = len(emulator.journal)
    done = _stop_with_mode(path, config.state_dir, 0o770 if loose == "writable" else 0o700)
    code = "insecure_directory" if loose == "writable" else "symlinked_directory"
    assert f"warning: {code}" in done.stderr and "stopping anyway" in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    [report] = json.loads(done.stdout)
    assert report["via"] == "direct" and report["ok"] is True, report
    assert "write" in [e.instruction for e in list(emulator.journal)[before:]]  # the hold
    assert StopLatch(config.state_dir).latched("arm")  # its record, in the real dir


def test_an_unreadable_latch_record_holds_the_robot(config: HostConfig) -> None:
    latch = StopLatch(config.state_dir)
    latch.latch("arm")
    latch._path("arm").write_bytes(b"{torn")
    assert latch.latched("arm")


def test_a_stop_of_a_latched_robot_keeps_its_author_and_reads_its_record_once(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop is on a loaded host's critical path: a repeat stop names the first stop's
    author from one read of the record (each read is several system calls, each a wait for
    the interpreter lock), and the record it writes still holds that author."""
    latch = StopLatch(config.state_dir)
    latch.latch("arm", by=SESSION_LAPSE)
    reads: list[str] = []
    state = StopLatch.state

    def counted(self: StopLatch, robot: str) -> dict[str, Any]:
        reads.append(robot)
        return state(self, robot)

    monkeypatch.setattr(StopLatch, "state", counted)
    doc = latch.latch("arm", by="operator")
    assert doc["by"] == SESSION_LAPSE and reads == ["arm"]
    monkeypatch.setattr(StopLatch, "state", state)
    assert json.loads(latch._path("arm").read_bytes())["by"] == SESSION_LAPSE
    assert StopLatch(config.state_dir).stop_reason("arm") == "stopped_on_session_lapse"


def test_a_move_on_a_latched_robot_sends_nothing_and_leaves_the_bus_to_the_stop(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """A move on a latched robot is refused before its plan's read-back: its attempt puts no
    frame on the bus (no stop-policy frames either: nothing was commanded), and it parks for
    an operator; only its reconcile reads the robot back (its evidence), once."""
    stop_everything(config)
    assert StopLatch(config.state_dir).latched("arm")
    one_read_back = sync_reads_of_one_read_back(emulator, config)
    before = len(emulator.journal)
    outcome = move(config, "m-latched")
    assert outcome["status"] == "awaiting_decision"
    assert outcome["reason"] == "robot_latched"
    frames = list(emulator.journal)[before:]
    assert not [e.instruction for e in frames if e.instruction in EFFECTFUL]
    reads = sum(1 for e in frames if e.instruction == "sync_read" and e.id == 1)
    assert reads == one_read_back  # the reconcile's; the attempt read nothing


def test_a_latch_the_session_watchdog_set_names_the_lapse_not_an_operator(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """A move refused by a latch the session watchdog set parks as `stopped_on_session_lapse` (no
    operator pressed stop), and its record keeps that reason after the resume; an operator's
    stop after that is `stopped_by_operator` again."""
    latch = StopLatch(config.state_dir)
    with latch.stopping():
        latch.latch("arm", by=SESSION_LAPSE)
    with pytest.raises(MotionStopped) as refused:
        latch.check(["arm"])
    assert refused.value.code == "stopped_on_session_lapse"
    assert "safe-stopped when a move's session heartbeat lapsed" in str(refused.value)
    outcome = move(config, "m-lapsed")
    assert (outcome["status"], outcome["reason"]) == ("awaiting_decision", "robot_latched")
    # Its evidence names the latch's own reason beside it: no operator pressed stop.
    assert _evidence(config, "m-lapsed")["latch_reason"] == "stopped_on_session_lapse"
    resumed = latch.resume("arm", operator="olga")
    assert (
        resumed["stopped_by"] == SESSION_LAPSE
        and latch.stop_reason("arm") == "stopped_on_session_lapse"
    )
    latch.latch("arm")  # an operator's stop (`tether stop`)
    assert latch.stop_reason("arm") == "stopped_by_operator"
    # A watchdog's stop of the robot the operator stopped never hides the operator's.
    latch.latch("arm", by=SESSION_LAPSE)
    assert latch.stop_reason("arm") == "stopped_by_operator"
    with pytest.raises(MotionStopped) as again:
        latch.check(["arm"])
    assert again.value.code == "stopped_by_operator"


def test_the_latch_dir_is_checked_once_not_at_every_stop(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop's latch write does not walk the latch dir's ancestors again (each a syscall the
    stop would wait on under load): the first write checks it, as `usable_dir` does."""
    import tether.devices.latch as latch_module

    checked: list[Path] = []
    real = latch_module.usable_dir

    def counted(path: Any, *, what: str, create: bool = True) -> Path:
        checked.append(Path(path))
        return real(path, what=what, create=create)

    monkeypatch.setattr(latch_module, "usable_dir", counted)
    latch = StopLatch(config.state_dir)
    latch.latch("arm")
    latch.resume("arm", operator="olga")
    latch.latch("arm")
    assert checked == [config.state_dir / "latches"] and latch.latched("arm")


def test_a_latch_record_after_the_first_is_overwritten_in_place(config: HostConfig) -> None:
    """The first record creates the file (renamed in); later ones rewrite its one sector in
    place (the same inode, the same size), each durable before it returns."""
    latch = StopLatch(config.state_dir)
    path = latch._path("arm")
    latch.latch("arm")
    first = path.stat()
    assert first.st_size == RECORD_BYTES and latch.latched("arm")
    latch.resume("arm", operator="olga")
    assert not latch.latched("arm") and latch.state("arm")["resumed_by"] == "olga"
    latch.latch("arm", by="grpc")
    again = path.stat()
    assert (again.st_ino, again.st_size) == (first.st_ino, RECORD_BYTES)
    assert latch.state("arm")["latched"] is True and latch.state("arm")["by"] == "grpc"
    assert json.loads(path.read_bytes())["latched"] is True  # padding is JSON whitespace
    # A record of another size (written by an older release: a bare JSON file) is replaced
    # by a new file of the record size, never overwritten in part.
    path.write_bytes(json.dumps({"robot": "arm", "latched": False}).encode())
    latch.latch("arm")
    assert path.stat().st_size == RECORD_BYTES and latch.latched("arm")


def _evidence(config: HostConfig, activity: str) -> dict[str, Any]:
    """The reconcile checks of move ``activity``'s evidence as the catalog holds it."""
    from tether.activities import ActivityKey, Catalog
    from tether.operator.decisions import evidence_document
    from tether.runtime import ArtifactStore

    data = data_dir_of(config)
    catalog = Catalog.open(f"sqlite:///{data / 'catalog.db'}")
    try:
        record = catalog.get(ActivityKey("local", KIND_ABSOLUTE, activity))
        assert record is not None and record.awaiting_decision
        evidence = evidence_document(ArtifactStore(data / "artifacts"), record)
    finally:
        catalog.close()
    assert evidence is not None
    return dict(evidence["reconcile"])


def _stays_parked(
    emulator: DynamixelEmulator,
    config: HostConfig,
    activity: str,
    reason: str = "stopped_by_operator",
) -> None:
    """A reconcile of move ``activity`` now (as the runtime's periodic one) keeps it parked
    with ``reason``, sending no effectful frame."""
    from tether.activities import ActivityKey, operation_id_for
    from tether.adapters.dynamixel.move import DynamixelMoveAdapter
    from tether.families.robot_move.journal import MoveStore
    from tether.families.robot_move.request import Unknown

    key = ActivityKey("local", KIND_ABSOLUTE, activity)
    op = MoveStore(data_dir_of(config) / "robot_move").get(operation_id_for(key))
    assert op is not None
    with RobotHost(config) as host:
        host.connect("arm")
        before = len(emulator.journal)
        again = DynamixelMoveAdapter(config, host).reconcile(op, op.request)
        frames = list(emulator.journal)[before:]
    assert isinstance(again, Unknown), again
    assert again.evidence["reason"] == reason
    assert not [e.instruction for e in frames if e.instruction in EFFECTFUL]


def test_a_move_parked_on_a_latched_robot_stays_parked_after_the_resume(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """A resume lets the robot move again; it decides no parked move. A move parked because
    its robot was latched (it sent nothing) is reconciled again later, as every Unknown is:
    once resumed, that reconcile must not confirm it absent and run it by itself, a minute
    after the user was told it awaits a decision. It stays parked, sending nothing."""

    stop_everything(config)
    outcome = move(config, "m-parked")
    assert (outcome["status"], outcome["reason"]) == ("awaiting_decision", "robot_latched")
    StopLatch(config.state_dir).resume("arm", operator="olga")
    _stays_parked(emulator, config, "m-parked", "robot_latched")


def test_a_move_parked_standalone_is_decided_through_a_daemon_and_later_moves_settle(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """A move parked by a standalone `tether move` (the robot latched), then `tether serve` on
    the same data dir, as the README says to decide it: the daemon replays the world's
    intents as the standalone run admitted them, so its own moves are admitted, run once and
    settle, instead of every later move answering `owner_refused` while it moved the arm."""
    from _dxl_setup import outcome, run_worker

    stop_everything(config)
    parked = move(config, "a1")
    assert (parked["status"], parked["reason"]) == ("awaiting_decision", "robot_latched")
    path = tmp_path / "host.toml"
    with daemon(add_serve(path)):
        resumed = operator(path, "resume", "arm")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        before = len(emulator.journal)
        done = run_worker(path, activity="a2", joints={"a": 0.2, "b": 0.1})
        assert done.returncode == 0, done.stdout + done.stderr
        assert outcome(done)["status"] == "done", done.stdout
        actions = [e for e in list(emulator.journal)[before:] if e.instruction == "action"]
        assert actions, "the move never ran"
        listed = operator(path, "--json", "list", secret=None)
        assert listed.returncode == 0, listed.stderr
        assert [i["key"].rsplit("/", 1)[1] for i in json.loads(listed.stdout)] == ["a1"]
    # And back: a standalone move after the daemon stopped replays the daemon's intents as the
    # daemon admitted them (both bind this host's moves to its name).
    after = run_worker(path, activity="a3", joints={"a": -0.2, "b": 0.0})
    assert after.returncode == 0, after.stdout + after.stderr
    assert outcome(after)["status"] == "done", after.stdout
    # Read in a process of its own: this one's in-process move left a connection to the file.
    catalog = data_dir_of(config) / "catalog.db"
    read = (
        "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchall())"
    )
    rows = subprocess.run(
        [
            sys.executable,
            "-c",
            read,
            str(catalog),
            "select activity_id, bound_host from activities",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rows.returncode == 0, rows.stderr
    hosts = dict(ast.literal_eval(rows.stdout))
    assert hosts == dict.fromkeys(("a1", "a2", "a3"), socket.gethostname())


def _cut_mid_motion(emulator: DynamixelEmulator, config: HostConfig, activity: str) -> None:
    """Move ``activity`` in real time and stop it (`tether stop`) once its ACTION went out: it
    ends parked, `stopped_by_operator`."""
    emulator.speed_scale = 1.0  # real time: the stop lands mid-motion
    outcome: dict[str, Any] = {}
    mover = threading.Thread(target=lambda: outcome.update(move(config, activity)))
    mover.start()
    deadline = time.monotonic() + 30
    while not any(e.instruction == "action" for e in list(emulator.journal)):
        assert time.monotonic() < deadline and mover.is_alive(), "the move never started"
        time.sleep(0.002)
    time.sleep(0.05)
    stop_everything(config)
    mover.join(timeout=60)
    assert (outcome["status"], outcome["reason"]) == ("awaiting_decision", "stopped_by_operator")


def test_a_move_stopped_mid_motion_is_not_recovered_by_a_later_move_to_its_target(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """Stopped mid-motion (parked, `stopped_by_operator`), the robot resumed, then another
    move drives the arm to the same target. The first move's later reconcile sees its goals
    reached, but by the other move: it stays parked for the operator, never `SUCCEEDED`."""

    _cut_mid_motion(emulator, config, "m-cut")
    held = emulator.snapshot(1)["present_position"]
    assert abs(held - tables.radians_to_ticks(TARGETS["a"])) > 20, held  # cut short
    emulator.speed_scale = 20.0
    StopLatch(config.state_dir).resume("arm", operator="olga")
    later = move(config, "m-later")  # the same target, after the resume
    assert later["status"] == "done", later
    _stays_parked(emulator, config, "m-cut")


def test_a_standalone_move_concluded_earlier_is_shown_as_such_and_sends_nothing(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """The same `tether move` again with no daemon: the move concluded in the first run is
    shown as it ended, marked `earlier`, and not a frame is sent for it."""
    first = move(config, "m-once")
    assert first["status"] == "done" and "earlier" not in first, first
    before = len(emulator.journal)
    again = move(config, "m-once")
    assert again["status"] == "done" and again["earlier"] is True, again
    sent = [e for e in list(emulator.journal)[before:] if e.instruction in EFFECTFUL]
    assert sent == []


def test_a_stop_names_its_principal_within_the_latch_records_bound(tmp_path: Path) -> None:
    from tether.devices.latch import BY_NAME_MAX, StopLatch, stopped_by

    long = "p" * (BY_NAME_MAX + 40)
    by = stopped_by("gRPC Stop", "planner", long)
    assert by == f"gRPC Stop by planner {'p' * BY_NAME_MAX}"
    latch = StopLatch(tmp_path)
    latch.latch("arm", by=by)
    assert StopLatch(tmp_path).stop_reason("arm") == "stopped_by_operator"
    assert stopped_by("console Stop", "operator", "alice") == "console Stop by operator alice"


def test_a_parked_moves_reason_stays_the_stop_that_cut_it_whatever_stops_come_later(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """Stopped mid-motion by an operator (parked, `stopped_by_operator`), the robot resumed,
    then stopped again by a session's lapse: a later reconcile of the parked move still names
    the operator's stop, the one that cut it (before, it took the latch's latest reason and
    told the operator the move was cut by the lapse)."""
    _cut_mid_motion(emulator, config, "m-cut")
    emulator.speed_scale = 20.0
    latch = StopLatch(config.state_dir)
    latch.resume("arm", operator="olga")
    latch.latch("arm", by=SESSION_LAPSE)  # a later stop, of nothing this move sent
    assert latch.stop_reason("arm") == "stopped_on_session_lapse"
    _stays_parked(emulator, config, "m-cut", reason="stopped_by_operator")


@pytest.mark.parametrize("stopped", [False, True], ids=["alone", "stopped_meanwhile"])
def test_a_move_parked_on_an_unreadable_device_stays_parked_once_it_reads_again(
    emulator: DynamixelEmulator, tmp_path: Path, stopped: bool
) -> None:
    """A move whose device could not be read (its servos answering nothing: a bus without
    power) parks for an operator, `device_unreadable`. Once the device reads again, the
    periodic reconcile found nothing had run, confirmed it absent and ran it by itself, a
    minute after the user was told it awaits a decision; and a `tether stop` made meanwhile,
    which cut nothing of it, became its reason. It stays parked for its own reason, sending
    nothing. (A new move on a port that does not open at all is refused before it is
    recorded: `test_a_new_move_on_a_port_that_does_not_open_is_refused_unrecorded`.)"""
    from _dxl_setup import write_config
    from tether.adapters.dynamixel.config import load_config

    config = load_config(write_config(tmp_path, emulator.path))
    emulator.inject(Fault("drop_status", count=1_000_000))  # no servo answers
    outcome = move(config, "m-gone")
    assert (outcome["status"], outcome["reason"]) == ("awaiting_decision", "device_unreadable")
    if stopped:  # latched while the device is silent: it stops nothing of the move
        stop_everything(config)
    emulator.clear_faults()  # powered again
    _stays_parked(emulator, config, "m-gone", "device_unreadable")
    if stopped:
        StopLatch(config.state_dir).resume("arm", operator="olga")
        _stays_parked(emulator, config, "m-gone", "device_unreadable")


def test_a_new_move_on_a_port_that_does_not_open_is_refused_unrecorded(tmp_path: Path) -> None:
    """The adapter unplugged (its udev link absent): a new move is refused at once, nothing
    recorded, rather than admitted and parked `device_unreadable` for an operator to decide
    a move that never sent a byte (and that needed a daemon to be decided at all)."""
    from _dxl_setup import write_config
    from tether.adapters.dynamixel.config import load_config
    from tether.errors import TransportError

    link = tmp_path / "arm.tty"
    config = load_config(write_config(tmp_path, str(link)))
    with pytest.raises(TransportError) as info:
        move(config, "m-unplugged")
    assert getattr(info.value, "code", None) == "open_failed", info.value
    from tether.activities import ActivityKey, Catalog
    from tether.storage._urls import sqlite_url

    catalog = Catalog.open(sqlite_url(data_dir_of(config) / "catalog.db"))
    try:
        assert catalog.get(ActivityKey("local", KIND_ABSOLUTE, "m-unplugged")) is None
    finally:
        catalog.close()


def test_a_reboot_answered_no_on_a_terminal_asks_for_no_credential(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """`tether operator reboot` answered "n" at its "Is the arm supported?" prompt still asked
    for the passphrase and sent it to the daemon, to be refused there."""
    import os
    import select

    path = tmp_path / "host.toml"
    with daemon(add_serve(path)):
        master, slave = os.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "operator", "--config", str(path), "reboot", "arm"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        text = ""
        answered = False
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    text += os.read(master, 4096).decode("utf-8", "replace")
                except OSError:
                    break
            if not answered and "[y/N]" in text:
                os.write(master, b"n\n")
                answered = True
            if answered and "credential:" in text.split("[y/N]", 1)[1]:
                proc.kill()  # it asks for the passphrase after the "no"
        code = proc.wait(timeout=30)
        os.close(master)
    assert answered, text
    assert code == 1 and "reboot_unconfirmed" in text, text
    assert "credential:" not in text.split("[y/N]", 1)[1], text  # never asked for
    assert not [e for e in emulator.journal if e.instruction == "reboot"]


def test_a_resume_the_daemon_never_answered_says_it_may_have_been_recorded(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """A resume sent to a daemon that died before answering said only `owner_no_answer:
    ConnectionResetError`: nothing said whether the robot was resumed."""
    import os
    import signal

    path = tmp_path / "host.toml"
    with daemon(add_serve(path)) as (proc, _ready):
        os.kill(proc.pid, signal.SIGSTOP)  # it takes the connection, and answers nothing
        with subprocess.Popen(
            [sys.executable, "-m", "tether", "operator", "--config", str(path), "resume", "arm",
             "--credential-stdin"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as resume:  # fmt: skip
            assert resume.stdin is not None
            resume.stdin.write(f"{CREDENTIAL}\n")
            resume.stdin.close()
            time.sleep(2.0)  # the request is sent and waits for its answer
            os.kill(proc.pid, signal.SIGKILL)
            code = resume.wait(timeout=60)
            assert resume.stderr is not None
            err = resume.stderr.read()
    assert code == 7, err
    assert "owner_no_answer" in err and "may or may not have been recorded" in err, err
    assert "tether status" in err and CREDENTIAL not in err


def test_a_host_file_others_may_write_is_refused_but_never_keeps_a_stop_from_going(
    emulator: DynamixelEmulator, config: HostConfig
) -> None:
    """A world-writable host.toml was taken by every command: any local user could add an
    operator's hash or widen a limit. It is refused (`insecure_config`, exit 2), except by
    `tether stop`, which says so and stops."""
    path = Path(config.path)
    path.chmod(0o666)

    def tether(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *argv, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    moved = tether("move", "--robot", "arm", "--joint", "a=0.5", "--activity", "ww")
    assert moved.returncode == 2, moved.stdout + moved.stderr
    assert "insecure_config" in moved.stderr and "writable by everyone" in moved.stderr
    assert not [e for e in emulator.journal if e.instruction in EFFECTFUL]
    stopped = tether("stop")  # the emulator's servos start limp: "NOT in the state" (exit 1)
    assert "safe_stop hold, via direct" in stopped.stdout, stopped.stdout + stopped.stderr
    assert "warning: insecure_config" in stopped.stderr and "stopping anyway" in stopped.stderr
    assert StopLatch(config.state_dir).latched("arm")
    path.chmod(0o644)  # readable by others is not refused (no credential in this one)
    assert tether("status").returncode == 7  # read: no daemon runs


def test_a_move_through_a_daemon_that_loaded_an_older_host_file_says_so(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    """host.toml edited while `tether serve` ran (a lower speed, say): `tether move --config`
    ran the move at the daemon's old speed without a word."""
    path = tmp_path / "host.toml"
    with daemon(add_serve(path)):

        def move_cli(activity: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "tether", "move", "--config", str(path), "--robot",
                 "arm", "--joint", "a=0.2", "--activity", activity],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip

        same = move_cli("as-loaded")
        assert same.returncode == 0, same.stdout + same.stderr
        assert "changed since tether serve" not in same.stderr
        path.write_text(path.read_text() + "\n# edited while the daemon runs\n")
        edited = move_cli("edited")
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert "warning:" in edited.stderr and "changed since tether serve" in edited.stderr
    assert "restart tether serve" in edited.stderr
