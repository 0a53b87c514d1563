"""Crash tests through the runtime: a `tether worker` process running the robot_move family is
SIGKILLed at the adapter's named points; a fresh worker process takes over after the lease
lapses. The journal shows one target ACTION per joint and the activity reaches its result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import CREDENTIAL, GOALS, TARGETS, target_actions, write_config
from tether.activities import ActivityKey
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import load_config
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.family import CONFIG_ENV, OBSERVATION, intent, robot_move_family
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest
from tether.runtime import Host

from tests._serve import decider

KEY = ActivityKey("w", KIND_ABSOLUTE, "move-1")


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    with DynamixelEmulator([1, 2], speed_scale=20.0) as emu:
        yield emu


def worker(data: Path, config: Path, crash_at: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
    env[CONFIG_ENV] = str(config)
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    argv = [
        "worker",
        str(data),
        "--families",
        "tether.families.robot_move.family:families_from_env",
        "--lease-ms",
        "1500",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], env=env, stderr=subprocess.DEVNULL
    )


def wait_for(check: object, seconds: float = 60.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("crash_at", "attempts", "outcome"),
    [
        # bound and read, nothing effectful sent: ConfirmedAbsent, then one re-execution
        ("after_preimage", [1, 2], "completed"),
        # staged, no ACTION: ConfirmedAbsent (neutralised), then exactly one re-execution
        ("after_reg_write", [1, 2], "completed"),
        # committed: Recovered from the read-back, never re-sent
        ("after_action", [1], "recovered"),
        ("after_readback", [1], "recovered"),
    ],
)
def test_worker_killed_mid_move_is_finished_by_the_next_worker(
    emulator: DynamixelEmulator, tmp_path: Path, crash_at: str, attempts: list[int], outcome: str
) -> None:
    config_path = write_config(tmp_path, emulator.path)
    data = tmp_path / "data"
    family = robot_move_family(load_config(config_path), data / "robot_move")
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    with Host(data, [family], workers=0, observe=False) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", request)])
        with worker(data, config_path, crash_at) as first:
            assert first.wait(timeout=60) == -signal.SIGKILL
        with worker(data, config_path, None) as second:
            try:
                wait_for(lambda: (r := host.get(KEY)) is not None and r.result is not None)
            finally:
                second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
        host.observe_once()
        observed = host.snapshot("w").get("move-1", OBSERVATION)
        assert isinstance(observed, dict) and not observed["failed"]
        assert observed["summary"]["outcome"] == outcome
        record = host.get(KEY)
        assert record is not None and record.settlement is not None
    journal = [asdict(e) for e in emulator.journal]
    assert target_actions(journal, GOALS) == {1: 1, 2: 1}
    # SIGTERM of the second worker ran the "hold" safe-stop on its way out (moves only ever
    # REG_WRITE the goal; a plain WRITE of Goal Position is the hold).
    holds = {
        e["id"]
        for e in journal
        if e["instruction"] == "write" and e["address"] == tables.GOAL_POSITION.address
    }
    assert holds == {1, 2}
    op = MoveStore(data / "robot_move").get(record.operation_id or "")
    assert op is not None and op.attempts() == attempts
    guard = op.guard(2)
    if crash_at == "after_preimage":
        assert guard is not None and guard["reason"] == "nothing_sent"
        assert guard["neutralised_ids"] == [] and record.retry_guard is not None
    elif attempts == [1, 2]:
        assert guard is not None and guard["reason"] == "staged_not_actioned"
        assert guard["port_lock"].startswith("path:") and sorted(guard["neutralised_ids"]) == [1, 2]
        assert record.retry_guard is not None  # the catalog holds the same guard artifact
    else:
        assert guard is None


def operator_cli(config: Path, data: Path, *argv: str, credential: str | None = None) -> Any:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "operator",
            "--config",
            str(config),
            "--data-dir",
            str(data),
            *argv,
            *(["--credential-stdin"] if credential is not None else []),
        ],
        input=(credential + "\n") if credential is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "TETHER_OPERATOR_CREDENTIAL"},
    )
    return json.loads(done.stdout)


def test_power_loss_after_staging_parks_in_the_catalog_until_the_operator_reissues(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    """Killed after the REG_WRITEs, then the servos lose power: the next worker cannot prove
    either outcome (Unknown), parks the activity and sends nothing more. The operator reviews
    the evidence and re-issues through the CLI while that worker still owns the port (the
    fresh read-back goes through its socket; the decision itself runs in `tether serve`, which
    verifies the credential); the worker then runs exactly one new attempt, its first motion
    speed-limited."""
    config_path = write_config(tmp_path, emulator.path)
    data = tmp_path / "data"
    config = load_config(config_path)
    family = robot_move_family(config, data / "robot_move")
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    with Host(data, [family], workers=0, observe=False) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", request)])
        with worker(data, config_path, "after_reg_write") as first:
            assert first.wait(timeout=60) == -signal.SIGKILL
        emulator.power_cycle()  # RAM wiped: staged writes gone, torque off
        with worker(data, config_path, None) as second:
            try:
                wait_for(lambda: (r := host.get(KEY)) is not None and r.awaiting_decision)
                parked = host.get(KEY)
                assert parked is not None and parked.result is None
                listed = operator_cli(config_path, data, "list")
                assert [(i["key"], i["revision"], i["reason"]) for i in listed] == [
                    ("w/physical_ai.robot_move.absolute/move-1", 1, "device_state_lost_or_moved")
                ]
                shown = operator_cli(config_path, data, "show", listed[0]["key"])
                evidence = shown["evidence"]
                assert evidence["command"]["targets"] == TARGETS
                assert evidence["staged"] == pytest.approx(TARGETS, abs=0.002)
                setup = ["profile_velocity", "torque_enable"] * 2  # before the pre-image
                sent = [s["instruction"] for s in evidence["sent"]]
                assert sent == [*setup, "reg_write", "reg_write"]
                assert all(
                    s["digest"].startswith("sha256:") and s["t_ms"] for s in evidence["sent"]
                )
                assert set(evidence["last_status"]) == {"1", "2"}
                assert evidence["reconcile"]["torque_changed"] == ["a", "b"]
                assert evidence["read_back"]["joints"]["a"]["torque_on"] is False
                assert evidence["commanded_vs_present"]["b"]["commanded_rad"] == pytest.approx(
                    TARGETS["b"], abs=0.002
                )
                assert shown["device_state_age_ms"] >= 0
                resolve = ["resolve", listed[0]["key"], "--decision", "reissue", "--revision", "1"]
                with decider(config_path, data):  # `tether serve` decides
                    refused = operator_cli(config_path, data, *resolve, "--operator", "alice")
                    assert refused["code"] == "empty_credential"  # none given: none sent
                    assert host.get(KEY) == parked  # a refusal changes nothing
                    ok = operator_cli(
                        config_path, data, *resolve, "--operator", "alice", credential=CREDENTIAL
                    )
                    assert ok["status"] == "resolved", ok
                    wait_for(lambda: (r := host.get(KEY)) is not None and r.result is not None)
                # `tether stop` while the runtime worker owns the port: through its socket.
                stopped = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "tether",
                        "stop",
                        "--json",
                        "--config",
                        str(config_path),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert stopped.returncode == 0, stopped.stdout + stopped.stderr
                assert json.loads(stopped.stdout)[0]["via"] == "owner"
            finally:
                second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
        done = host.get(KEY)
        assert done is not None and done.decision is not None
        assert done.decision.operator == "alice"
    assert target_actions([asdict(e) for e in emulator.journal], GOALS) == {1: 1, 2: 1}
    op = MoveStore(data / "robot_move").get(done.operation_id or "")
    assert op is not None and op.attempts() == [1, 2]
    assert op.guard(2) is None  # no reconcile proved it: the operator's re-issue did
    proof = op.reissue_proof(2)  # taken by the worker that owned the port, through its socket
    assert proof is not None and proof["reason"] == "operator_reissue"
    assert proof["owner_pid"] != os.getpid()
    assert proof["read_back"]["joints"]["a"]["moving"] is False
    assert proof["fence_floor"] == done.fence - 1 and done.retry_guard is not None
    preimage = op.preimage(2)
    assert preimage is not None and preimage["first_motion"] is True
    assert preimage["profile_velocity"] == config.robot("arm").first_motion_velocity


def test_a_worker_past_its_shutdown_bound_still_safe_stops_its_robots(tmp_path: Path) -> None:
    """SIGTERM while its move runs longer than `TETHER_SHUTDOWN_BOUND_S`: the worker gives up
    waiting (one line, exit 1) and still applies the robots' stop policy on its way out (here
    `torque_off`), which `os._exit` alone would have skipped."""
    with DynamixelEmulator([1, 2], speed_scale=1.0) as emu:  # real-time shafts: a long move
        config_path = write_config(tmp_path, emu.path)
        text = config_path.read_text().replace('safe_stop = "hold"', 'safe_stop = "torque_off"')
        config_path.write_text(text)
        data = tmp_path / "data"
        family = robot_move_family(load_config(config_path), data / "robot_move")
        far = {"a": 1.4, "b": -1.4}
        request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": far})
        with Host(data, [family], workers=0, observe=False) as host:
            host.create_world("w")
            host.commit_tick("w", [intent("move-1", request)])
            env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
            env[CONFIG_ENV] = str(config_path)
            env["TETHER_SHUTDOWN_BOUND_S"] = "1"
            argv = ["worker", str(data), "--families"]
            argv += ["tether.families.robot_move.family:families_from_env"]
            with subprocess.Popen(
                [sys.executable, "-m", "tether", *argv],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            ) as proc:
                wait_for(lambda: any(e.instruction == "action" for e in emu.journal))
                assert emu.snapshot(1)["torque_enable"] == 1
                start = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(timeout=60)
                took = time.monotonic() - start
                said = proc.stderr.read() if proc.stderr else ""
        assert rc == 1 and took < 20, (rc, took, said)
        assert "shutdown_stalled" in said, said
        assert [emu.snapshot(i)["torque_enable"] for i in (1, 2)] == [0, 0], said
