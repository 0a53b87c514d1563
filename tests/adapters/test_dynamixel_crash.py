"""Crash tests: the worker is SIGKILLed at named points of a move against the emulator process,
then a fresh worker process restarts it. The emulator journal shows no duplicate ACTION, and
each case reaches its conclusion (Recovered; ConfirmedAbsent then one re-execution; Unknown
then the operator)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from _dxl_setup import (
    CREDENTIAL,
    GOALS,
    TARGETS,
    emulator_process,
    outcome,
    run_worker,
    settled,
    target_actions,
    write_config,
)
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.adapters.dynamixel.move import CRASH_POINTS
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE

from tests._serve import add_serve, daemon, effectful

KILLED = -signal.SIGKILL
KEY = ActivityKey("local", KIND_ABSOLUTE, "move-1")
KEY_TEXT = "local/physical_ai.robot_move.absolute/move-1"
OP_ID = operation_id_for(KEY)


def store_of(tmp_path: Path) -> MoveStore:
    """The operations journal of `tether move`'s Host (<state_dir>/moves)."""
    return MoveStore(tmp_path / "state" / "moves" / "robot_move")


def catalog_of(tmp_path: Path) -> Catalog:
    """The Activity catalog of `tether move`'s Host: the one control record."""
    return Catalog.open("sqlite:///" + str(tmp_path / "state" / "moves" / "catalog.db"))


def operator(
    config: Path, *argv: str, credential: str | None = CREDENTIAL
) -> subprocess.CompletedProcess[str]:
    decides = argv[0] in ("resolve", "resume", "reboot") and credential is not None
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "operator",
            "--config",
            str(config),
            *argv,
            *(["--credential-stdin"] if decides else []),
        ],
        input=(f"{credential}\n" if decides else ""),
        capture_output=True,
        text=True,
        timeout=120,
    )


def resolve(
    config: Path,
    op_id: str,
    decision: str,
    revision: int,
    operator_name: str,
    *extra: str,
    credential: str | None = CREDENTIAL,
) -> subprocess.CompletedProcess[str]:
    """`tether operator resolve` with the usual flags; `extra` adds e.g. a note."""
    argv = ["resolve", op_id, "--decision", decision, "--revision", str(revision)]
    return operator(config, *argv, "--operator", operator_name, *extra, credential=credential)


#: Every crash point of a move (`move.CRASH_POINTS`), by name, with its conclusion.
MOVE_CASES = [
    ("after_preimage", "executed", 2),  # nothing effectful sent: absent, one re-execution
    ("after_reg_write", "executed", 2),  # staged, no ACTION: neutralised, one re-execution
    ("after_action", "recovered", 1),  # committed: read back, never re-sent
    ("after_readback", "recovered", 1),  # done but unrecorded: read back, never re-sent
]


def test_every_crash_point_of_a_move_is_killed_at() -> None:
    assert [case[0] for case in MOVE_CASES] == list(CRASH_POINTS)


@pytest.mark.parametrize(("crash_at", "conclusion", "attempts"), MOVE_CASES)
def test_kill_and_restart_reaches_the_right_conclusion(
    tmp_path: Path, crash_at: str, conclusion: str, attempts: int
) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        assert run_worker(config, crash_at=crash_at).returncode == KILLED
        restarted = run_worker(config)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert outcome(restarted)["conclusion"] == conclusion
        journal = emu.journal()
        assert target_actions(journal, GOALS) == {1: 1, 2: 1}
        for dxl_id, goal in GOALS.items():
            state = emu.request(op="snapshot", id=dxl_id)
            assert state["goal_position"] == goal and abs(state["present_position"] - goal) <= 20
    op = store_of(tmp_path).get(OP_ID)
    assert op is not None and op.status() == "done"
    assert op.attempts() == list(range(1, attempts + 1))
    if attempts == 2:
        guard = op.guard(2)
        assert guard is not None
        assert guard["reason"] == (
            "nothing_sent" if crash_at == "after_preimage" else "staged_not_actioned"
        )
        assert guard["port_lock"].startswith("path:")
    # A finished move is never run again.
    again = run_worker(config)
    assert outcome(again)["status"] == "done"


def test_power_loss_after_staging_is_unknown_then_operator_reissues(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        assert run_worker(config, crash_at="after_reg_write").returncode == KILLED
        emu.request(op="power_cycle")  # RAM wiped: the staged writes are gone, torque off
        parked = run_worker(config)
        assert parked.returncode == 3
        result = outcome(parked)
        assert (result["conclusion"], result["reason"]) == ("unknown", "device_state_lost_or_moved")
        # Unknown never executes again by itself: another run sends nothing.
        before = len(emu.journal())
        assert outcome(run_worker(config))["status"] == "awaiting_decision"
        assert len(emu.journal()) == before

        listed = json.loads(operator(config, "list").stdout)
        assert [(o["key"], o["operation_id"]) for o in listed] == [(KEY_TEXT, OP_ID)]
        shown = json.loads(operator(config, "show", KEY_TEXT).stdout)
        evidence = shown["evidence"]
        assert shown["revision"] == 1 and evidence["command"]["targets"] == {"a": 0.5, "b": -0.3}
        assert set(evidence["read_back"]["joints"]) == {"a", "b"}  # SI, by joint name
        assert evidence["read_back"]["joints"]["a"]["torque_on"] is False
        assert all(abs(evidence["staged"][k] - v) < 0.002 for k, v in TARGETS.items())
        assert evidence["preimage"]["read_back"]["read_at_ms"] > 0
        setup = ["profile_velocity", "torque_enable"] * 2  # journaled too, before the pre-image
        assert [s["instruction"] for s in evidence["sent"]] == [*setup, "reg_write", "reg_write"]
        assert all(s["digest"].startswith("sha256:") for s in evidence["sent"])
        assert abs(evidence["commanded_vs_present"]["a"]["commanded_rad"] - TARGETS["a"]) < 0.002
        assert shown["device_state_age_ms"] >= 0

        with daemon(add_serve(config)):  # decisions run through `tether serve`
            sent = effectful(emu.journal())
            no_credential = resolve(config, KEY_TEXT, "reissue", 1, "alice", credential=None)
            # None given, no terminal to ask on: refused before anything is sent.
            assert json.loads(no_credential.stdout)["code"] == "empty_credential"
            wrong = resolve(config, KEY_TEXT, "reissue", 1, "alice", credential="guess")
            assert json.loads(wrong.stdout)["code"] == "credential_refused"
            stale = resolve(config, KEY_TEXT, "reissue", 0, "alice")
            assert json.loads(stale.stdout)["code"] == "stale_revision"
            assert effectful(emu.journal()) == sent  # refusals sent nothing

            ok = resolve(config, KEY_TEXT, "reissue", 1, "alice", "--note", "checked the arm")
            assert ok.returncode == 0, ok.stdout + ok.stderr
            again = resolve(config, KEY_TEXT, "done", 1, "alice")
            assert json.loads(again.stdout)["code"] == "not_parked"  # single use

            executed = run_worker(config)
            assert executed.returncode == 0, executed.stdout
            assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
    op = store_of(tmp_path).get(OP_ID)
    assert op is not None
    proof = op.reissue_proof(2)  # the adapter's proof; the operator only authorised its use
    assert proof is not None and proof["reason"] == "operator_reissue"
    assert proof["last_action"] == {
        "attempt": 1,
        "sent": False,
        "t_ms": None,
        "accounted_by": "never_sent",
    }
    catalog = catalog_of(tmp_path)
    try:
        record = catalog.get(KEY)
    finally:
        catalog.close()
    assert record is not None and record.decision is not None
    assert (record.decision.operator, record.decision.note) == ("alice", "checked the arm")
    assert record.decision.evidence_revision == 1 and record.retry_guard is not None
    assert proof["fence_floor"] == record.fence - 1  # every attempt before the decision
    preimage = op.preimage(2)
    assert preimage is not None and preimage["first_motion"] is True


def test_relative_move_in_doubt_goes_to_the_operator_and_is_never_reissued(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        args = ("--relative",)
        assert (
            run_worker(config, *args, crash_at="after_reg_write", joints={"a": 0.2}).returncode
            == KILLED
        )
        parked = run_worker(config, *args, joints={"a": 0.2})
        assert outcome(parked)["reason"] == "relative_move_ambiguous"
        op_id = outcome(parked)["operation_id"]
        with daemon(add_serve(config)):  # decisions run through `tether serve`
            refused = resolve(config, op_id, "reissue", 1, "alice")
            assert json.loads(refused.stdout)["code"] == "not_repeatable"
            # The device changes under the operator's feet (an overheating alert): the decision is
            # refused and a new evidence revision with the fresh state appears.
            emu.request(op="fault", kind="alert", id=2, value=0x04)
            changed = resolve(config, op_id, "abandon", 1, "alice")
            assert json.loads(changed.stdout)["code"] == "state_changed"
            ok = resolve(config, op_id, "abandon", 2, "alice")
            assert ok.returncode == 0, ok.stdout
            assert outcome(run_worker(config, *args, joints={"a": 0.2}))["status"] == "failed"
            assert not any(e["instruction"] == "action" for e in emu.journal())


@pytest.mark.parametrize(
    ("delta", "conclusion"),
    [
        (0.2, "recovered"),  # the goal moved by the delta: the ACTION provably ran
        (0.0, "unknown"),  # the goal reads the same whether it ran or not: the operator decides
    ],
)
def test_a_relative_move_is_recovered_only_when_its_goal_proves_it_ran(
    tmp_path: Path, delta: float, conclusion: str
) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        args = ("--relative",)
        killed = run_worker(config, *args, crash_at="after_action", joints={"a": delta})
        assert killed.returncode == KILLED
        restarted = outcome(run_worker(config, *args, joints={"a": delta}))
        assert restarted["conclusion"] == conclusion
        if conclusion == "unknown":
            assert restarted["reason"] == "relative_move_ambiguous"
        actions = [e for e in emu.journal() if e["instruction"] == "action" and e["executed"]]
        assert len(actions) == 1  # never re-sent


def test_tether_stop_reaches_a_worker_that_owns_the_port_mid_move(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=0.3) as emu:
        config = write_config(tmp_path, emu.path)
        env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
        argv = [
            "move",
            "--config",
            str(config),
            "--robot",
            "arm",
            "--activity",
            "move-1",
            "--joint",
            "a=0.5",
            "--joint",
            "b=-0.3",
        ]
        with subprocess.Popen(
            [sys.executable, "-m", "tether", *argv], stdout=subprocess.PIPE, text=True, env=env
        ) as mover:
            assert mover.stdout is not None
            for line in mover.stdout:  # wait for the first progress line: the arm is moving
                if '"progress"' in line:
                    break
            stopped = subprocess.run(
                [sys.executable, "-m", "tether", "stop", "--json", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            assert json.loads(stopped.stdout)[0]["via"] == "owner"
            rest = mover.stdout.read()
            assert mover.wait(timeout=60) == 3  # parked for an operator, never re-run by itself
        final = json.loads(rest.strip().splitlines()[-1])
        assert final["status"] == "awaiting_decision"
        assert final["reason"] == "stopped_by_operator"  # its own evidence reason
        for dxl_id, goal in GOALS.items():
            state = settled(partial(emu.request, op="snapshot", id=dxl_id))
            assert state["goal_position"] == state["present_position"] != goal
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
