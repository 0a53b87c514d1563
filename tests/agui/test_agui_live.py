"""LiveActivities: one activity message per Activity key, merged reports, diffs, final snapshot."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path

import pytest
from tether._core import ActivityStore
from tether.activities import ActivityKey
from tether.agui import LiveActivities, RunStream, StoreState, message_id
from tether.runtime import ProgressEvent

A = ActivityKey("w", "physical_ai.robot_move.absolute", "move-1")
B = ActivityKey("w", "physical_ai.robot_move.absolute", "move-2")


def _live() -> tuple[RunStream, LiveActivities]:
    stream = RunStream("thread", "run", StoreState(), clock=lambda: 1_764_489_600_000)
    stream.start()
    return stream, LiveActivities(stream)


def _progress(key: ActivityKey, fraction: float, moving: int) -> ProgressEvent:
    content = {"fraction": fraction, "joints": {"1": {"present": 2048, "moving": moving}}}
    return ProgressEvent(key, "op-1", 2, 7, content)


def test_progress_publishes_a_snapshot_then_only_the_difference() -> None:
    stream, live = _live()
    live.progress(_progress(A, 0.5, 1))
    live.progress(_progress(A, 0.5, 1))  # unchanged: nothing published
    live.progress(_progress(A, 1.0, 0))
    first, second = stream.events()[1:]
    assert first == {
        "type": "ACTIVITY_SNAPSHOT",
        "timestamp": first["timestamp"],
        "messageId": "w/physical_ai.robot_move.absolute/move-1",
        "activityType": A.kind,
        "content": {
            "activity": "move-1",
            "world": "w",
            "state": "running",
            "attempt": 2,
            "fraction": 0.5,
            "joints": {"1": {"present": 2048, "moving": 1}},
        },
    }
    assert first["messageId"] == message_id(A)
    assert second["type"] == "ACTIVITY_DELTA" and second["activityType"] == A.kind
    assert sorted(op["path"] for op in second["patch"]) == ["/fraction", "/joints/1/moving"]
    assert live.content(A) == first["content"] | {
        "fraction": 1.0,
        "joints": {"1": {"present": 2048, "moving": 0}},
    }
    assert live.keys() == [A] and live.content(B) is None


def test_bad_content_is_refused_and_changes_nothing() -> None:
    stream, live = _live()
    live.update(A, state="executing")
    before = stream.events()
    with pytest.raises(ValueError, match="not JSON"):
        live.update(A, joints=(1, 2))
    with pytest.raises(ValueError, match="not JSON"):
        live.update(B, fraction=float("nan"))
    assert stream.events() == before
    assert live.keys() == [A] and live.content(A) == {
        "activity": "move-1",
        "world": "w",
        "state": "executing",
    }


def test_settle_publishes_the_final_snapshot_and_ignores_later_reports() -> None:
    stream, live = _live()
    live.update(A, state="running", fraction=0.2)
    live.settle(A, {"activity": "move-1", "state": "settled", "digest": "sha256:00"})
    live.progress(_progress(A, 0.9, 1))  # a straggler after settlement
    live.update(A, state="running")
    events = stream.events()
    assert [e["type"] for e in events] == ["RUN_STARTED", "ACTIVITY_SNAPSHOT", "ACTIVITY_SNAPSHOT"]
    assert events[-1]["content"] == {
        "activity": "move-1",
        "state": "settled",
        "digest": "sha256:00",
    }


def test_concurrent_reports_rebuild_every_activity_exactly() -> None:
    stream, live = _live()
    keys = [ActivityKey("w", "k", f"a{i}") for i in range(4)]

    def report(key: ActivityKey) -> None:
        for step in range(60):
            live.update(key, step=step, half=step // 2, shared=key.activity_id)

    threads = [threading.Thread(target=report, args=(k,)) for k in keys for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stream.finish()
    store = ActivityStore()
    for event in stream.events():
        assert store.handle_event(event) == []
    store.finish()
    rebuilt = {m["id"]: m["content"] for m in store.activities()}
    assert rebuilt == {message_id(k): live.content(k) for k in keys}
    assert all(c["step"] == 59 for c in rebuilt.values())  # both threads' last report agrees


def test_reset_starts_the_content_over() -> None:
    stream, live = _live()
    live.update(A, state="error", error="LeaseLost: gone", attempt=1)
    live.reset(A, state="reconciling", attempt=2)
    assert live.content(A) == {
        "activity": "move-1",
        "world": "w",
        "state": "reconciling",
        "attempt": 2,
    }
    store = ActivityStore()
    for event in stream.events():
        assert store.handle_event(event) == []
    assert [m["content"] for m in store.activities()] == [live.content(A)]


def test_only_the_most_recent_settled_activities_stay_in_snapshots() -> None:
    stream = RunStream("thread", "run", StoreState(), clock=lambda: 1_764_489_600_000)
    stream.start()
    live = LiveActivities(stream, retain_settled=2, remember_settled=2)
    keys = [ActivityKey("w", "k", f"a{i}") for i in range(6)]
    running = ActivityKey("w", "k", "still-running")
    live.update(running, state="running")
    for key in keys:
        live.update(key, state="running")
        live.settle(key, {"activity": key.activity_id, "state": "settled"})
    # Held: the unsettled one and the last two settled; the rest left snapshots and memory.
    assert live.keys() == [running, keys[4], keys[5]]
    assert live.content(keys[0]) is None and live.content(keys[5]) is not None
    sub, late = stream.subscribe(), b""
    with pytest.raises(queue.Empty):  # the opening frames, then nothing live yet
        while True:
            late += sub.get(timeout=0) or b""
    store = ActivityStore(lifecycle="partial")
    assert store.feed(late) == []
    assert [m["id"] for m in store.activities()] == [message_id(k) for k in (running, *keys[4:])]
    # A straggler for a remembered settled key is ignored; an older one starts a new message.
    before = stream.last_event_id
    live.progress(_progress(keys[3], 0.9, 1))
    live.settle(keys[2], {"state": "settled"})
    assert stream.last_event_id == before
    live.update(keys[0], state="running")
    assert stream.last_event_id != before and live.content(keys[0]) == {
        "activity": "a0",
        "world": "w",
        "state": "running",
    }


@pytest.mark.parametrize("bad", [{"retain_settled": -1}, {"remember_settled": 1.0}])
def test_retention_bounds_must_be_counts(bad: dict[str, object]) -> None:
    stream, _ = _live()
    with pytest.raises(ValueError, match="must be an int"):
        LiveActivities(stream, **bad)  # type: ignore[arg-type]


def test_a_workers_stream_keeps_only_its_most_recent_results(tmp_path: Path) -> None:
    """`tether worker --sse-port`: a worker never sees an Activity settle, so an attempt that
    returns the result concludes its message (`LiveAdapter`); the stream then holds the most
    recent `retain_settled` of them, however many the worker runs, and an attempt that ends
    without a result (an error) stays held."""
    from tether.activities import ResultRef
    from tether.runtime import ArtifactStore, AttemptContext
    from tether.runtime.worker_main import LiveAdapter

    artifacts = ArtifactStore(tmp_path / "artifacts")

    class Echo:
        """Stores its request as the result; refuses the one named "bad"."""

        def execute(self, ctx: AttemptContext, request: dict[str, object]) -> ResultRef:
            if request.get("bad"):
                raise ValueError("refused")
            return artifacts.put_bytes(json.dumps(request).encode(), "application/json")

        def reconcile(self, ctx: AttemptContext, request: dict[str, object]) -> object:
            raise AssertionError("not reconciled here")

    stream = RunStream("thread", "run", StoreState(), clock=lambda: 1_764_489_600_000)
    stream.start()
    live = LiveActivities(stream, retain_settled=3, remember_settled=3)
    adapter = LiveAdapter(Echo(), live)  # type: ignore[arg-type]

    def context(key: ActivityKey) -> AttemptContext:
        return AttemptContext(
            key=key, operation_id=f"op-{key.activity_id}", fence=1, attempt=1,
            may_execute=True, artifacts=artifacts, renew=lambda: None,
        )  # fmt: skip

    bad = ActivityKey("w", "k", "bad")
    with pytest.raises(ValueError):
        adapter.execute(context(bad), {"bad": True})
    keys = [ActivityKey("w", "k", f"a{i}") for i in range(20)]
    for key in keys:
        adapter.execute(context(key), {"n": key.activity_id})
    assert live.keys() == [bad, *keys[-3:]]
    assert live.content(keys[-1])["state"] == "result"  # type: ignore[index]
    assert live.content(bad)["state"] == "error"  # type: ignore[index]
