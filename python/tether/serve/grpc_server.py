"""The RobotControl gRPC service (`proto/tether/robot/v1/robot_control.proto`) on `tether serve`.

`[serve] grpc = "127.0.0.1:50051"` mounts it in the daemon (default "off"). There is no second
state machine here: every RPC reads or writes through the daemon's own paths.

Key mapping (documented contract): a request of principal P under `operation_id` X is the
Activity `(world "grpc-P", kind, activity X)`, where the kind is the family's: for a joint move
`physical_ai.robot_move.absolute` or `.relative` (device: a robot of host.toml's `[robots]`),
for a sim reach `physical_ai.sim_episode` (device "sim", `SIM_DEVICE`: the simulated arm,
there while `[serve] families` serves `tether.serve.families:sim_families`; a robot named
"sim" in `[robots]` is that robot, and the simulated arm is then not served over gRPC). The
intent is keyed by X alone in that world, so the same X with another command or kind is
another request under the same id (`ALREADY_EXISTS`; across families `_submit` checks it).
Two principals' equal ids are two worlds, never one Activity. On a world ledger shared by hosts
the world is also named for the daemon's host, `grpc-P@HOST` (`world_for`): each host writes
only its own worlds, so two hosts' daemons never take each other's writer.

A sim reach (`_execute_sim`): `SimReach{seed, target_x, target_y, episodes, steps}` and
`not_after_ms` are the family's submitted reach (`tether.families.sim.family.submit_intent`:
seed 0..2^63-1, target in the arm's reachable ring, episodes 1..1000, steps >= 1, each refused
as `INVALID_ARGUMENT` naming `sim_reach.<field>`, nothing recorded). Its memory cap is the
family's admission check: a request past it is committed and ends as a recorded failure
(`request_too_large`). The same seed and request give the same trajectory digest. Its
`Operation`: device "sim", progress from the episode steps (`steps / total`), the result a
reference document (`application/vnd.tether.sim-episode.reference+json`: the episode result
file's ref, digest, media type, size and summary, the trajectory digest among it) whose digest
is its own, evidence the family's Unknown document (an episode process that may still run).
A sim reach takes no session, cannot be cancelled once committed and has nothing to read back;
`Stop(device="sim")` is `FAILED_PRECONDITION` (nothing moves: Stop acts on robots).

Rules:
- `Execute` checks the request (operation id, device, command, `not_after_ms`, the family's
  own limits) before anything is committed (`INVALID_ARGUMENT` naming the field's path, nothing
  recorded), then commits it through `Daemon.submit`, the control socket's `submit` path:
  the same id and request return the existing operation; another request is `ALREADY_EXISTS`.
  It answers once the intent is committed: a new operation with the catalog record its tick
  admitted (`pending`, that record's revision; no read after the commit), an existing one as
  its record reads then. The request digest covers operation id, device, command and
  `not_after_ms` (`request_digest`).
- `not_after_ms` is required; the server's clock decides it: the family records an `expired`
  failure in place of the start marker once now >= not_after_ms.
- Sessions (`tether.serve.sessions`, the daemon's `sessions`): `Heartbeat(session_id, ttl_ms)`
  creates or extends the session (world of the principal, session_id) until the server's now
  + ttl_ms (`MIN_TTL_MS`..`MAX_TTL_MS`, else `INVALID_ARGUMENT` on `ttl_ms:`) and answers
  `expires_ms` (server clock); it waits on no storage and not on the work lane. `Execute`
  with `session_id` binds the request to the live session of its principal before the intent
  is committed (`FAILED_PRECONDITION` on `session_id:` when there is none, nothing recorded;
  the identical retry of an already committed request is answered with it). The session id
  is part of the intent, hence of the digest: a retry must re-send it. The family starts the
  move only through the sessions' gate (`begin`, under the robot's lock, before the start
  marker): a lapsed, unknown or other incarnation's session records `session_lapsed` and
  sends nothing. A lapse mid-motion: the watchdog stops each robot running a move of that
  session through `Daemon.stop_devices` (the path `Stop` uses: held and latched), so the move is
  reconciled as after a Stop (awaiting an operator, or failed), never succeeded. In memory
  only: after a daemon restart every session is unknown, so a pending move of one never
  starts unless its client re-sends the identical Execute under a live session. A session
  holds an operation until it has a result (`Sessions.settle`, from the doorbell's keyed
  result rings and the watch poller's sweep, `_sweep_sessions`), not for the session's life.
- An `Operation` is a view of the Activity's catalog record (state, `revision` = the record's
  version, attempts, result and evidence documents from the artifact store) and the daemon's
  latest progress. `updated_ms` is the latest time the record holds (`updated_ms`): the same
  on every read of an unchanged operation, never less on a later revision. States: pending
  (committed and not started per its journal's start marker: no attempt yet, claimed and
  waiting for its robot's move before it, progress phase `queued`, or claimed past its
  `not_after` and never started), running, succeeded, failed, cancelled, expired (a
  failed result whose outcome says so), unknown-awaiting-operator.
- `WatchOperation` sends the current view first (or only changes after `from_revision`), then
  every change, and ends at a terminal state (a recorded result), on its settled view (the
  result's settlement is the record's last change; `WATCH_SETTLE_MAX_S` at most past the
  result). An awaiting-operator view is
  not terminal: the stream stays until it is decided; a server shutting down ends it
  `UNAVAILABLE`, never OK, for the client to resume). A `from_revision` past the operation's
  revision (revisions are durable and only grow, so never one this server sent) is
  `OUT_OF_RANGE`.
- A failure of the server's own stores while answering (a catalog or world ledger that cannot
  be read or written, a COMMIT whose reply was lost) is `UNAVAILABLE` (`server_storage:`):
  retrying the identical request is safe (an Execute committed before is returned, never run
  twice). It is never `INVALID_ARGUMENT` or `NOT_FOUND`, which say something of the request.
- Threads: every call but `Stop` and `Heartbeat` holds one of `THREADS - STOP_RESERVE` RPC
  threads while it runs (an open watch for its whole life); one past them is answered
  `RESOURCE_EXHAUSTED` (`server_busy:`) at once, so a stop always finds a thread.
- `Stop` is the daemon's stop path (latch file and stop frames; no catalog, world or artifact
  store). Its credential check uses the in-memory cache of verified tokens (below), so it
  waits on no storage either once the token has been seen.
- `Resolve` needs an operator's credential on the call (`decide`); it goes through
  `tether.operator.decisions.resolve`, the daemon's `operator_resolve`. It names the operation
  `PRINCIPAL/OPERATION_ID` (or an id only one principal holds), and so may `GetOperation` for an
  operator or an observer (`read`): how an operator reads the evidence revision a decision is
  bound to. `ListOperations` for them lists every principal's operations on this host, each
  id so named (what awaits a decision: `states` UNKNOWN_AWAITING_OPERATOR). A planner reads
  and lists its own operations only.
- `Cancel` asks the family to cancel (`cancel` on the device host's handlers): before the start
  marker the move never starts (`CANCELLED_BEFORE_START`); while its attempt runs the device is
  stopped and latched (`STOPPED_WHILE_RUNNING`, reconciled as the daemon's stop is), and so it
  is when an attempt that runs no more started it (a server killed mid-move: the servos may
  still drive to its goals), unless another operation's attempt runs the robot now: then
  nothing is stopped (`NOT_RUNNING`) and it is reconciled. A stop that reaches no device (its
  adapter gone) is `UNAVAILABLE` (`device_unreachable:`), never "stopped". An operation
  awaiting an operator is not running and only `Resolve` decides it: its Cancel is
  `FAILED_PRECONDITION` (`awaiting_operator:`), asks the family nothing and stops nothing.
- `Reconcile` reads the device back (`read_back`) and refreshes a parked operation's evidence;
  it never sends motion.
- Auth: every call carries `authorization: Bearer <secret>`, verified by the daemon's
  `Authenticator` (argon2id hashes from host.toml, failures rate-limited per peer address,
  never against the local operator's bucket); missing or wrong is
  `UNAUTHENTICATED`, a role that may not do the call `PERMISSION_DENIED`. A verified secret is
  remembered only as an HMAC-SHA256 under a random per-process key (never the secret, never
  logged). Without `[tls]` the server binds loopback only (`ListenerPolicy`); with it, TLS
  from `TlsConfig.pem()`, and with `[tls] client_ca` mutual TLS (`require_client_auth` with
  `TlsConfig.client_roots()`: no certificate of those roots, no handshake; the bearer token
  still names the principal). Messages over `MAX_MESSAGE_BYTES` get grpcio's
  `RESOURCE_EXHAUSTED`.
- `grpc.health.v1`: "" and `tether.robot.v1.RobotControl` for the server, and
  `tether.robot.v1.RobotControl/<device>` per device, NOT_SERVING while the device is not
  connected or its port's device node is gone; `.../sim` is SERVING while the sim family is
  served. Server reflection is on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, Final, NoReturn, cast

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import (  # type: ignore[import-untyped]
    health,
    health_pb2,
)
from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]

from tether._coded import CodedError
from tether._config import HostConfigError
from tether._crash import crash_point
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether._listen import ListenerError, ListenerPolicy, address_text
from tether._log import guard_grpc_logs
from tether.activities import ActivityKey, ActivityRecord
from tether.devices.config import check_name
from tether.devices.credentials import ROLES, CredentialError, Principal, roles_for
from tether.devices.latch import PLANNER_CANCEL, stop_reason, stop_words, stopped_by
from tether.errors import TetherError, TransportError
from tether.runtime._errors import owned_by
from tether.serve.views import abandoned_words
from tether.world import WorldNotFound

log = logging.getLogger("tether.serve.grpc")

SERVICE: Final = "tether.robot.v1.RobotControl"
#: The world of a principal's operations.
WORLD_PREFIX: Final = "grpc-"
#: The largest message either side accepts (grpcio answers RESOURCE_EXHAUSTED above it).
MAX_MESSAGE_BYTES: Final = 1 << 20
#: RPC threads: each open WatchOperation holds one.
THREADS: Final = 320
#: RPC threads no other call may take: `Stop` and `Heartbeat` always find one, however many
#: watches are open and Executes queued. The others hold at most `THREADS - STOP_RESERVE`
#: threads at a time; one past that is answered RESOURCE_EXHAUSTED (`server_busy`) at once.
STOP_RESERVE: Final = 24
#: How often the watch poller reads every watched record (one thread for all watches): a
#: watch whose record's version moved is woken; its own progress and its recorded result
#: wake it at once (a claim is seen by its first progress or by this poll).
WATCH_POLL_S: Final = 0.5
#: A watch nothing woke re-reads its record after this long anyway (a backstop: the poller,
#: the doorbell and progress wake it first).
WATCH_BACKSTOP_S: Final = 5.0
#: How long a watch stays open past its operation's terminal state for its settlement (the
#: last change of its record: the tick that observed the result); it ends at once when it is
#: settled, and at this bound when it is not.
WATCH_SETTLE_MAX_S: Final = 10.0
#: RPCs that read or write storage run at most this many at a time (the work lane); `Stop`
#: never waits for it, so a flood of Executes and watches cannot crowd a stop out of the
#: interpreter (a waiting RPC thread is blocked, not runnable).
WORK_LANE: Final = 4
#: The most often a client may ping a quiet connection (the bridge's channel pings every
#: `remote.KEEPALIVE_S` while a call is open); more often is grpcio's `too_many_pings`.
PING_MIN_S: Final = 5.0
#: The server pings each connection this often, and closes one whose ping goes unanswered for
#: `KEEPALIVE_TIMEOUT_S`: the watches of a client gone without a reset (powered off, a cut
#: link) end, and give back their RPC threads.
KEEPALIVE_S: Final = 30.0
KEEPALIVE_TIMEOUT_S: Final = 10.0
#: How often device health is checked.
HEALTH_POLL_S: Final = 0.25
LIST_PAGE_MAX: Final = 500
#: A ListOperations page holds at most this many bytes of views (and at least one view): a
#: page of operations with their evidence documents stays well under `MAX_MESSAGE_BYTES`,
#: which the client would refuse; the rest follow on the next page.
LIST_PAGE_BYTES = 512 * 1024
OPERATION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+@-]{0,255}")
#: The error message of a failed outcome whose result document carries none (it is kept
#: small enough to travel in its reference).
_OUTCOME_WORDS: Final = {"cancelled": "cancelled before it started: nothing was sent"}
#: A cancelled outcome whose document says frames were sent before the cancel (`sent`).
_CANCELLED_WHILE_RUNNING: Final = (
    "cancelled while it ran: it is never run again (what it sent before the cancel stands)"
)
#: What an `OPERATION_ID` is, as a refusal says it.
OPERATION_ID_RULE: Final = "operation_id: 1..256 of [A-Za-z0-9_.:+@-], starting alphanumeric"
#: Joint-move kinds (the family's; named here as the wire contract's mapping, not imported).
KINDS: Final = {
    pb.JointMove.ABSOLUTE: "physical_ai.robot_move.absolute",
    pb.JointMove.RELATIVE: "physical_ai.robot_move.relative",
}
#: The simulated arm: its device name and the sim family's kind (the wire contract's mapping).
SIM_DEVICE: Final = "sim"
SIM_KIND: Final = "physical_ai.sim_episode"
#: The intent component of each kind served over gRPC (one operation id names one of them).
INTENTS: Final = {
    "physical_ai.robot_move.absolute": "physical_ai.robot_move.intent",
    "physical_ai.robot_move.relative": "physical_ai.robot_move.intent",
    SIM_KIND: "physical_ai.sim_episode.intent",
}
SIM_REFERENCE_MEDIA_TYPE: Final = "application/vnd.tether.sim-episode.reference+json"
#: The gRPC path of each field a submitted reach may be refused for (the family's names).
SIM_FIELDS: Final = {
    "seed": "sim_reach.seed",
    "target": "sim_reach.target_x/target_y",
    "target[0]": "sim_reach.target_x",
    "target[1]": "sim_reach.target_y",
    "episodes": "sim_reach.episodes",
    "steps": "sim_reach.steps",
    "not_after_ms": "not_after_ms",
}
#: The sim result file's summary, answered as a reference document, is read once per result.
SIM_REFERENCES_KEPT: Final = 256
#: The kinds an Execute may bind to a session (joint moves: a sim reach takes none).
SESSION_KINDS: Final = tuple(sorted(set(KINDS.values())))
#: Terminal operation states.
TERMINAL: Final = frozenset({pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.EXPIRED})
#: Execute's crash points (`TETHER_CRASH_AT`), in order: before the intent is committed, and
#: after it is committed but before the answer is sent (a lost response).
CRASH_POINTS: Final = ("grpc.execute.before_commit", "grpc.execute.after_commit")


def world_for(principal: str, owner: str | None = None) -> str:
    """The world of a principal's operations (see the module's key mapping); on a world ledger
    shared by hosts, named for this host (`owner`: `grpc-<principal>@<host>`), one world per
    principal and host."""
    return f"{WORLD_PREFIX}{principal}" + (f"@{owner}" if owner else "")


def reached_fraction(evidence: Any) -> float | None:
    """How far a move's motion got, read off its evidence (a reconcile's document): 1 less
    the distance left to the goals it staged over the distance from its pre-image, summed over
    its joints, as its progress reports it while it runs; None where the evidence holds no
    staged goals and pre-image to measure from."""

    def positions(read_back: Any) -> dict[str, float]:
        joints = read_back.get("joints") if isinstance(read_back, dict) else None
        if not isinstance(joints, dict):
            return {}
        return {
            str(n): float(j["position_rad"])
            for n, j in joints.items()
            if isinstance(j, dict) and isinstance(j.get("position_rad"), int | float)
        }

    if not isinstance(evidence, dict):
        return None
    staged = evidence.get("staged")
    pre = evidence.get("preimage")
    if not isinstance(staged, dict) or not staged or not isinstance(pre, dict):
        return None
    # Where its motion got to when it was cut (`reached_read_back`), not a later read-back of
    # a robot another operation has moved since (older evidence: its read-back).
    reached = evidence.get("reached_read_back") or evidence.get("read_back")
    start, now = positions(pre.get("read_back")), positions(reached)
    goals = {n: float(g) for n, g in staged.items() if isinstance(g, int | float)}
    if not goals or not all(n in start and n in now for n in goals):
        return None
    total = sum(abs(g - start[n]) for n, g in goals.items())
    if total <= 0 or not math.isfinite(total):
        return None
    left = sum(abs(g - now[n]) for n, g in goals.items())
    return round(min(1.0, max(0.0, 1 - left / total)), 4)


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def request_digest(operation_id: str, intent: Any) -> str:
    """The digest every retry must match: operation id, device, command and not_after (all of
    which the committed intent holds)."""
    return "sha256:" + hashlib.sha256(canonical([operation_id, intent])).hexdigest()


def updated_ms(record: ActivityRecord, read_at_ms: int = 0) -> int:
    """When the operation last changed: the latest wall-clock time its catalog record holds
    (admitted, its provider operation first bound, a retry guard, its result, its evidence and
    the evidence's device read-back `read_at_ms`, an operator's decision, its settlement, its
    compaction). A function of the record alone, so the same on every read of one revision,
    and never less on a later one (each time is kept or replaced by a later one). A change
    the record stamps no time on (a lease renewed, a later attempt claimed) keeps the time of
    the last one that it does."""
    times = [
        record.admitted_at_ms,
        record.operation_bound_at_ms,
        record.compacted_at_ms,
        read_at_ms,
    ]
    if record.retry_guard is not None:
        times.append(record.retry_guard.recorded_at_ms)
    if record.recorded_result is not None:
        times.append(record.recorded_result.recorded_at_ms)
    if record.evidence is not None:
        times.append(record.evidence.recorded_at_ms)
    if record.decision is not None:
        times.append(record.decision.decided_at_ms)
    if record.settlement is not None:
        times.append(record.settlement.settled_at_ms)
    return max(int(t) for t in times if t)


#: The longest status message the server sends (characters). The message travels as trailing
#: metadata, which grpcio clients cap at 8 KiB (soft) and 16 KiB: a longer one would reach the
#: client as its own RESOURCE_EXHAUSTED, the status and the field path lost.
MAX_DETAILS: Final = 1024
#: The longest client value a message repeats (characters; `_shown`).
MAX_SHOWN: Final = 64


def _shown(value: str) -> str:
    """A client's value as a message repeats it: cut to `MAX_SHOWN` characters."""
    return value if len(value) <= MAX_SHOWN else value[:MAX_SHOWN] + "…"


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    if len(message) > MAX_DETAILS:
        message = message[: MAX_DETAILS - 1] + "…"
    context.abort(code, message)
    raise AssertionError("unreachable")  # pragma: no cover - abort raises


class _Malformed:
    """A request whose bytes are no message of the call's type (`_tolerant`)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _tolerant(message: Any) -> Any:
    """``message``'s parser, which answers `_Malformed` for bytes that are no such message:
    grpcio's own answer to a parser that raises is INTERNAL, logged with a traceback, for
    anyone who sends garbage, credential or not."""
    parse = message.FromString
    name = message.DESCRIPTOR.full_name

    def load(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception:  # DecodeError, or invalid UTF-8 in a string field
            return _Malformed(name)

    return load


def _checked(behaviour: Any, authenticate: Any = None, name: str = "") -> Any:
    """``behaviour`` for a request `_tolerant` parsed: a malformed one is INVALID_ARGUMENT
    (nothing read, nothing recorded, no traceback), once the caller is authenticated where the
    service asks for a principal (``authenticate(context, name)``: who may not call at all is
    told that first, as for a well-formed request)."""

    def call(request: Any, context: grpc.ServicerContext, *rest: Any) -> Any:
        if isinstance(request, _Malformed):
            if authenticate is not None:
                authenticate(context, name)
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed request: the bytes are no {request.type_name} message",
            )
        return behaviour(request, context, *rest)  # (a non-blocking one's response callback)

    # grpcio reads how to run a behaviour off it: a non-blocking one (the health Watch) holds
    # no pool thread while it waits, and must not start holding one here.
    for name in ("experimental_non_blocking", "experimental_thread_pool"):
        if hasattr(behaviour, name):
            setattr(call, name, getattr(behaviour, name))
    return call


def add_service(
    server: grpc.Server, service: Any, module: Any, servicer: Any, authenticate: Any = None
) -> None:
    """Register ``servicer``'s methods of ``service`` (a service descriptor; its messages in
    ``module``) on ``server``, as the generated ``add_..._to_server`` does, with each request
    parsed by `_tolerant` and checked by `_checked` (``authenticate``: the service's check of
    a caller, before a malformed request is refused). Unary and server-streaming calls."""
    handlers = {}
    for method in service.methods:
        request = getattr(module, method.input_type.name)
        response = getattr(module, method.output_type.name)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        if method.client_streaming:  # pragma: no cover - none of Tether's services has one
            raise ValueError(f"{method.full_name}: client-streaming calls are not served")
        handlers[method.name] = make(
            _checked(getattr(servicer, method.name), authenticate, method.name),
            request_deserializer=_tolerant(request),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


class _Health(health.HealthServicer):  # type: ignore[misc]
    """grpcio's health servicer with `List` (grpc.health.v1's every name and its status),
    which its 1.x servicer leaves unimplemented (UNIMPLEMENTED, and a traceback logged)."""

    def __init__(self) -> None:
        super().__init__(experimental_non_blocking=True)
        self._statuses: dict[str, int] = {}
        self._statuses_lock = threading.Lock()

    def set(self, service: str, status: int) -> None:
        with self._statuses_lock:
            self._statuses[service] = status
        super().set(service, status)

    def List(
        self, request: health_pb2.HealthListRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthListResponse:
        with self._statuses_lock:
            names = sorted({"", *self._statuses})
        # Each name as `Check` answers it (after a graceful shutdown began, NOT_SERVING
        # whatever was set since).
        return health_pb2.HealthListResponse(
            statuses={
                name: self.Check(health_pb2.HealthCheckRequest(service=name), context)
                for name in names
            }
        )


def peer_address(peer: str) -> str:
    """The address of a grpcio peer (``ipv4:10.0.0.5:51234``, ``ipv6:[::1]:51234``,
    ``unix:/run/x.sock``) without its port: the source its failed credentials count against
    (a network client guessing tokens locks out its own address, never the local operator
    nor other hosts)."""
    scheme, _, rest = peer.partition(":")
    if scheme == "ipv4":
        return rest.rpartition(":")[0] or rest
    if scheme == "ipv6":
        host = rest.rpartition(":")[0] if rest.startswith("[") else rest
        return host.strip("[]") or rest
    return peer or "unknown"


class _Auth:
    """Bearer secrets verified by the daemon's Authenticator; verified ones cached as HMACs."""

    def __init__(self, authenticator: Any) -> None:
        self._authenticator = authenticator
        self._key = secrets.token_bytes(32)
        self._known: OrderedDict[bytes, Principal] = OrderedDict()
        #: Sources locked out (too many failures), to when (monotonic s): a token verified
        #: before is refused from them too until then, as an unverified one is. Otherwise a
        #: locked-out client would learn at full speed which guesses are valid tokens (those
        #: answered from the cache).
        self._locked: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        #: A lock per secret being verified now: calls bearing the same secret at once (every
        #: watch of a bridge resuming after a restart) wait for the one check, then take its
        #: cached answer, instead of each running the whole verification after the other.
        self._checking: dict[bytes, threading.Lock] = {}

    def principal(
        self, context: grpc.ServicerContext, action: str | None, *, call: str
    ) -> Principal:
        """The verified principal of a call to `call` (an RPC's name, for the refusal's words)
        that takes `action` (`tether.devices.credentials.ACTIONS`; None: any role, only the
        credential is checked)."""
        secret = self._secret(context)
        mac = hmac.new(self._key, secret.encode(), hashlib.sha256).digest()
        # Stop's failures count apart from the other calls' (per address still): every client
        # on this host shares 127.0.0.1, and one sending stale tokens to other calls must not
        # lock its planners out of Stop.
        source = f"net:{peer_address(context.peer())}" + (":stop" if action == "stop" else "")
        now = time.monotonic()
        with self._lock:
            known = self._known.get(mac)
            locked = self._locked.get(source)
        if locked is not None and now < locked[0]:
            until, why = locked  # the limiter's own words, with the time left
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"credential_rate_limited: {why}: try again in {until - now:.0f} s",
            )
        if known is None:
            known = self._verified(context, secret, mac, source, now, call)
        if action is None:
            return known
        allowed = roles_for(action)
        if known.role not in allowed:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"role_refused: {known.where} has role {known.role}; {call} needs "
                f"{' or '.join(allowed)}",
            )
        return known

    def _verified(
        self,
        context: grpc.ServicerContext,
        secret: str,
        mac: bytes,
        source: str,
        now: float,
        call: str,
    ) -> Principal:
        """The principal of a secret not in the cache, verified once however many calls bear
        it at the same moment (`_checking`), and cached; refused as `principal` says."""
        with self._lock:
            gate = self._checking.setdefault(mac, threading.Lock())
        try:
            with gate:
                with self._lock:
                    known = self._known.get(mac)  # verified by the call this one waited for
                if known is None:
                    known = self._check(context, secret, source, now, call)
                    self._remember(mac, known)
                return known
        finally:
            with self._lock:
                if self._checking.get(mac) is gate and not gate.locked():
                    del self._checking[mac]

    def _check(
        self, context: grpc.ServicerContext, secret: str, source: str, now: float, call: str
    ) -> Principal:
        """`Authenticator.authenticate` of `secret`; a refusal aborts the call (logged once, a
        lockout remembered)."""
        try:
            return cast(
                Principal,
                self._authenticator.authenticate(secret, roles=ROLES, source=source),
            )
        except CredentialError as exc:
            # Said once per refused credential and once per lockout (never the secret):
            # an operator sees a client guessing, or why local planners are locked out.
            # A locked-out source's further calls are refused above without a line.
            log.warning(
                "grpc credential refused",
                extra={"code": exc.code, "source": source, "call": call},
            )
            if exc.code == "credential_rate_limited":
                wait = float((exc.details or {}).get("retry_after_s") or 0.0)
                self._lock_out(source, now + wait, exc.message.rsplit(": try again", 1)[0])
                _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.code}: {exc.message}")
            _abort(context, grpc.StatusCode.UNAUTHENTICATED, f"{exc.code}: {exc.message}")

    def _lock_out(self, source: str, until: float, why: str) -> None:
        with self._lock:
            self._locked[source] = (until, why)
            if len(self._locked) > 1024:  # forget the lockouts that ended
                now = time.monotonic()
                for stale in [k for k, (t, _) in self._locked.items() if t <= now]:
                    del self._locked[stale]

    def _remember(self, mac: bytes, known: Principal) -> None:
        with self._lock:
            self._known[mac] = known
            while len(self._known) > 1024:
                self._known.popitem(last=False)

    @staticmethod
    def _secret(context: grpc.ServicerContext) -> str:
        secret = None
        headers = [v for k, v in context.invocation_metadata() if k == "authorization"]
        if len(headers) > 1:  # which one would speak for the call is nobody's guess
            _abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"principal_ambiguous: {len(headers)} `authorization` headers; send one",
            )
        for value in headers:
            scheme, _, token = str(value).strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                secret = token.strip()
        if secret is None:
            _abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "principal_required: send `authorization: Bearer <token>` metadata",
            )
        return secret


def robot_serving(daemon: Any, name: str) -> bool:
    """Whether robot `name` is connected and its device node still there: what health reports
    as SERVING for `RobotControl/<name>`, and what a new Execute on it needs."""
    devices = daemon.devices
    if devices is None or name not in devices.identities:
        return False
    config = daemon.config
    url = getattr(config.ports.get(config.spec(name).port), "url", None)
    return not (isinstance(url, str) and url.startswith("/") and not os.path.exists(url))


class _Lane:
    """The work lane: at most `WORK_LANE` storage RPCs at a time, each entering only while no
    stop runs (the daemon's `StopFirst`: a stop is never queued behind them). A slot belongs
    to the thread that took it (one RPC per thread): `release` gives back the calling
    thread's slot if it holds one, so an RPC may leave the lane early and its `with` still
    ends it once."""

    def __init__(self, stop_first: Any) -> None:
        self._slots = threading.BoundedSemaphore(WORK_LANE)
        self._stop_first = stop_first
        self._held = threading.local()

    def acquire(self) -> None:
        self._stop_first.wait_clear()
        self._slots.acquire()
        self._held.slot = True

    def reenter(self) -> None:
        """Take a slot again without waiting for a running stop: for an RPC that entered
        already and left the lane only to wait (an Execute's group commit), so its answer,
        a few reads, is not held a second time behind the stop it waited for once."""
        self._slots.acquire()
        self._held.slot = True

    def release(self) -> None:
        if getattr(self._held, "slot", False):
            self._held.slot = False
            self._slots.release()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Calls:
    """The RPC threads calls other than `Stop` and `Heartbeat` may hold (`STOP_RESERVE`): a
    non-blocking count. A call over it is refused at once, so it never waits for a thread
    that a stop would need."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @contextmanager
    def held(self, context: grpc.ServicerContext) -> Iterator[None]:
        with self._lock:
            busy = self._held >= self.limit
            if not busy:
                self._held += 1
        if busy:
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"server_busy: {self.limit} calls in progress (open watches included); retry"
                " later (Stop and Heartbeat are always served)",
            )
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1


class _Watches:
    """The open WatchOperation streams, by key: each waits on its own event, set only for its
    key (its record's version moved in the poll, a result of it was recorded, its progress
    moved) or for all (a result ring naming no record, closing). No herd: a change of one
    operation wakes its watches only. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[ActivityKey, set[threading.Event]] = {}

    def add(self, key: ActivityKey, event: threading.Event) -> None:
        with self._lock:
            self._by_key.setdefault(key, set()).add(event)

    def remove(self, key: ActivityKey, event: threading.Event) -> None:
        with self._lock:
            events = self._by_key.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._by_key[key]

    def keys(self) -> list[ActivityKey]:
        with self._lock:
            return list(self._by_key)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._by_key

    def wake(self, key: ActivityKey) -> None:
        with self._lock:
            events = list(self._by_key.get(key, ()))
        for event in events:
            event.set()

    def wake_all(self) -> None:
        with self._lock:
            events = [e for group in self._by_key.values() for e in group]
        for event in events:
            event.set()


def _not_after_words(given: int) -> str:
    """The refusal of a `not_after_ms` that is not a time: unset (0, proto3's default) is
    required, a negative one is said as given."""
    if given == 0:
        return "not_after_ms: required (ms since the epoch, server clock)"
    return f"not_after_ms: must be positive (ms since the epoch, server clock), got {given}"


def _principal_name(name: str) -> bool:
    """Whether ``name`` could be a principal's (`tether.devices.config.check_name`: 1 to 64
    printable characters, no '/' or edge spaces): `a//b` or `a/b/c` names none."""
    try:
        check_name("principal", name)
    except HostConfigError:
        return False
    return True


class RobotControl(rpc.RobotControlServicer):
    """The servicer over one `Daemon` (see the module rules)."""

    def __init__(self, daemon: Any, auth: _Auth, closing: threading.Event) -> None:
        self.daemon = daemon
        self.auth = auth
        self.closing = closing
        #: The open watches (woken per key, see `_Watches`).
        self.watches = _Watches()
        self.work = _Lane(daemon.stop_first)
        self.calls = _Calls(THREADS - STOP_RESERVE)
        self._references: OrderedDict[str, bytes] = OrderedDict()
        self._references_lock = threading.Lock()

    def ring_loop(self) -> None:
        """Wake a watch when a result of its record is recorded (the catalog's doorbell), so
        it answers a terminal state without waiting for the poll; a ring naming no record
        wakes every watch. A result also unbinds its operation from the sessions that hold it
        (`Sessions.settle`: no attempt of it starts again); one no ring names is left to the
        poller's sweep (`_sweep_sessions`)."""
        from tether.runtime._wakeup import Wakeup
        from tether.storage import RESULT

        doorbell = self.daemon.host().catalog.doorbell
        wakeup = Wakeup(self.closing, 1.0, doorbell=doorbell, topic=RESULT)
        seen, _ = doorbell.results_since(0)
        while not self.closing.is_set():
            mark = wakeup.mark()
            wakeup.wait(mark, delay_s=1.0)
            seen, keys = doorbell.results_since(seen)
            if keys is None:
                self.watches.wake_all()
                continue
            for k in keys:
                self.watches.wake(ActivityKey(*k))
            self._settle_sessions(keys)

    def _settle_sessions(self, keys: list[tuple[str, str, str]]) -> None:
        """Unbind the operations of `keys` (records given a result) from their sessions."""
        ended: dict[str, list[str]] = {}
        for world, kind, activity in keys:
            if kind in SESSION_KINDS and world.startswith(WORLD_PREFIX):
                ended.setdefault(world, []).append(activity)
        for world, activities in ended.items():
            self.daemon.sessions.settle(world, activities)

    def poll_loop(self) -> None:
        """Every `WATCH_POLL_S`, read each watched record once and wake the watches of a record
        whose version moved (a claim, an unknown conclusion, a decision: changes no doorbell
        names). One thread for all watches, on a catalog connection of its own (its reads
        queue behind nobody's and nobody's behind them), entering the work lane as any
        storage RPC does. The same thread sweeps the sessions when one is due
        (`_sweep_sessions`)."""
        catalog = self.daemon.host().open_catalog()
        try:
            self._poll(catalog)
        finally:
            catalog.close()

    def _poll(self, catalog: Any) -> None:
        versions: dict[ActivityKey, int | None] = {}
        while not self.closing.wait(WATCH_POLL_S):
            keys = self.watches.keys()
            for key in set(versions) - set(keys):
                del versions[key]
            for key in keys:
                try:
                    with self.work:
                        record = catalog.get(key)
                except Exception:  # the poll never takes the server down; the next pass retries
                    log.exception("watch poll of %s failed", key)
                    continue
                version = None if record is None else record.version
                if key not in versions or versions[key] != version:
                    # First seen: its watch may have read it before this change.
                    self.watches.wake(key)
                versions[key] = version
            self._sweep_sessions(catalog)

    def _sweep_sessions(self, catalog: Any) -> None:
        """Unbind from the sessions every operation whose record has a result that no keyed
        ring named (a ring of another process, a PostgreSQL notification, more rings than the
        doorbell keeps): once more ids are bound than `Sessions.sweep_due` allows (at least
        `SWEEP_MIN`, twice what the last sweep kept), each bound id's record is read once. An
        id with no record yet (committed, not yet admitted) or none with a result stays."""
        sessions = self.daemon.sessions
        due = sessions.sweep_due()
        if not due:
            return
        try:
            for world, activities in due.items():
                ended = []
                for activity in sorted(activities):
                    for kind in SESSION_KINDS:
                        with self.work:
                            record = catalog.get(ActivityKey(world, kind, activity))
                        if record is not None:
                            if record.result is not None or record.compacted:
                                ended.append(activity)
                            break
                sessions.settle(world, ended)
        except Exception:  # the sweep never takes the server down; the next one retries
            log.exception("session sweep failed")
        finally:
            sessions.swept()

    # --- lookups and views ---

    def _kinds(self) -> list[str]:
        return sorted(self.daemon.served)

    def _find(self, world: str, activity: str) -> tuple[ActivityKey, Any] | None:
        """The key and intent of `activity` in `world`: from the catalog once admitted, else
        from the world's committed intents (the projection's view)."""
        runtime = self.daemon.host()
        for kind in self._kinds():
            key = ActivityKey(world, kind, activity)
            record = runtime.get(key)
            if record is not None:
                return key, self._input(record)
        try:
            snapshot = runtime.snapshot(world)
        except WorldNotFound:  # nothing committed by this principal yet (storage: raised)
            return None
        for served in self.daemon.served.values():
            for request in served.family.project(snapshot):
                if request.activity_id == activity:
                    return ActivityKey(world, request.kind, activity), request.input
        return None

    def _input(self, record: ActivityRecord) -> Any:
        if not record.input_ref:
            return None
        try:
            return json.loads(
                self.daemon.host().artifacts.get_bytes(record.input_ref, record.input_digest)
            )
        except (TetherError, ValueError, OSError):
            return None

    def _doc(self, ref: str, digest: str) -> tuple[dict[str, Any], bytes]:
        try:
            data = self.daemon.host().artifacts.get_bytes(ref, digest)
        except (TetherError, ValueError, OSError):
            return {}, b""
        try:
            doc = json.loads(data)
        except ValueError:  # e.g. an adapter error's text: shown as is
            return {"reason": "adapter_error"}, bytes(data)
        return (doc if isinstance(doc, dict) else {}), bytes(data)

    def _operation(
        self, key: ActivityKey, intent: Any, record: ActivityRecord | None = None
    ) -> pb.Operation:
        """The view of `key` (its catalog record read now, unless given)."""
        runtime = self.daemon.host()
        if record is None:
            record = runtime.get(key)
        value = intent if isinstance(intent, dict) else {}
        sim = key.kind == SIM_KIND
        op = pb.Operation(
            id=key.activity_id,
            device=SIM_DEVICE if sim else str(value.get("robot") or value.get("device") or ""),
            request_digest=request_digest(key.activity_id, intent),
            not_after_ms=int(value.get("not_after_ms") or 0),
            non_repeatable=key.kind.endswith(".relative"),
        )
        _, progress = self.daemon.latest(key)
        # The attempt a `queued` report is of (an earlier attempt's says nothing of this one).
        progress_attempt = (progress or {}).get("attempt")
        if progress:
            fraction = progress.get("fraction")
            done, total = progress.get("steps"), progress.get("total")
            if not isinstance(fraction, int | float) and isinstance(done, int | float):
                # A sim attempt reports its episode steps: done over all of them.
                fraction = done / total if isinstance(total, int | float) and total > 0 else 0.0
            op.progress.fraction = float(fraction) if isinstance(fraction, int | float) else 0.0
            op.progress.phase = str(
                progress.get("phase") or progress.get("stage") or progress.get("state") or ""
            )
        if record is None:
            op.state = pb.PENDING
            op.progress.phase = op.progress.phase or "pending"
            return op
        op.revision = record.version
        op.attempt = record.attempt_count
        op.created_ms = record.admitted_at_ms
        operator_done = False
        if record.result is not None:
            reference = self._sim_reference(record.result) if sim else None
            if reference is not None:
                doc: dict[str, Any] = {}
                op.result.document = reference
                op.result.digest = "sha256:" + hashlib.sha256(reference).hexdigest()
                op.result.media_type = SIM_REFERENCE_MEDIA_TYPE
            else:
                doc, data = self._doc(record.result.ref, record.result.digest)
                op.result.document = data
                op.result.digest = record.result.digest
                op.result.media_type = str(getattr(record.result, "media_type", "") or "")
            if record.result.failed:
                outcome = doc.get("outcome")
                op.state = {"expired": pb.EXPIRED, "cancelled": pb.CANCELLED}.get(
                    str(outcome), pb.FAILED
                )
                op.error.code = str(doc.get("code") or outcome or "failed")
                words = _OUTCOME_WORDS.get(str(outcome), "")
                if outcome == "cancelled" and doc.get("sent"):
                    words = _CANCELLED_WHILE_RUNNING
                op.error.message = (
                    str(doc.get("error") or doc.get("note") or doc.get("reason") or "") or words
                )
                decided = record.decision
                if decided is not None and decided.outcome == "abandon":
                    # An operator's abandon ends it: say so, and who, rather than "failed".
                    op.error.code = "abandoned"
                    op.error.message = abandoned_words(decided)
            else:
                op.state = pb.SUCCEEDED
                operator_done = doc.get("outcome") == "operator_done"
        elif record.compacted_at_ms is not None:
            op.state = pb.FAILED if record.result_failed else pb.SUCCEEDED
        elif record.awaiting_decision:
            op.state = pb.UNKNOWN_AWAITING_OPERATOR
        elif op.progress.phase == "queued" and progress_attempt == record.attempt_count:
            op.state = pb.PENDING  # this attempt is claimed and waits for its robot
        elif record.attempt is not None or record.attempt_count > 0:
            # Claimed: running once its journal says it started (never, for one past its
            # `not_after` that is recorded `expired`).
            op.state = pb.RUNNING if self._started(key) else pb.PENDING
        else:
            op.state = pb.PENDING
        reached: float | None = None
        if record.evidence is not None:
            ev, data = self._doc(record.evidence.evidence.ref, record.evidence.evidence.digest)
            reached = reached_fraction(ev)
            op.evidence.revision = record.evidence_revision
            op.evidence.reason = str(ev.get("reason") or "")
            op.evidence.document = data
            op.evidence.digest = record.evidence.evidence.digest
            read_back = ev.get("read_back") or {}
            if isinstance(read_back, dict):
                op.evidence.read_at_ms = int(read_back.get("read_at_ms") or 0)
                for name, j in sorted((read_back.get("joints") or {}).items()):
                    if isinstance(j, dict):
                        op.evidence.read_back.append(
                            pb.JointReading(
                                joint=str(name),
                                position_rad=float(j.get("position_rad") or 0.0),
                                velocity_rad_s=float(j.get("velocity_rad_s") or 0.0),
                                torque_on=bool(j.get("torque_on")),
                                hardware_errors=[str(e) for e in j.get("hardware_errors") or []],
                            )
                        )
        if op.state not in (pb.PENDING, pb.RUNNING):
            # The last progress event was sent while it waited or ran (`queued`, `running`):
            # an ended or parked operation says what it is now. Its fraction stays what the
            # motion reached, unless it succeeded by its own motion (an operator's `done` on a
            # move cut short succeeds without it).
            op.progress.phase = pb.OperationState.Name(op.state).lower()
            if op.state == pb.SUCCEEDED and not operator_done:
                op.progress.fraction = 1.0
            elif progress is None and reached is not None:
                # No progress in this process (it restarted since the move ran): what the
                # motion reached, read off its evidence, not a fraction of 0.
                op.progress.fraction = reached
        elif not op.progress.phase:  # no progress reported yet: the phase is its state
            op.progress.phase = pb.OperationState.Name(op.state).lower()
        op.updated_ms = updated_ms(record, op.evidence.read_at_ms)
        return op

    def _started(self, key: ActivityKey) -> bool:
        """Whether a claimed operation started, per its family's journal (`started` on the
        device host's handlers); True where no family says (a sim reach, no devices)."""
        handler = self.daemon.devices.handler("started") if self.daemon.devices else None
        if handler is None or key.kind == SIM_KIND:
            return True
        from tether.activities import operation_id_for

        try:
            return bool(handler({"operation_id": operation_id_for(key)}).get("started", True))
        except Exception:  # an unreadable journal says nothing: the catalog's attempt stands
            log.debug("started: journal of %s not read", key, exc_info=True)
            return True

    def _sim_reference(self, result: Any) -> bytes | None:
        """The reference document of a sim reach's episode result file (canonical JSON): its
        ref, digest, media type, size and summary, read once. None for any other result (a
        failure, an operator's `done` document: shown as they are) or one that cannot be read
        (shown as `_doc` shows it)."""
        from tether.families.sim._episode import RESULT_MEDIA_TYPE, read_summary

        media = str(getattr(result, "media_type", "") or "")
        if result.failed or media != RESULT_MEDIA_TYPE:
            return None
        with self._references_lock:
            known = self._references.get(result.digest)
        if known is not None:
            return known
        from tether.families.sim.errors import ResultCorrupt
        from tether.families.sim.family import result_reference

        try:
            payload = self.daemon.host().artifacts.get_bytes(result.ref, result.digest)
            summary = read_summary(payload)
        except (TetherError, ResultCorrupt, ValueError, OSError):
            return None
        size = int(getattr(result, "size", 0) or len(payload))
        data = canonical(result_reference(result.ref, result.digest, media, size, summary))
        with self._references_lock:
            self._references[result.digest] = data
            while len(self._references) > SIM_REFERENCES_KEPT:
                self._references.popitem(last=False)
        return data

    def _get(
        self, context: grpc.ServicerContext, principal: Principal, op_id: str
    ) -> tuple[ActivityKey, Any]:
        if not op_id:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "operation_id: required")
        owner, sep, own = op_id.rpartition("/")
        if not OPERATION_ID.fullmatch(own) or (sep and not _principal_name(owner)):
            # No Execute could have taken it: a bad argument. (PRINCIPAL/OPERATION_ID, an
            # operator's name of another principal's operation, is not known to a planner.)
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, OPERATION_ID_RULE)
        if sep and owner == principal.name:
            op_id = own  # its own operation, by the name an operator sees it under
        found = self._find(world_for(principal.name, self.daemon.world_owner), op_id)
        if found is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"operation {_shown(op_id)!r} is not known")
        return found

    # --- RPCs ---

    def _Execute(self, request: pb.ExecuteRequest, context: grpc.ServicerContext) -> pb.Operation:
        principal = self.auth.principal(context, "submit", call="Execute")
        op_id = request.operation_id
        bad = grpc.StatusCode.INVALID_ARGUMENT
        if not op_id:
            _abort(context, bad, "operation_id: required")
        if not OPERATION_ID.fullmatch(op_id):
            _abort(context, bad, OPERATION_ID_RULE)
        config = self.daemon.config
        if request.WhichOneof("command") == "sim_reach" or (
            request.device == SIM_DEVICE and SIM_DEVICE not in config.robots
        ):
            return self._execute_sim(principal, request, context)
        if request.device not in config.robots:
            _abort(
                context,
                bad,
                f"device: unknown device {_shown(request.device)!r} "
                f"(configured: {', '.join(self._devices()) or 'none'})",
            )
        if request.WhichOneof("command") != "joint_move":
            _abort(context, bad, f"command: device {request.device} takes a joint_move")
        move = request.joint_move
        kind = KINDS.get(move.kind)
        if kind is None:
            _abort(context, bad, "joint_move.kind: ABSOLUTE or RELATIVE")
        if not move.targets_rad:
            _abort(context, bad, "joint_move.targets_rad: at least one joint")
        if request.not_after_ms <= 0:
            _abort(context, bad, _not_after_words(request.not_after_ms))
        session = request.session_id
        if session and not OPERATION_ID.fullmatch(session):
            _abort(context, bad, "session_id: 1..256 of [A-Za-z0-9_.:+@-], starting alphanumeric")
        served = self.daemon.served.get(kind)
        if served is None or served.submit is None:
            _abort(context, bad, f"device: {request.device} is not served for joint moves")
        targets = {str(k): float(v) for k, v in sorted(move.targets_rad.items())}
        try:  # the family's own checks: every joint at once (one build on the common path)
            served.submit(op_id, kind, {"robot": request.device, "targets": targets})
        except (ValueError, TetherError, CodedError) as whole:
            for joint, value in targets.items():  # refused: name the field, one at a time
                try:
                    served.submit(op_id, kind, {"robot": request.device, "targets": {joint: value}})
                except (ValueError, TetherError, CodedError) as exc:
                    path = f"joint_move.targets_rad[{json.dumps(_shown(joint))}]"
                    _abort(context, bad, f"{path}: {exc}")
            _abort(context, bad, f"joint_move.targets_rad: {whole}")
        body = {
            "robot": request.device,
            "targets": targets,
            "not_after_ms": int(request.not_after_ms),
        }
        if self._unreachable_robot(request.device, int(request.not_after_ms)):
            # Not connected (health: NOT_SERVING): a new operation is not recorded, so no move
            # waits on a robot nobody can reach, to be parked for an operator with nothing
            # sent. A retry of one accepted before stays a read of it (the id's record).
            if self._find(world_for(principal.name, self.daemon.world_owner), op_id) is None:
                why = self.daemon.unavailable.get(
                    request.device, "its device is gone; not reopened yet"
                )
                _abort(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    f"device_unavailable: robot {request.device} is not connected ({why}):"
                    " nothing was recorded; send the identical request again once"
                    f" {SERVICE}/{request.device} is SERVING",
                )
        if self._latched_robot(request.device, int(request.not_after_ms)):
            # Stopped by an operator: a new move would only wait to be parked for an operator
            # (`robot_latched`) with nothing sent, reported running meanwhile. Not recorded; a
            # retry of one accepted before stays a read of it.
            if self._find(world_for(principal.name, self.daemon.world_owner), op_id) is None:
                devices = self.daemon.devices
                assert devices is not None
                by = devices.latch.author(request.device)
                words = stop_words(stop_reason(by), by)
                _abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"robot_latched: robot {request.device} {words}: nothing was recorded;"
                    f" once an operator resumes it (tether operator resume {request.device}),"
                    " send the identical request again",
                )
        taken_back: tuple[str, str, str] | None = None
        if session:
            body["session_id"] = session
            world = world_for(principal.name, self.daemon.world_owner)
            if not self.daemon.sessions.bound(world, session, op_id):
                taken_back = (world, session, op_id)  # bound by this call: undone if refused
            if not self.daemon.sessions.bind(world, session, op_id):
                # A retry of a request committed before stays a read of it; anything else
                # needs the session live (nothing is recorded).
                found = self._find(world, op_id)
                try:
                    wanted = served.submit(op_id, kind, body).value
                except (ValueError, TetherError, CodedError) as exc:
                    _abort(context, bad, f"{exc}")
                if found is not None and canonical(found[1]) == canonical(wanted):
                    return self._operation(*found)
                if found is not None:  # the id is taken, whatever the session says
                    _abort(
                        context,
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"operation {op_id!r} exists with another request",
                    )
                _abort(
                    context,
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"session_id: session {session!r} is not live for {principal.name} "
                    "(send Heartbeat first; a lapsed session's id starts a new session)",
                )
        return self._commit(context, principal, op_id, kind, body, taken_back=taken_back)

    def _unreachable_robot(self, robot: str, not_after_ms: int) -> bool:
        """Whether a new move of `robot` is refused as `device_unavailable`: this daemon's
        workers would run it and the robot is not connected. Not while the daemon starts
        (`daemon_starting` answers that), nor when no worker of the daemon runs moves
        (`workers = 0`: they wait, or a `tether worker` that drives the robot runs them), nor
        for a request already past its `not_after_ms` (recorded, it ends `expired` at once)."""
        daemon = self.daemon
        if daemon.devices is None or daemon.serve.workers == 0:
            return False
        if robot in daemon.driven_elsewhere or not_after_ms <= time.time() * 1000:
            return False
        return not robot_serving(daemon, robot)

    def _latched_robot(self, robot: str, not_after_ms: int) -> bool:
        """Whether a new move of `robot` is refused as `robot_latched`: this daemon's workers
        would run it and an operator's stop holds the robot (as `_unreachable_robot`, not for
        a request already past its `not_after_ms`, which ends `expired` at once)."""
        daemon = self.daemon
        if daemon.devices is None or daemon.serve.workers == 0:
            return False
        if robot in daemon.driven_elsewhere or not_after_ms <= time.time() * 1000:
            return False
        return bool(daemon.devices.latched(robot))

    def _devices(self) -> list[str]:
        """The devices this host serves: its robots, and the simulated arm while served."""
        served = SIM_KIND in self.daemon.served and SIM_DEVICE not in self.daemon.config.robots
        sim = [SIM_DEVICE] if served else []
        return sorted({*self.daemon.config.robots, *sim})

    def _execute_sim(
        self, principal: Principal, request: pb.ExecuteRequest, context: grpc.ServicerContext
    ) -> pb.Operation:
        """Execute on the simulated arm: a seeded MuJoCo reach (see the module's mapping)."""
        bad = grpc.StatusCode.INVALID_ARGUMENT
        op_id = request.operation_id
        served = self.daemon.served.get(SIM_KIND)
        if request.device in self.daemon.config.robots:  # a robot, even one named "sim"
            _abort(context, bad, f"command: device {request.device} takes a joint_move")
        if request.device != SIM_DEVICE:
            _abort(
                context,
                bad,
                f"device: unknown device {_shown(request.device)!r} "
                f"(configured: {', '.join(self._devices()) or 'none'})",
            )
        if served is None or served.submit is None:
            _abort(
                context,
                bad,
                f"device: {SIM_DEVICE} is not served here (configured: "
                f"{', '.join(self._devices()) or 'none'}; serve it with [serve] families = "
                '[..., "tether.serve.families:sim_families"])',
            )
        if request.WhichOneof("command") != "sim_reach":
            _abort(context, bad, f"command: device {SIM_DEVICE} takes a sim_reach")
        if request.not_after_ms <= 0:
            _abort(context, bad, _not_after_words(request.not_after_ms))
        if request.session_id:
            _abort(context, bad, "session_id: a simulated reach takes no session")
        reach = request.sim_reach
        body = {
            "seed": int(reach.seed),
            "target": [float(reach.target_x), float(reach.target_y)],
            "episodes": int(reach.episodes),
            "steps": int(reach.steps),
            "not_after_ms": int(request.not_after_ms),
        }
        try:
            served.submit(op_id, SIM_KIND, body)  # the family's own checks, nothing committed
        except (ValueError, TetherError) as exc:
            field = str(getattr(exc, "field", ""))
            reason = str(getattr(exc, "reason", "") or exc)
            _abort(context, bad, f"{SIM_FIELDS.get(field, 'sim_reach')}: {reason}")
        return self._commit(context, principal, op_id, SIM_KIND, body)

    def _submit(
        self, world: str, op_id: str, kind: str, body: Any
    ) -> tuple[ActivityKey, bool, ActivityRecord | None]:
        """`Daemon.submit_admitted`, refused (`admission_conflict`) when the id already names
        another kind's operation in `world`: its catalog record (`unrecorded`), or (not yet
        admitted, or in the same group commit) another family's intent on the id's entity
        (`exclusive`). The daemon checks both for the whole batch in its committing thread,
        on the snapshot the batch is decided on, so no lock here serializes submits and no
        Execute thread reads the catalog."""
        kinds = self._kinds()
        mine = INTENTS.get(kind)
        exclusive = frozenset(c for k, c in INTENTS.items() if c != mine and k in kinds)
        others = tuple(ActivityKey(world, k, op_id) for k in kinds if k != kind)
        return self.daemon.submit_admitted(  # type: ignore[no-any-return]
            world, op_id, kind, body, exclusive=exclusive, unrecorded=others
        )

    def _commit(
        self,
        context: grpc.ServicerContext,
        principal: Principal,
        op_id: str,
        kind: str,
        body: dict[str, Any],
        *,
        taken_back: tuple[str, str, str] | None = None,
    ) -> pb.Operation:
        """Commit a checked request as intent and answer its operation (see the rules): a new
        one from the record its tick admitted (no read), an existing one as read now. A
        request refused because the id holds another one leaves no session binding it made
        (`taken_back`: world, session, id)."""
        bad = grpc.StatusCode.INVALID_ARGUMENT
        crash_point("grpc.execute.before_commit")
        # Waiting for its group commit, an Execute holds no place in the work lane (a blocked
        # thread is not runnable): concurrent Executes share one tick instead of queueing for
        # the lane one by one.
        self.work.release()
        try:
            key, created, record = self._submit(
                world_for(principal.name, self.daemon.world_owner), op_id, kind, body
            )
        except CodedError as exc:
            if exc.code == "admission_conflict":
                if taken_back is not None:
                    self.daemon.sessions.unbind(*taken_back)
                _abort(
                    context,
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"operation {op_id!r} exists with another request",
                )
            if exc.code == "daemon_starting":
                _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
            if exc.code == "not_submittable":
                _abort(context, bad, str(exc))  # a CodedError's text: "code: message"
            raise  # the commit failed, not the request: UNAVAILABLE (`_call`)
        except ValueError as exc:
            _abort(context, bad, str(exc))
        crash_point("grpc.execute.after_commit")
        # DEBUG: one line per Execute is no audit trail at a flood's rate (the catalog record
        # and the world's intent are), and costs the logging lock on the hot path.
        log.debug(
            "grpc execute",
            extra={"principal": principal.name, "operation_id": op_id, "new": created},
        )
        if record is not None:  # created by this call: the admission is its first view
            op = self._operation(key, self._input(record), record)
        else:
            self.work.reenter()  # an existing operation is read (Execute's `with` releases it)
            found = self._find(key.world_id, op_id)
            op = self._operation(key, found[1] if found else {"kind": kind, **body})
        if "session_id" in body and op.state in TERMINAL:
            # Ended already (a retry after the end, a refusal at admission): it never starts
            # again, so no session holds it (its result's ring may have come before the bind).
            self.daemon.sessions.settle(key.world_id, [op_id])
        return op

    def _GetOperation(
        self, request: pb.GetOperationRequest, context: grpc.ServicerContext
    ) -> pb.Operation:
        principal = self.auth.principal(context, "read", call="GetOperation")
        if principal.role == "planner":  # its own operations only
            key, intent = self._get(context, principal, request.operation_id)
        else:  # an operator or observer: any principal's, as `Resolve` names them
            key, intent = self._anyones(context, request.operation_id)
            return self._host_wide(key, self._operation(key, intent))
        return self._operation(key, intent)

    def _host_wide(self, key: ActivityKey, op: pb.Operation) -> pb.Operation:
        """`op` as a host-wide role (an operator, an observer) names it, in every answer as
        in `ListOperations`: `PRINCIPAL/OPERATION_ID` (two principals' operations may share an
        id)."""
        who = self._worlds().get(key.world_id)
        if who is not None:
            op.id = f"{who}/{key.activity_id}"
        return op

    def _anyones(self, context: grpc.ServicerContext, target: str) -> tuple[ActivityKey, Any]:
        """The operation `target` names for a host-wide role (an operator, an observer):
        `PRINCIPAL/OPERATION_ID`, or an id only one principal's operations hold."""
        owner, sep, op_id = target.rpartition("/")
        if not op_id:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "operation_id: required")
        if not OPERATION_ID.fullmatch(op_id) or (sep and not _principal_name(owner)):
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{OPERATION_ID_RULE} (PRINCIPAL/OPERATION_ID names another principal's)",
            )
        worlds = [world_for(owner, self.daemon.world_owner)] if sep else list(self._worlds())
        hits = [f for w in worlds if (f := self._find(w, op_id)) is not None]
        if not hits:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"operation {_shown(target)!r} is not known")
        if len(hits) > 1:
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"operation_id: {_shown(op_id)!r} names operations of several principals: "
                "send PRINCIPAL/OPERATION_ID",
            )
        return hits[0]

    def _worlds(self) -> dict[str, str]:
        """Every principal's world of this host's operations (`world_for`), to its principal."""
        owner = self.daemon.world_owner
        suffix = f"@{owner}" if owner else ""
        return {
            w: w[len(WORLD_PREFIX) : len(w) - len(suffix)]
            for w in self.daemon.host().ledger.worlds()
            if w.startswith(WORLD_PREFIX) and owned_by(w, owner)
        }

    def _ListOperations(
        self, request: pb.ListOperationsRequest, context: grpc.ServicerContext
    ) -> pb.ListOperationsResponse:
        principal = self.auth.principal(context, "read", call="ListOperations")
        size = request.page_size or 50
        if size > LIST_PAGE_MAX:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"page_size: at most {LIST_PAGE_MAX}")
        runtime = self.daemon.host()
        owner = self.daemon.world_owner
        # A planner lists its own operations; a host-wide role (an operator, an observer)
        # every principal's, each named PRINCIPAL/OPERATION_ID as Get and Resolve take it.
        host_wide = principal.role != "planner"
        worlds = self._worlds() if host_wide else {world_for(principal.name, owner): ""}
        named: dict[str, tuple[str, str]] = {}  # the id shown: (world, operation id)
        for world, who in worlds.items():
            try:
                entities = {entity for entity, _ in runtime.snapshot(world).keys()}
            except WorldNotFound:
                continue
            for entity in entities:
                named[f"{who}/{entity}" if host_wide else entity] = (world, entity)
        ids = sorted(named)
        # Paged by the id shown (a stable order across calls); the token is the last id sent.
        after = request.page_token
        owner_part, sep, own = after.rpartition("/")
        if after and (
            not OPERATION_ID.fullmatch(own) or (sep and not owner_part) or bool(sep) != host_wide
        ):
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "page_token: the next_page_token of a previous page (an operation id"
                + (", PRINCIPAL/OPERATION_ID" if host_wide else "")
                + ")",
            )
        states = set(request.states)
        defined = set(pb.OperationState.values()) - {pb.OPERATION_STATE_UNSPECIFIED}
        if unknown := sorted(states - defined):
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"states: {unknown[0]} is no operation state (one of "
                f"{', '.join(pb.OperationState.Name(v) for v in sorted(defined))})",
            )
        if request.device and request.device not in self._devices():
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"device: unknown device {_shown(request.device)!r} "
                f"(served: {', '.join(self._devices()) or 'none'})",
            )
        out: list[pb.Operation] = []
        next_token = ""
        taken = 0  # bytes of the views in `out`
        for shown in ids:
            if after and shown <= after:
                continue
            found = self._find(*named[shown])
            if found is None:
                continue
            op = self._operation(*found)
            if states and op.state not in states:
                continue
            if request.device and op.device != request.device:
                continue
            op.id = shown
            taken += op.ByteSize()
            if len(out) == size or (out and taken > LIST_PAGE_BYTES):
                next_token = out[-1].id
                break
            out.append(op)
        return pb.ListOperationsResponse(operations=out, next_page_token=next_token)

    @contextmanager
    def _call(self, context: grpc.ServicerContext) -> Iterator[None]:
        """A call other than Stop and Heartbeat: it holds one of `_Calls`' threads, and a
        failure of the server's own storage (a store that cannot be read or written, a COMMIT
        whose reply was lost) is UNAVAILABLE, which a client retries with the identical
        request, never INVALID_ARGUMENT or NOT_FOUND: every refusal of the request itself
        was answered before (an abort is no TetherError)."""
        with self.calls.held(context):
            try:
                yield
            except (TetherError, CodedError, OSError) as exc:
                code = getattr(exc, "code", None) or type(exc).__name__
                log.warning("grpc call failed on the server: %s: %s", code, exc)
                _abort(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    f"server_storage: {code}: {exc} (the server could not answer from its"
                    " stores; retry the identical request: an Execute that was committed is"
                    " returned, never run twice)",
                )

    def Execute(self, request: pb.ExecuteRequest, context: grpc.ServicerContext) -> pb.Operation:
        with self._call(context), self.work:
            return self._Execute(request, context)

    def GetOperation(
        self, request: pb.GetOperationRequest, context: grpc.ServicerContext
    ) -> pb.Operation:
        with self._call(context), self.work:
            return self._GetOperation(request, context)

    def ListOperations(
        self, request: pb.ListOperationsRequest, context: grpc.ServicerContext
    ) -> pb.ListOperationsResponse:
        with self._call(context), self.work:
            return self._ListOperations(request, context)

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext) -> pb.CancelResponse:
        with self._call(context), self.work:
            return self._Cancel(request, context)

    def Reconcile(
        self, request: pb.ReconcileRequest, context: grpc.ServicerContext
    ) -> pb.Operation:
        with self._call(context), self.work:
            return self._Reconcile(request, context)

    def Resolve(self, request: pb.ResolveRequest, context: grpc.ServicerContext) -> pb.Operation:
        with self._call(context), self.work:
            return self._Resolve(request, context)

    def WatchOperation(
        self, request: pb.WatchOperationRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Operation]:
        with self._call(context):
            principal = self.auth.principal(context, "watch", call="WatchOperation")
            with self.work:
                key, intent = self._get(context, principal, request.operation_id)
            floor = request.from_revision
            woken = threading.Event()
            self.watches.add(key, woken)
            context.add_callback(woken.set)  # a cancelled or ended call wakes it at once
            try:
                yield from self._watch_loop(context, key, intent, floor, woken)
            finally:
                self.watches.remove(key, woken)

    def _watch_loop(
        self,
        context: grpc.ServicerContext,
        key: ActivityKey,
        intent: Any,
        floor: int,
        woken: threading.Event,
    ) -> Iterator[pb.Operation]:
        last = b""
        sent = False
        runtime = self.daemon.host()
        #: (record version, progress seq) of the last view built: a view is a function of
        #: the two, so a wake-up that changed neither (an unkeyed ring, the backstop) costs
        #: one record read, not a view.
        stamp: tuple[int | None, int] | None = None
        ended: float | None = None  # when a terminal view was first built (monotonic)
        while context.is_active() and not self.closing.is_set():
            woken.clear()  # before the read: a change after it wakes the wait below
            seq = self.daemon.latest(key)[0]
            with self.work:
                record = runtime.get(key)
                now = (None if record is None else record.version, seq)
                # Not before its admission (its intent committed, its catalog record an instant
                # away): a view without a record has no revision, and the first one sent would
                # read revision 0 after Execute answered revision 1.
                fresh = now != stamp and record is not None
                op = self._operation(key, intent, record) if fresh else None
            if op is not None:
                if stamp is None and floor > op.revision:
                    _abort(
                        context,
                        grpc.StatusCode.OUT_OF_RANGE,
                        f"from_revision: {floor} is past the revision of operation"
                        f" {key.activity_id!r} ({op.revision}; resume from a revision this"
                        " server sent)",
                    )
                stamp = now
                data = op.SerializeToString(deterministic=True)
                # First the current view (from_revision 0) or the first one past
                # from_revision; from then on every change.
                if data != last and (sent or floor == 0 or op.revision > floor):
                    yield op
                    sent, last = True, data
                if op.state in TERMINAL:
                    # Its last change is its settlement (the tick that observed the result):
                    # the stream ends on that revision, so a watcher that saw it end holds
                    # the record's final view. One that never settles ends at the bound.
                    if record is None or record.settlement is not None or record.compacted:
                        return
                    if ended is None:
                        ended = time.monotonic()
            wait = WATCH_BACKSTOP_S
            if ended is not None:
                wait = ended + WATCH_SETTLE_MAX_S - time.monotonic()
                if wait <= 0:
                    return
            # Sleep until this operation's own progress moves, its result is recorded, the
            # poller sees its record change, the call ends, or the backstop passes.
            woken.wait(min(wait, WATCH_BACKSTOP_S))
        if self.closing.is_set() and context.is_active():
            # Not a terminal state: the stream ends as an outage, for the client to resume.
            _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                "server_stopping: the server is shutting down; watch again with from_revision"
                " set to the last revision received",
            )

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopResponse:
        from tether._priority import stop_priority

        with stop_priority():  # from its first line to its answer
            return self._stop(request, context)

    def _stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopResponse:
        principal = self.auth.principal(context, "stop", call="Stop")
        config = self.daemon.config
        simulated = SIM_DEVICE not in config.robots and SIM_KIND in self.daemon.served
        if request.device == SIM_DEVICE and simulated:  # a robot named "sim" is that robot
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"device: the simulated arm {SIM_DEVICE!r} moves no hardware, so it has nothing"
                " to stop: a sim reach runs to its end (Stop acts on robots)",
            )
        if request.device and request.device not in config.robots:
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"device: unknown device {_shown(request.device)!r}",
            )
        devices = self.daemon.devices
        resumes = None if devices is None else devices.latch.resumes
        # Checked and authorised: from here to its answer new work is held back (`StopFirst`),
        # so the RPCs and ticks the stop held do not wake to contend with its answer.
        with self.daemon.stop_first.stopping():
            # The latch names who stopped it (`tether operator resume` and status show it).
            by = stopped_by("gRPC Stop", principal.role, principal.name)
            reports = self.daemon.stop_devices(
                {"robot": request.device} if request.device else {}, by=by
            )
            # Every robot a stop reports, it latched before any frame (in memory where its
            # record could not be written): with no resume in this daemon since, each still
            # is, and no record is read again.
            if devices is not None and devices.latch.resumes == resumes:
                return pb.StopResponse(devices=[_device_stop(r, latched=True) for r in reports])
            return pb.StopResponse(
                devices=[_device_stop(r, latched=_latched(self.daemon, r)) for r in reports]
            )

    def _Cancel(
        self, request: pb.CancelRequest, context: grpc.ServicerContext
    ) -> pb.CancelResponse:
        principal = self.auth.principal(context, "submit", call="Cancel")
        key, intent = self._get(context, principal, request.operation_id)
        op = self._operation(key, intent)
        if op.state in TERMINAL:
            return pb.CancelResponse(outcome=pb.CancelResponse.ALREADY_TERMINAL, operation=op)
        if op.state == pb.UNKNOWN_AWAITING_OPERATOR:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, _awaiting(op))
        if key.kind == SIM_KIND:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "a sim reach cannot be cancelled")
        handler = self.daemon.devices.handler("cancel") if self.daemon.devices else None
        if handler is None:
            _abort(context, grpc.StatusCode.UNIMPLEMENTED, f"{key.kind} cannot be cancelled")
        from tether.activities import operation_id_for

        answer = handler(
            {"operation_id": operation_id_for(key), "request": {**intent, "kind": key.kind}}
        )
        if answer.get("terminal"):  # over on the device; the record catches up
            outcome = pb.CancelResponse.ALREADY_TERMINAL
        elif answer.get("started"):
            # Started, per its journal: running unless its attempt was concluded since the
            # read above (parked for an operator, or a result recorded). Only a running move's
            # robot is stopped.
            now = self.daemon.host().get(key)
            if now is not None and now.result is None and now.awaiting_decision:
                parked = self._operation(key, intent, now)
                _abort(context, grpc.StatusCode.FAILED_PRECONDITION, _awaiting(parked, late=True))
            if now is not None and (now.result is not None or now.compacted):
                outcome = pb.CancelResponse.ALREADY_TERMINAL
            elif not answer.get("running") and answer.get("other"):
                # Started by an attempt that runs no more, and another operation's attempt runs
                # the robot now: a cancel of this one never stops that one. (With none running
                # it, the robot may still drive to this one's goals: it is stopped below.)
                outcome = pb.CancelResponse.NOT_RUNNING
            else:
                reports = self.daemon.stop_devices({"robot": op.device}, by=PLANNER_CANCEL)
                for report in reports:
                    stop = _device_stop(report, latched=False)
                    if stop.error.code == "device_unreachable":
                        # Cancelled (no attempt of it starts again), and nothing was stopped:
                        # said as it is, for the client to retry the Cancel or Stop it.
                        _abort(
                            context,
                            grpc.StatusCode.UNAVAILABLE,
                            f"device_unreachable: {op.id} is cancelled (no attempt of it"
                            f" starts again), but its device {op.device!r} could not be"
                            f" stopped: {stop.error.message}; retry the Cancel (or"
                            " Stop) once it answers",
                        )
                outcome = pb.CancelResponse.STOPPED_WHILE_RUNNING
        else:
            outcome = pb.CancelResponse.CANCELLED_BEFORE_START
            self._conclude_cancelled(key)
        return pb.CancelResponse(outcome=outcome, operation=self._operation(key, intent))

    def _conclude_cancelled(self, key: ActivityKey) -> None:
        """Run the attempt of a move cancelled before its start now, in this call: it
        concludes `cancelled` from its journal without its robot (`Worker.run_key`), so the
        answer and every later read say CANCELLED, not PENDING until a worker is free. One a
        worker holds (waiting for its robot) ends on its own within `QUEUED_CHECK_S`; one this
        process does not run (its robot driven by a `tether worker`) is left to that one."""
        runtime = self.daemon.host()
        worker = runtime.new_worker("cancel")
        try:
            if key.kind in worker.kinds:
                worker.run_key(key)
        except (TetherError, OSError) as exc:  # the answer stands; a worker concludes it
            log.warning("cancel of %s: its attempt did not run now: %s", key, exc)
        finally:
            worker.close()

    def _Reconcile(
        self, request: pb.ReconcileRequest, context: grpc.ServicerContext
    ) -> pb.Operation:
        principal = self.auth.principal(context, "watch", call="Reconcile")
        key, intent = self._get(context, principal, request.operation_id)
        op = self._operation(key, intent)
        read = self.daemon.devices.handler("read_back") if self.daemon.devices else None
        if op.state == pb.UNKNOWN_AWAITING_OPERATOR and read is not None and key.kind != SIM_KIND:
            from tether.operator import decisions

            runtime = self.daemon.host()
            try:
                fresh = read({"robot": op.device})
                decisions.refresh_for_robot(
                    runtime.catalog,
                    runtime.artifacts,
                    op.device,
                    fresh,
                    f"reconciled over gRPC by {principal.name}",
                    review=self.daemon.review(),
                    only=key,
                    if_changed=True,
                )
            except (TetherError, CodedError, OSError) as exc:
                _abort(context, grpc.StatusCode.UNAVAILABLE, f"device read-back failed: {exc}")
        return self._operation(key, intent)

    def _Resolve(self, request: pb.ResolveRequest, context: grpc.ServicerContext) -> pb.Operation:
        operator = self.auth.principal(context, "decide", call="Resolve")
        key, intent = self._anyones(context, request.operation_id)
        decision = {
            pb.ResolveRequest.DONE: "done",
            pb.ResolveRequest.REISSUE: "reissue",
            pb.ResolveRequest.ABANDON: "abandon",
        }.get(request.decision)
        if decision is None:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "decision: DONE, REISSUE or ABANDON")
        from tether.operator import decisions

        runtime = self.daemon.host()
        try:
            decisions.resolve(
                runtime.catalog,
                runtime.artifacts,
                f"{key.world_id}/{key.kind}/{key.activity_id}",
                decision=decision,
                revision=int(request.evidence_revision),
                credential="verified",
                verify_credential=lambda _secret: operator.name,
                note=request.note,
                review=self.daemon.review(),
                host=self.daemon.decision_host,
            )
        except CodedError as exc:
            if exc.code in ("bounds_exceeded", "bad_note"):  # the one free text of the request
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"note: {exc}")
            if isinstance(exc, TransportError):
                # The device could not be read for the decision (its port gone): nothing was
                # decided, and the same decision may be sent again once it answers, as a
                # Reconcile's read-back failure says it.
                _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))  # "code: message"
        return self._host_wide(key, self._operation(key, intent))

    def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        principal = self.auth.principal(context, "submit", call="Heartbeat")
        from tether.serve.sessions import MAX_TTL_MS, MIN_TTL_MS, SessionRefused

        bad = grpc.StatusCode.INVALID_ARGUMENT
        if not request.session_id:
            _abort(context, bad, "session_id: required")
        if not OPERATION_ID.fullmatch(request.session_id):
            _abort(context, bad, "session_id: 1..256 of [A-Za-z0-9_.:+@-], starting alphanumeric")
        if not MIN_TTL_MS <= request.ttl_ms <= MAX_TTL_MS:
            _abort(context, bad, f"ttl_ms: {MIN_TTL_MS}..{MAX_TTL_MS} ms, got {request.ttl_ms}")
        try:
            expires = self.daemon.sessions.heartbeat(
                world_for(principal.name, self.daemon.world_owner),
                request.session_id,
                int(request.ttl_ms),
            )
        except SessionRefused as exc:
            _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.code}: {exc}")
        return pb.HeartbeatResponse(expires_ms=expires)


def _awaiting(op: pb.Operation, *, late: bool = False) -> str:
    """Why `Cancel` refuses an operation parked for an operator: it is not running (nothing is
    stopped) and only an operator's `Resolve` decides it. `late`: it was parked between the
    Cancel's first read and the family's answer, which recorded the cancel already."""
    if late:
        changed = (
            "so Cancel stopped nothing; it came as the attempt ended and its cancel is recorded,"
            " so a REISSUE of it ends cancelled and never moves"
        )
    else:
        changed = "so Cancel stops nothing and changes nothing"
    return (
        f"awaiting_operator: operation {op.id!r} awaits an operator's decision"
        f" (UNKNOWN_AWAITING_OPERATOR, evidence revision {op.evidence.revision}): it is not"
        f" running, {changed}; only an operator's Resolve decides it (DONE, REISSUE or ABANDON)"
    )


def _latched(daemon: Any, report: dict[str, Any]) -> bool:
    """Whether the device of a stop report is latched now (its record read)."""
    try:
        return bool(daemon.devices.latched(_stopped_name(report)))
    except Exception:
        return False


def _stopped_name(report: dict[str, Any]) -> str:
    return str(report.get("robot") or report.get("device") or "")


def _device_stop(report: dict[str, Any], *, latched: bool) -> pb.DeviceStop:
    """A device's stop report (a `SafeStopReport` document: each joint's `present_rad`
    and `hardware_error` names as read back after the stop) on the wire; ``latched``: whether
    the device is latched now."""
    name = _stopped_name(report)
    out = pb.DeviceStop(device=name, ok=bool(report.get("ok")))
    joints = [j for j in report.get("joints") or [] if isinstance(j, dict)]
    for j in joints:
        present = j.get("present_rad")
        out.joints.append(
            pb.JointStop(
                joint=str(j.get("joint") or j.get("name") or ""),
                state=str(j.get("state") or ""),
                position_rad=float(present) if isinstance(present, int | float) else 0.0,
                hardware_errors=[str(e) for e in j.get("hardware_error") or []],
            )
        )
    lost = [str(j["error"]) for j in joints if j.get("state") == "unknown" and j.get("error")]
    if report.get("error"):
        out.error.code = "device_unreachable"
        out.error.message = str(report["error"])
    elif joints and len(lost) == len(joints):
        # No joint answered (a lost port reports per joint): the device was not reached.
        out.error.code = "device_unreachable"
        out.error.message = "; ".join(dict.fromkeys(lost))
    elif report.get("latch_error"):
        out.error.code = "latch_unwritable"
        out.error.message = str(report["latch_error"])
    out.latched = latched
    return out


def listener_policy(config: Any, address: tuple[str, int]) -> ListenerPolicy:
    """The gRPC listener's policy: loopback unless [tls], a principal on every call.

    Raises:
        HostConfigError: `insecure_listener`, `insecure_tls_key`, `tls_unusable`.
    """
    try:
        return ListenerPolicy(address, config.tls, config.authenticator(), require_principal=True)
    except ListenerError as exc:
        raise HostConfigError(exc.code, f"serve.grpc: {exc.message}") from None


def _serving_priority() -> None:
    """A pool thread serves calls at `DISPATCH_NICE`, like the dispatcher that hands them over:
    a call's own work is short (the Activity's work runs in the worker threads, at nice 0), and
    a flood of calls keeps its rate beside the machine's other processes. A Stop call raises
    its thread further (`tether._priority.stop_priority`)."""
    from tether._priority import DISPATCH_NICE, raise_thread

    raise_thread(threading.get_native_id(), DISPATCH_NICE)


class GrpcServer:
    """The mounted server: RobotControl, health, reflection. `close()` stops it."""

    def __init__(self, daemon: Any, address: tuple[str, int]) -> None:
        config = daemon.config
        policy = listener_policy(config, address)
        self.closing = threading.Event()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 4 * MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
            ("grpc.http2.min_ping_interval_without_data_ms", int(PING_MIN_S * 1000)),
            ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
            # The wait for a ping's ack is `ping_timeout` in grpcio's transport (60 s by
            # default, whatever `keepalive_timeout` says).
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
            ("grpc.http2.ping_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
        ]
        guard_grpc_logs()  # a client's undecodable metadata (a token) is never logged
        self.server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=THREADS, thread_name_prefix="grpc", initializer=_serving_priority
            ),
            options=options,
        )
        self.servicer = RobotControl(daemon, _Auth(config.authenticator()), self.closing)
        auth = self.servicer.auth
        add_service(
            self.server,
            pb.DESCRIPTOR.services_by_name["RobotControl"],
            pb,
            self.servicer,
            authenticate=lambda context, call: auth.principal(context, None, call=call),
        )
        self.health = _Health()
        #: The status each health name was last set to: a set that changes nothing is not
        #: made (grpcio sends every set to each Watch, a change or not).
        self._health_now: dict[str, int] = {}
        add_service(
            self.server, health_pb2.DESCRIPTOR.services_by_name["Health"], health_pb2, self.health
        )
        names = (
            SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self.server)
        host, port = address
        target = address_text(host, port)
        try:
            if policy.tls is not None:
                key, cert = policy.tls.pem()
                roots = policy.tls.client_roots()  # [tls] client_ca: mutual TLS
                credentials = grpc.ssl_server_credentials(
                    [(key, cert)], root_certificates=roots, require_client_auth=roots is not None
                )
                bound = self.server.add_secure_port(target, credentials)
            else:
                bound = self.server.add_insecure_port(target)
        except RuntimeError as exc:
            bound, error = 0, str(exc)
        else:
            error = "address in use or unusable"
        if not bound:
            from tether.serve.daemon import unavailable

            raise unavailable("grpc_unavailable", "gRPC", target, error)
        self.url = address_text(host, bound)  # an IPv6 host bracketed, as a client dials it
        self.daemon = daemon
        self._health_set("", SERVICE, serving=True)
        self._check_devices()
        self.server.start()
        self._raise_dispatcher()
        self._poller = threading.Thread(target=self._poll, name="grpc-health", daemon=True)
        self._poller.start()
        self._ringer = threading.Thread(
            target=self.servicer.ring_loop, name="grpc-rings", daemon=True
        )
        self._ringer.start()
        self._watch_poller = threading.Thread(
            target=self.servicer.poll_loop, name="grpc-watch-poll", daemon=True
        )
        self._watch_poller.start()
        daemon.progress_watchers.append(self.servicer.watches.wake)
        mutual = policy.tls is not None and policy.tls.client_ca is not None
        log.info(
            "grpc serving",
            extra={"address": self.url, "tls": policy.tls is not None, "mtls": mutual},
        )

    def _health_set(self, *names: str, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in names:
            if self._health_now.get(name) != status:
                self._health_now[name] = status
                self.health.set(name, status)

    def _check_devices(self) -> None:
        self.daemon.refresh_devices()  # a lost port is not serving, even before its next use
        config = self.daemon.config
        for name in sorted(config.robots):
            self._health_set(f"{SERVICE}/{name}", serving=robot_serving(self.daemon, name))
        if SIM_KIND in self.daemon.served and SIM_DEVICE not in config.robots:
            self._health_set(f"{SERVICE}/{SIM_DEVICE}", serving=True)

    @staticmethod
    def _raise_dispatcher() -> None:
        """grpcio hands every call, a Stop's too, from one dispatcher thread (its target is
        grpcio's ``_serve``) to a pool thread: it runs at `DISPATCH_NICE` so that a stop's
        call is not queued behind the machine's other work (see `tether._priority`; the pool
        threads: `_serving_priority`)."""
        from tether._priority import DISPATCH_NICE, raise_thread

        for thread in threading.enumerate():
            if thread.name.endswith("(_serve)") and thread.native_id is not None:
                raise_thread(thread.native_id, DISPATCH_NICE)

    def _poll(self) -> None:
        while not self.closing.wait(HEALTH_POLL_S):
            try:
                self._check_devices()
            except Exception:  # health never takes the server down
                log.exception("device health check failed")

    def close(self) -> None:
        if self.closing.is_set():
            return
        self.closing.set()
        self.servicer.watches.wake_all()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace=1.0).wait(5.0)
        self._watch_poller.join(5.0)  # it closes its catalog connection


def mount(daemon: Any, address: tuple[str, int]) -> GrpcServer:
    """Serve RobotControl for `daemon` on `address` (its `[serve] grpc`)."""
    return GrpcServer(daemon, address)


__all__ = [
    "CRASH_POINTS",
    "KINDS",
    "MAX_MESSAGE_BYTES",
    "SERVICE",
    "SIM_DEVICE",
    "SIM_KIND",
    "WORLD_PREFIX",
    "GrpcServer",
    "RobotControl",
    "listener_policy",
    "mount",
    "request_digest",
    "world_for",
]
