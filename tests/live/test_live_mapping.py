"""The Activity mapping on a real SQLite catalog: ids round-trip, a parked Activity is a pending
approval that becomes answered, the turn settles when every Activity it admitted settled, and
the live events the mapping builds rebuild its canonical record in an overlay."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest
import tether.live
from tether.activities import (
    ActivityKey,
    Catalog,
    Decision,
    Evidence,
    Receipt,
    RetryGuard,
    operation_id_for,
)
from tether.live import (
    LiveFeed,
    LiveOverlay,
    LiveSubscriber,
    interaction_updates,
    message_id_for,
    parse_message_id,
    parse_turn_id,
    runtime_update,
    session_record,
    tool_call_delta,
    trace_lines,
    turn_id_for,
    turn_update,
    validate_live_event,
)

from tests.activities.support import ManualClock, admission, evidence_for, key, receipt, result


def test_ids_are_stable_and_round_trip() -> None:
    r = Receipt("w/1", "run:a", 42, "tok%/x")
    assert turn_id_for(r) == "receipt:w%2F1/run%3Aa/42/tok%25%2Fx"
    assert parse_turn_id(turn_id_for(r)) == r
    k = ActivityKey("w/1", "robot.move", "a:7")
    assert message_id_for(k) == "toolcall:w%2F1/robot.move/a%3A7"
    assert parse_message_id(message_id_for(k)) == k
    # Same activity id in two kinds or two worlds: distinct messages.
    assert message_id_for(ActivityKey("w", "a", "x")) != message_id_for(ActivityKey("w", "b", "x"))
    for bad in ("toolcall:a/b", "receipt:w/r/x/t", "other:a/b/c", "toolcall:a//c"):
        with pytest.raises(ValueError):
            (parse_message_id if bad.startswith(("toolcall", "other")) else parse_turn_id)(bad)


def test_a_session_through_the_catalog(tmp_path: Path) -> None:
    clock = ManualClock()
    ws = "ws"
    with Catalog.open(f"sqlite://{tmp_path / 'c.db'}", clock=clock) as cat:
        a, b = key("a1"), key("b1")
        source = receipt(3)
        view = LiveOverlay(ws, "w1")
        seen = {}

        def publish(k: ActivityKey) -> None:
            rec = cat.get(k)
            assert rec is not None
            now = clock() + 1
            recs = [x for x in (cat.get(a), cat.get(b)) if x is not None]
            for ev in [
                runtime_update("w1", recs, workspace_id=ws, now_ms=now),
                tool_call_delta(rec, workspace_id=ws, now_ms=now, previous=seen.get(k)),
                *interaction_updates(rec, workspace_id=ws, now_ms=now),
                turn_update(
                    source, [cat.get(x) for x in (a, b) if cat.get(x)], workspace_id=ws, now_ms=now
                ),
            ]:
                assert view.apply(validate_live_event(ev)) in ("applied", "unchanged"), ev
            seen[k] = rec

        def canonical() -> dict:
            recs = [r for r in (cat.get(a), cat.get(b)) if r is not None]
            return session_record(ws, "w1", recs)

        cat.admit(admission(a))
        publish(a)
        assert view.snapshot() == canonical()
        assert view.snapshot()["turns"][turn_id_for(source)]["phase"] == "submitted"

        # a: claimed, bound, its attempt expires; the reconciliation is unknown: parked.
        claim = cat.claim("w-old", 1_000)
        assert claim is not None and claim.key == a
        cat.bind_provider_operation(a, claim.fence, operation_id_for(a))
        clock.advance(2_000)
        again = cat.claim("w-new", 1_000)
        assert again is not None and again.key == a
        parked = cat.record_unknown(a, again.fence, Evidence("ev://1", "sha256:e1"), 60_000)
        assert parked.awaiting_decision
        cat.admit(admission(b))  # the same tick admitted b; the projector is slower for it
        publish(a)
        publish(b)
        snap = view.snapshot()
        assert snap == canonical()
        [pending] = snap["interactions"].values()
        assert (pending["kind"], pending["status"]) == ("approval", "pending")
        assert snap["messages"][message_id_for(a)]["status"] == "waiting"
        assert snap["turns"][turn_id_for(source)]["phase"] == "waiting"

        # The operator decides: the interaction is answered.
        res_a = result("ra")
        cat.resolve(a, Decision.recovered(res_a, evidence_revision=1, operator="op"))
        publish(a)
        [answered] = view.snapshot()["interactions"].values()
        assert answered["status"] == "answered" and answered["output"]["outcome"] == "recovered"

        # b runs to a result; the turn settles only once both settled.
        cb = cat.claim("w", 1_000)
        assert cb is not None and cb.key == b
        cat.bind_provider_operation(b, cb.fence, operation_id_for(b))
        res_b = result("rb")
        cat.record_result(b, cb.fence, res_b)
        publish(b)
        later = receipt(4)
        cat.settle(a, later, evidence_for(a, res_a))
        publish(a)
        assert view.snapshot()["turns"][turn_id_for(source)]["phase"] == "settling"
        cat.settle(b, later, evidence_for(b, res_b))
        publish(b)
        snap = view.snapshot()
        assert snap == canonical()
        turn = snap["turns"][turn_id_for(source)]
        assert (turn["phase"], turn["outcome"]) == ("settled", "completed")
        assert {m["status"] for m in snap["messages"].values()} == {"completed"}
        assert snap["runtime"] == {"state": "idle"}


def test_fresh_evidence_supersedes_the_approval_of_the_revision_it_replaced(
    tmp_path: Path,
) -> None:
    """A re-read while an Activity awaits a decision (evidence revision 2) makes the approval
    of revision 1 `superseded` in the events and in the canonical record alike: a GUI never
    keeps a pending approval whose decision the catalog would refuse."""
    clock = ManualClock()
    ws = "ws"
    with Catalog.open(f"sqlite://{tmp_path / 'c.db'}", clock=clock) as cat:
        a = key("a1")
        view = LiveOverlay(ws, "w1")

        def publish() -> dict:
            rec = cat.get(a)
            assert rec is not None
            for ev in interaction_updates(rec, workspace_id=ws, now_ms=clock() + 1):
                assert view.apply(validate_live_event(ev)) in ("applied", "unchanged"), ev
            return {i: x["status"] for i, x in view.snapshot()["interactions"].items()}

        def canonical() -> dict:
            rec = cat.get(a)
            assert rec is not None
            record = session_record(ws, "w1", [rec])
            return {i: x["status"] for i, x in record["interactions"].items()}

        one, two = (f"approval:w1/sim.rollout/a1/{n}" for n in (1, 2))
        cat.admit(admission(a))
        claim = cat.claim("w-old", 1_000)
        assert claim is not None
        cat.bind_provider_operation(a, claim.fence, operation_id_for(a))
        clock.advance(2_000)
        again = cat.claim("w-new", 1_000)
        assert again is not None
        cat.record_unknown(a, again.fence, Evidence("ev://1", "sha256:e1"), 60_000)
        assert publish() == canonical() == {one: "pending"}
        cat.refresh_evidence(a, 1, Evidence("ev://2", "sha256:e2"))
        assert publish() == canonical() == {one: "superseded", two: "pending"}
        guard = RetryGuard("guard://proof", "sha256:g")
        cat.resolve(a, Decision.absent(guard, evidence_revision=2, operator="op"))
        assert publish() == canonical() == {one: "superseded", two: "answered"}
        # Named as the operator decided it (`reissue`), beside the catalog's outcome.
        answered = view.snapshot()["interactions"][two]["output"]
        assert (answered["decision"], answered["outcome"]) == ("reissue", "absent"), answered
        decided = cat.get(a)
        assert decided is not None
        said = [line.text for line in trace_lines(decided, None)]
        assert "operator op decided reissue on evidence revision 2" in said, said


def test_the_streamed_approvals_and_the_canonical_record_agree_through_every_decision(
    tmp_path: Path,
) -> None:
    """Through re-reads, a decision, a second park and its decision, and a park that
    recovered unattended, a subscriber's overlay built from a feed's frames holds the
    interactions the feed's canonical record holds, and a re-read of that record keeps no
    optimistic entry it lacks: no approval the stream published is left only in the GUI."""
    clock = ManualClock()
    with Catalog.open(f"sqlite://{tmp_path / 'c.db'}", clock=clock) as cat:
        a, b = key("a1"), key("b1")
        feed = LiveFeed("ws", "w1", lambda: [r for k in (a, b) if (r := cat.get(k))])
        frames: list[bytes] = []
        feed.attach(lambda frame, seq: frames.append(frame))
        start = feed.canonical()
        frames.clear()  # the record holds them
        sub, view = LiveSubscriber(epoch=start.epoch, seq=start.seq), LiveOverlay("ws", "w1")
        view.reconcile(start.record)

        def statuses(record: dict) -> dict[str, str]:
            return {i.rsplit("/", 2)[-2] + "/" + i.rsplit("/", 1)[-1]: x["status"]
                    for i, x in record["interactions"].items()}  # fmt: skip

        def streamed() -> dict[str, str]:
            feed.sync()
            return drained()

        def drained() -> dict[str, str]:
            for f in frames:
                outcome = sub.handle_frame(f)
                assert outcome.fault is None and not outcome.reread, outcome
                view.apply_outcome(outcome)
            frames.clear()
            return statuses(view.snapshot())

        def canonical() -> dict[str, str]:
            record = feed.canonical().record
            drained()  # what its sync sent, for the next comparison
            return statuses(record)

        def park(k: ActivityKey, ev: str) -> None:
            claim = cat.claim("w", 1_000)
            assert claim is not None and claim.key == k
            cat.bind_provider_operation(k, claim.fence, operation_id_for(k))
            clock.advance(2_000)  # its lease runs out: the next claim reconciles
            again = cat.claim("w", 1_000)
            assert again is not None and again.key == k and not again.attempt.may_execute
            cat.record_unknown(k, again.fence, Evidence(f"ev://{ev}", f"sha256:{ev}"), 1_000)

        cat.admit(admission(a))
        park(a, "1")
        assert streamed() == canonical() == {"a1/1": "pending"}
        cat.refresh_evidence(a, 1, Evidence("ev://2", "sha256:2"))
        assert streamed() == canonical() == {"a1/1": "superseded", "a1/2": "pending"}
        guard = RetryGuard("guard://proof", "sha256:g")
        cat.resolve(a, Decision.absent(guard, evidence_revision=2, operator="op"))
        assert streamed() == canonical() == {"a1/1": "superseded", "a1/2": "answered"}
        clock.advance(2_000)
        park(a, "3")  # the re-issue parks too
        assert (
            streamed()
            == canonical()
            == {
                "a1/1": "superseded",
                "a1/2": "answered",
                "a1/3": "pending",
            }
        )
        cat.resolve(a, Decision.abandon(evidence_revision=3, operator="op"))
        # The record keeps its latest decision only: revision 2 is superseded there now. The
        # stream never changes what it showed as terminal; a re-read brings the record's.
        want = {"a1/1": "superseded", "a1/2": "superseded", "a1/3": "answered"}
        assert canonical() == want
        assert streamed() == {**want, "a1/2": "answered"}
        record = feed.canonical()
        assert view.reconcile(record.record) == []  # no optimistic entry stands on its own
        assert statuses(view.snapshot()) == want and not view.needs_reconciliation

        cat.admit(admission(b))
        park(b, "b")
        assert streamed()["b1/1"] == canonical()["b1/1"] == "pending"
        clock.advance(2_000)
        late = cat.claim("w", 1_000)  # its reconcile finds the result: recovered unattended
        assert late is not None and late.key == b
        cat.record_result(b, late.fence, result("b"))
        assert streamed()["b1/1"] == canonical()["b1/1"] == "superseded"
        assert view.reconcile(feed.canonical().record) == []
        assert statuses(view.snapshot()) == canonical()


def test_the_package_docstrings_run() -> None:
    assert doctest.testmod(tether.live, raise_on_error=True).attempted > 0
