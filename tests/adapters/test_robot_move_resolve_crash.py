"""Crash tests of the resolve path: `tether operator resolve` is SIGKILLed at every named point
of a decision (and of the adapter's re-issue proof). After each kill, no decision is durable
without its guard or result document, no guard is used without its decision, and the emulator's
journal shows at most one ACTION per intended move; repeating the decision finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _dxl_setup import (
    CREDENTIAL,
    GOALS,
    emulator_process,
    outcome,
    run_worker,
    target_actions,
    write_config,
)
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.adapters.dynamixel.move import PROOF_CRASH_POINTS
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE
from tether.operator.decisions import RESOLVE_CRASH_POINTS
from tether.runtime import ArtifactStore

KEY = ActivityKey("local", KIND_ABSOLUTE, "move-1")
KEY_TEXT = "local/physical_ai.robot_move.absolute/move-1"
#: Every crash point of a re-issue decision, in the order the resolve path reaches them.
REISSUE_POINTS = (
    "resolve.after_read",
    "proof.after_fence_floor",
    "proof.after_neutralise",
    "resolve.after_proof",
    "resolve.after_document",
    "resolve.after_decision",
)
#: The crash point of a decision on a device that changed since its evidence.
CHANGED_POINTS = ("resolve.after_evidence_document",)


def test_every_crash_point_of_the_resolve_path_is_killed_at() -> None:
    assert set(REISSUE_POINTS) | set(CHANGED_POINTS) == set(RESOLVE_CRASH_POINTS) | set(
        PROOF_CRASH_POINTS
    )


def resolve(
    config: Path, decision: str, revision: int, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    argv = ["operator", "--config", str(config), "resolve", KEY_TEXT]
    argv += ["--decision", decision, "--revision", str(revision), "--operator", "alice"]
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv, "--credential-stdin"],
        input=f"{CREDENTIAL}\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def control(tmp_path: Path) -> tuple[Catalog, ArtifactStore, MoveStore]:
    data = tmp_path / "state" / "moves"
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    return catalog, ArtifactStore(data / "artifacts"), MoveStore(data / "robot_move")


def park(tmp_path: Path, emu: object, config: Path) -> None:
    """Killed after the REG_WRITEs, then a power loss: the next run parks the move."""
    assert run_worker(config, crash_at="after_reg_write").returncode == -signal.SIGKILL
    emu.request(op="power_cycle")  # type: ignore[attr-defined]
    parked = run_worker(config)
    assert parked.returncode == 3, parked.stdout + parked.stderr
    assert outcome(parked)["reason"] == "device_state_lost_or_moved"


def check_invariants(tmp_path: Path, journal: list[dict[str, object]]) -> None:
    catalog, artifacts, store = control(tmp_path)
    try:
        record = catalog.get(KEY)
    finally:
        catalog.close()
    assert record is not None
    op = store.get(operation_id_for(KEY))
    assert op is not None
    if record.decision is not None:
        # no decision without its document
        if record.retry_guard is not None and record.decision.outcome == "absent":
            guard = record.retry_guard.guard
            proof = json.loads(artifacts.get_bytes(guard.ref, guard.digest))
            assert (
                proof
                == {k: v for k, v in (op.reissue_proof(2) or {}).items() if k != "recorded_at_ms"}
                or proof["reason"] == "operator_reissue"
            )
        if record.result is not None and not record.result.failed:
            assert artifacts.get_bytes(record.result.ref, record.result.digest)
    else:
        # no guard used without its decision: parked, nothing started, nothing actioned
        assert record.awaiting_decision and record.retry_guard is None
        assert op.attempts() == [1]
    assert target_actions(journal, GOALS) == {1: 0, 2: 0}  # type: ignore[arg-type]


@pytest.mark.parametrize("crash_at", REISSUE_POINTS)
def test_a_reissue_killed_at_each_point_of_the_resolve_path(tmp_path: Path, crash_at: str) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        park(tmp_path, emu, config)
        killed = resolve(config, "reissue", 1, crash_at=crash_at)
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        check_invariants(tmp_path, emu.journal())
        again = resolve(config, "reissue", 1)
        code = json.loads(again.stdout).get("code") if again.returncode else None
        if crash_at == "resolve.after_decision":
            assert code == "not_parked"  # the decision was made: single use
        else:
            assert again.returncode == 0, again.stdout + again.stderr
        done = run_worker(config)
        assert done.returncode == 0, done.stdout + done.stderr
        assert outcome(done)["conclusion"] == "executed"
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}  # re-issued once, on proof
    _, _, store = control(tmp_path)
    op = store.get(operation_id_for(KEY))
    assert op is not None and op.attempts() == [1, 2] and op.reissue_proof(2) is not None


@pytest.mark.parametrize("crash_at", CHANGED_POINTS)
def test_a_decision_on_a_changed_device_killed_before_the_core_records_it(
    tmp_path: Path, crash_at: str
) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        park(tmp_path, emu, config)
        emu.request(op="fault", kind="alert", id=2, value=0x04)
        killed = resolve(config, "abandon", 1, crash_at=crash_at)
        assert killed.returncode == -signal.SIGKILL
        catalog, _, _ = control(tmp_path)
        try:
            record = catalog.get(KEY)
        finally:
            catalog.close()
        assert record is not None and record.evidence_revision == 1 and record.decision is None
        changed = resolve(config, "abandon", 1)
        assert json.loads(changed.stdout)["code"] == "state_changed"
        ok = resolve(config, "abandon", 2)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert outcome(run_worker(config))["status"] == "failed"
        assert target_actions(emu.journal(), GOALS) == {1: 0, 2: 0}
