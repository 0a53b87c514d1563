"""A world feed stays bounded while it is open: the daemon's records let the oldest settled
turns go whole, and `LiveFeed` forgets what it published of a record it no longer holds,
without sending anything for it. Real SQLite files and a real Host throughout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether._coded import CodedError
from tether.activities import ActivityKey, ActivityRecord
from tether.live import LiveFeed, message_id_for
from tether.runtime import AttemptContext, Family, Host
from tether.serve import live_mount
from tether.world import ComponentWrite, canonical_json

from tests._hosts import ECHO_KIND, drain, echo_project, echo_stage

KIND = ECHO_KIND
_project, _stage = echo_project, echo_stage


class Echo:
    """Records its input as its result; an id starting with ``hold`` is refused (typed), so
    that Activity stays unsettled for the test's length (its lease is long)."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        if ctx.key.activity_id.startswith("hold"):
            raise CodedError("held", "kept unsettled by the test")
        return ctx.artifacts.put_bytes(canonical_json(request), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        raise AssertionError("no lease runs out in these tests")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    family = Family("demo", (KIND,), _project, Echo(), _stage)
    with Host(tmp_path / "data", [family], workers=0, observe=False, lease_ms=600_000) as h:
        h.create_world("w")
        yield h


def _key(activity: str) -> ActivityKey:
    return ActivityKey("w", KIND, activity)


def _tick(host: Host, *activities: str) -> None:
    """One tick admitting `activities`, run and observed until nothing is left to do."""
    host.commit_tick("w", [ComponentWrite(a, "echo.intent", {"id": a}) for a in activities])
    drain(host)
    while host.observe_once():
        pass


def test_a_feed_forgets_what_it_no_longer_holds_and_sends_nothing_for_it(host: Host) -> None:
    for a in ("a", "b", "c"):
        _tick(host, a)
    records: list[ActivityRecord] = []
    for a in ("a", "b", "c"):
        record = host.get(_key(a))
        assert record is not None and record.settlement is not None
        records.append(record)
    frames: list[bytes] = []
    feed = LiveFeed("ws", "w", lambda: list(records))
    feed.attach(lambda frame, seq: frames.append(frame))
    whole = feed.canonical().record
    assert set(whole["messages"]) == {message_id_for(_key(a)) for a in "abc"}
    assert len(whole["turns"]) == 3
    assert feed.trace(_key("a")) != ""

    held = feed.publisher.held
    gone = records.pop(0)
    frames.clear()
    assert feed.sync() == 0 and frames == []  # letting a record go is not news
    # The publisher gave back what it held of the message and of its (now empty) turn.
    assert feed.publisher.held < held
    assert feed.publisher.emitted_bytes(message_id_for(gone.key)) is None
    left = feed.canonical().record
    assert set(left["messages"]) == {message_id_for(_key(a)) for a in "bc"}
    assert len(left["turns"]) == 2
    assert feed.trace(gone.key) == ""
    assert (
        left["messages"][message_id_for(_key("b"))] == whole["messages"][message_id_for(_key("b"))]
    )

    records.insert(0, gone)  # should it come back, it is shown again, and nothing breaks
    feed.sync()
    assert set(feed.canonical().record["messages"]) == set(whole["messages"])


def test_an_open_world_feed_keeps_its_latest_settled_turns_whole(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_mount, "SETTLED_SEED", 4)
    monkeypatch.setattr(live_mount, "SETTLED_KEPT", 2)
    records = live_mount._WorldRecords("w", lambda: host, lambda: host.families)
    feed = LiveFeed("ws", "w", records)

    def note(*activities: str) -> None:
        for a in activities:
            records.note(_key(a))
        feed.sync()

    _tick(host, "hold-0")  # the oldest, never settled: it stays
    note("hold-0")
    _tick(host, "t1-a", "t1-b")  # one turn of two
    note("t1-a", "t1-b")
    for n in range(2, 7):
        _tick(host, f"t{n}")
        note(f"t{n}")
    shown = {r.key.activity_id: r for r in records()}
    settled = sorted(a for a, r in shown.items() if r.settlement is not None)
    # 7 settled were seen: past SEED + KEPT (6), the oldest turns went until SEED were left.
    assert settled == ["t3", "t4", "t5", "t6"]
    assert "hold-0" in shown and shown["hold-0"].settlement is None
    canon = json.loads(json.dumps(feed.canonical().record))
    assert set(canon["messages"]) == {message_id_for(_key(a)) for a in [*settled, "hold-0"]}
    assert feed.trace(_key("t1-a")) == "" and feed.trace(_key("t4")) != ""

    # Whole turns only: a turn of two goes as one, never half of it.
    for n in (7, 8):
        _tick(host, f"t{n}-a", f"t{n}-b")
        note(f"t{n}-a", f"t{n}-b")
    for n in (9, 10, 11):
        _tick(host, f"t{n}")
        note(f"t{n}")
    shown = {r.key.activity_id: r for r in records()}
    # At t11, 7 settled: 3 to go, and t7 (two) is not enough: t8 goes whole too, leaving 3.
    assert sorted(a for a, r in shown.items() if r.settlement is not None) == ["t10", "t11", "t9"]
    assert "hold-0" in shown
