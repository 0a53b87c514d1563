"""A session holds the operations submitted under it only until they end (`Sessions.settle`),
not for the session's life: a planner heartbeating one session for days does not grow it by
one id per Execute. The rules of `tether.serve.sessions` stand: a bound move starts only while
its session is live, a lapse stops the robots of its running moves only.

The `Sessions` rules alone (no daemon), then a `Daemon` in this process (its gRPC server on
loopback, a real grpcio client, the emulated arm on a real pty, real workers): the per-session
set itself (`_Session.bound`, read directly) shrinks as the operations end, through the
doorbell's keyed results, an identical Execute retried after the end, and the watch poller's
sweep of the catalog (for ends no ring named)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _grpc_setup import bearer, in_process, move, stub, until_terminal
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve import sessions as sessions_module
from tether.serve.daemon import Daemon
from tether.serve.grpc_server import world_for
from tether.serve.sessions import SWEEP_MIN, Sessions

WORLD = world_for("ci")


def bound(sessions: Sessions, session_id: str, world: str = WORLD) -> set[str]:
    """The session's own set of bound ids (what grows per Execute), read directly."""
    with sessions._cond:
        session = sessions._sessions.get((world, session_id))
        return set(session.bound) if session is not None else set()


def test_settle_drops_ended_operations_and_a_running_move_is_still_stopped_by_a_lapse() -> None:
    stopped: list[str] = []
    sessions = Sessions(stopped.append)
    sessions.heartbeat("w", "s", 60_000)
    sessions.heartbeat("w", "t", 60_000)
    sessions.heartbeat("x", "s", 60_000)
    for op in ("a", "b", "c"):
        assert sessions.bind("w", "s", op)
    assert sessions.bind("w", "t", "b")  # one id under two sessions (a refused request's)
    assert sessions.bind("x", "s", "a")  # another world's equal ids are other operations
    assert sessions.begin("w", "s", "c", "arm")  # "c" runs on the arm
    assert sessions.settle("w", ["a", "b", "c", "nobody"]) == 4
    assert bound(sessions, "s", "w") == set() == bound(sessions, "t", "w")
    assert sessions.held("x", "s") == frozenset({"a"})
    # An ended operation never starts again under the session.
    assert not sessions.begin("w", "s", "a", "arm")
    # "c" is still running on the arm: the lapse stops it (and nothing else).
    sessions.heartbeat("w", "s", sessions_module.MIN_TTL_MS)
    time.sleep(sessions_module.MIN_TTL_MS / 1000 + 0.05)
    sessions.heartbeat("w", "other", 60_000)  # a heartbeat reaps the lapsed session first
    assert stopped == ["arm"]
    assert sessions.held("w", "s") == frozenset()


def test_a_sweep_is_due_past_sweep_min_then_past_twice_what_it_kept() -> None:
    sessions = Sessions(lambda robot: None)
    sessions.heartbeat("w", "s", 60_000)
    for i in range(SWEEP_MIN):
        sessions.bind("w", "s", f"op-{i}")
    assert sessions.sweep_due() == {}
    sessions.bind("w", "s", "one-more")
    due = sessions.sweep_due()
    assert sorted(due) == ["w"] and len(due["w"]) == SWEEP_MIN + 1
    # The sweep finds all but 200 ended: the next one is due past 2 * 200 = 400 bound ids.
    sessions.settle("w", sorted(due["w"])[200:])
    sessions.swept()
    assert len(sessions.held("w", "s")) == 200
    for i in range(200):
        sessions.bind("w", "s", f"next-{i}")
    assert sessions.sweep_due() == {}
    sessions.bind("w", "s", "past-it")
    assert len(sessions.sweep_due()["w"]) == 401


SERVE = '\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\nsse = "off"\ngrpc = "127.0.0.1:0"\n'


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    with in_process(tmp_path, SERVE) as running:
        yield running


def until_unbound(sessions: Sessions, session_id: str, timeout: float = 10) -> set[str]:
    """The session's bound ids once empty (or as they stand after `timeout`)."""
    deadline = time.monotonic() + timeout
    while (ids := bound(sessions, session_id)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return ids


def test_a_sessions_bound_operations_are_dropped_as_they_end(served: Daemon) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        heartbeat = pb.HeartbeatRequest(session_id="days", ttl_ms=60_000)
        control.Heartbeat(heartbeat, metadata=bearer(), timeout=10)
        requests = []
        for i, pose in enumerate(({"a": 0.3, "b": -0.2}, {"a": -0.3, "b": 0.2}, {"a": 0.1})):
            request = move(f"day-{i}", pose)
            request.session_id = "days"
            requests.append(request)
            control.Execute(request, metadata=bearer(), timeout=30)
            assert f"day-{i}" in bound(served.sessions, "days")  # bound while it may start
            assert until_terminal(control, f"day-{i}")[-1].state == pb.SUCCEEDED
        # One that ends without starting (past its not_after_ms): dropped too.
        late = move("day-late", not_after_ms=int(time.time() * 1000) - 1)
        late.session_id = "days"
        control.Execute(late, metadata=bearer(), timeout=30)
        assert until_terminal(control, "day-late")[-1].state == pb.EXPIRED
        assert until_unbound(served.sessions, "days") == set()
        # The identical retry of an ended operation under the live session binds nothing.
        again = control.Execute(requests[0], metadata=bearer(), timeout=30)
        assert again.state == pb.SUCCEEDED
        assert bound(served.sessions, "days") == set()
        # The session itself is untouched: a new move under it still starts and ends.
        control.Heartbeat(heartbeat, metadata=bearer(), timeout=10)
        fresh = move("day-3", {"a": 0.2, "b": 0.2})
        fresh.session_id = "days"
        control.Execute(fresh, metadata=bearer(), timeout=30)
        assert until_terminal(control, "day-3")[-1].state == pb.SUCCEEDED
        assert until_unbound(served.sessions, "days") == set()
    finally:
        channel.close()


def test_the_poller_sweeps_ended_operations_no_ring_named(
    served: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        control.Execute(move("ended"), metadata=bearer(), timeout=30)
        assert until_terminal(control, "ended")[-1].state == pb.SUCCEEDED
        control.Heartbeat(
            pb.HeartbeatRequest(session_id="swept", ttl_ms=60_000), metadata=bearer(), timeout=10
        )
        monkeypatch.setattr(sessions_module, "SWEEP_MIN", 0)
        served.sessions.swept()  # due at once: any id bound is swept on the next pass
        # Bound after its result (as if its ring named no key), and one with no record at all
        # (committed, not admitted yet): the sweep drops the first only.
        assert served.sessions.bind(WORLD, "swept", "ended")
        assert served.sessions.bind(WORLD, "swept", "not-yet")
        deadline = time.monotonic() + 10
        while "ended" in bound(served.sessions, "swept"):
            assert time.monotonic() < deadline, "the sweep never dropped the ended operation"
            time.sleep(0.05)
        assert bound(served.sessions, "swept") == {"not-yet"}
    finally:
        channel.close()


def test_an_idle_sessions_lapse_is_news_and_a_moving_ones_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A planner that went away between moves lapses its session: logged at INFO. A lapse that
    stops a robot is a WARNING."""
    sessions = Sessions(lambda robot: None)
    sessions.heartbeat("w", "idle", sessions_module.MIN_TTL_MS)
    sessions.heartbeat("w", "busy", sessions_module.MIN_TTL_MS)
    assert sessions.bind("w", "busy", "m") and sessions.begin("w", "busy", "m", "arm")
    time.sleep(sessions_module.MIN_TTL_MS / 1000 + 0.05)
    with caplog.at_level(logging.INFO, logger="tether.serve.sessions"):
        sessions.heartbeat("w", "other", 60_000)  # reaps the lapsed ones
    lapses = {r.session_id: r.levelno for r in caplog.records if r.msg == "session lapsed"}
    assert lapses == {"idle": logging.INFO, "busy": logging.WARNING}, lapses
