"""Families and adapters: how a family registers its kinds, projection, adapter and processors.

Rules (seed sections 2 and 4):
- `project` is pure: it sees one committed `WorldSnapshot` (plain data) and returns requests.
  Registration rejects bound methods and closures over anything but plain data (str, numbers,
  bytes, None, tuples/frozensets, enums, frozen dataclasses of those, and other such pure
  functions), so no adapter, client, file or network handle is reachable from it through its
  own references; provider entry points also refuse to run while a projection runs.
- `admission_check` (optional) is pure by the same rules (a limit from configuration is plain
  data it closes over): the projector runs it on each request before admitting it, and a
  request it refuses (it can never run: say, past a memory cap) is admitted already failed,
  with its `Refusal` as a durable refusal document, so no worker ever claims it and the
  family observes the refusal like any other failed result (`Catalog.admit_refused`).
- The adapter runs only in a worker, outside the world lock, under a provider operation id the
  worker bound in the catalog first. `reconcile` concludes Recovered, ConfirmedAbsent (with a
  provider retry guard) or Unknown (with evidence); it never executes.
- `stage` turns a durable result into the complete set of factual component writes; it is
  pure and idempotent, so it can be repeated after restart until a tick commits it.
- Processors are the only code that decides a semantic transition; they run inside every tick
  the Host commits, reading the pre-tick snapshot and the family's observations in that tick.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import json
import re
import socket
import sqlite3
import subprocess
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from tether import _core
from tether._core import TetherError
from tether.activities import (
    ActivityKey,
    Evidence,
    ResultRef,
    RetryGuard,
)
from tether.runtime._errors import FamilyError, LeaseLost, ProviderIOForbidden
from tether.storage._errors import with_code
from tether.world import ComponentWrite, JSONValue, WorldSnapshot, canonical_json
from tether.world._errors import InvalidWrite
from tether.world._types import check_name

if TYPE_CHECKING:
    from tether.runtime._artifacts import ArtifactStore

#: Component holding a family's completion evidence on the activity's evidence entity.
COMPLETION_COMPONENT: Final = "tether.completion"

#: Stable codes `completion_mismatch` returns (the Rust core's list).
COMPLETION_MISMATCH_CODES: Final = tuple(_core.completion_mismatch_codes())


@dataclass(frozen=True, slots=True)
class ActivityRequest:
    """One logical Activity a projection asks for: kind, family-local id and its input.

    ``host`` names the host that owns the device the request drives (from the family's
    configuration of its devices): the Activity is admitted bound to it and only a worker on
    that host claims it. Empty (the default): any host may (simulation, remote gRPC work).
    """

    kind: str
    activity_id: str
    input: JSONValue
    host: str = ""


def unobserved_intents(
    snapshot: WorldSnapshot, intent: str, observation: str, kinds: Sequence[str]
) -> list[ActivityRequest]:
    """The requests a family whose intents name their kind asks for: one per entity holding an
    `intent` component (a JSON object whose ``kind`` is one of `kinds`) and no `observation`
    yet (pure: the snapshot only)."""
    requests = []
    for entity, value in snapshot.with_component(intent):
        if snapshot.get(entity, observation) is not None or not isinstance(value, dict):
            continue
        kind = value.get("kind")
        if kind in kinds:
            requests.append(ActivityRequest(str(kind), entity, value))
    return requests


def unobserved_intent(
    view: EntityView, intent: str, observation: str, kinds: Sequence[str]
) -> list[ActivityRequest]:
    """`unobserved_intents` for one entity (for an `EntityProjection`): its request if it holds
    an `intent` naming one of `kinds` and no `observation` yet, else none."""
    if view.get(observation) is not None:
        return []
    value = view.get(intent)
    if not isinstance(value, dict):
        return []
    kind = value.get("kind")
    return [ActivityRequest(str(kind), view.entity, value)] if kind in kinds else []


class EntityView:
    """One entity's components as of one committed snapshot: all an entity projection sees.

    Values are decoded afresh on every read (as `WorldSnapshot.get`), so a caller mutating
    what it got back changes nothing.
    """

    __slots__ = ("_encoded", "entity")

    def __init__(self, entity: str, encoded: Mapping[tuple[str, str], str]) -> None:
        self.entity = entity
        self._encoded = encoded

    def get(self, component: str) -> JSONValue | None:
        """The entity's `component` value, or None when it does not hold it."""
        text = self._encoded.get((self.entity, component))
        return None if text is None else json.loads(text)


EntityProjectionFn = Callable[[EntityView], Sequence["ActivityRequest"]]


@dataclass(frozen=True, slots=True)
class EntityProjection:
    """A projection made of one pure function per entity, so the required projector can run
    it on what a tick changed instead of on the whole world.

    `fn` sees one entity's components (`EntityView`) and returns that entity's requests; the
    projection of a snapshot is, for every entity in sorted order, `fn` of it (calling the
    object on a snapshot computes exactly that, so it is a `Projection` too). Since a request
    then depends on its own entity's components alone, an entity no tick wrote asks for what
    it asked for at the parent tick, and the projector runs `fn` only on the entities the new
    tick wrote (`WorldSnapshot.changes`), with the same admissions as the whole projection
    (`Projector`).
    """

    fn: EntityProjectionFn

    def __call__(self, snapshot: WorldSnapshot) -> list[ActivityRequest]:
        encoded = snapshot.encoded()
        return [r for e in snapshot.entities() for r in self.fn(EntityView(e, encoded))]


#: Media type of the durable refusal document of a request refused at admission.
REFUSAL_MEDIA_TYPE: Final = "application/vnd.tether.refusal+json"
_CODE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a family's admission check refuses a request: it can never run.

    Attributes:
        code: a stable snake_case code (``request_too_large``).
        reason: one line for people, naming the problem and what to do.
        details: JSON-shaped numbers and names behind the reason.
    """

    code: str
    reason: str
    details: dict[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not _CODE.fullmatch(self.code):
            raise FamilyError(f"a refusal code is snake_case, got {self.code!r}")
        if not isinstance(self.reason, str) or not self.reason.strip() or "\n" in self.reason:
            raise FamilyError(f"a refusal reason is one non-empty line, got {self.reason!r}")
        if not isinstance(self.details, dict):
            raise FamilyError(f"refusal details are an object, got {self.details!r}")
        try:
            canonical_json(self.details)
        except InvalidWrite as exc:
            raise FamilyError(f"refusal details are not JSON: {exc}") from exc

    def document(self) -> bytes:
        """The durable refusal document: canonical JSON of code, reason and details (a
        function of the refusal alone, so a replay puts the same bytes)."""
        return canonical_json({"code": self.code, "reason": self.reason, "details": self.details})

    @classmethod
    def from_document(cls, payload: bytes) -> Refusal:
        """The refusal a refusal document holds (`FamilyError` if it is not one)."""
        try:
            doc = json.loads(payload)
            return cls(str(doc["code"]), str(doc["reason"]), dict(doc["details"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise FamilyError(f"not a refusal document: {exc}") from exc


def refusal_of(staged: StagedResult) -> Refusal | None:
    """The refusal behind a staged result refused at admission, else None (for `stage`)."""
    if not staged.result.failed or staged.result.media_type != REFUSAL_MEDIA_TYPE:
        return None
    return Refusal.from_document(staged.payload)


@dataclass(frozen=True, slots=True)
class Recovered:
    """Reconcile found the provider's durable result for this operation."""

    result: ResultRef


@dataclass(frozen=True, slots=True)
class ConfirmedAbsent:
    """Reconcile proved the operation absent, with a guard that makes a fresh execution safe."""

    guard: RetryGuard


@dataclass(frozen=True, slots=True)
class Unknown:
    """Reconcile could not decide; retry reconciliation after `retry_after_ms` (0 ms to 7 days,
    `MAX_RETRY_AFTER_MS`, on the lease clock), or an operator decides."""

    evidence: Evidence
    retry_after_ms: int = 1000


ReconcileOutcome = Recovered | ConfirmedAbsent | Unknown


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Live progress an adapter reported for one attempt (delivered to the Host's listener)."""

    key: ActivityKey
    operation_id: str
    attempt: int
    fence: int
    content: dict[str, Any]


# Set while a family projection runs, so provider entry points can refuse to run inside it.
_guard = threading.local()


def _projection_active() -> bool:
    return bool(getattr(_guard, "projecting", False))


class AttemptContext:
    """What an adapter gets for one fenced attempt. Single owner: the worker running it.

    Attributes:
        key: the Activity's control key.
        operation_id: the stable provider operation identity bound before any effect; the
            adapter must use it as its provider idempotency key.
        fence: the attempt's fence.
        attempt: the attempt number.
        may_execute: False on reconcile-only attempts.
        artifacts: where results above the inline bound are made durable.
        evidence: the evidence the Activity holds for an operator when the attempt was claimed
            (a reconcile of a parked Activity), else None. A reconcile that finds nothing
            changed returns it again as its Unknown's evidence: the catalog then keeps its
            revision, so a decision being made on it stays valid.
    """

    def __init__(
        self,
        *,
        key: ActivityKey,
        operation_id: str,
        fence: int,
        attempt: int,
        may_execute: bool,
        artifacts: ArtifactStore,
        renew: Callable[[], None],
        emit: Callable[[ProgressEvent], None] | None = None,
        stopping: threading.Event | None = None,
        evidence: Evidence | None = None,
    ) -> None:
        self.key = key
        self.evidence = evidence
        self.operation_id = operation_id
        self.fence = fence
        self.attempt = attempt
        self.may_execute = may_execute
        self.artifacts = artifacts
        self._renew = renew
        self._emit = emit
        self._lost = threading.Event()
        self._ended = threading.Event()
        self._stopping = stopping or threading.Event()

    def _check_running(self) -> None:
        if self._ended.is_set():
            raise LeaseLost(
                f"attempt {self.attempt} of {self.key} has ended: nothing of it may act or"
                " report any more"
            )

    def progress(self, content: dict[str, Any]) -> None:
        """Report live progress (for example to the AG-UI activity stream); never durable.

        Raises:
            LeaseLost: the attempt has ended (a thread the adapter left running): its
                progress would be shown after its outcome.
        """
        if _projection_active():
            raise ProviderIOForbidden("progress() called inside a projection")
        if not isinstance(content, dict):
            raise FamilyError("progress content must be a dict")
        self._check_running()
        if self._emit is not None:
            self._emit(
                ProgressEvent(self.key, self.operation_id, self.attempt, self.fence, dict(content))
            )

    def heartbeat(self) -> None:
        """Renew the attempt's lease now.

        Raises:
            LeaseLost: the lease or fence is no longer live, or the attempt has ended (the
                adapter returned or raised, and a thread it left running asks): stop.
        """
        self._check_running()
        if self._lost.is_set():
            raise LeaseLost(f"attempt {self.attempt} of {self.key} lost its lease")
        try:
            self._renew()
        except LeaseLost:
            self._lost.set()
            raise

    @property
    def stopping(self) -> bool:
        """Whether the worker is shutting down; a long adapter may stop early and return or
        raise (the attempt then stays bound, and the next one reconciles)."""
        return self._stopping.is_set()

    def wait_stopping(self, timeout_s: float | None) -> bool:
        """Block until the worker is shutting down (True) or `timeout_s` passed (False): for an
        adapter waiting on something it can abandon (a remote stream), so a shutdown is never
        held by it."""
        return self._stopping.wait(timeout_s)

    @property
    def lost(self) -> bool:
        """Whether a renewal found the lease or fence gone."""
        return self._lost.is_set()

    def mark_lost(self) -> None:
        """Record that the lease is gone (the worker's background renewal calls this)."""
        self._lost.set()

    def mark_ended(self) -> None:
        """Record that the attempt has ended (the worker calls this once the adapter's call
        returned or raised): `heartbeat` and `progress` then raise `LeaseLost`, so a thread
        the adapter left running learns it holds nothing."""
        self._ended.set()


@runtime_checkable
class Adapter(Protocol):
    """A family's provider adapter: executes or reconciles one bound provider operation."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        """Perform the effect under `ctx.operation_id` and return its durable result."""
        ...

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        """Find out what happened to `ctx.operation_id` without executing anything."""
        ...


@dataclass(frozen=True, slots=True)
class StagedResult:
    """A durable result handed to a family's `stage` (payload already digest-checked).

    `result.failed` marks a failed result; an operator's abandon has an empty payload.
    """

    key: ActivityKey
    result: ResultRef
    payload: bytes

    def json(self) -> Any:
        """The payload decoded as JSON."""
        return json.loads(self.payload)


@dataclass(frozen=True, slots=True)
class Observation:
    """The staged facts of one Activity plus the completion evidence binding them."""

    key: ActivityKey
    result: ResultRef
    facts: tuple[ComponentWrite, ...]
    evidence: ComponentWrite


Projection = Callable[[WorldSnapshot], Sequence[ActivityRequest]] | EntityProjection
AdmissionCheck = Callable[[ActivityRequest], "Refusal | None"]
Stager = Callable[[StagedResult], Sequence[ComponentWrite]]
Processor = Callable[[WorldSnapshot, Sequence[Observation]], Sequence[ComponentWrite]]

_PLAIN = (str, int, float, bool, bytes, type(None))


def _is_plain(value: object, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_is_plain(v, depth + 1) for v in value)
    if isinstance(value, enum.Enum):
        return _is_plain(value.value, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(value, "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            _is_plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        )
    if isinstance(value, types.FunctionType):
        return _pure_function(value, depth + 1) is None
    return False


def _handle_kind(value: object) -> str | None:
    """What kind of live handle `value` is (adapter, file, socket, storage...), or None."""
    from tether.activities import Catalog
    from tether.runtime._artifacts import ArtifactStore
    from tether.world import WorldLedger

    handles = (io.IOBase, socket.socket, sqlite3.Connection, sqlite3.Cursor, subprocess.Popen)
    if isinstance(value, (*handles, threading.Thread, Catalog, ArtifactStore, AttemptContext)):
        return type(value).__name__
    if isinstance(value, type) or isinstance(value, types.ModuleType):
        return None
    if isinstance(value, Adapter) or isinstance(value, WorldLedger):
        return type(value).__name__
    return None


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _global_handle(fn: types.FunctionType, seen: set[int]) -> str | None:
    """A module global `fn` (or a plain function it calls) names that is a live handle."""
    if id(fn) in seen or len(seen) > 64:
        return None
    seen.add(id(fn))
    for name in sorted(_code_names(fn.__code__)):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        kind = _handle_kind(value)
        if kind is not None:
            return f"it reaches the module global {name!r}, a {kind}"
        if isinstance(value, types.FunctionType):
            why = _global_handle(value, seen)
            if why is not None:
                return why
    return None


def _pure_function(fn: object, depth: int = 0) -> str | None:
    """None if `fn` is a plain function whose closure holds only plain data and whose module
    globals (and those of the plain functions it names) hold no live handle, else why not.

    Module globals are checked for handles only (adapters, files, sockets, connections,
    catalogs, ledgers, artifact stores, attempt contexts): constants, classes and modules stay
    usable. Python cannot prove purity; this closes the reachable paths a family would use.
    """
    if isinstance(fn, staticmethod):
        fn = fn.__func__
    if isinstance(fn, types.MethodType):
        return "a bound method reaches its instance"
    if not isinstance(fn, types.FunctionType):
        return f"{type(fn).__name__} is not a plain function"
    for cell in fn.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:
            continue
        if not _is_plain(content, depth):
            return f"its closure captures a {type(content).__name__}"
    return _global_handle(fn, set())


@dataclass(frozen=True)
class Family:
    """A registered Activity family.

    Args:
        name: the family's name.
        kinds: the Activity kinds it owns (each owned by exactly one family in a Host).
        project: pure projection from a committed snapshot to Activity requests.
        adapter: the provider adapter (runs only in workers).
        stage: pure, idempotent map from a durable result to the complete fact set.
        processors: the family's semantic transition authority, run in observation ticks.
        admission_check: pure check of one projected request before it is admitted: a
            `Refusal` when the request can never run (it is then admitted refused), else None.
        device_host: the host whose devices the adapter drives (its configuration's host
            name), or None when it drives none: a worker claiming another host's device work
            refuses to start with it (`tether worker --host`), so one host's moves never run
            on another host's robot of the same name.
        devices_busy: why another process owns the devices the adapter would open itself (a
            sentence), or None when none does: a worker refuses to start with a family whose
            devices another process owns (`port_owned`), since it would claim work it cannot
            drive (the host's daemon, owning them, runs it).
    """

    name: str
    kinds: tuple[str, ...]
    project: Projection
    adapter: Adapter
    stage: Stager
    processors: tuple[Processor, ...] = field(default=())
    admission_check: AdmissionCheck | None = None
    device_host: str | None = None
    devices_busy: Callable[[], str | None] | None = None

    def __post_init__(self) -> None:
        check_name("family name", self.name)
        if not self.kinds or isinstance(self.kinds, str):
            raise FamilyError(f"family {self.name!r} needs a tuple of kinds")
        for kind in self.kinds:
            check_name("activity kind", kind, slash=False)
        project = self.project.fn if isinstance(self.project, EntityProjection) else self.project
        why = _pure_function(project)
        if why is not None:
            raise FamilyError(f"projection of family {self.name!r} must be pure: {why}")
        if self.admission_check is not None:
            why = _pure_function(self.admission_check)
            if why is not None:
                raise FamilyError(f"admission check of family {self.name!r} must be pure: {why}")
        if not isinstance(self.adapter, Adapter):
            raise FamilyError(f"adapter of family {self.name!r} lacks execute/reconcile")
        if not callable(self.stage) or not all(callable(p) for p in self.processors):
            raise FamilyError(f"stage and processors of family {self.name!r} must be callable")

    def run_projection(self, snapshot: WorldSnapshot) -> list[ActivityRequest]:
        """Run the projection with provider entry points disabled; validate what it returns."""
        _guard.projecting = True
        try:
            requests = list(self.project(snapshot))
        except TetherError:
            raise
        except Exception as exc:
            raise self._projection_failed(snapshot, exc) from exc
        finally:
            _guard.projecting = False
        self._check_requests(requests)
        return requests

    def _projection_failed(self, snapshot: WorldSnapshot, exc: Exception) -> FamilyError:
        """A projection that raised (or returned no iterable) on a committed tick: a
        `FamilyError` coded `projection_failed`, saying the tick landed and its post-commit
        work waits for the projection to work (it reruns on the world's next commit, or
        `Host.recover`)."""
        receipt = snapshot.receipt
        return with_code(
            FamilyError(
                f"the projection of family {self.name!r} raised {type(exc).__name__}: {exc}"
                f" on tick {receipt.tick} of world {receipt.world_id!r}: the tick is committed;"
                " its post-commit work (projection, settlement) is pending and runs again on the"
                " world's next commit or Host.recover, once the projection works"
            ),
            "projection_failed",
        )

    def run_entity_projection(
        self, snapshot: WorldSnapshot, entities: Sequence[str]
    ) -> dict[str, list[ActivityRequest]]:
        """Run an `EntityProjection` on `entities` of `snapshot` only, with provider entry
        points disabled: each entity's validated requests (the caller checks that no two
        entities ask for one key)."""
        if not isinstance(self.project, EntityProjection):
            raise FamilyError(f"the projection of family {self.name!r} is not per entity")
        fn, encoded = self.project.fn, snapshot.encoded()
        out: dict[str, list[ActivityRequest]] = {}
        _guard.projecting = True
        try:
            for entity in entities:
                out[entity] = list(fn(EntityView(entity, encoded)))
        except TetherError:
            raise
        except Exception as exc:
            raise self._projection_failed(snapshot, exc) from exc
        finally:
            _guard.projecting = False
        for requests in out.values():
            self._check_requests(requests)
        return out

    def _check_requests(self, requests: Sequence[ActivityRequest]) -> None:
        """Each request is valid, and no key is asked for twice."""
        seen: set[tuple[str, str]] = set()
        for req in requests:
            self._check_request(req)
            if (req.kind, req.activity_id) in seen:
                raise FamilyError(f"family {self.name!r} projected {req.activity_id!r} twice")
            seen.add((req.kind, req.activity_id))

    def _check_request(self, req: object) -> None:
        if not isinstance(req, ActivityRequest):
            raise FamilyError(f"family {self.name!r} projected {req!r}, not ActivityRequest")
        if req.kind not in self.kinds:
            raise FamilyError(f"family {self.name!r} projected foreign kind {req.kind!r}")
        if not isinstance(req.activity_id, str) or not req.activity_id:
            raise FamilyError(f"family {self.name!r} projected an empty activity id")
        canonical_json(req.input)

    def run_admission_check(self, request: ActivityRequest) -> Refusal | None:
        """Run the admission check on one projected request, with provider entry points
        disabled as in a projection: its `Refusal`, or None (admit it; also without a check)."""
        if self.admission_check is None:
            return None
        _guard.projecting = True
        try:
            refusal = self.admission_check(request)
        finally:
            _guard.projecting = False
        if refusal is not None and not isinstance(refusal, Refusal):
            raise FamilyError(
                f"admission check of family {self.name!r} returned {refusal!r}, not a Refusal"
            )
        return refusal


def families_by_kind(families: Sequence[Family]) -> dict[str, Family]:
    """Map each Activity kind to its family; a kind owned by two families is an error."""
    by_kind: dict[str, Family] = {}
    for fam in families:
        if not isinstance(fam, Family):
            raise FamilyError(f"{fam!r} is not a Family")
        for kind in fam.kinds:
            if kind in by_kind:
                raise FamilyError(f"kind {kind!r} is registered by two families")
            by_kind[kind] = fam
    return by_kind


def evidence_entity(kind: str, activity_id: str) -> str:
    """The entity that carries an Activity's completion evidence in the world."""
    h = hashlib.sha256(canonical_json([kind, activity_id])).hexdigest()[:40]
    return f"tether.activity/{h}"


def observation_for(family: Family, staged: StagedResult) -> Observation:
    """Stage `staged` with its family and bind the facts to completion evidence.

    The evidence binds the Activity kind and id, the exact result reference and digest, the
    list of fact keys and the digest of the complete fact set.
    """
    facts = tuple(family.stage(staged))
    texts: list[tuple[str, str, str]] = []
    for w in facts:
        if not isinstance(w, ComponentWrite) or w.value is None:
            raise FamilyError(f"family {family.name!r} staged {w!r}: facts set a value")
        text = w.encoded()
        assert text is not None
        texts.append((w.entity, w.component, text))
    if len({(e, c) for e, c, _ in texts}) != len(texts):
        raise FamilyError(f"family {family.name!r} staged one component twice")
    key = staged.key
    # The Rust core builds the evidence (and later verifies it): one implementation of the
    # settlement binding and the fact-set digest.
    evidence = json.loads(_core.completion_evidence(key, staged.result, texts))
    write = ComponentWrite(
        evidence_entity(key.kind, key.activity_id), COMPLETION_COMPONENT, evidence
    )
    return Observation(key, staged.result, facts, write)


def completion_mismatch(snapshot: WorldSnapshot, key: ActivityKey, result: ResultRef) -> str | None:
    """Why `snapshot`'s tick does not hold completion evidence of `result` for `key` (a stable
    code such as ``not_written_in_tick`` or ``fact_missing``), or None when it does."""
    return _verify(snapshot, key, result)[1]


def _verify(
    snapshot: WorldSnapshot, key: ActivityKey, result: ResultRef
) -> tuple[str | None, str | None]:
    entity = evidence_entity(key.kind, key.activity_id)
    state = snapshot.encoded()
    return _core.verify_completion(
        key,
        result,
        state.get((entity, COMPLETION_COMPONENT)),
        written_in_tick=(entity, COMPLETION_COMPONENT) in snapshot.changes,
        state=state,
    )


def verify_completion(snapshot: WorldSnapshot, key: ActivityKey, result: ResultRef) -> str | None:
    """The settlement evidence digest if `snapshot`'s tick committed complete evidence.

    Returns None unless this exact tick wrote the evidence, it binds this kind, id, result
    reference and digest (and the catalog's settlement binding of them), and every listed fact
    is present in the snapshot with the bound fact-set digest. The Rust core decides; see
    `completion_mismatch` for the reason of a None.
    """
    return _verify(snapshot, key, result)[0]
