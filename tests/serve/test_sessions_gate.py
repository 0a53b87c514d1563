"""The daemon's session registry and watchdog (`tether.serve.sessions`) on its own: per-world
sessions, bind/begin/end, a lapse stops exactly the robots of the session's running moves."""

from __future__ import annotations

import threading

import pytest
from tether.serve.sessions import (
    MAX_SESSIONS_PER_WORLD,
    MAX_TTL_MS,
    MIN_TTL_MS,
    SessionRefused,
    Sessions,
)


class Stops:
    def __init__(self) -> None:
        self.robots: list[str] = []
        self.seen = threading.Event()

    def __call__(self, robot: str) -> None:
        self.robots.append(robot)
        self.seen.set()


def test_bind_and_begin_need_the_live_session_of_that_world_and_a_bound_move() -> None:
    sessions = Sessions(Stops())
    assert not sessions.bind("grpc-a", "s", "m1")  # no heartbeat yet
    sessions.heartbeat("grpc-a", "s", MAX_TTL_MS)
    assert not sessions.bind("grpc-b", "s", "m1")  # another principal's "s" is not this one
    assert not sessions.begin("grpc-a", "s", "m1", "arm")  # live, but m1 was never bound
    assert sessions.bind("grpc-a", "s", "m1")
    assert sessions.begin("grpc-a", "s", "m1", "arm")
    sessions.end("grpc-a", "s", "m1")
    assert sessions.begin("grpc-a", "s", "m1", "arm")  # a later attempt of it may start
    for ttl in (MIN_TTL_MS - 1, MAX_TTL_MS + 1):
        with pytest.raises(ValueError):
            sessions.heartbeat("grpc-a", "s", ttl)


def test_a_world_holds_a_bounded_number_of_sessions() -> None:
    sessions = Sessions(Stops())
    for i in range(MAX_SESSIONS_PER_WORLD):
        sessions.heartbeat("grpc-a", f"s{i}", MAX_TTL_MS)
    with pytest.raises(SessionRefused) as info:
        sessions.heartbeat("grpc-a", "one-more", MAX_TTL_MS)
    assert info.value.code == "too_many_sessions"
    sessions.heartbeat("grpc-a", "s0", MAX_TTL_MS)  # an existing one is still extended
    sessions.heartbeat("grpc-b", "s0", MAX_TTL_MS)  # and another world has its own


def test_a_lapse_stops_the_robots_of_its_running_moves_only_and_forgets_the_session() -> None:
    stops = Stops()
    sessions = Sessions(stops).start()
    try:
        sessions.heartbeat("grpc-a", "kept", MAX_TTL_MS)
        assert sessions.bind("grpc-a", "kept", "k1")
        assert sessions.begin("grpc-a", "kept", "k1", "left")
        sessions.heartbeat("grpc-a", "brief", MAX_TTL_MS)
        assert sessions.bind("grpc-a", "brief", "running")
        assert sessions.bind("grpc-a", "brief", "pending")
        assert sessions.begin("grpc-a", "brief", "running", "right")
        assert stops.robots == []
        sessions.heartbeat("grpc-a", "brief", MIN_TTL_MS)  # the last heartbeat's ttl decides
        assert stops.seen.wait(30), "the watchdog never stopped anything"
        assert stops.robots == ["right"]  # not "left": that move is another session's
        assert not sessions.begin("grpc-a", "brief", "pending", "right")
        # The same id again is a new session: it holds none of the old one's moves.
        sessions.heartbeat("grpc-a", "brief", MAX_TTL_MS)
        assert not sessions.begin("grpc-a", "brief", "pending", "right")
    finally:
        sessions.close()
