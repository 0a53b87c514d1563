"""`physical_ai.robot_move` through the runtime (Contract C): a committed intent is projected,
a worker executes it on the emulator under a bound operation id, the result is observed and
settled; an Unknown is parked in the catalog until an operator re-issues it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from _dxl_setup import CREDENTIAL, GOALS, TARGETS, target_actions
from tether.activities import ActivityKey, operation_id_for
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.errors import OperatorRejection
from tether.families.robot_move.family import (
    OBSERVATION,
    RobotMoveAdapter,
    intent,
)
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.operator import RobotMoveReview
from tether.families.robot_move.request import KIND_ABSOLUTE, KIND_RELATIVE, MoveRequest
from tether.operator.decisions import evidence_document, format_key, resolve
from tether.runtime import Family, Host, ProgressEvent

from tests._hosts import HandClock as Clock
from tests._hosts import drain
from tests._serve import decider


def resolve_activity(
    config: HostConfig,
    host: Host,
    store: MoveStore,
    key: ActivityKey,
    *,
    decision: str,
    revision: int,
    operator: str,
    credential: str | None,
    note: str = "",
) -> dict[str, object]:
    """One operator decision through `tether.operator.decisions.resolve`, as the CLI makes it."""
    return resolve(
        host.catalog,
        host.artifacts,
        format_key(key),
        decision=decision,
        revision=revision,
        operator=operator,
        credential=credential,
        verify_credential=config.verify_operator,
        note=note,
        review=RobotMoveReview(config, store).for_record,
    )


KEY = ActivityKey("w", KIND_ABSOLUTE, "move-1")
REQUEST = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})


def park_on_alert(host: Host, emulator: DynamixelEmulator, family: Family, clock: Clock) -> None:
    """Commit REQUEST; an overload alert on joint 2 strikes once its ACTION ran (a move is
    refused before any byte while a joint already reports one): execute fails, the lease
    lapses, the reconcile-only claim concludes Unknown (parked); the worker then gives the
    port back."""
    host.create_world("w")
    emulator.inject(Fault("alert", id=2, value=0x20, instruction="action"))
    host.commit_tick("w", [intent("move-1", REQUEST)])
    assert drain(host) == 1
    clock.now += 10_000
    assert drain(host) == 1
    assert isinstance(family.adapter, RobotMoveAdapter)
    family.adapter.close()


def test_a_committed_intent_moves_the_arm_and_settles(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    events: list[ProgressEvent] = []
    with Host(
        tmp_path / "data",
        [family],
        workers=0,
        observe=False,
        clock=Clock(),
        progress_listener=events.append,
    ) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", REQUEST)])
        assert drain(host) == 1
        record = host.get(KEY)
        assert record is not None and record.result is not None
        assert record.operation_id == operation_id_for(KEY)
        host.observe_once()
        observed = host.snapshot("w").get("move-1", OBSERVATION)
        assert isinstance(observed, dict) and observed["summary"]["outcome"] == "completed"
        settled = host.get(KEY)
        assert settled is not None and settled.settlement is not None
        assert drain(host) == 0  # nothing more to do: the move never runs twice
    assert events and events[-1].content["fraction"] == 1.0
    assert {e.operation_id for e in events} == {operation_id_for(KEY)}
    assert target_actions([asdict(e) for e in emulator.journal], GOALS) == {1: 1, 2: 1}


def test_unknown_parks_in_the_catalog_until_an_operator_reissues(
    emulator: DynamixelEmulator, family: Family, config: HostConfig, tmp_path: Path
) -> None:
    clock = Clock()
    store = MoveStore(tmp_path / "data" / "robot_move")
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=clock, lease_ms=5_000
    ) as host:
        host.create_world("w")
        # Overheating once the ACTION ran: torque cannot stay on.
        emulator.inject(Fault("alert", id=1, value=0x04, instruction="action"))
        host.commit_tick("w", [intent("move-1", REQUEST)])
        assert drain(host) == 1  # execute fails (arm did not reach); safe-stop; lease left to lapse
        clock.now += 10_000
        assert drain(host) == 1  # reconcile-only: hardware error -> Unknown
        record = host.get(KEY)
        assert record is not None and record.awaiting_decision and record.evidence_revision == 1
        before = len(emulator.journal)
        assert drain(host) == 0  # parked: nothing runs, nothing is sent
        assert len(emulator.journal) == before

        assert isinstance(family.adapter, RobotMoveAdapter)
        family.adapter.close()  # the worker process gives the port back; the operator reads it
        args: dict[str, object] = dict(
            decision="reissue", revision=1, operator="alice", note="cooled down"
        )
        with pytest.raises(OperatorRejection) as info:
            resolve_activity(
                config,
                host,
                store,
                KEY,
                credential=None,
                **args,  # type: ignore[arg-type]
            )
        assert getattr(info.value, "code", None) == "credential_refused"
        emulator.power_cycle()  # the operator power-cycles the servo: hardware error cleared
        with pytest.raises(OperatorRejection) as info:
            resolve_activity(
                config,
                host,
                store,
                KEY,
                credential=CREDENTIAL,
                **args,  # type: ignore[arg-type]
            )
        assert getattr(info.value, "code", None) == "state_changed"
        # The rejection recorded the fresh state through the core as the catalog's revision 2:
        # the same decision on revision 1 (what the operator saw before the change) is stale.
        changed = host.get(KEY)
        assert changed is not None and changed.evidence_revision == 2 and changed.awaiting_decision
        # Revision 2 says what the fresh read-back says, in every part an operator reads the
        # arm by: its commanded/goal/present table kept revision 1's, and its time too.
        assert changed.evidence is not None
        ref = changed.evidence.evidence
        doc = json.loads(host.artifacts.get_bytes(ref.ref, ref.digest))
        back = doc["read_back"]
        assert doc["at_ms"] == back["read_at_ms"]
        table = doc["commanded_vs_present"]
        assert set(table) == set(back["joints"])
        for name, j in back["joints"].items():
            assert table[name]["present_rad"] == j["position_rad"], (name, table, j)
            assert table[name]["goal_rad"] == j["goal_rad"]
            assert table[name]["commanded_rad"] is not None
        with pytest.raises(OperatorRejection) as info:
            resolve_activity(
                config,
                host,
                store,
                KEY,
                credential=CREDENTIAL,
                **args,  # type: ignore[arg-type]
            )
        assert getattr(info.value, "code", None) == "stale_revision"
        args["revision"] = 2
        out = resolve_activity(
            config,
            host,
            store,
            KEY,
            credential=CREDENTIAL,
            **args,  # type: ignore[arg-type]
        )
        assert out["status"] == "resolved"
        with pytest.raises(OperatorRejection) as info:
            resolve_activity(
                config,
                host,
                store,
                KEY,
                credential=CREDENTIAL,
                **args,  # type: ignore[arg-type]
            )
        assert getattr(info.value, "code", None) == "not_parked"  # single use
        assert drain(host) == 1
        done = host.get(KEY)
        assert done is not None and done.result is not None and done.decision is not None
        assert done.decision.operator == "alice"
        host.observe_once()
        settled = host.get(KEY)
        assert settled is not None and settled.settlement is not None
    op = store.get(operation_id_for(KEY))
    assert op is not None and op.attempts() == [1, 2]
    proof = op.reissue_proof(2)  # the adapter's proof the decision authorised, not the operator
    assert proof is not None and proof["fence_floor"] == changed.fence + 1
    assert proof["last_action"]["accounted_by"] in (
        "never_sent",
        "absolute_move_repeats_to_the_same_pose",
    )
    assert done.retry_guard is not None
    preimage = op.preimage(2)
    assert preimage is not None and preimage["first_motion"] is True
    state = emulator.snapshot(1)
    assert abs(state["present_position"] - GOALS[1]) <= 20


def test_operator_cli_reads_the_runtime_catalog(
    emulator: DynamixelEmulator, family: Family, config: HostConfig, tmp_path: Path
) -> None:
    clock = Clock()
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=clock, lease_ms=5_000
    ) as host:
        park_on_alert(host, emulator, family, clock)
        base = [
            sys.executable,
            "-m",
            "tether",
            "operator",
            "--config",
            str(tmp_path / "host.toml"),
            "--data-dir",
            str(tmp_path / "data"),
        ]
        listed = json.loads(
            subprocess.run([*base, "list"], capture_output=True, text=True, check=True).stdout
        )
        assert [(i["key"], i["revision"], i["reason"]) for i in listed] == [
            ("w/physical_ai.robot_move.absolute/move-1", 1, "hardware_error")
        ]
        shown = json.loads(
            subprocess.run(
                [*base, "show", listed[0]["key"]], capture_output=True, text=True, check=True
            ).stdout
        )
        assert shown["evidence"]["reconcile"]["hardware_error"] == {"b": ["overload"]}
        with decider(tmp_path / "host.toml", tmp_path / "data"):  # the daemon decides
            abandon = subprocess.run(
                [
                    *base,
                    "resolve",
                    listed[0]["key"],
                    "--decision",
                    "abandon",
                    "--revision",
                    "1",
                    "--operator",
                    "alice",
                    "--credential-stdin",
                ],
                input=CREDENTIAL + "\n",
                capture_output=True,
                text=True,
            )
        assert abandon.returncode == 0, abandon.stdout + abandon.stderr
        record = host.get(KEY)
        assert record is not None and record.result is not None and record.result.failed


def test_an_ambiguous_relative_move_goes_to_the_operator_and_is_never_reissued(
    emulator: DynamixelEmulator, family: Family, config: HostConfig, tmp_path: Path
) -> None:
    """A relative move is non-repeatable: once a REG_WRITE status is lost it cannot be proved
    either way, so the runtime parks it; re-issue is refused, `done` records the verdict, and
    nothing is ever sent again for it."""
    clock = Clock()
    store = MoveStore(tmp_path / "data" / "robot_move")
    key = ActivityKey("w", KIND_RELATIVE, "nudge")
    nudge = MoveRequest.from_dict({"kind": KIND_RELATIVE, "robot": "arm", "targets": {"a": 0.2}})
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=clock, lease_ms=5_000
    ) as host:
        host.create_world("w")
        emulator.inject(Fault("drop_status", instruction="reg_write", id=1))
        host.commit_tick("w", [intent("nudge", nudge)])
        assert drain(host) == 1  # the write was applied, its status lost: in doubt
        clock.now += 10_000
        assert drain(host) == 1  # reconcile-only: relative -> Unknown, parked
        record = host.get(key)
        assert record is not None and record.awaiting_decision and record.result is None
        before = len(emulator.journal)
        clock.now += 10_000
        assert drain(host) == 0  # doing nothing never moves the robot
        assert len(emulator.journal) == before
        assert isinstance(family.adapter, RobotMoveAdapter)
        family.adapter.close()
        op = store.get(record.operation_id or "")
        assert op is not None
        evidence = evidence_document(host.artifacts, record)
        assert evidence is not None and evidence["reason"] == "relative_move_ambiguous"
        assert evidence["retry_class"] == "non_repeatable"

        def decide(decision: str) -> dict[str, object]:
            return resolve_activity(
                config,
                host,
                store,
                key,
                decision=decision,
                revision=1,
                operator="alice",
                credential=CREDENTIAL,
                note="checked by eye",
            )

        with pytest.raises(OperatorRejection) as info:
            decide("reissue")
        assert getattr(info.value, "code", None) == "not_repeatable"
        assert decide("wait")["status"] == "awaiting_decision"
        assert decide("done")["status"] == "resolved"
        done = host.get(key)
        assert done is not None and done.result is not None and not done.result.failed
        assert done.decision is not None and done.decision.operator == "alice"
        assert drain(host) == 0
        host.observe_once()
        observed = host.snapshot("w").get("nudge", OBSERVATION)
        assert isinstance(observed, dict) and observed["summary"]["outcome"] == "operator_done"
        assert observed["summary"]["verdict"]["operator"] == "alice"
    assert op.attempts() == [1]
    assert not [e for e in emulator.journal[before:] if e.instruction == "action"]


@pytest.mark.parametrize(
    ("kind", "targets", "code"),
    [
        (KIND_ABSOLUTE, {"a": 3.0, "b": 0.0}, "limit_violation"),
        (KIND_ABSOLUTE, {"elbow": 0.1}, "unknown_joint"),
        (KIND_RELATIVE, {"elbow": 0.1}, "unknown_joint"),
    ],
)
def test_a_move_that_can_never_run_fails_before_any_byte_is_sent(
    emulator: DynamixelEmulator,
    family: Family,
    tmp_path: Path,
    kind: str,
    targets: dict[str, float],
    code: str,
) -> None:
    bad = MoveRequest.from_dict({"kind": kind, "robot": "arm", "targets": targets})
    key = ActivityKey("w", kind, "move-1")
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", bad)])
        assert drain(host) == 1
        record = host.get(key)
        assert record is not None and record.result is not None and record.result.failed
        host.observe_once()
        observed = host.snapshot("w").get("move-1", OBSERVATION)
        assert isinstance(observed, dict) and observed["failed"]
        assert observed["summary"]["outcome"] == "refused"
        assert drain(host) == 0
    assert emulator.journal == []  # not even a PING: the port was never opened
    assert MoveStore(tmp_path / "data" / "robot_move").all() == []
    doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
    assert doc["code"] == code


def test_a_reissue_is_refused_while_a_joint_reports_a_hardware_error(
    emulator: DynamixelEmulator, family: Family, config: HostConfig, tmp_path: Path
) -> None:
    """Parked with an overload alert that is still there: the fresh read-back equals the
    evidence, but the adapter refuses to prove a re-issue, and nothing is recorded or sent."""
    clock = Clock()
    store = MoveStore(tmp_path / "data" / "robot_move")
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=clock, lease_ms=5_000
    ) as host:
        park_on_alert(host, emulator, family, clock)
        record = host.get(KEY)
        assert record is not None and record.awaiting_decision
        sent = len(emulator.journal)
        with pytest.raises(OperatorRejection) as info:
            resolve_activity(
                config,
                host,
                store,
                KEY,
                decision="reissue",
                revision=1,
                operator="alice",
                credential=CREDENTIAL,
            )
        assert getattr(info.value, "code", None) == "hardware_error"
        assert host.get(KEY) == record  # nothing recorded
        op = store.get(record.operation_id or "")
        assert op is not None and op.reissue_proof(2) is None and op.fence_floor() == 0
        effectful = {"write", "reg_write", "action"}
        assert not [e for e in emulator.journal[sent:] if e.instruction in effectful]
        assert (
            resolve_activity(
                config,
                host,
                store,
                KEY,
                decision="abandon",
                revision=1,
                operator="alice",
                credential=CREDENTIAL,
            )["status"]
            == "resolved"
        )
        assert drain(host) == 0


def test_the_family_takes_its_speed_limit_from_the_hosts_first_motion_policy(
    emulator: DynamixelEmulator, family: Family, config: HostConfig, tmp_path: Path
) -> None:
    """The family keeps no record of what moved: the worker's device host decides. Its first
    move is capped, the next is not, and a resume through the host caps the next one again."""
    from tether.devices.host import resume_robot

    spec = config.spec("arm")
    slow, fast = (tables.profile_velocity_for(s) for s in (spec.first_motion_speed, spec.speed))
    store = MoveStore(tmp_path / "data" / "robot_move")
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        seen = []
        for n, pose in enumerate((0.4, -0.4, 0.4, -0.4)):
            if n == 2:
                resume_robot(config, "arm", operator="alice")  # the worker's host owns the port
            request = {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": {"a": pose, "b": pose}}
            host.commit_tick("w", [intent(f"move-{n}", MoveRequest.from_dict(request))])
            assert drain(host) == 1
            op = store.get(operation_id_for(ActivityKey("w", KIND_ABSOLUTE, f"move-{n}")))
            assert op is not None
            preimage = op.preimage(1)
            assert preimage is not None
            seen.append((emulator.snapshot(1)["profile_velocity"], preimage["first_motion"]))
    assert seen == [(slow, True), (fast, False), (slow, True), (fast, False)]


def test_a_move_an_operator_reissued_has_not_started_until_its_new_attempt_does(
    config: HostConfig, tmp_path: Path
) -> None:
    """`started` (what the gRPC view reads to say RUNNING rather than PENDING) is of the attempt
    that runs the move now: once an operator's re-issue (or a confirmed absence) allows the next
    attempt, the move has not started until that attempt writes its own start marker."""
    from tether.families.robot_move.family import RobotMoveAdapter

    adapter = RobotMoveAdapter(config, tmp_path / "store")
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    op = adapter.store.bind("op-1", request)

    def started() -> bool:
        return bool(adapter._on_started({"operation_id": "op-1"})["started"])

    assert not started()  # bound, no attempt began
    op.start_attempt(1, {"fence": 1, "catalog_attempt": 1})
    assert started()
    op.record_reissue_proof(2, {"reason": "operator_reissue"})
    assert not started()  # the re-issue's attempt is allowed, not begun
    op.start_attempt(2, {"fence": 3, "catalog_attempt": 3})
    assert started()
