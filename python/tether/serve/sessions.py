"""Session heartbeats of `tether serve` (the RobotControl `Heartbeat` RPC), and their watchdog.

A session is named by its world (one per principal, `grpc_server.world_for`) and a client-chosen
id, so another principal's equal id is another session. `heartbeat(world, id, ttl_ms)` creates
or extends it until now + ttl_ms; it is live while the server's monotonic clock is before that.

Rules:
- `bind` (the gRPC `Execute` of a request with `session_id`, before the intent is committed)
  needs a live session and records the activity id in it; `begin` (the family, before the
  start marker, under the robot's lock) lets a move start only while its session is live and
  holds it, and registers the move as running on its robot until `end`. Both are atomic with
  the watchdog's lapse (one lock), so a move either is refused at `begin` or is stopped by the
  lapse: never neither.
- A lapse ends the session: the watchdog (a daemon thread, no storage) removes it and stops
  every robot whose running move was started under it, through `stop` (the daemon's own stop
  path, the one `Stop` uses: the robot is latched and safe-stopped, and the attempt ends as
  after a Stop, awaiting an operator, never as a success). A pending move of it then never
  starts: `begin` refuses it and the family records `session_lapsed`. A heartbeat after the
  lapse creates a new session under the same id that holds none of the old one's moves.
- In memory only. A daemon restart forgets every session: a move submitted under one is not
  bound to any live session after the restart, so it never starts (`session_lapsed`), even if
  the client heartbeats the same id again, unless the client re-sends its identical `Execute`
  under the live session (which binds it again). A move running when the daemon died is
  reconciled as every interrupted move is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger("tether.serve.sessions")

#: The accepted range of `ttl_ms` (the gRPC service answers INVALID_ARGUMENT outside it).
MIN_TTL_MS: Final = 100
MAX_TTL_MS: Final = 60_000
#: At most this many live sessions per world (a heartbeat past it is refused).
MAX_SESSIONS_PER_WORLD: Final = 1024


class SessionRefused(ValueError):
    """A heartbeat that cannot be taken (`code`: `too_many_sessions`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Session:
    deadline: float  # time.monotonic()
    expires_ms: int  # the same instant on the wall clock, as answered
    bound: set[str] = field(default_factory=set)
    running: dict[str, str] = field(default_factory=dict)  # activity id -> robot


class Sessions:
    """The daemon's sessions (see the module rules). `start()` runs the watchdog; `close()`."""

    def __init__(self, stop: Callable[[str], object]) -> None:
        self._stop = stop
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- the gRPC side ---

    def heartbeat(self, world: str, session_id: str, ttl_ms: int) -> int:
        """Create or extend the session until now + `ttl_ms`; its expiry in ms since the epoch
        (server clock). A session past its deadline is lapsed first (its robots stopped).

        Raises:
            ValueError: `ttl_ms` outside MIN_TTL_MS..MAX_TTL_MS.
            SessionRefused: `too_many_sessions`.
        """
        if not MIN_TTL_MS <= ttl_ms <= MAX_TTL_MS:
            raise ValueError(f"ttl_ms must be {MIN_TTL_MS}..{MAX_TTL_MS}, got {ttl_ms}")
        robots: list[str] = []
        try:
            with self._cond:
                robots = self._reap(time.monotonic())
                session = self._sessions.get((world, session_id))
                if session is None:
                    if sum(1 for w, _ in self._sessions if w == world) >= MAX_SESSIONS_PER_WORLD:
                        raise SessionRefused(
                            "too_many_sessions",
                            f"at most {MAX_SESSIONS_PER_WORLD} live sessions per principal",
                        )
                    session = self._sessions[(world, session_id)] = _Session(0.0, 0)
                session.deadline = time.monotonic() + ttl_ms / 1000
                session.expires_ms = int(time.time() * 1000) + ttl_ms
                self._cond.notify_all()  # the watchdog's next deadline may be this one
                return session.expires_ms
        finally:
            self._stop_all(robots)

    def bind(self, world: str, session_id: str, activity_id: str) -> bool:
        """Record `activity_id` as submitted under the live session; False when it is not."""
        with self._cond:
            session = self._sessions.get((world, session_id))
            if session is None or session.deadline <= time.monotonic():
                return False
            session.bound.add(activity_id)
            return True

    def bound(self, world: str, session_id: str, activity_id: str) -> bool:
        """Whether `activity_id` is recorded in the live session."""
        with self._cond:
            session = self._sessions.get((world, session_id))
            return session is not None and activity_id in session.bound

    def unbind(self, world: str, session_id: str, activity_id: str) -> None:
        """Take back a `bind` whose request was refused (another request holds the id): the
        session holds only what was submitted under it. A move already running stays."""
        with self._cond:
            session = self._sessions.get((world, session_id))
            if session is not None and activity_id not in session.running:
                session.bound.discard(activity_id)

    # --- the family's gate (`tether.families.robot_move.family.SessionGate`) ---

    def begin(self, world: str, session_id: str, activity_id: str, robot: str) -> bool:
        with self._cond:
            session = self._sessions.get((world, session_id))
            if (
                session is None
                or session.deadline <= time.monotonic()
                or activity_id not in session.bound
            ):
                return False
            session.running[activity_id] = robot
            return True

    def end(self, world: str, session_id: str, activity_id: str) -> None:
        with self._cond:
            session = self._sessions.get((world, session_id))
            if session is not None:  # it stays bound: a later attempt may start again
                session.running.pop(activity_id, None)

    # --- the watchdog ---

    def _reap(self, now: float) -> list[str]:
        """Remove every lapsed session (under the lock); the robots to stop."""
        robots: list[str] = []
        for key, session in list(self._sessions.items()):
            if session.deadline <= now:
                del self._sessions[key]
                moving = sorted(set(session.running.values()))
                log.warning(
                    "session lapsed",
                    extra={
                        "world": key[0],
                        "session_id": key[1],
                        "robots": moving,
                        "pending": len(session.bound) - len(session.running),
                    },
                )
                robots += moving
        return robots

    def _stop_all(self, robots: list[str]) -> None:
        for robot in sorted(set(robots)):
            try:
                self._stop(robot)
            except Exception:  # the watchdog never dies of one robot's failure
                log.exception("session lapse stop failed", extra={"robot": robot})

    def _watch(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                robots = self._reap(now)
                if not robots:
                    deadlines = [s.deadline for s in self._sessions.values()]
                    wait = min(deadlines) - now if deadlines else None
                    self._cond.wait(None if wait is None else max(wait, 0.0))
                    continue
            self._stop_all(robots)

    def start(self) -> Sessions:
        self._thread = threading.Thread(target=self._watch, name="session-watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5.0)


__all__ = ["MAX_TTL_MS", "MIN_TTL_MS", "SessionRefused", "Sessions"]
