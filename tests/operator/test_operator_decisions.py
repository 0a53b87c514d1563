"""Operator decisions on the Activity catalog (the one control record): one `resolve` on the
catalog's revision, documents durable first, a changed device recorded through the core, and
families without a device review limited to abandon. The device side here is a recorded
read-back (its real adapter runs against the emulator in tests/adapters)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tether.activities import ActivityKey, ActivityRecord, Catalog, Evidence
from tether.adapters.dynamixel.move import changed_since
from tether.errors import OperatorRejection
from tether.operator.decisions import listing, resolve, show
from tether.runtime import ArtifactStore

from tests.activities.support import ManualClock, key, reconciling

SECRET = "s3cret"


def state(present: int = 2048, torque: int = 1) -> dict[str, Any]:
    joint = {
        "present_position": present,
        "goal_position": 2048,
        "moving": 0,
        "torque_enable": torque,
        "registered_instruction": 0,
        "hardware_error_status": 0,
    }
    return {"robot": "arm", "read_at_ms": 1, "joints": {"1": joint}}


class RecordedDevice:
    """A device review whose read-back is whatever the test set; it counts proofs."""

    result_media_type = "application/json"
    guard_media_type = "application/json"

    def __init__(self) -> None:
        self.now = state()
        self.proofs = 0

    def read(self, record: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
        return self.now

    def changed_since(self, evidence: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
        return changed_since(evidence.get("device_state") or {}, fresh, 5)

    def refreshed(
        self, evidence: dict[str, Any], fresh: dict[str, Any], changes: list[str]
    ) -> dict[str, Any]:
        return {**evidence, "device_state": fresh, "changes": changes}

    def done_result(
        self, record: ActivityRecord, fresh: dict[str, Any], verdict: dict[str, Any]
    ) -> dict[str, Any]:
        return {"outcome": "operator_done", "verdict": verdict}

    def prove(
        self, record: ActivityRecord, evidence: dict[str, Any], fresh: dict[str, Any]
    ) -> dict[str, Any]:
        self.proofs += 1
        return {"reason": "operator_reissue", "fence_floor": record.fence + 1}


@pytest.fixture
def parked(tmp_path: Path) -> tuple[Catalog, ArtifactStore, ActivityRecord]:
    clock = ManualClock()
    catalog = Catalog.open("sqlite:///" + str(tmp_path / "catalog.db"), clock=clock)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    k = key("m1", kind="physical_ai.robot_move.absolute")
    _, c = reconciling(catalog, clock, k)
    doc = json.dumps({"reason": "device_state_lost_or_moved", "device_state": state()}).encode()
    ref = artifacts.put_bytes(doc, "application/json")
    record = catalog.record_unknown(k, c.fence, Evidence(ref.ref, ref.digest), 60_000)
    yield catalog, artifacts, record
    catalog.close()


def as_ann(
    parked: tuple[Catalog, ArtifactStore, ActivityRecord],
    decision: str,
    revision: int = 1,
    credential: str | None = SECRET,
    **kw: Any,
) -> dict[str, Any]:
    """ann's `decision` on the parked Activity (`kw`: the rest of `resolve`'s)."""
    catalog, artifacts, record = parked
    k = record.key
    return resolve(
        catalog,
        artifacts,
        f"{k.world_id}/{k.kind}/{k.activity_id}",
        decision=decision,
        revision=revision,
        operator="ann",
        credential=credential,
        verify_credential=lambda c: "ann" if c == SECRET else None,
        **kw,
    )


def decide(
    parked: tuple[Catalog, ArtifactStore, ActivityRecord],
    decision: str,
    revision: int = 1,
    device: RecordedDevice | None = None,
    credential: str | None = SECRET,
) -> dict[str, Any]:
    return as_ann(parked, decision, revision, credential, note="n", review=lambda rec: device)


def code(info: pytest.ExceptionInfo[OperatorRejection]) -> str:
    return str(getattr(info.value, "code", ""))


def abandon(parked: tuple[Catalog, ArtifactStore, ActivityRecord], **kw: Any) -> dict[str, Any]:
    """ann's abandon of the parked Activity on revision 1 (`kw`: the rest of `resolve`'s)."""
    return as_ann(parked, "abandon", **kw)


def test_reissue_is_one_resolve_whose_guard_is_the_adapters_proof(parked: Any) -> None:
    catalog, artifacts, record = parked
    device = RecordedDevice()
    assert decide(parked, "reissue", device=device)["status"] == "resolved"
    done = catalog.get(record.key)
    assert done is not None and done.retry_guard is not None and not done.awaiting_decision
    assert done.fence == record.fence + 1 and done.evidence_revision == 1
    guard = done.retry_guard.guard
    proof = json.loads(artifacts.get_bytes(guard.ref, guard.digest))
    assert proof == {"reason": "operator_reissue", "fence_floor": record.fence + 1}
    assert device.proofs == 1
    with pytest.raises(OperatorRejection) as info:
        decide(parked, "reissue", device=device)
    assert code(info) == "not_parked"  # single use, decided by the core's record
    assert device.proofs == 1


def test_a_changed_device_is_a_new_revision_through_the_core(parked: Any) -> None:
    catalog, artifacts, record = parked
    device = RecordedDevice()
    device.now = state(torque=0)
    with pytest.raises(OperatorRejection) as info:
        decide(parked, "done", device=device)
    assert code(info) == "state_changed"
    fresh = catalog.get(record.key)
    assert fresh is not None and fresh.evidence_revision == 2 and fresh.awaiting_decision
    assert fresh.decision is None and fresh.result is None
    shown = show(catalog, artifacts, f"{record.key.world_id}/{record.key.kind}/m1")
    assert shown["revision"] == 2 and shown["evidence"]["device_state"] == state(torque=0)
    assert shown["evidence"]["changes"] and shown["evidence_age_ms"] >= 0
    with pytest.raises(OperatorRejection) as info:
        decide(parked, "done", revision=1, device=device)
    assert code(info) == "stale_revision"
    assert decide(parked, "done", revision=2, device=device)["status"] == "resolved"
    done = catalog.get(record.key)
    assert done is not None and done.result is not None and not done.result.failed
    doc = json.loads(artifacts.get_bytes(done.result.ref, done.result.digest))
    assert doc["verdict"]["operator"] == "ann" and doc["verdict"]["revision"] == 2


def test_credentials_are_checked_before_anything_is_read(parked: Any) -> None:
    catalog, _, record = parked
    for credential in (None, "", "wrong"):
        with pytest.raises(OperatorRejection) as info:
            decide(parked, "done", device=None, credential=credential)
        assert code(info) == "credential_refused"
    assert catalog.get(record.key) == record


def test_wait_records_nothing_and_a_family_without_a_review_can_only_abandon(
    parked: Any,
) -> None:
    catalog, _, record = parked
    assert decide(parked, "wait")["status"] == "awaiting_decision"
    assert catalog.get(record.key) == record
    for decision in ("done", "reissue"):
        with pytest.raises(OperatorRejection) as info:
            decide(parked, decision)
        assert code(info) == "not_supported"
    assert decide(parked, "abandon")["status"] == "resolved"
    done = catalog.get(record.key)
    assert done is not None and done.result is not None and done.result.failed


def test_listing_shows_every_family(parked: Any, tmp_path: Path) -> None:
    catalog, artifacts, record = parked
    [item] = listing(catalog, artifacts)
    assert item["kind"] == record.key.kind and item["revision"] == 1
    assert item["reason"] == "device_state_lost_or_moved"


def test_the_adapters_comparison_uses_the_tolerance() -> None:
    assert changed_since(state(2048), state(2052), tolerance=5) == []
    assert changed_since(state(2048), state(2060), tolerance=5)
    assert changed_since(state(torque=1), state(torque=0), tolerance=5)


def test_a_decision_on_a_shared_catalog_is_the_bound_hosts_own(tmp_path: Path) -> None:
    """An Activity bound to host "arm-a" is decided only by that host (`host`: the deciding
    daemon's name on a shared catalog), whose daemon reads its device: another host is refused
    (`bound_elsewhere`) and nothing changes; with no `host` (a catalog of one host's own) the
    decision is made whatever name it was bound under."""
    from dataclasses import replace

    from tether.activities import operation_id_for

    from tests.activities.support import admission

    clock = ManualClock()
    catalog = Catalog.open("sqlite:///" + str(tmp_path / "catalog.db"), clock=clock)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    try:
        k = key("m1", kind="physical_ai.robot_move.absolute")
        catalog.admit(replace(admission(k), bound_host="arm-a"))
        first = catalog.claim("w", 1_000, kinds=[k.kind], world_id=k.world_id, host="arm-a")
        assert first is not None
        catalog.bind_provider_operation(k, first.fence, operation_id_for(k))
        clock.advance(1_000)
        c = catalog.claim("w", 1_000, kinds=[k.kind], world_id=k.world_id, host="arm-a")
        assert c is not None and not c.attempt.may_execute
        doc = json.dumps({"reason": "device_state_lost_or_moved"}).encode()
        ref = artifacts.put_bytes(doc, "application/json")
        catalog.record_unknown(k, c.fence, Evidence(ref.ref, ref.digest), 60_000)
        (listed,) = listing(catalog, artifacts)
        assert listed["host"] == "arm-a"
        text = f"{k.world_id}/{k.kind}/{k.activity_id}"

        def abandon(host: str | None) -> dict[str, Any]:
            return resolve(
                catalog,
                artifacts,
                text,
                decision="abandon",
                revision=1,
                credential=SECRET,
                verify_credential=lambda s: "ann" if s == SECRET else None,
                host=host,
            )

        with pytest.raises(OperatorRejection) as info:
            abandon("arm-b")
        assert code(info) == "bound_elsewhere" and "'arm-a'" in str(info.value)
        after = catalog.get(k)
        assert after is not None and after.awaiting_decision  # nothing decided
        assert abandon(None)["status"] == "resolved"
    finally:
        catalog.close()


def test_a_revision_written_during_a_decision_is_stale_revision_said_once(parked: Any) -> None:
    """Another decision's refresh landing between this decision's check and its write came
    back as the core's `stale_evidence_revision`, its code said twice (`stale_evidence_revision:
    stale_evidence_revision (evidence_revision): ...`), where the same condition found by the
    check is `stale_revision`."""
    catalog, artifacts, record = parked

    class Racing(RecordedDevice):
        def read(self, rec: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
            doc = json.dumps({"reason": "refreshed", "device_state": state()}).encode()
            ref = artifacts.put_bytes(doc, "application/json")
            catalog.refresh_evidence(rec.key, rec.evidence_revision, Evidence(ref.ref, ref.digest))
            return self.now

    with pytest.raises(OperatorRejection) as info:
        decide(parked, "done", device=Racing())
    assert code(info) == "stale_revision"
    assert str(info.value).count("stale") == 1, str(info.value)
    assert catalog.get(record.key).evidence_revision == 2  # type: ignore[union-attr]


def test_a_decision_recorded_by_another_meanwhile_is_not_parked_said_once(parked: Any) -> None:
    """Another operator's decision landing between this decision's check and its write came
    back as the core's `not_awaiting_decision`, where the same condition found by the check is
    `not_parked`: one race, two codes."""
    from tether.activities import Decision

    catalog, _artifacts, record = parked

    class Racing(RecordedDevice):
        def read(self, rec: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
            other = Decision.abandon(evidence_revision=rec.evidence_revision, operator="bob")
            catalog.resolve(rec.key, other)
            return self.now

    with pytest.raises(OperatorRejection) as info:
        decide(parked, "done", device=Racing())
    assert code(info) == "not_parked", str(info.value)
    assert catalog.get(record.key).decision.operator == "bob"  # type: ignore[union-attr]


def test_an_abandon_the_provider_refuses_decides_nothing(parked: Any) -> None:
    """A provider's say on an abandon (a bridge whose remote move may still run) comes before
    the catalog's write: refused, nothing is decided; allowed, the abandon is recorded."""
    from tether.operator.decisions import rejection

    catalog, _artifacts, record = parked
    k = record.key
    asked: list[ActivityKey] = []

    def refuse(rec: ActivityRecord) -> None:
        asked.append(rec.key)
        raise rejection("remote_unreachable", "the robot host did not take the cancel")

    def decide_with(hook: Any) -> dict[str, Any]:
        return abandon(parked, before_abandon=hook)

    with pytest.raises(OperatorRejection) as info:
        decide_with(refuse)
    assert code(info) == "remote_unreachable" and asked == [k]
    assert catalog.get(k).awaiting_decision  # type: ignore[union-attr]
    assert decide_with(lambda rec: None)["status"] == "resolved"


@pytest.mark.parametrize(
    "note",
    ["x\x1b[2Jy", "bell\x07", "\x9b31m", "n" * 2001],
    ids=["escape", "bell", "c1-csi", "too-long"],
)
def test_a_note_a_terminal_would_act_on_or_past_the_cap_is_refused(parked: Any, note: str) -> None:
    """A note went to the catalog as given: an escape sequence in it cleared the screen of the
    operator reading `tether operator` output, and the CLI took 120 KB where the console caps
    it at 2000 characters. One rule for both, in the decision itself."""
    from tether.operator.decisions import MAX_NOTE_CHARS

    catalog, _artifacts, record = parked
    k = record.key
    with pytest.raises(OperatorRejection) as info:
        abandon(parked, note=note)
    assert code(info) == "bad_note"
    assert catalog.get(k).awaiting_decision  # type: ignore[union-attr]
    fine = "line one\nline\ttwo " + "n" * (MAX_NOTE_CHARS - 20)
    done = abandon(parked, note=fine)
    assert done["status"] == "resolved" and catalog.get(k).decision.note == fine  # type: ignore[union-attr]


def test_a_resolve_on_a_terminal_is_a_sentence_not_a_field_dump(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.operator.cli import _print

    _print(
        {
            "decision": "abandon",
            "revision": 2,
            "operator": "ann",
            "note": "left\ttab",
            "key": "w/k/a",
            "status": "resolved",
            "decided_at_ms": 1,
        },
        False,
    )
    _print(
        {"decision": "wait", "revision": 2, "operator": "ann", "note": "", "key": "w/k/a",
         "status": "awaiting_decision"},
        False,
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "w/k/a: abandon recorded by ann on revision 2 (resolved)",
        "  note: 'left\\ttab'",
        "w/k/a: wait: nothing recorded; it stays parked on revision 2",
    ], out


def test_show_of_a_decided_activity_says_it_is_decided_and_by_whom(
    parked: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a move decided and ended looked as if it were still parked: its reason and
    old joint states, nothing of the decision. It now says where it stands and who decided."""
    from tether.operator.cli import _print
    from tether.operator.decisions import show

    catalog, artifacts, record = parked
    k = record.key
    text = f"{k.world_id}/{k.kind}/{k.activity_id}"
    abandon(parked, note="arm unsafe")
    doc = show(catalog, artifacts, text)
    assert doc["state"] == "failed" and doc["awaiting_decision"] is False
    assert doc["decision"]["decision"] == "abandon" and doc["decision"]["operator"] == "ann"
    _print(doc, False)
    out = capsys.readouterr().out
    assert "NOT parked now: failed" in out, out
    assert "decided: abandon by ann on revision 1" in out and "'arm unsafe'" in out, out
    # A revision recorded by a re-read says why on a terminal too (it was in the JSON only).
    changed = {
        **{k: v for k, v in doc.items() if k != "decision"},
        "awaiting_decision": True,
        "state": "awaiting_decision",
        "evidence": {"changes": ["re-read by bob from the console; a position -0.48 -> -0.84 rad"]},
    }
    _print(changed, False)
    out = capsys.readouterr().out
    assert "recorded with this revision: re-read by bob from the console" in out, out
    assert "NOT parked" not in out and "decided:" not in out
