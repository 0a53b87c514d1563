"""`physical_ai.robot_move` as a runtime family (Contract C): components, projection, staging,
and the adapter that drives the DYNAMIXEL move adapter under the worker's fenced attempts.

Components (entity = the move's activity id):
    physical_ai.robot_move.intent       {"kind", "robot", "targets"}: a committed move request
    physical_ai.robot_move.observation  the factual outcome: result reference, digest, summary

The projection asks for one Activity per intent without an observation. The adapter binds the
catalog's provider operation id in the operations journal before the first byte (the journal
records the request digest under that id), and maps the device adapter's conclusions onto the
runtime's: Recovered -> the durable result artifact, ConfirmedAbsent -> a retry-guard artifact
(port lock + read-back), Unknown -> the evidence document as an artifact (the catalog records it
by ref and digest under its revision; nothing else keeps it) and a long retry delay (an operator
decides; reconciliation never executes). A device that cannot be read is Unknown
(`device_unreadable`). The adapter serves `prove_reissue` on its host's control socket: the
adapter's proof behind an operator's re-issue, taken while this process owns the port.
A request that can never run (malformed, unknown robot or joint, an absolute target outside the
configured limits) gets a failed result before any byte is sent or the port is opened; a
relative move whose goals, planned from a fresh read-back, fall outside the limits gets one
before any byte is written (`MoveRefused`). A failed result is terminal: never retried.
A request with `not_after_ms` whose time has passed on this host's clock gets a failed
`expired` result in place of its start marker (no attempt starts, no byte is sent). The time is
the store's (`MoveStore.passed`: the wall clock, never below the store's clock floor), and the
floor is raised to at least `not_after_ms` durably before the result is returned, so a move
once decided expired is expired for every later or stale attempt whatever the clock does. A
move that was never bound in the operations journal (no attempt of it ever began, no cancel
was recorded) is decided expired without binding it: nothing is written to the journal, the
result (inline in its reference) is the only record, in the catalog; an execute or reconcile
attempt decides so under the robot's lock. A move the gRPC service cancelled (a `cancel` proof
in its journal operation) gets a failed `cancelled` result, checked before and again after the
start marker, before any byte.
A request with `session_id` (the gRPC service's session heartbeat) starts only through the
family's `SessionGate` (given by `tether serve` through its `ServeContext`; this package never
imports serve): `begin` says, atomically with registering the running move, whether the
session is live and the move was submitted under it. A move that may not start gets a failed
`session_lapsed` result in place of its start marker (no attempt starts, no byte is sent); a
lapse later is the gate's owner's business (it stops the robot through the daemon's stop path,
so the attempt ends as after a Stop). Without a gate (a worker process, `tether move`) no
session is live, so such a move never starts. `end` runs when the attempt ends, however.

Ports: given a `host` (the daemon's device host, `tether serve`), the adapter uses that one
owner of the ports and never opens, drops or closes one itself (a robot the host has not
connected yet is connected on first use; the daemon's shutdown applies the stop policy).
Without one (a worker process, `tether move` standalone), the adapter keeps its own
`RobotHost` between moves. A normal end of the worker's use of a
port (`close(safe_stop=False)`, what `tether move` does after a completed move) releases it with
the arm as the move left it; a shutdown (`close()`, also at interpreter exit on SIGTERM), a
transport fault or a move that did not complete applies the robot's stop policy.
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from tether._crash import crash_point
from tether.activities import Evidence, ResultRef, RetryGuard
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.host import RobotHost
from tether.adapters.dynamixel.move import (
    DEVICE_UNREADABLE,
    DynamixelMoveAdapter,
    MoveRefused,
    check_request,
    park_unreadable,
    read_joints,
    si_read_back,
)

# `families_from_env` reads the host configuration's path from `CONFIG_ENV` (re-exported).
from tether.devices.config import CONFIG_ENV as CONFIG_ENV
from tether.errors import HostConfigError, TetherError, TransportError
from tether.families.robot_move.journal import MoveStore, Operation, now_ms
from tether.families.robot_move.operator import RobotMoveReview
from tether.families.robot_move.request import (
    EVIDENCE_MEDIA_TYPE,
    FAMILY,
    GUARD_MEDIA_TYPE,
    KINDS,
    RESULT_MEDIA_TYPE,
    ConfirmedAbsent,
    MoveRequest,
    MoveRequestError,
    Recovered,
    Unknown,
    canonical_json,
)
from tether.operations import JournalError
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    EntityProjection,
    EntityView,
    Family,
    FamilyError,
    StagedResult,
    unobserved_intent,
)
from tether.runtime import ConfirmedAbsent as RuntimeAbsent
from tether.runtime import Recovered as RuntimeRecovered
from tether.runtime import Unknown as RuntimeUnknown
from tether.world import ComponentWrite

if TYPE_CHECKING:
    from tether.devices.host import DeviceHost

#: The adapter's own crash point (`TETHER_CRASH_AT`): the journal operation is bound, no
#: attempt has started (the window a reconcile must read as "never started").
CRASH_POINTS = ("robot_move.after_journal_bind",)
INTENT = "physical_ai.robot_move.intent"
OBSERVATION = "physical_ai.robot_move.observation"
#: An Unknown that needs an operator is reconciled again only after this long.
OPERATOR_RETRY_MS = 60_000
#: How often a move waiting for its robot (`queued`) checks whether it was cancelled (s).
QUEUED_CHECK_S = 0.1


class SessionGate(Protocol):
    """What the family needs of the host's sessions (`tether.serve.sessions.Sessions`)."""

    def begin(self, world: str, session_id: str, activity_id: str, robot: str) -> bool:
        """Whether the move may start now (its session live, the move submitted under it);
        True registers it as running on `robot` until `end`."""
        ...

    def end(self, world: str, session_id: str, activity_id: str) -> None:
        """The attempt that `begin` let start has ended."""
        ...


def unreadable_evidence(op: Operation, request: MoveRequest, error: Exception) -> dict[str, Any]:
    """Evidence of a move whose reconciliation could not read the device: whether its attempt
    recorded a pre-image (as a device's own reconcile says it), never the pre-image itself,
    which holds the device's own units (the sent log is in SI units already)."""
    attempts = op.attempts()
    return {
        "operation_id": op.id,
        "reason": DEVICE_UNREADABLE,
        "error": str(error),
        "command": request.as_dict(),
        "retry_class": request.retry_class.value,
        "sent": op.sent(),
        "preimage": bool(attempts) and op.preimage(attempts[-1]) is not None,
        "read_back": None,
        "hardware_errors": {},
    }


def intent(activity_id: str, request: MoveRequest) -> ComponentWrite:
    """The component write that asks for one move."""
    return ComponentWrite(activity_id, INTENT, request.as_dict())


def project_move(view: EntityView) -> list[ActivityRequest]:
    """The Activity of one entity: its intent if not yet observed, bound to the host its intent
    names (the host that owns the robot and committed it), so another host that projects it
    (recovering a shared world) never takes that host's move (pure: the entity only)."""
    return [
        ActivityRequest(r.kind, r.activity_id, r.input, host=_host_of(r.input))
        for r in unobserved_intent(view, INTENT, OBSERVATION, KINDS)
    ]


def _host_of(value: Any) -> str:
    host = value.get("host") if isinstance(value, dict) else None
    return host if isinstance(host, str) else ""


#: One Activity per intent not yet observed (pure: the snapshot only), per entity, so the
#: required projector runs it on what a tick wrote (`EntityProjection`).
project = EntityProjection(project_move)


def project_on(host_name: str) -> EntityProjection:
    """`project`, each move admitted bound to the host its intent names, else to `host_name`
    (the host owning the robots): only a worker of that host claims it (pure: a closure over
    a name)."""

    def project_bound(view: EntityView) -> list[ActivityRequest]:
        return [
            ActivityRequest(r.kind, r.activity_id, r.input, host=r.host or host_name)
            for r in project_move(view)
        ]

    return EntityProjection(project_bound)


def stage(staged: StagedResult) -> list[ComponentWrite]:
    """The observation fact of one durable result (pure, idempotent)."""
    try:
        doc = json.loads(staged.payload) if staged.payload else {}
    except ValueError:
        doc = {}
    summary = {
        k: doc.get(k)
        for k in ("outcome", "attempt", "goals", "final", "verdict", "code")
        if k in doc
    }
    value = {
        "result_ref": staged.result.ref,
        "result_digest": staged.result.digest,
        "failed": staged.result.failed,
        "summary": summary,
    }
    return [ComponentWrite(staged.key.activity_id, OBSERVATION, value)]


class RobotMoveAdapter:
    """Contract C adapter. Owns one `RobotHost` (the ports) for the life of the worker process;
    one move per robot at a time. `close()` safe-stops and releases the ports."""

    def __init__(
        self,
        config: HostConfig,
        store_root: str | Path,
        *,
        settle_timeout_s: float = 30.0,
        host: DeviceHost | None = None,
        sessions: SessionGate | None = None,
    ) -> None:
        self.config = config
        self.store = MoveStore(store_root)
        self.sessions = sessions
        self.settle_timeout_s = settle_timeout_s
        self._mutex = threading.Lock()
        self._robot_locks: dict[str, threading.Lock] = {}
        #: The operation each robot's attempt in this process runs now (its robot lock held).
        self._running: dict[str, str] = {}
        # A host given by the caller (the daemon) is shared: this adapter never closes it.
        self._shared = host is not None
        self._host: RobotHost | None = cast("RobotHost | None", host)
        self._atexit = False
        if host is not None:
            host.add_handler("prove_reissue", self._on_prove)
            host.add_handler("read_back", self._on_read_back)
            host.add_handler("cancel", self._on_cancel)
            host.add_handler("started", self._on_started)

    def _on_started(self, request: dict[str, Any]) -> dict[str, Any]:
        """Whether a move's journal holds a start marker of the attempt that runs it now
        (`started`): an attempt that never wrote one (waiting for its robot, or past its
        `not_after` and recorded `expired`) never started, whatever its catalog attempt says;
        nor did the next one an operator's re-issue or a confirmed absence allowed (its proof
        is in the journal) until it writes its own."""
        op = self.store.get(str(request.get("operation_id")))
        if op is None or not op.attempts():
            return {"started": False}
        upcoming = op.next_attempt()
        allowed = op.guard(upcoming) is not None or op.reissue_proof(upcoming) is not None
        return {"started": not allowed}

    def _on_cancel(self, request: dict[str, Any]) -> dict[str, Any]:
        """Cancel a move (the gRPC service's `Cancel`): a `cancel` proof in its journal
        operation (bound here if the worker has not yet), then whether an attempt had started
        and is not over (`started`) and whether the journal holds its terminal result already
        (`terminal`: the catalog may not have recorded it yet). The attempt checks the proof
        before and after its start marker, so a move reported not started never sends a
        byte."""
        req = MoveRequest.from_dict(request.get("request"))
        op = self.store.bind(str(request.get("operation_id")), req)
        try:
            op.entry.record_proof("cancel", {"cancelled_at_ms": now_ms()})
        except JournalError:  # a cancel recorded before stands
            pass
        with self._mutex:
            holder = self._running.get(req.robot)
        return {
            "started": bool(op.attempts()) and not op.terminal,
            "terminal": op.terminal,
            # Its attempt runs in this process now: the robot's motion is this operation's.
            "running": holder == op.id and not op.terminal,
            # Another operation's attempt runs the robot now: this one's (an attempt of an
            # earlier process, ended with it) can be moving it no more.
            "other": holder is not None and holder != op.id,
        }

    def _lock(self, robot: str) -> threading.Lock:
        with self._mutex:
            return self._robot_locks.setdefault(robot, threading.Lock())

    def _connected(self, robot: str) -> RobotHost:
        with self._mutex:
            if self._host is None:
                if self._shared:  # pragma: no cover - a shared host is never dropped
                    raise FamilyError("the shared device host is closed")
                self._host = RobotHost(self.config)
                if not self._atexit:
                    # Shutdown of the worker process (e.g. `tether worker` on SIGTERM) safe-stops
                    # the robots this adapter connected, even if nobody calls close().
                    atexit.register(self.close)
                    self._atexit = True
            host = self._host
        host.forget_lost()  # a port whose adapter went away is opened anew, not used dead
        if robot not in host.identities:
            host.connect(robot)
            host.add_handler("prove_reissue", self._on_prove)
            host.add_handler("read_back", self._on_read_back)
        return host

    def connect(self, robot: str) -> None:
        """Open `robot`'s port now, as its first attempt would (`PortBusy`: another process
        owns it; `TransportError`: it does not answer). Nothing is sent but the identity
        checks of a connect."""
        self._connected(robot)

    def _on_read_back(self, request: dict[str, Any]) -> dict[str, Any]:
        """A fresh read-back in SI units (Present Velocity included) for an operator."""
        host = self._host
        if host is None:
            raise FamilyError("no robot is connected")
        robot = self.config.robot(str(request.get("robot")))
        return si_read_back(robot, read_joints(host.bus_for(robot), robot))

    def _on_prove(self, request: dict[str, Any]) -> dict[str, Any]:
        """The owner's side of an operator's re-issue: the proof, taken under the move's lock
        while this process owns the port."""
        op = self.store.get(str(request.get("operation_id")))
        if op is None:
            raise FamilyError(f"no operation {request.get('operation_id')}")
        req = op.request
        with self._lock(req.robot):
            host = self._connected(req.robot)
            adapter = DynamixelMoveAdapter(self.config, host)
            return adapter.prove_reissue(op, req, int(request["fence_floor"]))

    def _drop_host(self, *, safe_stop: bool = True) -> None:
        """Release the ports (reconnect later): after a transport failure or at shutdown with
        the robots' stop policy applied; at a normal end without it (`safe_stop=False`)."""
        if self._shared:
            return  # the daemon owns the ports: it alone stops and releases them
        with self._mutex:
            host, self._host = self._host, None
        if host is not None:
            if not safe_stop:
                # `RobotHost.close` safe-stops the robots it lists as connected: a normal end
                # lists none, so the arm keeps its goal and torque.
                host.identities.clear()
            host.close()

    def close(self, *, safe_stop: bool = True) -> None:
        """Release the ports; the stop policy applies unless this is a normal end."""
        self._drop_host(safe_stop=safe_stop)

    def _device(self, ctx: AttemptContext, host: RobotHost) -> DynamixelMoveAdapter:
        def progress(content: dict[str, Any]) -> None:
            ctx.heartbeat()  # a lost lease stops the move (the safe-stop runs on the way out)
            ctx.progress(content)

        return DynamixelMoveAdapter(
            self.config,
            host,
            progress=progress,
            settle_timeout_s=self.settle_timeout_s,
            fence=ctx.fence,
            heartbeat=ctx.heartbeat,
        )

    @staticmethod
    def _put(ctx: AttemptContext, doc: dict[str, Any], media_type: str) -> ResultRef:
        return ctx.artifacts.put_bytes(canonical_json(doc), media_type)

    def _refused(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef | None:
        """A failed result for a request that can never run (malformed, unknown robot or joint,
        an absolute target outside the configured limits), decided before any byte is sent,
        the port is opened or the operation is bound; None for a request that may run."""
        try:
            req = MoveRequest.from_dict(request)
            check_request(self.config.robot(req.robot), req)
        except (MoveRequestError, HostConfigError) as exc:
            doc = {
                "operation_id": ctx.operation_id,
                "outcome": "refused",
                "code": getattr(exc, "code", "bad_request"),
                "error": str(exc),
            }
            return replace(self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True)
        return None

    def _failed(self, ctx: AttemptContext, op: Operation, exc: MoveRefused) -> ResultRef:
        """The terminal failed result of a move refused before any byte (journal first)."""
        doc = {
            "operation_id": ctx.operation_id,
            "outcome": "refused",
            "code": exc.code,
            "error": str(exc),
            "details": exc.details,
        }
        op.record_failed(doc)
        return self._published(ctx, op) or replace(
            self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True
        )

    def _published(self, ctx: AttemptContext, op: Operation) -> ResultRef | None:
        """The result the journal already holds (a success, or a terminal failure)."""
        done = op.result()
        if done is not None:
            return self._put(ctx, done, RESULT_MEDIA_TYPE)
        failed = op.failed()
        if failed is not None:
            return replace(self._put(ctx, failed, RESULT_MEDIA_TYPE), failed=True)
        return None

    def _expired(self, ctx: AttemptContext, req: MoveRequest) -> dict[str, Any] | None:
        """The `expired` failure of a move past its `not_after_ms` on the store's time (the
        clock floor raised to it first, durably), else None."""
        at = req.not_after_ms
        if at is None or not self.store.passed(at):
            return None
        self.store.raise_clock_floor(at)
        return {
            "operation_id": ctx.operation_id,
            "outcome": "expired",
            "code": "expired",
            "error": f"not started: the host's clock passed not_after_ms {at}",
        }

    def _expired_unbound(self, ctx: AttemptContext, req: MoveRequest) -> ResultRef | None:
        """The failed `expired` result of a move never bound in the journal (call under the
        robot's lock): no attempt of it ever began (a start marker needs the binding) and
        none ever will (past `not_after_ms` on the store's time), so there is no provider fact
        to record; the result is the whole record. None when the move is bound, or not
        expired."""
        if self.store.get(ctx.operation_id) is not None:
            return None  # an earlier attempt or a cancel bound it: the journal decides
        doc = self._expired(ctx, req)
        if doc is None:
            return None
        return replace(self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True)

    def _not_startable(
        self, ctx: AttemptContext, op: Operation, req: MoveRequest
    ) -> ResultRef | None:
        """The terminal failed result of a move that may not start: past its `not_after_ms`
        (`expired`) or cancelled (`cancelled`); None for one that may."""
        if op.entry.proof("cancel") is not None:
            doc: dict[str, Any] = {
                "operation_id": ctx.operation_id,
                "outcome": "cancelled",
                "code": "cancelled",
            }
            if op.sent():  # frames an earlier attempt sent stay sent: the cancel cut it
                doc["sent"] = True  # (a flag, not words: the document stays small enough to
                # travel inline in its reference; the gRPC view says it in words)
        else:
            expired = self._expired(ctx, req)
            if expired is None:
                return None
            doc = expired
        op.record_failed(doc)
        return self._published(ctx, op) or replace(
            self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True
        )

    def _session_lapsed(self, ctx: AttemptContext, op: Operation, req: MoveRequest) -> ResultRef:
        """The terminal failed result of a move whose session is not live (`session_lapsed`)."""
        where = "no session gate on this host" if self.sessions is None else "not live"
        doc = {
            "operation_id": ctx.operation_id,
            "outcome": "session_lapsed",
            "code": "session_lapsed",
            "error": f"not started: session {req.session_id!r} is {where} (its heartbeat "
            "lapsed, or the host restarted since it was submitted)",
        }
        op.record_failed(doc)
        return self._published(ctx, op) or replace(
            self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True
        )

    def never_starts(self, request: dict[str, Any]) -> bool:
        """Whether `execute` of `request` ends without a start marker, from the request alone:
        a well-formed move already past its `not_after_ms` on the store's time (its floor as
        this process knows it). A hint for the worker (it shares such attempts' catalog
        transactions); `execute` decides again."""
        try:
            req = MoveRequest.from_dict(request)
        except MoveRequestError:
            return False
        return req.expired(max(now_ms(), self.store.clock_floor_ms()))

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        refused = self._refused(ctx, request)
        if refused is not None:
            return refused
        req = MoveRequest.from_dict(request)
        lock = self._lock(req.robot)
        queued = lock.locked()
        if queued:  # one move per robot at a time: this one waits, and says so (this attempt)
            ctx.progress(
                {"robot": req.robot, "phase": "queued", "fraction": 0.0, "attempt": ctx.attempt}
            )
        cancelled = self._robot_or_cancelled(ctx, req, lock)
        if cancelled is not None:
            return cancelled
        try:
            expired = self._expired_unbound(ctx, req)
            if expired is not None:
                return expired
            op = self.store.bind(ctx.operation_id, req)
            crash_point("robot_move.after_journal_bind")
            published = self._published(ctx, op)
            if published is not None:
                return published
            number = op.next_attempt()
            guard = op.guard(number) or op.reissue_proof(number)
            if number > 1 and guard is None:
                raise FamilyError(
                    f"{ctx.operation_id}: attempt {number} has no retry guard in the store"
                )
            stopped = self._not_startable(ctx, op, req)
            if stopped is not None:
                return stopped
            session = req.session_id
            world, activity = ctx.key.world_id, ctx.key.activity_id
            if session is not None and (
                self.sessions is None
                or not self.sessions.begin(world, session, activity, req.robot)
            ):
                return self._session_lapsed(ctx, op, req)
            with self._mutex:
                self._running[req.robot] = ctx.operation_id
            try:
                return self._started(ctx, op, req, number, guard, queued=queued)
            finally:
                with self._mutex:
                    self._running.pop(req.robot, None)
                if session is not None and self.sessions is not None:
                    self.sessions.end(world, session, activity)
        finally:
            lock.release()

    def _robot_or_cancelled(
        self, ctx: AttemptContext, req: MoveRequest, lock: threading.Lock
    ) -> ResultRef | None:
        """Take the robot's lock (None: it is held now). A move that waits for it behind
        another (`queued`) and is cancelled meanwhile, before it ever started, ends at once
        with its `cancelled` result (the lock not taken), not once every move ahead of it on
        the robot has run."""
        while not lock.acquire(timeout=QUEUED_CHECK_S):
            cancelled = self._cancelled_unstarted(ctx, req)
            if cancelled is not None:
                return cancelled
        return None

    def _cancelled_unstarted(self, ctx: AttemptContext, req: MoveRequest) -> ResultRef | None:
        """The result of a move cancelled before any attempt of it started (none wrote a start
        marker, so it never sent a frame), or None. Needs no robot: its journal alone says."""
        op = self.store.get(ctx.operation_id)
        if op is None or op.entry.proof("cancel") is None or op.attempts():
            return None
        return self._published(ctx, op) or self._not_startable(ctx, op, req)

    def _started(
        self,
        ctx: AttemptContext,
        op: Operation,
        req: MoveRequest,
        number: int,
        guard: dict[str, Any] | None,
        *,
        queued: bool = False,
    ) -> ResultRef:
        """The attempt from its start marker on (the robot's lock held, every check passed);
        `queued`: it said it waited for the robot, so it says it runs once its marker is
        written (a move that did not wait says nothing before its motion's own progress)."""
        try:
            host = self._connected(req.robot)
            # The speed limit is the generic host's first-motion policy; a re-issue is a
            # first motion whatever moved since its proof.
            reissue = (guard or {}).get("reason") == "operator_reissue"
            op.start_attempt(number, {"fence": ctx.fence, "catalog_attempt": ctx.attempt})
            if op.entry.proof("cancel") is not None:  # a cancel raced the start marker
                cancelled = self._not_startable(ctx, op, req)
                assert cancelled is not None
                return cancelled
            if queued:  # started (its marker written): no longer waiting
                ctx.progress({"robot": req.robot, "phase": "running", "fraction": 0.0})
            result = self._device(ctx, host).execute(op, number, req, reissue=reissue)
        except MoveRefused as exc:  # refused from the fresh read-back: nothing was sent
            return self._failed(ctx, op, exc)
        except TransportError:
            self._drop_host()
            raise
        return self._put(ctx, op.record_result(result), RESULT_MEDIA_TYPE)

    def reconcile(
        self, ctx: AttemptContext, request: dict[str, Any]
    ) -> RuntimeRecovered | RuntimeAbsent | RuntimeUnknown:
        if self.store.get(ctx.operation_id) is None:  # never bound: nothing was ever sent
            refused = self._refused(ctx, request)
            if refused is not None:
                return RuntimeRecovered(refused)
        req = MoveRequest.from_dict(request)
        with self._lock(req.robot):
            # Never bound and expired: no attempt ever began and none ever will (the result
            # of an execute attempt that decided so, then lost its lease before recording it).
            expired = self._expired_unbound(ctx, req)
            if expired is not None:
                return RuntimeRecovered(expired)
            op = self.store.bind(ctx.operation_id, req)
            published = self._published(ctx, op)
            if published is not None:
                return RuntimeRecovered(published)
            if not op.attempts():
                # No attempt of it ever began (no start marker): nothing was sent. One that
                # may not start now (cancelled, or past its `not_after_ms`) ends so from the
                # journal alone, never parked because its device cannot be read (gone, say).
                stopped = self._not_startable(ctx, op, req)
                if stopped is not None:
                    return RuntimeRecovered(stopped)
            try:
                conclusion = self._device(ctx, self._connected(req.robot)).reconcile(op, req)
            except MoveRefused as exc:  # no pre-image: nothing was sent, and it can never run
                return RuntimeRecovered(self._failed(ctx, op, exc))
            except TransportError as exc:
                # The device cannot be read (a dead bus after ACTION): nothing can be proved,
                # so the move is parked for an operator with what the journal knows, and
                # stays parked once the device reads again (`park_unreadable`).
                self._drop_host()
                park_unreadable(self.config, op, self.config.robot(req.robot))
                conclusion = Unknown(unreadable_evidence(op, req, exc))
            if isinstance(conclusion, Recovered):
                doc = op.record_result(conclusion.result)
                return RuntimeRecovered(self._put(ctx, doc, RESULT_MEDIA_TYPE))
            if isinstance(conclusion, ConfirmedAbsent):
                ref = self._put(ctx, op.record_absent(conclusion), GUARD_MEDIA_TYPE)
                return RuntimeAbsent(RetryGuard(ref=ref.ref, digest=ref.digest))
            retry = conclusion.retry_after_ms or OPERATOR_RETRY_MS
            if self._unchanged(ctx, conclusion.evidence):
                # Parked already, and the device reads as its evidence says (the operator
                # review's own test): the same evidence again, so its revision stays and a
                # decision being made on it is not refused as stale.
                assert ctx.evidence is not None
                return RuntimeUnknown(ctx.evidence, retry)
            # The evidence document is made durable in the artifact store; the catalog records
            # it by ref and digest under its own revision (no second record of it).
            ref = self._put(ctx, {**conclusion.evidence, "at_ms": now_ms()}, EVIDENCE_MEDIA_TYPE)
            return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), retry)

    def _unchanged(self, ctx: AttemptContext, evidence: dict[str, Any]) -> bool:
        """Whether a parked Activity's evidence (`ctx.evidence`) still holds: the same reason,
        and a read-back in which nothing that matters changed (the operator review's
        `changed_since`, which refuses a decision as `state_changed` otherwise)."""
        if ctx.evidence is None:
            return False
        try:
            held = json.loads(ctx.artifacts.get_bytes(ctx.evidence.ref, ctx.evidence.digest))
        except (TetherError, ValueError):
            return False  # unreadable: a fresh document, a new revision
        if not isinstance(held, dict) or held.get("reason") != evidence.get("reason"):
            return False
        fresh = evidence.get("read_back")
        if not isinstance(fresh, dict) or not isinstance(held.get("read_back"), dict):
            return False
        try:
            changes = RobotMoveReview(self.config, self.store).changed_since(held, fresh)
        except (TetherError, KeyError, TypeError, ValueError):
            return False
        return not changes


def robot_move_family(
    config: HostConfig,
    store_root: str | Path,
    *,
    settle_timeout_s: float = 30.0,
    host: DeviceHost | None = None,
    host_name: str = "",
    sessions: SessionGate | None = None,
    device_host: str | None = None,
) -> Family:
    """The family to register with a runtime `Host`. Its adapter owns the robots' ports, or
    uses `host`'s (the daemon's device host) when one is given. With `host_name`, each move is
    admitted bound to that host (device-bound claims). `sessions`: the gate a move with a
    `session_id` starts through (none: such a move never starts). `device_host`: the host
    whose robots `config` names (`Family.device_host`)."""
    adapter = RobotMoveAdapter(
        config, store_root, settle_timeout_s=settle_timeout_s, host=host, sessions=sessions
    )
    return Family(
        name=FAMILY,
        kinds=KINDS,
        project=project_on(host_name) if host_name else project,
        adapter=adapter,
        stage=stage,
        device_host=device_host,
        # Only where the adapter opens the ports itself (not over the daemon's device host).
        devices_busy=ports_busy(config) if host is None else None,
    )


def ports_busy(config: HostConfig) -> Callable[[], str | None]:
    """`Family.devices_busy` of the robots of `config`: the first of its ports another process
    owns (its identity lock held), named with the owner's pid and control socket, and said to
    be the host's `tether serve` when it is; None when none is owned."""

    def busy() -> str | None:
        from tether.devices.control import daemon_socket
        from tether.devices.ports import owner_of

        for name, port in sorted(config.ports.items()):
            try:
                owned = owner_of(config.state_dir, port)
            except Exception:  # not plugged in now: nobody owns it
                continue
            if owned is None:
                continue
            identity, owner = owned
            socket = owner.get("socket")
            said = f"port {name} ({identity.device}) is owned by pid {owner.get('pid')}"
            if isinstance(socket, str) and socket:
                said += f" (socket {socket})"
                if socket == daemon_socket(Path(config.state_dir)):
                    said += ", this host's tether serve, whose workers run its robots' moves"
            return said
        return None

    return busy


def submit_intent(config: HostConfig, host_name: str = "") -> Any:
    """`tether serve`'s admission of a submitted move: the request checked (kind, robot,
    joints, an absolute move's limits) before anything is committed, then its intent write,
    naming this host (`host_name`) as the one that owns the robot. A client never names it."""

    def build(activity_id: str, kind: str, request: dict[str, Any]) -> ComponentWrite:
        if "host" in request:
            raise MoveRequestError(
                "host: set by the host that owns the robot, never by a submitted request"
            )
        req = MoveRequest.from_dict({**request, "kind": kind})
        check_request(config.robot(req.robot), req)
        return intent(activity_id, replace(req, host=host_name) if host_name else req)

    return build


def serve_families(ctx: Any) -> list[tuple[Family, Any]]:
    """`tether serve`'s factory (`tether.serve.families`): the robot_move family over the
    daemon's own device host, its operations journal in `<data_dir>/robot_move`, each with its
    submit admission; moves with a `session_id` start through the daemon's sessions."""
    config = cast(HostConfig, ctx.config)
    # Each move is admitted bound to this host, as a standalone `tether move` on the same
    # data dir admits it (`tether.serve.config.host_name_for`): one intent is never admitted
    # under two hosts (a conflict that would stop the world's projection).
    host_name = str(getattr(ctx, "host_name", ""))
    family = robot_move_family(
        config,
        Path(ctx.data_dir) / "robot_move",
        settle_timeout_s=ctx.settle_timeout_s,
        host=ctx.device_host,
        host_name=host_name,
        sessions=getattr(ctx, "sessions", None),
    )
    # On a shared world a move's intent names its host (another host may project it); on
    # this host's own world the projection binds it here anyway, and an intent stays the
    # request as `tether move` writes it directly.
    shared = bool(getattr(ctx, "shared_world", False))
    return [(family, submit_intent(config, host_name if shared else ""))]


def families_from_env(data_dir: Path) -> list[Family]:
    """Worker-process factory: the robot_move family over `$TETHER_HOST_CONFIG`, its operation
    store in `<data_dir>/robot_move`."""
    import os

    from tether.adapters.dynamixel.config import load_config
    from tether.serve.config import host_name_for

    path = os.environ.get(CONFIG_ENV)
    if not path:
        from tether.runtime._errors import bad_families

        raise bad_families(
            f"the robot_move family needs the host configuration: give tether worker"
            f" --config host.toml (or set {CONFIG_ENV} to it)"
        )
    config = load_config(path)
    return [
        robot_move_family(config, Path(data_dir) / "robot_move", device_host=host_name_for(config))
    ]
