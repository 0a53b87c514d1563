"""`physical_ai.remote_move`: joint moves of a robot on another host, through its RobotControl
gRPC service (`tether serve` with `[serve] grpc`), as a runtime family (Contract C).

Components (entity = the move's activity id):
    physical_ai.remote_move.intent       {"kind", "device", "targets", "not_after_ms"} (a joint
                                         move), or {"kind": KIND_SIM_REACH, "device", "sim_reach":
                                         {"seed", "target_x", "target_y", "episodes", "steps"},
                                         "not_after_ms"} (a seeded simulation on the remote's
                                         simulated arm, device "sim")
    physical_ai.remote_move.observation  the factual outcome: result reference, digest, summary

A remote planner launches seeded simulations and drives real arms the same way: one family,
one adapter, one ExecuteRequest per Activity (`execute_request`); only the command differs.

Rules:
- The client `operation_id` is the Activity's bound provider operation id (`ctx.operation_id`,
  bound in the catalog before any effect). `not_after_ms` is part of the Activity's input, so
  every attempt sends the byte-identical `ExecuteRequest`: a retry re-sends the identical
  request, and the server's create-if-absent per (principal, operation_id) is the guard.
- `execute`: `Execute`, then `WatchOperation` until a terminal state; each view's progress goes
  to `ctx.progress` (the AG-UI stream). `UNAVAILABLE`, `DEADLINE_EXCEEDED` or a broken stream
  raises `RemoteUnreachable`: the attempt stays bound and the next one reconciles (never a new
  id). `INVALID_ARGUMENT` (the remote refused the request, nothing recorded there) and
  `ALREADY_EXISTS` (the id is bound to another request there) are failed results, as is
  `FAILED_PRECONDITION robot_latched` (`remote_robot_latched`: an operator's stop holds the
  remote robot, and the remote recorded nothing): a move refused by a stopped robot never
  starts by itself once that robot is resumed; the planner asks again with a new intent.
- The remote result is made durable in the local artifact store and read back against the
  digest the remote reported (and the digest of its bytes) before it is returned for
  `record_result`; a mismatch is `RemoteResultMismatch` (nothing recorded).
- `reconcile` asks `GetOperation`, and sends nothing that could start a motion (an operator
  may be deciding the Activity meanwhile). NOT_FOUND -> ConfirmedAbsent whose guard names the
  remote's create-if-absent per (principal, operation_id): the next execute attempt, bound
  under its own fence, retries with the identical request (the remote's `expired` answer is
  then a recorded failure). An operation it holds is proved to be this request's by the
  identical `Execute`, which the remote answers with that operation when its request digest
  matches and creates nothing (another request's under the same id -> `ALREADY_EXISTS`, a
  recorded failure `remote_conflict`: ours never ran there; a request the remote now refuses,
  its limits changed -> the view stands when its device, deadline and repeatability are
  ours). Then: succeeded ->
  Recovered (the result as above); failed, cancelled or expired -> Recovered with a failed
  result (a recorded failure: the remote has settled it, it never runs again);
  unknown-awaiting-operator -> Unknown with the remote evidence document; pending or running
  -> watched to its end; a result whose bytes do not match its digest -> Unknown
  `remote_result_mismatch` for an operator; unreachable -> Unknown, retried shortly; refused
  (a credential the remote refuses, any other non-transient code) -> Unknown
  `remote_refused_principal` or `remote_refused`, retried after `OPERATOR_RETRY_MS` (fix the
  token or the address). A terminal operation whose record the remote has compacted (its
  retention) is recorded with its state and no document (`remote_compacted`).

Crash points (`tether._crash.crash_point`, `CRASH_POINTS`), where a death of the bridge worker
matters; tests/grpc/test_bridge_crash.py SIGKILLs the bridge at each and at the runtime's:
    remote.execute_sent          the Execute handed to grpcio, its reply not read (whether
                                 it left the process is a race, mostly not: the next attempt
                                 reconciles: NOT_FOUND, and the next execute attempt re-sends
                                 the identical request)
    remote.after_execute         the Execute answered (the intent is committed remotely), the
                                 reply not used: the next attempt finds it by GetOperation
    remote.mid_watch             a not yet terminal view of the watch reported as progress
    remote.reconcile.after_get   GetOperation answered, nothing concluded from it yet
    remote.after_result_stored   the remote result durable in the local artifact store, not
                                 yet returned for `record_result`
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from tether._coded import CodedError
from tether._crash import crash_point
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether._log import guard_grpc_logs
from tether.activities import ABANDONED_MEDIA_TYPE, Evidence, ResultRef, RetryGuard
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    Family,
    FamilyError,
    StagedResult,
    unobserved_intents,
)
from tether.runtime import ConfirmedAbsent as RuntimeAbsent
from tether.runtime import Recovered as RuntimeRecovered
from tether.runtime import Unknown as RuntimeUnknown
from tether.world import ComponentWrite, WorldSnapshot

FAMILY: Final = "physical_ai.remote_move"
KIND_ABSOLUTE: Final = "physical_ai.remote_move.absolute"
KIND_RELATIVE: Final = "physical_ai.remote_move.relative"
#: A seeded MuJoCo reach on the remote's simulated arm (`SimReach`).
KIND_SIM_REACH: Final = "physical_ai.remote_move.sim_reach"
KINDS: Final = (KIND_ABSOLUTE, KIND_RELATIVE, KIND_SIM_REACH)
#: The `sim_reach` fields of a sim intent (the wire's `SimReach`).
SIM_REACH_FIELDS: Final = ("seed", "target_x", "target_y", "episodes", "steps")
INTENT: Final = "physical_ai.remote_move.intent"
OBSERVATION: Final = "physical_ai.remote_move.observation"
RESULT_MEDIA_TYPE: Final = "application/vnd.tether.remote-move.result+json"
EVIDENCE_MEDIA_TYPE: Final = "application/vnd.tether.remote-move.evidence+json"
GUARD_MEDIA_TYPE: Final = "application/vnd.tether.remote-move.guard+json"
#: An operation an operator here decides (a changed principal, a result that does not
#: match) is reconciled again after this long.
OPERATOR_RETRY_MS: Final = 60_000
#: A remote operation its robot host's operator holds is asked about again this often, so
#: that operator's decision reaches the planner within it (it waited up to a minute). While
#: nothing changed there the evidence is the same document, so its revision here does not
#: rise: a decision an operator here names stays current.
REMOTE_DECISION_RETRY_MS: Final = 5_000
UNREACHABLE_RETRY_MS: Final = 1_000
#: How long `tether status` on the bridge host waits for the robot host's health answer.
STATUS_TIMEOUT_S: Final = 2.0
#: The robot host's service, whose health names are "<it>/<device>".
REMOTE_SERVICE: Final = "tether.robot.v1.RobotControl"
#: Codes of a remote that did not answer (or not yet): reconciled again after
#: `UNREACHABLE_RETRY_MS`. Any other code of GetOperation is the remote's answer (a refused
#: credential, say), asked again only after `OPERATOR_RETRY_MS`.
TRANSIENT: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)
TERMINAL: Final = frozenset({pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.EXPIRED})
#: The adapter's crash points (see the module doc), in the order an attempt can reach them.
CRASH_POINTS: Final = (
    "remote.execute_sent",
    "remote.after_execute",
    "remote.mid_watch",
    "remote.reconcile.after_get",
    "remote.after_result_stored",
)


class RemoteUnreachable(FamilyError, CodedError):
    """The remote host did not answer (UNAVAILABLE, DEADLINE_EXCEEDED, a broken stream): the
    attempt stays bound and is reconciled. An expected condition, with its code
    (``remote_unreachable``): the worker logs its line, not a traceback."""

    def __init__(self, message: str) -> None:
        CodedError.__init__(self, "remote_unreachable", message)


class RemoteResultMismatch(FamilyError, CodedError):
    """The remote result's bytes do not match the digest it reported (code
    ``remote_result_mismatch``): nothing is recorded from it, and the operation awaits an
    operator (the worker logs its line, not a traceback)."""

    def __init__(self, message: str) -> None:
        CodedError.__init__(self, "remote_result_mismatch", message)


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def intent(activity_id: str, request: dict[str, Any]) -> ComponentWrite:
    """The component write that asks for one remote move (`request`: kind, device, targets,
    not_after_ms) or one remote sim reach (kind `KIND_SIM_REACH`, device, sim_reach,
    not_after_ms)."""
    return ComponentWrite(activity_id, INTENT, request)


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    """One Activity per intent not yet observed (pure)."""
    return unobserved_intents(snapshot, INTENT, OBSERVATION, KINDS)


def stage(staged: StagedResult) -> list[ComponentWrite]:
    """The observation fact of one durable result (pure, idempotent)."""
    try:
        doc = json.loads(staged.payload) if staged.payload else {}
    except ValueError:
        doc = {}
    summary = {k: doc.get(k) for k in ("outcome", "state", "code", "remote_revision") if k in doc}
    value = {
        "result_ref": staged.result.ref,
        "result_digest": staged.result.digest,
        "failed": staged.result.failed,
        "summary": summary,
    }
    return [ComponentWrite(staged.key.activity_id, OBSERVATION, value)]


_EMPTY_DIGEST: Final = "sha256:" + hashlib.sha256(b"").hexdigest()


def _document(data: bytes) -> Any:
    """A remote result or evidence document as kept locally: its JSON, or, for a document
    that is not JSON (an adapter error's text, say), its text (invalid UTF-8 replaced)."""
    try:
        return json.loads(data)
    except ValueError:
        return {"text": data.decode("utf-8", "replace")}


def _sim_reach(reach: Any) -> pb.SimReach:
    """The `SimReach` of a sim intent; only what the wire cannot carry is refused here (the
    remote checks the bounds, and its refusal is a recorded failure)."""
    if not isinstance(reach, dict) or sorted(reach) != sorted(SIM_REACH_FIELDS):
        raise FamilyError(f"sim_reach must be an object of exactly {', '.join(SIM_REACH_FIELDS)}")
    for name, bits in (("seed", 64), ("episodes", 32), ("steps", 32)):
        value = reach[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << bits:
            raise FamilyError(f"sim_reach.{name} must be an unsigned {bits}-bit integer")
    for name in ("target_x", "target_y"):
        value = reach[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FamilyError(f"sim_reach.{name} must be a number of metres")
    return pb.SimReach(
        seed=reach["seed"],
        target_x=float(reach["target_x"]),
        target_y=float(reach["target_y"]),
        episodes=reach["episodes"],
        steps=reach["steps"],
    )


def execute_request(operation_id: str, request: dict[str, Any]) -> pb.ExecuteRequest:
    """The one ExecuteRequest of an Activity: every attempt sends exactly these bytes."""
    kind = request.get("kind")
    if kind not in KINDS:
        raise FamilyError(f"kind must be one of {KINDS}")
    not_after = request.get("not_after_ms")
    if isinstance(not_after, bool) or not isinstance(not_after, int) or not 0 < not_after < 1 << 63:
        raise FamilyError(
            "not_after_ms (ms since the epoch, a positive 64-bit integer) is part of the request"
        )
    if kind == KIND_SIM_REACH:
        return pb.ExecuteRequest(
            operation_id=operation_id,
            device=str(request.get("device") or ""),
            sim_reach=_sim_reach(request.get("sim_reach")),
            not_after_ms=not_after,
        )
    targets = request.get("targets")
    if not isinstance(targets, dict) or not targets:
        raise FamilyError("targets must map joint names to radians")
    for joint, value in targets.items():
        if not isinstance(joint, str) or not joint:
            raise FamilyError(f"targets: joint names are non-empty strings, not {joint!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FamilyError(f'targets["{joint}"] must be a number of radians, not {value!r}')
        if not math.isfinite(value):
            raise FamilyError(f'targets["{joint}"] must be finite, not {value!r}')
    return pb.ExecuteRequest(
        operation_id=operation_id,
        device=str(request.get("device") or ""),
        joint_move=pb.JointMove(
            kind=pb.JointMove.RELATIVE if kind == KIND_RELATIVE else pb.JointMove.ABSOLUTE,
            targets_rad={str(k): float(v) for k, v in targets.items()},
        ),
        not_after_ms=not_after,
    )


#: The channel's keepalive (`RemoteHost.keepalive_s`): while a call is open the channel pings
#: the host this often, and closes a connection whose ping is not answered within
#: `KEEPALIVE_TIMEOUT_S`, so a watch over a cut link (a host powered off mid-move, a NAT
#: that dropped the flow: no reset ever comes) ends UNAVAILABLE and the attempt is
#: reconciled, instead of waiting for ever while its lease is renewed. The robot host's
#: server accepts pings this often (`grpc_server.PING_MIN_S`).
KEEPALIVE_S: Final = 20.0
KEEPALIVE_TIMEOUT_S: Final = 10.0
#: The longest wait between two connection attempts to a host that is down (grpcio's own
#: backoff grows to 120 s: a robot host back after a minute's outage would be reached, and its
#: moves reconciled, only a minute or two later).
RECONNECT_MAX_MS: Final = 2_000


@dataclass(frozen=True)
class RemoteHost:
    """Where the robot host is and how to reach it: `address` (HOST:PORT), the planner token
    (a secret: read it with `credentials.read_secret`, never from argv), an optional PEM
    trust anchor for TLS (the server's CA), and the per-call deadline. For a host whose
    `[tls]` has `client_ca` (mutual TLS): `certificate_chain` and `private_key`, the PEM
    client certificate and its key (both or neither; a secret like the token). Either a trust
    anchor or a client certificate means TLS (without an anchor, the system's roots); the
    bearer token is sent on every call either way."""

    address: str
    token: str
    root_certificates: bytes | None = None
    timeout_s: float = 10.0
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    keepalive_s: float = KEEPALIVE_S
    keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise FamilyError(
                "RemoteHost: a client certificate needs both certificate_chain and private_key"
            )

    @property
    def tls(self) -> bool:
        return self.root_certificates is not None or self.certificate_chain is not None

    def channel(self) -> grpc.Channel:
        """A channel to the host: TLS (mutual with a client certificate) or plain, with the
        keepalive above."""
        guard_grpc_logs()  # a peer's undecodable metadata is never logged in full
        options = [
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            # grpcio's transport waits for a ping's ack `ping_timeout` (60 s by default,
            # whatever `keepalive_timeout` says).
            ("grpc.http2.ping_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.http2.max_pings_without_data", 0),  # a quiet watch is pinged all along
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.min_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
        ]
        if not self.tls:
            return grpc.insecure_channel(self.address, options=options)
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )
        return grpc.secure_channel(self.address, creds, options=options)

    def __repr__(self) -> str:  # the token and the key never appear in a repr or a log
        mtls = self.certificate_chain is not None
        return f"RemoteHost({self.address!r}, tls={self.tls}, client_cert={mtls})"


#: At most this many characters of grpcio's account of a failed call are kept in evidence.
WHY_CHARS: Final = 300


def _why(exc: grpc.RpcError) -> str:
    """A failed call's status and grpcio's account of it (a TLS handshake that failed on
    verification, a refused connection), one line, clipped: what an operator needs to tell a
    wrong certificate from a host that is down."""
    details = " ".join(str(exc.details() or "").split())
    if len(details) > WHY_CHARS:
        details = details[:WHY_CHARS] + "..."
    name = exc.code().name
    return f"{name}: {details}" if details else name


class RemoteMoveAdapter:
    """Contract C adapter over one remote host's RobotControl."""

    def __init__(self, remote: RemoteHost, *, credentials: Path | None = None) -> None:
        """``credentials``: the file keeping every credential this bridge has sent under (as
        digests, never a token; `_credential_history`): with it, an operation sent under an
        earlier credential is never taken as absent because the current one's principal does
        not know it."""
        self.remote = remote
        self._channel = remote.channel()
        self._stub = rpc.RobotControlStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = (("authorization", f"Bearer {remote.token}"),)
        self._credential = _credential_digest(remote.token)
        self._earlier = _credential_history(credentials, self._credential)

    def close(self) -> None:
        self._channel.close()

    def status(self) -> dict[str, Any]:
        """The robot host as this bridge reaches it now (`tether status` on the bridge host):
        its grpc.health.v1 `List` (the server and each of its devices), asked on the bridge's
        own channel (its TLS) within `STATUS_TIMEOUT_S`; never raises. Health takes no
        credential: asking it never counts against the planner token's failed-credential
        window there."""
        address = self.remote.address
        doc: dict[str, Any] = {"remote": address, "tls": self.remote.tls}
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            answer = stub.List(health_pb2.HealthListRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.RpcError as exc:
            why = _why(exc)
            return {
                **doc,
                "answers": False,
                "error": why,
                "summary": f"remote robot host {address}: no answer within"
                f" {STATUS_TIMEOUT_S:g} s ({why}); remote moves wait for it",
            }
        serving = health_pb2.HealthCheckResponse.SERVING
        names = dict(answer.statuses)
        devices = {
            name.removeprefix(REMOTE_SERVICE + "/"): status.status == serving
            for name, status in sorted(names.items())
            if name.startswith(REMOTE_SERVICE + "/")
        }
        up = "" in names and names[""].status == serving
        words = ", ".join(
            f"{name} {'serving' if ok else 'NOT SERVING'}" for name, ok in devices.items()
        )
        return {
            **doc,
            "answers": True,
            "serving": up,
            "devices": devices,
            "summary": f"remote robot host {address}: answers, "
            f"{'serving' if up else 'NOT SERVING'}; devices: {words or 'none'}",
        }

    # --- results ---

    def _put(self, ctx: AttemptContext, doc: dict[str, Any], media: str) -> ResultRef:
        ref = ctx.artifacts.put_bytes(canonical(doc), media)
        ctx.artifacts.get_bytes(ref.ref, ref.digest)  # durable and readable before it counts
        return ref

    def _result(self, ctx: AttemptContext, op: pb.Operation) -> ResultRef:
        """The local durable result of a terminal remote operation, digest-checked."""
        remote_doc: Any = None
        # An operator's abandon on the remote host: its result is the decision itself, a
        # reference the remote's core keeps no bytes of (its digest names the decision's
        # canonical record). Recorded as the failure it is, with the remote's digest, never
        # waited for: no bytes will ever come.
        abandoned = op.state != pb.SUCCEEDED and op.result.media_type == ABANDONED_MEDIA_TYPE
        if (
            op.result.digest
            and not op.result.document
            and op.result.digest != _EMPTY_DIGEST
            and not abandoned
        ):
            # The host reported a result it could not read back to us: ask again later,
            # never record a success (or a failure) without its document.
            raise RemoteUnreachable(f"{op.id}: the remote sent its result's digest, not its bytes")
        if op.result.document:
            actual = "sha256:" + hashlib.sha256(op.result.document).hexdigest()
            if actual != op.result.digest:
                raise RemoteResultMismatch(
                    f"{op.id}: the remote result hashes to {actual}, not"
                    f" {op.result.digest or 'the digest it did not report'}"
                )
            remote_doc = _document(op.result.document)
        state = pb.OperationState.Name(op.state).lower()
        outcome = "completed" if op.state == pb.SUCCEEDED else state
        said = remote_doc.get("outcome") if isinstance(remote_doc, dict) else None
        if op.state == pb.SUCCEEDED and isinstance(said, str) and said:
            # As the remote ended it: an operator's `operator_done` on a move a stop cut short
            # is not a move that completed by itself.
            outcome = said
        doc = {
            "operation_id": op.id,
            "state": state,
            "outcome": outcome,
            "remote_revision": op.revision,
            "remote_digest": op.result.digest,
            "result": remote_doc,
        }
        if not op.result.digest:
            # Ended, and the remote's retention compacted its record: the state is all it
            # keeps (an expired or cancelled one reads failed), the document is gone for good.
            doc["remote_compacted"] = True
        if abandoned:
            doc["remote_abandoned"] = True
        if op.state != pb.SUCCEEDED:
            doc["code"] = op.error.code or state
            doc["error"] = op.error.message
        ref = self._put(ctx, doc, RESULT_MEDIA_TYPE)
        crash_point("remote.after_result_stored")
        return ref if op.state == pb.SUCCEEDED else replace(ref, failed=True)

    def _refused(self, ctx: AttemptContext, code: str, message: str) -> ResultRef:
        doc = {"operation_id": ctx.operation_id, "outcome": "refused", "code": code}
        doc["error"] = message
        return replace(self._put(ctx, doc, RESULT_MEDIA_TYPE), failed=True)

    # --- calls ---

    def _unary(self, method: Any, request: Any) -> Any:
        """One unary call of RobotControl (``method``, a stub's) with this bridge's bearer
        token, bounded by the remote's timeout: its answer."""
        return method(request, metadata=self._metadata, timeout=self.remote.timeout_s)

    def _watch(self, ctx: AttemptContext, op_id: str, revision: int) -> pb.Operation:
        """Follow the remote operation to a terminal or awaiting-operator view."""
        last: pb.Operation | None = None
        views = self._stub.WatchOperation(
            pb.WatchOperationRequest(operation_id=op_id, from_revision=0),
            metadata=self._metadata,
        )
        watching = threading.Event()
        watching.set()

        def cancel_on_shutdown() -> None:
            # A remote operation may stay pending or running for long (a queued move, a long
            # sim reach): a shutdown of this worker abandons the watch (the attempt stays
            # bound, and the next one reconciles) instead of waiting for the operation's end.
            while watching.is_set():
                if ctx.wait_stopping(0.5):
                    views.cancel()
                    return

        threading.Thread(target=cancel_on_shutdown, name="remote-watch-stop", daemon=True).start()
        try:
            for view in views:
                last = view
                ctx.heartbeat()
                _report(ctx, view)
                if view.state in TERMINAL or view.state == pb.UNKNOWN_AWAITING_OPERATOR:
                    views.cancel()
                    done: pb.Operation = view
                    return done
                crash_point("remote.mid_watch")
        except grpc.RpcError as exc:
            if ctx.stopping:
                raise RemoteUnreachable(
                    f"{op_id}: watch abandoned: the worker is stopping"
                ) from None
            raise RemoteUnreachable(f"{op_id}: watch ended: {_why(exc)}") from None
        finally:
            watching.clear()
        raise RemoteUnreachable(f"{op_id}: watch ended at {last.state if last else 'nothing'}")

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        try:
            message = execute_request(ctx.operation_id, request)
        except FamilyError as exc:
            return self._refused(ctx, "bad_request", str(exc))
        # Durable before the Execute leaves: this operation was sent under this credential (a
        # principal renamed later, its NOT_FOUND is then no proof that it never ran).
        ctx.artifacts.put_bytes(self._sent_marker(ctx, ctx.operation_id, self._credential), SENT)
        try:
            call = self._stub.Execute.future(
                message, metadata=self._metadata, timeout=self.remote.timeout_s
            )
            crash_point("remote.execute_sent")
            op = call.result()
            crash_point("remote.after_execute")
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                return self._refused(ctx, "remote_invalid_argument", exc.details() or "")
            if code == grpc.StatusCode.ALREADY_EXISTS:
                return self._refused(ctx, "remote_conflict", exc.details() or "")
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return self._refused(ctx, "remote_refused_principal", exc.details() or "")
            if code == grpc.StatusCode.FAILED_PRECONDITION and (exc.details() or "").startswith(
                "robot_latched:"
            ):
                # The remote robot is held by an operator's stop, and the remote recorded
                # nothing under the id (a retry of one it holds is answered with it): a
                # recorded failure, never a move that starts by itself once the robot is
                # resumed there.
                said = (exc.details() or "").split(": nothing was recorded")[0]
                return self._refused(
                    ctx,
                    "remote_robot_latched",
                    f"{said}: nothing was recorded there, and this Activity has ended failed;"
                    " once its operator resumes the robot there, submit a new activity to move"
                    " it (this one is never sent again)",
                )
            raise RemoteUnreachable(f"{ctx.operation_id}: Execute: {_why(exc)}") from None
        if op.state not in TERMINAL:
            op = self._watch(ctx, op.id, op.revision)
        else:  # a retry of one that ended: its end is the progress shown, never an old view
            _report(ctx, op)
        if op.state == pb.UNKNOWN_AWAITING_OPERATOR:
            raise RemoteUnreachable(f"{op.id}: awaits the remote operator (reconciled)")
        return self._result(ctx, op)

    def before_abandon(self, record: Any) -> None:
        """An operator abandons this move here: it is cancelled on the robot host first, so it
        never runs there afterwards (a robot host back from an outage, a re-issue by its
        operator). Refused (`CodedError`, nothing decided here) while it may still run there:
        the robot host awaits its own operator's decision on it (`remote_awaits_operator`),
        it did not answer (`remote_unreachable`), or it ended there (`remote_ended`: its next
        reconcile records how)."""
        op_id = record.operation_id
        if not op_id:
            return  # never bound: nothing of it was sent
        where = self.remote.address
        try:
            answer = self._unary(self._stub.Cancel, pb.CancelRequest(operation_id=op_id))
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.NOT_FOUND and not self._earlier:
                return  # never received there (under the one credential it was sent under)
            if code == grpc.StatusCode.NOT_FOUND:
                raise CodedError(
                    "remote_awaits_operator",
                    f"{op_id} is not known to the robot host {where} under this bridge's"
                    " credential, and may be under an earlier one (a renamed planner): decide"
                    " it there; nothing was decided here",
                ) from None
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                raise CodedError(
                    "remote_awaits_operator",
                    f"{op_id} awaits a decision on the robot host {where}: decide it there"
                    " (its operator's `tether operator resolve`); nothing was decided here",
                ) from None
            raise CodedError(
                "remote_unreachable",
                f"the robot host {where} did not take the cancel of {op_id} ({_why(exc)}): it"
                " may still run there; nothing was decided here; try again once it answers",
            ) from None
        if answer.outcome == pb.CancelResponse.ALREADY_TERMINAL:
            state = pb.OperationState.Name(answer.operation.state).lower()
            raise CodedError(
                "remote_ended",
                f"{op_id} ended on the robot host {where} ({state}): its next reconcile here"
                " records that outcome; nothing was decided here",
            )

    def reconcile(
        self, ctx: AttemptContext, request: dict[str, Any]
    ) -> RuntimeRecovered | RuntimeAbsent | RuntimeUnknown:
        op_id = ctx.operation_id
        try:
            message = execute_request(op_id, request)
        except FamilyError as exc:  # no attempt could ever send it: nothing ran
            return RuntimeRecovered(self._refused(ctx, "bad_request", str(exc)))
        try:
            try:
                view = self._unary(
                    self._stub.GetOperation, pb.GetOperationRequest(operation_id=op_id)
                )
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                earlier = self._sent_under_another(ctx, op_id)
                if earlier is not None:
                    # Sent under an earlier credential: the remote keeps operations per
                    # principal, and this one's NOT_FOUND says nothing of the earlier one's.
                    # Re-sending would run it a second time there (a renamed planner).
                    return self._principal_changed(ctx, earlier)
                # Never received there: absent, and a reconcile sends nothing (an operator may
                # be deciding this Activity meanwhile). The next execute attempt, bound under
                # its own fence, re-sends the identical request, the remote's create-if-absent
                # being the guard; the remote's `expired` answer then records it as failed.
                return self._not_found(ctx, op_id, message)
            crash_point("remote.reconcile.after_get")
            op = self._ours(ctx, message, view)
            if isinstance(op, RuntimeRecovered):
                return op  # another request holds the id: ours never ran there
            if op.state not in TERMINAL and op.state != pb.UNKNOWN_AWAITING_OPERATOR:
                op = self._watch(ctx, op_id, op.revision)
            else:  # the view read now replaces whatever an earlier attempt's watch showed
                _report(ctx, op)
        except grpc.RpcError as exc:
            if exc.code() not in TRANSIENT or _rate_limited(exc):
                return self._refused_reconcile(ctx, exc)  # asking again soon changes nothing
            return self._unreachable(ctx, f"reconcile: {_why(exc)}")
        except RemoteUnreachable as exc:
            return self._unreachable(ctx, exc.message)
        if op.state in TERMINAL:
            try:
                return RuntimeRecovered(self._result(ctx, op))
            except RemoteUnreachable as exc:
                return self._unreachable(ctx, exc.message)
            except RemoteResultMismatch as exc:
                return self._mismatch(ctx, exc)
        evidence = {
            "operation_id": op_id,
            "reason": op.evidence.reason or "remote_awaiting_operator",
            "remote": self.remote.address,
            "remote_revision": op.revision,
            "remote_evidence_revision": op.evidence.revision,
            "remote_evidence_digest": op.evidence.digest,
            "remote_evidence": _document(op.evidence.document) if op.evidence.document else None,
        }
        ref = self._put(ctx, evidence, EVIDENCE_MEDIA_TYPE)
        return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), REMOTE_DECISION_RETRY_MS)

    def _ours(
        self, ctx: AttemptContext, message: pb.ExecuteRequest, view: pb.Operation
    ) -> pb.Operation | RuntimeRecovered:
        """The remote operation under the id (`view`, as GetOperation read it), proved to be
        this request's: the identical Execute, which the remote answers, for an operation it
        holds, with that operation when its request digest matches ours, ALREADY_EXISTS when
        it is another request's (a second bridge on the same token, a bridge whose data dir
        was reset: a recorded failure `remote_conflict`, ours never ran there). It creates
        nothing: the operation exists. Where the remote now refuses the request itself (its
        limits or devices changed since), the digest cannot be asked, and the view stands
        when its device, deadline and repeatability are ours."""
        try:
            op: pb.Operation = self._unary(self._stub.Execute, message)
            return op
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.ALREADY_EXISTS:
                conflict = exc.details() or "another request"
            elif code == grpc.StatusCode.INVALID_ARGUMENT:
                relative = message.WhichOneof("command") == "joint_move" and (
                    message.joint_move.kind == pb.JointMove.RELATIVE
                )
                if (
                    view.device == message.device
                    and view.not_after_ms == message.not_after_ms
                    and view.non_repeatable == relative
                ):
                    return view
                conflict = f"device {view.device!r}, not_after_ms {view.not_after_ms}"
            else:
                raise
        return RuntimeRecovered(
            self._refused(
                ctx,
                "remote_conflict",
                f"{message.operation_id} names another request on {self.remote.address}"
                f" ({conflict})",
            )
        )

    def _sent_marker(self, ctx: AttemptContext, op_id: str, credential: str) -> bytes:
        """The marker of `op_id` sent under `credential` (a digest): the same bytes each time,
        so its artifact's reference names it; padded past the inline bound, so it is stored
        (an inline reference is stored nowhere)."""
        doc = {"sent": op_id, "remote": self.remote.address, "credential": credential}
        size = len(canonical(doc))
        return canonical({**doc, "pad": "." * max(0, ctx.artifacts.inline_bound + 1 - size)})

    def _sent_under_another(self, ctx: AttemptContext, op_id: str) -> str | None:
        """An earlier credential (digest) `op_id` was sent under, or None."""
        for credential in self._earlier:
            if ctx.artifacts.holds(self._sent_marker(ctx, op_id, credential)):
                return credential
        return None

    def _principal_changed(self, ctx: AttemptContext, credential: str) -> RuntimeUnknown:
        doc = {
            "operation_id": ctx.operation_id,
            "reason": "remote_principal_changed",
            "error": "sent under an earlier credential; the current one's principal does not"
            " know it, which proves nothing of the earlier one's: an operator decides (on the"
            " robot host, under the earlier principal, it may have run)",
            "earlier_credential": credential,
            "remote": self.remote.address,
        }
        ref = self._put(ctx, doc, EVIDENCE_MEDIA_TYPE)
        return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), OPERATOR_RETRY_MS)

    def _not_found(
        self, ctx: AttemptContext, op_id: str, message: pb.ExecuteRequest
    ) -> RuntimeAbsent:
        guard = {
            "operation_id": op_id,
            "reason": "remote_not_found",
            "guard": "remote create-if-absent per (principal, operation_id)",
            "request_digest": "sha256:"
            + hashlib.sha256(message.SerializeToString(deterministic=True)).hexdigest(),
            "remote": self.remote.address,
        }
        ref = self._put(ctx, guard, GUARD_MEDIA_TYPE)
        return RuntimeAbsent(RetryGuard(ref=ref.ref, digest=ref.digest))

    def _mismatch(self, ctx: AttemptContext, exc: RemoteResultMismatch) -> RuntimeUnknown:
        """A remote result whose bytes do not hash to the digest the remote reported: nothing
        is recorded from it, and asking every second changes nothing, so it awaits an operator
        (asked again after `OPERATOR_RETRY_MS`)."""
        doc = {
            "operation_id": ctx.operation_id,
            "reason": "remote_result_mismatch",
            "error": exc.message,
            "remote": self.remote.address,
        }
        ref = self._put(ctx, doc, EVIDENCE_MEDIA_TYPE)
        return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), OPERATOR_RETRY_MS)

    def _refused_reconcile(self, ctx: AttemptContext, exc: grpc.RpcError) -> RuntimeUnknown:
        """The remote answered GetOperation with a refusal (our credential, a server that is
        no RobotControl): the outcome cannot be read, and the operation may have run there,
        so it awaits an operator (fix the token or the address), asked again only after
        `OPERATOR_RETRY_MS`: not every second, each a failed credential check on the robot
        host that keeps its rate limit on this address."""
        code = exc.code()
        principal = code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
        # Locked out: the host refuses every credential from this address for a while, after
        # failures that may not be ours (another client on the same address with a wrong
        # token): not proof that our own token is wrong.
        reason = "remote_rate_limited" if _rate_limited(exc) else "remote_refused"
        doc = {
            "operation_id": ctx.operation_id,
            "reason": "remote_refused_principal" if principal else reason,
            "error": f"reconcile: {code.name}: {exc.details() or ''}".rstrip(": "),
            "remote": self.remote.address,
        }
        ref = self._put(ctx, doc, EVIDENCE_MEDIA_TYPE)
        return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), OPERATOR_RETRY_MS)

    def _unreachable(self, ctx: AttemptContext, why: str) -> RuntimeUnknown:
        doc = {"operation_id": ctx.operation_id, "reason": "remote_unreachable", "error": why}
        ref = self._put(ctx, doc, EVIDENCE_MEDIA_TYPE)
        return RuntimeUnknown(Evidence(ref=ref.ref, digest=ref.digest), UNREACHABLE_RETRY_MS)


#: The media type of a "sent under this credential" marker (`RemoteMoveAdapter._sent_marker`).
SENT: Final = "application/vnd.tether.remote-sent+json"


def _credential_digest(token: str) -> str:
    """A credential's name in markers and the history: a salted SHA-256 prefix of the token,
    never the token (the robot host keeps its own argon2 hash)."""
    return hashlib.sha256(b"tether-remote-credential\0" + token.encode()).hexdigest()[:32]


def _credential_history(path: Path | None, current: str) -> tuple[str, ...]:
    """The credentials (digests) this bridge sent under before ``current``, read from
    ``path``, with ``current`` added to it (durably) when it is new. A file that cannot be
    read is refused: without it, a renamed principal's NOT_FOUND could re-run a move."""
    if path is None:
        return ()
    try:
        known = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError) as exc:
        raise CodedError(
            "bad_remote_history", f"{path}: the bridge's credential history cannot be read: {exc}"
        ) from None
    if not isinstance(known, list) or not all(isinstance(d, str) for d in known):
        raise CodedError("bad_remote_history", f"{path}: not a list of credential digests")
    if current not in known:
        from tether.operations._durable import write_durable

        write_durable(path, json.dumps([*known, current]).encode())
    return tuple(d for d in known if d != current)


def _report(ctx: AttemptContext, view: pb.Operation) -> None:
    """The remote view as the attempt's live progress (the AG-UI stream): each view a watch
    reads, and the one a reconcile or a retried Execute reads, so a move that ended while no
    attempt watched it never stays shown as the last view an earlier attempt saw."""
    ctx.progress(
        {
            "remote_state": pb.OperationState.Name(view.state).lower(),
            "fraction": view.progress.fraction,
            "phase": view.progress.phase,
            "remote_revision": view.revision,
        }
    )


def _rate_limited(exc: grpc.RpcError) -> bool:
    """The robot host refusing our credential's further tries for a while (too many failed
    here): the token is wrong, and asking every second only keeps the limit on."""
    return bool(
        exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        and (exc.details() or "").startswith("credential_rate_limited")
    )


def remote_move_family(remote: RemoteHost, *, credentials: Path | None = None) -> Family:
    """The family to register with a runtime `Host` on the bridge side; ``credentials``: the
    adapter's credential history file (`RemoteMoveAdapter`; the daemon keeps it in its data
    dir)."""
    return Family(
        name=FAMILY,
        kinds=KINDS,
        project=project,
        adapter=RemoteMoveAdapter(remote, credentials=credentials),
        stage=stage,
    )


__all__ = [
    "CRASH_POINTS",
    "FAMILY",
    "INTENT",
    "KINDS",
    "KIND_ABSOLUTE",
    "KIND_RELATIVE",
    "KIND_SIM_REACH",
    "OBSERVATION",
    "RemoteHost",
    "RemoteMoveAdapter",
    "RemoteResultMismatch",
    "RemoteUnreachable",
    "execute_request",
    "intent",
    "project",
    "remote_move_family",
    "stage",
]
