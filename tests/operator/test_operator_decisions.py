"""Operator decisions on the standalone operation store: single use, revision checks,
idempotent effects after a crash, and the state-change rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tether.adapters.dynamixel.config import hash_credential, parse_config
from tether.errors import OperatorRejection
from tether.operator.decisions import apply_decision, resolve, state_changed
from tether.physical.robot_move import KIND_ABSOLUTE, KIND_RELATIVE, MoveRequest
from tether.physical.robot_move_store import MoveStore, StoreConflict

SECRET = "s3cret"
CONFIG = parse_config(
    f"""
[operator]
credential = "{hash_credential(SECRET)}"
[ports.bus]
url = "loop://"
[robots.arm]
port = "bus"
tolerance = 0.008
[[robots.arm.joints]]
name = "a"
id = 1
min = -1
max = 1
"""
)


def state(present: int = 2048, moving: int = 0, torque: int = 1) -> dict[str, Any]:
    joint = {
        "present_position": present,
        "goal_position": 2048,
        "moving": moving,
        "torque_enable": torque,
        "registered_instruction": 0,
        "hardware_error_status": 0,
    }
    return {"robot": "arm", "read_at_ms": 1, "joints": {"1": joint}}


def parked(tmp_path: Path, kind: str = KIND_ABSOLUTE) -> MoveStore:
    store = MoveStore(tmp_path)
    op = store.bind(
        "op-1", MoveRequest.from_dict({"kind": kind, "robot": "arm", "targets": {"a": 0.1}})
    )
    op.start_attempt(1, {})
    op.record_evidence({"reason": "device_state_lost_or_moved", "device_state": state()})
    return store


def decide(
    store: MoveStore,
    decision: str,
    revision: int = 1,
    fresh: dict[str, Any] | None = None,
    credential: str | None = SECRET,
) -> dict[str, Any]:
    return resolve(
        CONFIG,
        store,
        "op-1",
        decision=decision,
        revision=revision,
        operator="ann",
        credential=credential,
        note="n",
        read_state=lambda robot: fresh or state(),
    )


def code(info: pytest.ExceptionInfo[OperatorRejection]) -> str:
    return str(getattr(info.value, "code", ""))


def test_reissue_records_a_guard_and_is_single_use(tmp_path: Path) -> None:
    store = parked(tmp_path)
    decide(store, "reissue")
    op = store.get("op-1")
    assert op is not None and not op.parked and op.status() == "in_flight"
    guard = op.guard(2)
    assert (
        guard is not None
        and guard["operator"] == "ann"
        and guard["read_back"]["joints"]["1"]["moving"] == 0
    )
    op.start_attempt(2, {})  # the guard lets exactly one attempt start
    with pytest.raises(StoreConflict):
        op.start_attempt(2, {})
    with pytest.raises(OperatorRejection) as info:
        decide(store, "done")
    assert code(info) == "already_decided"


def test_revisions_credentials_and_idle_are_checked(tmp_path: Path) -> None:
    store = parked(tmp_path)
    for credential in (None, "nope"):
        with pytest.raises(OperatorRejection) as info:
            decide(store, "done", credential=credential)
        assert code(info) == "credential_refused"
    with pytest.raises(OperatorRejection) as info:
        decide(store, "done", revision=2)
    assert code(info) == "stale_revision"
    with pytest.raises(OperatorRejection) as info:
        decide(store, "reissue", fresh=state(present=2300, moving=1))
    assert code(info) == "state_changed"
    # The rejection recorded the fresh state as revision 2; deciding on 1 is now stale.
    with pytest.raises(OperatorRejection) as info:
        decide(store, "done", revision=1)
    assert code(info) == "stale_revision"
    with pytest.raises(OperatorRejection) as info:
        decide(store, "reissue", revision=2, fresh=state(present=2300, moving=1))
    assert code(info) == "device_not_idle"
    decide(store, "wait", revision=2)  # keeps waiting: nothing durable changes
    op = store.get("op-1")
    assert op is not None and op.parked
    decide(store, "done", revision=2, fresh=state(present=2300, moving=1))
    result = op.result()
    assert result is not None and result["verdict"]["operator"] == "ann"


def test_relative_moves_cannot_be_reissued(tmp_path: Path) -> None:
    store = parked(tmp_path, KIND_RELATIVE)
    with pytest.raises(OperatorRejection) as info:
        decide(store, "reissue")
    assert code(info) == "not_repeatable"
    decide(store, "abandon")
    op = store.get("op-1")
    assert op is not None and op.status() == "failed"


def test_a_decision_interrupted_before_its_effect_is_completed_later(tmp_path: Path) -> None:
    store = parked(tmp_path)
    op = store.get("op-1")
    assert op is not None
    op.record_decision(
        1,
        {
            "decision": "done",
            "revision": 1,
            "operator": "ann",
            "note": "",
            "decided_at_ms": 5,
            "read_back": state(),
        },
    )
    assert op.result() is None  # crash here
    apply_decision(op, 1)
    apply_decision(op, 1)  # idempotent
    result = op.result()
    assert result is not None and result["outcome"] == "operator_done"


def test_state_changed_uses_the_tolerance() -> None:
    assert state_changed(state(2048), state(2052), tolerance=5) == []
    assert state_changed(state(2048), state(2060), tolerance=5)
    assert state_changed(state(torque=1), state(torque=0), tolerance=5)


def test_a_replayed_reissue_never_mints_a_guard_for_a_later_attempt(tmp_path: Path) -> None:
    # Re-issue -> attempt 2 starts and its worker dies before a result. Replaying the decision
    # (every `tether move` run does) must not let attempt 3 start without a reconciliation.
    store = parked(tmp_path)
    decide(store, "reissue")
    op = store.get("op-1")
    assert op is not None and op.guard(2) is not None
    op.start_attempt(2, {})
    assert apply_decision(op, 1) == op.guard(2)
    assert op.guard(3) is None and op.next_attempt() == 3
    with pytest.raises(StoreConflict):
        op.start_attempt(3, {})


def test_the_same_decision_again_finishes_it_and_a_different_one_is_refused(
    tmp_path: Path,
) -> None:
    store = parked(tmp_path)
    op = store.get("op-1")
    assert op is not None
    with pytest.raises(OperatorRejection) as info:
        decide(store, "wait", revision=1, credential=None)
    assert code(info) == "credential_refused"  # even "keep waiting" needs the credential
    decide(store, "abandon")
    with pytest.raises(OperatorRejection) as info:
        decide(store, "done")
    assert code(info) == "already_final"
    failed = op.failed()
    assert failed is not None and failed["verdict"]["operator"] == "ann"
    assert op.result() is None
