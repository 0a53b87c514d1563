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
- A bound id is dropped once its operation no longer needs the gate (`settle`: a result is
  recorded, so no attempt of it ever starts again; the gRPC service calls it for each result
  the catalog's doorbell names and, past `SWEEP_MIN` bound ids, for those a sweep of the
  catalog finds with a result), so a session heartbeated for days holds only its operations
  still to end. A move already running stays registered on its robot until `end`: a lapse
  still stops it.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger("tether.serve.sessions")

#: The accepted range of `ttl_ms` (the gRPC service answers INVALID_ARGUMENT outside it).
MIN_TTL_MS: Final = 100
MAX_TTL_MS: Final = 60_000
#: At most this many live sessions per world (a heartbeat past it is refused).
MAX_SESSIONS_PER_WORLD: Final = 1024
#: Bound ids (all sessions) below which the gRPC service never sweeps the catalog for ended
#: ones (`Sessions.sweep_due`): the doorbell's keyed results drop them one by one; a sweep
#: catches the ones it could not name (an unkeyed ring, a PostgreSQL notification).
SWEEP_MIN: Final = 256


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
        #: (world, activity id) -> the ids of the sessions it is bound to (mostly one).
        self._holders: dict[tuple[str, str], set[str]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: The bound ids (all sessions) past which a sweep is due: `SWEEP_MIN`, or twice what
        #: the last sweep kept (each sweep reads at most twice the ids that still need it).
        self._sweep_at = SWEEP_MIN

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
            self._holders.setdefault((world, activity_id), set()).add(session_id)
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
                self._drop(world, session_id, session, activity_id)

    def _drop(self, world: str, session_id: str, session: _Session, activity_id: str) -> None:
        """Take `activity_id` out of `session` and the index (under the lock)."""
        session.bound.discard(activity_id)
        holders = self._holders.get((world, activity_id))
        if holders is not None:
            holders.discard(session_id)
            if not holders:
                del self._holders[(world, activity_id)]

    def settle(self, world: str, activity_ids: Iterable[str]) -> int:
        """Drop each of `activity_ids` from every session of `world` that holds it: its
        operation has a recorded result, so no attempt of it ever passes `begin` again. A move
        still registered as running stays so until `end` (a lapse stops its robot). The
        number of ids dropped."""
        dropped = 0
        with self._cond:
            for activity_id in set(activity_ids):
                for session_id in list(self._holders.get((world, activity_id), ())):
                    session = self._sessions.get((world, session_id))
                    if session is not None:
                        self._drop(world, session_id, session, activity_id)
                        dropped += 1
        return dropped

    def held(self, world: str, session_id: str) -> frozenset[str]:
        """The ids bound to the session (empty when it is not there): what `begin` admits."""
        with self._cond:
            session = self._sessions.get((world, session_id))
            return frozenset(session.bound) if session is not None else frozenset()

    def sweep_due(self) -> dict[str, set[str]]:
        """The bound ids by world when a sweep is due (more ids bound, over all sessions, than
        `_sweep_at`), else {}: the caller drops the settled ones (`settle`) and reports what
        it kept (`swept`)."""
        with self._cond:
            if len(self._holders) <= self._sweep_at:
                return {}
            out: dict[str, set[str]] = {}
            for world, activity_id in self._holders:
                out.setdefault(world, set()).add(activity_id)
            return out

    def swept(self) -> None:
        """A sweep ended: the next is due once twice what is bound now is bound."""
        with self._cond:
            self._sweep_at = max(SWEEP_MIN, 2 * len(self._holders))

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
                pending = len(session.bound - session.running.keys())
                for activity_id in list(session.bound):
                    self._drop(key[0], key[1], session, activity_id)
                moving = sorted(set(session.running.values()))
                # A lapse that stops a robot or ends waiting moves is a warning; one of an idle
                # session (a planner that simply went away) is news only.
                log.log(
                    logging.WARNING if moving or pending else logging.INFO,
                    "session lapsed",
                    extra={
                        "world": key[0],
                        "session_id": key[1],
                        "robots": moving,
                        "pending": pending,
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


__all__ = ["MAX_TTL_MS", "MIN_TTL_MS", "SWEEP_MIN", "SessionRefused", "Sessions"]
