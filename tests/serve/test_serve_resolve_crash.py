"""Crash tests of the resolve path on `tether serve`: the daemon is SIGKILLed at every named
point of an operator decision it runs (and of the adapter's re-issue proof it takes, owning the
port), each listed by name. After each kill no decision is durable without its guard or result
document, no guard is used without its decision, and nothing was actioned; after the restart
the decision, repeated through the daemon, finishes the move, and the emulator's journal shows
exactly the re-issued ACTION per joint. The default run samples; TETHER_SLOW=1 runs them all."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.adapters.dynamixel.move import PROOF_CRASH_POINTS
from tether.client import Client
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE
from tether.operator.decisions import RESOLVE_CRASH_POINTS
from tether.runtime import ArtifactStore

from tests._serve import add_serve, daemon, final, killed, operator
from tests.adapters._dxl_setup import (
    GOALS,
    EmulatorProcess,
    emulator_process,
    outcome,
    run_worker,
    target_actions,
    write_config,
)

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
SAMPLED = ("proof.after_neutralise", "resolve.after_decision", "resolve.after_evidence_document")


def test_every_crash_point_of_the_resolve_path_is_killed_at() -> None:
    assert set(REISSUE_POINTS) | set(CHANGED_POINTS) == set(RESOLVE_CRASH_POINTS) | set(
        PROOF_CRASH_POINTS
    )


def resolve(config: Path, decision: str, revision: int) -> subprocess.CompletedProcess[str]:
    """`tether operator resolve` through the running daemon."""
    return operator(
        config, "resolve", KEY_TEXT, "--decision", decision, "--revision", str(revision),
        "--operator", "alice",
    )  # fmt: skip


def control(tmp_path: Path) -> tuple[Catalog, ArtifactStore, MoveStore]:
    data = tmp_path / "state" / "moves"
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    return catalog, ArtifactStore(data / "artifacts"), MoveStore(data / "robot_move")


def park(emu: EmulatorProcess, config: Path) -> None:
    """Killed after the REG_WRITEs, then a power loss: the next run parks the move (standalone
    `tether move`, the same data dir the daemon serves)."""
    assert run_worker(config, crash_at="after_reg_write").returncode == -signal.SIGKILL
    emu.request(op="power_cycle")
    parked = run_worker(config)
    assert parked.returncode == 3, parked.stdout + parked.stderr
    assert outcome(parked)["reason"] == "device_state_lost_or_moved"


def decide_killed(config: Path, decision: str, revision: int, crash_at: str) -> None:
    """The decision through a daemon that a crash point kills on the way: the CLI says in one
    line that the daemon did not answer (exit 7)."""
    with daemon(config, crash_at=crash_at) as (proc, _):
        lost = resolve(config, decision, revision)
        killed(proc)
    assert lost.returncode == 7, lost.stdout + lost.stderr
    assert len(lost.stderr.strip().splitlines()) == 1 and "Traceback" not in lost.stderr


def record_of(tmp_path: Path) -> Any:
    catalog, _, _ = control(tmp_path)
    try:
        return catalog.get(KEY)
    finally:
        catalog.close()


def check_invariants(tmp_path: Path, journal: list[dict[str, Any]]) -> None:
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
    assert target_actions(journal, GOALS) == {1: 0, 2: 0}


def _cases(points: tuple[str, ...]) -> list[object]:
    return [pytest.param(p, id=p, marks=() if p in SAMPLED else pytest.mark.slow) for p in points]


@pytest.mark.parametrize("crash_at", _cases(REISSUE_POINTS))
def test_serve_killed_at_each_point_of_a_reissue(tmp_path: Path, crash_at: str) -> None:
    with emulator_process(tmp_path) as emu:
        config = add_serve(write_config(tmp_path, emu.path))
        park(emu, config)
        decide_killed(config, "reissue", 1, crash_at)
        check_invariants(tmp_path, emu.journal())
        with daemon(config):
            again = resolve(config, "reissue", 1)
            code = json.loads(again.stdout).get("code") if again.returncode else None
            if crash_at == "resolve.after_decision":
                assert code == "not_parked"  # the decision was made: single use
            else:
                assert again.returncode == 0, again.stdout + again.stderr
            done = final(Client(config=config), KEY_TEXT)
            assert (done["state"], done["settled"]) == ("done", True), done
            assert done["result"]["outcome"] == "completed"
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}  # re-issued once, on proof
    _, _, store = control(tmp_path)
    op = store.get(operation_id_for(KEY))
    assert op is not None and op.attempts() == [1, 2] and op.reissue_proof(2) is not None


@pytest.mark.parametrize("crash_at", _cases(CHANGED_POINTS))
def test_serve_killed_before_the_core_records_a_changed_device(
    tmp_path: Path, crash_at: str
) -> None:
    with emulator_process(tmp_path) as emu:
        config = add_serve(write_config(tmp_path, emu.path))
        park(emu, config)
        emu.request(op="fault", kind="alert", id=2, value=0x04)
        decide_killed(config, "abandon", 1, crash_at)
        record = record_of(tmp_path)
        assert record is not None and record.evidence_revision == 1 and record.decision is None
        with daemon(config):
            changed = resolve(config, "abandon", 1)
            assert json.loads(changed.stdout)["code"] == "state_changed"
            ok = resolve(config, "abandon", 2)
            assert ok.returncode == 0, ok.stdout + ok.stderr
            done = final(Client(config=config), KEY_TEXT)
            assert (done["state"], done["settled"]) == ("failed", True), done
        assert target_actions(emu.journal(), GOALS) == {1: 0, 2: 0}
