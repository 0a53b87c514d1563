"""The simulation provider: runs episodes in worker-owned processes, reconciles them from the
provider operations journal (`tether.operations`).

Each attempt runs in its own process, forked by the provider's episode host (`_host.py`, a
pre-imported child of the worker); both die with their parent (PR_SET_PDEATHSIG), so killing
the worker kills the attempt.

A data directory holds one journal, `<data_dir>/operations/`, and each provider operation id is
one journal operation (`tether.operations.Operation`); the sim records in it:

    bound.json            the operation id, the episode request and its digest (bound before
                          any attempt starts; another request under the id is a conflict)
    attempt-<n>.start     start marker: created by the episode process itself (create-if-absent,
                          refused once the attempt is fenced out), naming the process (pid,
                          /proc start time, boot id, host)
    attempt-<n>.fenced    tombstone: a later attempt fenced attempt n out
    result-<n>.pending    the result attempt n's process made durable (the complete result file
                          is in the artifact store first), not yet published
    result.json           the published result: a reference (ref, digest, media type, size) to
                          the result file; create-if-absent, so the first published result is
                          never replaced
    proof-guard-<n>.json  the retry guard's proof behind attempt n: every earlier attempt is
                          fenced and its process provably gone
    proof-expired.json    the request's `not_after_ms` passed before an attempt started: it
                          never starts (the first decision stands)
    attempt-<n>.stderr    the episode process's stderr (diagnostics only, beside the entry)

Unknown evidence is not a provider fact: the adapter makes it durable in the artifact store and
the Activity catalog references it.

Rules (seeded simulation, seed section 4): the first published result is reused and never
recomputed; a durable but unpublished result is published once its process is gone and its
digest verifies (`publish_pending`), or removed once its attempt is fenced out
(`discard_pending`), never left behind; a start marker without a result is Unknown while its
process may still run; once every earlier attempt is fenced and its recorded process is
provably gone, the absence is confirmed and the guard proof lets exactly one fresh attempt
start (its marker is create-if-absent, so a second starter of the same attempt fails). Fencing
and the marker are both write-then-check, so a stale process and a reconciler can never both
miss each other.

A request with `not_after_ms` starts only while the host's clock is before it: past it (or
once an `expired` proof is recorded) no attempt starts and `execute` raises `AttemptExpired`
with the proof, in place of the start marker. The episode process checks the clock again just
before it creates its marker, so a marker is only ever written while now < `not_after_ms`.
A published result is still reused first: a reach that ran is never declared expired.

A request whose preallocated arrays (episodes x steps) would exceed the provider's memory cap
(`memory_cap_bytes`, default `DEFAULT_MEMORY_CAP_BYTES`) is refused before anything is bound or
started (`RequestTooLarge`). Through the runtime the family refuses it at admission already
(`family.admission_check`); this check is the second line, for a cap lowered after admission.

An older data directory, whose sim records are in `<data_dir>/sim/ops/` (the layout before the
journal: `operation.json`, `guard-<n>.json`, `evidence-<n>.json`), is migrated into the journal
when the provider opens it; while an episode process of that older layout may still run it is
refused (`old_layout`) with what to do.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import io
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tether._crash import CRASH_ENV as _CRASH_ENV
from tether._crash import child_environment
from tether._crash import crash_point as _crash_point
from tether._proc import ProcessIdentity
from tether.activities import ResultRef
from tether.families.sim._episode import (
    EpisodeRequest,
    EpisodeRun,
    ProgressFn,
    decode_result,
    read_summary,
)

# The estimate lives in the pure `_memory` (the family's admission check uses it too); it is
# named here as well, where the provider's cap is.
from tether.families.sim._memory import BYTES_PER_REQUEST as BYTES_PER_REQUEST
from tether.families.sim._memory import BYTES_PER_STEP as BYTES_PER_STEP
from tether.families.sim._memory import DEFAULT_MEMORY_CAP_BYTES as DEFAULT_MEMORY_CAP_BYTES
from tether.families.sim._memory import check_cap, check_memory
from tether.families.sim._memory import estimated_memory_bytes as estimated_memory_bytes
from tether.families.sim.errors import (
    AttemptAlreadyStarted,
    AttemptExpired,
    AttemptFenced,
    EpisodeFailed,
    InvalidEpisodeRequest,
    ResultCorrupt,
    SimError,
    StaleAttemptAlive,
)
from tether.operations import Journal, JournalError, Operation, canonical_json, digest_of
from tether.operations._durable import fsync_dir
from tether.runtime import ArtifactError, ArtifactStore

# Child exit codes (the child is `python -m tether.families.sim._child`).
EXIT_OK = 0
EXIT_PARENT_GONE = 10
EXIT_ALREADY_STARTED = 11
EXIT_FENCED = 12
EXIT_BAD_REQUEST = 13
#: The episode process could not make its result durable: the disk is full (ENOSPC, EDQUOT)
#: or a file reached the file-size limit (EFBIG). Nothing was staged.
EXIT_NO_SPACE = 14
EXIT_FILE_TOO_LARGE = 15
#: The request's `not_after_ms` passed before the start marker: nothing was written.
EXIT_EXPIRED = 16
EXIT_STORAGE: Final = {"disk_full": EXIT_NO_SPACE, "file_too_large": EXIT_FILE_TOO_LARGE}
_EXIT_ERRNO: Final = {EXIT_NO_SPACE: errno.ENOSPC, EXIT_FILE_TOO_LARGE: errno.EFBIG}
_EXIT_ERRORS: dict[int, type[SimError]] = {
    EXIT_ALREADY_STARTED: AttemptAlreadyStarted,
    EXIT_FENCED: AttemptFenced,
    EXIT_BAD_REQUEST: InvalidEpisodeRequest,
    EXIT_EXPIRED: AttemptExpired,
}
#: The crash-point variable (the one mechanism, `tether._crash`); the sim's points are named
#: `sim.*` and count attempts (`sim.x` attempt 1, `sim.x@k` attempt k, `sim.x@*` every one).
CRASH_ENV = _CRASH_ENV
#: The sim's crash points, in the order an attempt passes them (the first three in the episode
#: process, the last two in the worker).
CRASH_POINTS: Final = (
    "sim.child_started",
    "sim.artifact_durable",
    "sim.result_staged",
    "sim.result_durable",
)
#: The journal directory under a data directory, and the older layout's operations.
JOURNAL_DIR: Final = "operations"
OLD_LAYOUT_DIR: Final = "sim"


def crash_point(name: str, attempt: int) -> None:
    """SIGKILL this process at a named point of `attempt`, for crash tests."""
    _crash_point(name, attempt=attempt)


def stderr_path(op: Operation, attempt: int) -> Path:
    """The episode process's stderr of `attempt` (diagnostics only, beside the journal entry)."""
    return op.path / f"attempt-{attempt}.stderr"


def result_pointer(ref: ResultRef) -> dict[str, Any]:
    """The journal's pointer to a result file in the artifact store."""
    return {"ref": ref.ref, "digest": ref.digest, "media_type": ref.media_type, "size": ref.size}


def _ref_of(pointer: Mapping[str, Any], where: Path) -> ResultRef:
    try:
        return ResultRef(
            ref=str(pointer["ref"]),
            digest=str(pointer["digest"]),
            media_type=str(pointer["media_type"]),
            size=int(pointer["size"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultCorrupt(f"result pointer {where} is unreadable") from exc


def read_marker(op: Operation, attempt: int) -> dict[str, Any]:
    """The start marker of `attempt` with its child; raises `ResultCorrupt` if it is unreadable."""
    try:
        raw = op.marker(attempt)
        if raw is None:
            raise KeyError(attempt)
        ProcessIdentity.from_dict(raw["child"])
    except (JournalError, KeyError, TypeError, ValueError) as exc:
        raise ResultCorrupt(
            f"start marker of attempt {attempt} in {op.path} is unreadable"
        ) from exc
    return raw


def observe_children(op: Operation, *, exclude: int | None = None) -> list[dict[str, Any]]:
    """Each started attempt's recorded process (but `exclude`'s): alive, gone or undecidable."""
    out = []
    for k in op.attempts():
        if k == exclude:
            continue
        child = ProcessIdentity.from_dict(read_marker(op, k)["child"])
        alive, seen = child.observe()
        out.append({"attempt": k, "child": child.to_dict(), "alive": alive, "observed": seen})
    return out


@dataclass(frozen=True)
class EpisodeOutcome:
    """The published result of an operation (fresh, or reused and verified on reading).

    `result` is the durable artifact reference; the bytes are read from `store` on first use,
    so a fresh result travels on as a reference without another pass over the file.
    """

    path: Path
    result: ResultRef
    reused: bool
    store: ArtifactStore = field(repr=False, compare=False)

    @property
    def digest(self) -> str:
        """`sha256:` digest of the result file."""
        return self.result.digest

    @functools.cached_property
    def data(self) -> bytes:
        """The result file, checked against its digest and size."""
        try:
            return self.store.get(self.result)
        except ArtifactError as exc:
            raise ResultCorrupt(f"published result {self.path} is not readable: {exc}") from exc

    @functools.cached_property
    def run(self) -> EpisodeRun:
        """The verified arrays and summary."""
        return decode_result(self.data)

    @functools.cached_property
    def summary(self) -> dict[str, Any]:
        """The result summary: the observation."""
        return read_summary(self.data)


@dataclass(frozen=True)
class ResultFound:
    """Reconciliation found the first complete result: reuse it, never recompute."""

    outcome: EpisodeOutcome


@dataclass(frozen=True)
class ProvenAbsent:
    """No result, and every earlier attempt is fenced and its process provably gone. `proof`
    is the journal's `proof-guard-<n>` record; `data` its canonical bytes (digest
    `guard_digest`)."""

    proof: dict[str, Any]
    guard_digest: str

    @property
    def data(self) -> bytes:
        return canonical_json(self.proof)


@dataclass(frozen=True)
class StillUnknown:
    """An earlier attempt's process may still be running (or cannot be checked from here).
    `evidence` is the document the adapter makes durable for the catalog."""

    evidence: dict[str, Any]
    reason: str

    @property
    def data(self) -> bytes:
        return canonical_json(self.evidence)

    @property
    def evidence_digest(self) -> str:
        return digest_of(self.evidence)


ReconcileFact = ResultFound | ProvenAbsent | StillUnknown


def verified(
    store: ArtifactStore, operation_id: str, attempt: int
) -> Callable[[dict[str, Any]], bool]:
    """The digest check a pending result of `attempt` must pass before it is published: the
    file is in `store` with its digest and size, decodes with its trajectory digest, and is
    the result of this operation and attempt."""

    def check(pointer: dict[str, Any]) -> bool:
        try:
            ref = _ref_of(pointer, Path("pending"))
            summary = decode_result(store.get(ref)).summary
        except (ArtifactError, ResultCorrupt):
            return False
        return summary.get("operation_id") == operation_id and summary.get("attempt") == attempt

    return check


class SimProvider:
    """Runs and reconciles seeded simulation operations of one data directory.

    `root` is the data directory: the journal is `<root>/operations/` (or `journal`), results
    go to `<root>/artifacts/` unless a call names another store (the adapter passes the Host's,
    so the runtime records the very file the episode process made durable).
    """

    def __init__(
        self,
        root: Path | str,
        *,
        artifacts: ArtifactStore | None = None,
        journal: Journal | None = None,
        memory_cap_bytes: int = DEFAULT_MEMORY_CAP_BYTES,
    ) -> None:
        check_cap(memory_cap_bytes)
        self.root = Path(root)
        self.journal = journal or Journal(self.root / JOURNAL_DIR)
        self.memory_cap_bytes = memory_cap_bytes
        self.journal.root.mkdir(parents=True, exist_ok=True)
        migrate_old_layout(self.root, self.journal)
        self.artifacts = artifacts or ArtifactStore(self.root / "artifacts")
        self._host_lock = threading.Lock()
        self._host: _EpisodeHost | None = None

    def operation(self, operation_id: str) -> Operation | None:
        """The journal operation of `operation_id`, or None if it was never bound."""
        return self.journal.get(self._check_id(operation_id))

    def state(self, operation_id: str) -> dict[str, Any]:
        """`provider_state` of the operation (an unbound one has no attempts and no result)."""
        return provider_state(self.entry(operation_id))

    def entry(self, operation_id: str) -> Operation:
        """The operation's journal entry, bound or not (fence tombstones may come first)."""
        return self.journal.entry(self._check_id(operation_id))

    @staticmethod
    def _check_id(operation_id: str) -> str:
        try:
            from tether.operations import check_operation_id

            return check_operation_id(operation_id)
        except JournalError as exc:
            raise InvalidEpisodeRequest(f"operation_id: {exc.message}") from exc

    def _bind(self, operation_id: str, request: EpisodeRequest) -> Operation:
        try:
            return self.journal.bind(self._check_id(operation_id), request.to_dict())
        except JournalError as exc:
            if exc.code == "request_conflict":
                raise InvalidEpisodeRequest(
                    f"operation {operation_id!r} is already bound to a different request"
                ) from exc
            raise

    def _published(
        self, op: Operation, store: ArtifactStore | None, *, reused: bool
    ) -> EpisodeOutcome | None:
        try:
            pointer = op.result()
        except JournalError as exc:
            raise ResultCorrupt(f"result pointer in {op.path} is unreadable") from exc
        if pointer is None:
            return None
        where = op.path / "result.json"
        return EpisodeOutcome(where, _ref_of(pointer, where), reused, store or self.artifacts)

    def _found(self, op: Operation, store: ArtifactStore | None) -> EpisodeOutcome | None:
        outcome = self._published(op, store, reused=True)
        if outcome is not None:
            outcome.run  # noqa: B018 - verify a result at rest before anyone reuses it
        return outcome

    def find_result(
        self, operation_id: str, *, artifacts: ArtifactStore | None = None
    ) -> EpisodeOutcome | None:
        """The published result of `operation_id`, verified, or None if none was published.

        Raises `ResultCorrupt` if a result was published but its file is missing from
        `artifacts` or does not verify: a lost result is never mistaken for an absent one.
        """
        op = self.operation(operation_id)
        return None if op is None else self._found(op, artifacts)

    def _settle_earlier(
        self, op: Operation, attempt: int, store: ArtifactStore, by: str
    ) -> EpisodeOutcome | tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Before `attempt` concludes anything: reuse an earlier attempt's durable result,
        fence every earlier attempt, and remove what a fenced-out attempt left pending.

        Returns the reused or published outcome, or (the earlier processes observed after the
        fence, the pending results removed)."""
        if op.pending():
            gone = {
                o["attempt"] for o in observe_children(op, exclude=attempt) if o["alive"] is False
            }
            for k in sorted(op.pending()):
                if k == attempt or k not in gone:
                    continue
                try:
                    published = op.publish_pending(k, verified(store, op.id, k))
                except JournalError as exc:
                    if exc.code != "result_conflict":
                        raise
                    published = None  # another result stands; this one is removed below
                if published is not None:
                    return self._require(op, store, reused=True)
        for k in range(1, attempt):
            op.fence(k, {"fenced_by_attempt": attempt, "by": by})
        found = self._found(op, store)  # a process may have published before the fence landed
        if found is not None:
            return found
        observations = observe_children(op, exclude=attempt)
        gone = {o["attempt"] for o in observations if o["alive"] is False}
        discarded = []
        for k, pointer in sorted(op.pending().items()):
            if k != attempt and op.fenced(k) and (k in gone or op.marker(k) is None):
                op.discard_pending(k)
                discarded.append({"attempt": k, "digest": pointer.get("digest")})
        return observations, discarded

    def _require(self, op: Operation, store: ArtifactStore, *, reused: bool) -> EpisodeOutcome:
        outcome = self._published(op, store, reused=reused)
        if outcome is None:  # pragma: no cover - called only once a result was published
            raise EpisodeFailed(f"{op.path} published no result")
        return outcome

    def reconcile(
        self, operation_id: str, attempt: int, *, artifacts: ArtifactStore | None = None
    ) -> ReconcileFact:
        """Decide, from the journal and /proc only, what happened to earlier attempts.

        Args:
            operation_id: the stable provider operation id bound before any attempt ran.
            attempt: the reconciling attempt number; every lower attempt is fenced out.
            artifacts: the store results are published in (default: the provider's own).
        """
        _check_attempt(attempt)
        store = artifacts or self.artifacts
        op = self.entry(operation_id)
        if op.path.joinpath("bound.json").exists():
            found = self._found(op, store)
            if found is not None:
                return ResultFound(found)
        settled = self._settle_earlier(op, attempt, store, "reconcile")
        if isinstance(settled, EpisodeOutcome):
            return ResultFound(settled)
        observations, discarded = settled
        undecided = [o for o in observations if o["alive"] is not False]
        if undecided:
            reason = "; ".join(o["observed"] for o in undecided)
            # No attempt number in it: each reconcile is an attempt of its own, and the same
            # facts must make the same document (else a new evidence revision each second).
            evidence = {
                "operation_id": operation_id,
                "reason": "episode_process_may_run",
                "detail": reason,
                "children": undecided,
                "provider_state": provider_state(op),
            }
            return StillUnknown(evidence=evidence, reason=reason)
        name = f"guard-{attempt}"
        existing = op.proof(name)  # the first proof stands: gone processes stay gone
        if existing is not None:
            doc = {k: v for k, v in existing.items() if k != "digest"}
            return ProvenAbsent(proof=doc, guard_digest=str(existing["digest"]))
        proof = {
            "operation_id": operation_id,
            "attempt": attempt,
            "fenced_attempts": list(range(1, attempt)),
            "children_gone": observations,
            "discarded_pending": discarded,
        }
        recorded = op.record_proof(name, proof)
        doc = {k: v for k, v in recorded.items() if k != "digest"}
        return ProvenAbsent(proof=doc, guard_digest=str(recorded["digest"]))

    def check_request(self, request: Mapping[str, Any] | EpisodeRequest) -> EpisodeRequest:
        """The validated request, refused (`RequestTooLarge`) past the memory cap."""
        req = request if isinstance(request, EpisodeRequest) else EpisodeRequest.from_dict(request)
        check_memory(req, self.memory_cap_bytes)
        return req

    def execute(
        self,
        operation_id: str,
        attempt: int,
        request: Mapping[str, Any] | EpisodeRequest,
        *,
        artifacts: ArtifactStore | None = None,
        progress: ProgressFn | None = None,
        on_start: Callable[[ProcessIdentity], None] | None = None,
    ) -> EpisodeOutcome:
        """Run the operation's episodes in a child process, or reuse its published result.

        The child writes the result file into `artifacts` (default: the provider's own store)
        and stages its reference; this process verifies its digest and publishes it; the
        returned outcome carries that reference.

        The child dies with the calling thread (PR_SET_PDEATHSIG), so call this from a thread
        that outlives the episode. If `progress` or `on_start` raises (say, the lease was lost),
        the child is killed before the exception propagates. Raises `RequestTooLarge` (nothing
        bound) past the memory cap, `StaleAttemptAlive` if an earlier attempt's child may still
        run, `AttemptExpired` (nothing started) past the request's `not_after_ms`,
        `EpisodeFailed` if the child ended without a result, and the child's own typed errors
        (already started, fenced, bad request).
        """
        _check_attempt(attempt)
        req = self.check_request(request)
        store = artifacts or self.artifacts
        op = self._bind(operation_id, req)
        found = self._found(op, store)
        if found is not None:
            return found
        settled = self._settle_earlier(op, attempt, store, "execute")
        if isinstance(settled, EpisodeOutcome):
            return settled
        alive = [o for o in settled[0] if o["alive"] is not False]
        if alive:
            raise StaleAttemptAlive("; ".join(o["observed"] for o in alive))
        self._refuse_expired(op, req)
        try:
            self._run_child(op, operation_id, attempt, req, store, progress, on_start)
        except AttemptExpired:  # the episode process saw the clock pass: no marker written
            self._refuse_expired(op, req, decided=True)
            raise
        found = self._published(op, store, reused=True)
        if found is not None and attempt not in op.pending():
            return found  # the child found a published result and ran nothing
        crash_point("sim.result_staged", attempt)
        outcome = self._publish_own(op, attempt, store)
        crash_point("sim.result_durable", attempt)
        return outcome

    def _refuse_expired(self, op: Operation, req: EpisodeRequest, *, decided: bool = False) -> None:
        """Raise `AttemptExpired` (its proof recorded, the first decision standing) once the
        request may no longer start: an `expired` proof exists, or the clock passed its
        `not_after_ms` (`decided`: the episode process already saw it pass)."""
        proof = op.proof("expired")
        now = int(time.time() * 1000)
        if proof is None and not (decided or req.expired(now)):
            return
        if proof is None:
            doc = {
                "operation_id": op.id,
                "not_after_ms": req.not_after_ms,
                "decided_at_ms": now,
            }
            try:
                proof = op.record_proof("expired", doc)
            except JournalError as exc:  # a concurrent decision landed first: it stands
                if exc.code != "proof_conflict":
                    raise
                proof = op.proof("expired") or doc
        raise AttemptExpired(
            f"not started: the host's clock passed not_after_ms {proof.get('not_after_ms')}",
            {k: v for k, v in proof.items() if k != "digest"},
        )

    def _publish_own(self, op: Operation, attempt: int, store: ArtifactStore) -> EpisodeOutcome:
        try:
            published = op.publish_pending(attempt, verified(store, op.id, attempt))
        except JournalError as exc:
            if exc.code != "result_conflict":
                raise
            op.discard_pending(attempt)  # another attempt's result stands: reuse it
            return self._require(op, store, reused=True)
        if published is not None:
            return self._require(op, store, reused=False)
        fenced = op.fenced(attempt)
        op.discard_pending(attempt)
        if fenced:
            raise AttemptFenced(
                f"attempt {attempt} was fenced out before it published; its result was removed"
            )
        raise ResultCorrupt(f"the result attempt {attempt} made durable does not verify")

    def _run_child(
        self,
        op: Operation,
        operation_id: str,
        attempt: int,
        req: EpisodeRequest,
        store: ArtifactStore,
        progress: ProgressFn | None,
        on_start: Callable[[ProcessIdentity], None] | None,
    ) -> None:
        job = {
            "op_dir": str(op.path),
            "attempt": attempt,
            "operation_id": operation_id,
            "request": req.to_dict(),
            "artifacts": str(store.root),
            "inline_bound": store.inline_bound,
        }
        if store.shared is not None:  # the hosts' shared store: the child writes there too
            job["artifacts_url"] = store.shared.conninfo
        code: int | None = None
        forked: ProcessIdentity | None = None
        with self._episode_host().submit(job) as events:
            try:
                for line in events:
                    event = json.loads(line)
                    kind = event["event"]
                    if kind == "forked":
                        forked = _identity_or_none(int(event["pid"]))
                    elif kind == "started" and on_start is not None:
                        on_start(ProcessIdentity.from_dict(event["child"]))
                    elif kind == "progress" and progress is not None:
                        progress(int(event["done"]), int(event["total"]), float(event["error"]))
                    elif kind == "exit":
                        code = int(event["code"])
            except BaseException:
                if forked is not None and forked.observe()[0]:
                    os.kill(forked.pid, signal.SIGKILL)
                raise
        if code == EXIT_OK and (attempt in op.pending() or op.result() is not None):
            return
        try:
            tail = stderr_path(op, attempt).read_text(errors="replace")[-2000:]
        except FileNotFoundError:
            tail = ""
        error = _EXIT_ERRORS.get(code or -1, EpisodeFailed)
        what = "died without finishing" if code is None else f"exited with {code}"
        if code in _EXIT_ERRNO:  # the disk, not the episode: say so with its errno
            cause = OSError(_EXIT_ERRNO[code], os.strerror(_EXIT_ERRNO[code]))
            raise EpisodeFailed(
                f"episode process of attempt {attempt} could not make its result durable: {cause}"
            ) from cause
        raise error(f"episode process of attempt {attempt} {what}: {tail.strip()}")

    def _episode_host(self) -> _EpisodeHost:
        with self._host_lock:
            if self._host is None:
                self._host = _EpisodeHost(self.journal.root / "sim-episode-host.log")
            return self._host

    def warm(self) -> None:
        """Start the episode host ahead of the first attempt (it imports MuJoCo once)."""
        self._episode_host().warm()

    def close(self) -> None:
        """Stop the episode host (a running attempt is killed with it)."""
        with self._host_lock:
            host, self._host = self._host, None
        if host is not None:
            host.close()

    def __enter__(self) -> SimProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def provider_state(op: Operation) -> dict[str, Any]:
    """What the journal and /proc say about an operation now (the operator compares these):
    per started attempt whether its process is alive (True, False, or None: undecidable) and
    whether it was fenced out, the published result's digest and the pending attempts."""
    try:
        result = op.result()
    except JournalError:
        result = {"digest": "unreadable"}
    attempts = {}
    for o in observe_children(op):
        attempts[str(o["attempt"])] = {
            "alive": o["alive"],
            "observed": o["observed"],
            "fenced": op.fenced(o["attempt"]),
            "pid": o["child"]["pid"],
        }
    return {
        "attempts": attempts,
        "result_digest": None if result is None else result.get("digest"),
        "pending": sorted(op.pending()),
    }


def _identity_or_none(pid: int) -> ProcessIdentity | None:
    try:
        return ProcessIdentity.of(pid)
    except ProcessLookupError:
        return None


# --- the older layout -------------------------------------------------------------------------


def _old_roots(root: Path) -> list[Path]:
    """Where an older Tether kept sim operations: `<data_dir>/sim/ops/` (the demo and the
    adapter) and `<root>/ops/` (a provider opened on its own root)."""
    return [p for p in (root / OLD_LAYOUT_DIR / "ops", root / "ops") if p.is_dir()]


def migrate_old_layout(root: Path, journal: Journal) -> list[str]:
    """Move the older layout's operations into `journal` (idempotent; a crash midway resumes
    on the next open). Refused (`old_layout`) while an episode process it recorded may still
    run. Returns the directory names moved."""
    olds = _old_roots(root)
    if not olds:
        return []
    moved: list[str] = []
    lock_path = journal.root / ".migrate.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one migrating process at a time
        for old in olds:
            entries = sorted(p for p in old.iterdir() if p.is_dir())
            for entry in entries:
                _refuse_if_running(entry, root)
            for entry in entries:
                _migrate_entry(entry, journal)
                moved.append(entry.name)
            try:
                old.rmdir()
                fsync_dir(old.parent)
            except OSError:
                pass  # something else is left there: it stays where it is
    return moved


def _refuse_if_running(entry: Path, root: Path) -> None:
    if (entry / "result.json").exists():
        return
    op = Operation(entry)
    for k in op.attempts():
        try:
            child = ProcessIdentity.from_dict(read_marker(op, k)["child"])
        except ResultCorrupt:
            continue
        alive, seen = child.observe()
        if alive is not False:
            raise JournalError(
                "old_layout",
                f"{entry.parent} holds simulation operations of an older Tether and {seen}: "
                f"stop that Tether (its worker or `tether demo`), then open {root} again "
                "(it is migrated into the operations journal on open)",
                path=str(entry),
                pid=child.pid,
            )


def _migrate_entry(entry: Path, journal: Journal) -> None:
    op = Operation(entry)
    bound = entry / "bound.json"
    legacy = entry / "operation.json"
    if not bound.exists() and legacy.exists():
        try:
            old = json.loads(legacy.read_bytes())
            doc = {
                "operation_id": str(old["operation_id"]),
                "device": None,
                # The older layout kept the request's digest only (the Activity catalog holds
                # the request); a later bind checks its digest against this one.
                "request": None,
                "request_digest": str(old["request_digest"]),
                "bound_at_ms": int(legacy.stat().st_mtime * 1000),
                "migrated_from": "sim/ops",
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(
                "journal_corrupt", f"{legacy} is unreadable: {exc}", path=str(legacy)
            ) from exc
        from tether.operations._durable import create_exclusive

        create_exclusive(bound, canonical_json(doc))
    for guard in sorted(entry.glob("guard-*.json")):
        number = guard.name.removeprefix("guard-").removesuffix(".json")
        try:
            proof = json.loads(guard.read_bytes())
        except (OSError, ValueError) as exc:
            raise JournalError(
                "journal_corrupt", f"{guard} is unreadable: {exc}", path=str(guard)
            ) from exc
        if op.proof(f"guard-{number}") is None:
            op.record_proof(f"guard-{number}", proof if isinstance(proof, dict) else {"doc": proof})
        guard.unlink()
    legacy.unlink(missing_ok=True)
    target = journal.root / "ops" / entry.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise JournalError(
            "old_layout",
            f"{entry} and {target} both hold operation {entry.name}: move one aside, then "
            "open the data directory again",
            path=str(entry),
        )
    os.rename(entry, target)
    fsync_dir(target.parent)
    fsync_dir(entry.parent)


class _EpisodeHost:
    """The worker's handle on its episode host process (see `_host.py`); thread-safe.

    A dedicated thread spawns the host and then stays blocked: PR_SET_PDEATHSIG ties the host
    to the *thread* that forked it, so that thread must live as long as the host should.
    """

    def __init__(self, log: Path) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._spawns: queue.Queue[queue.Queue[object] | None] = queue.Queue()
        self._spawner = threading.Thread(
            target=self._spawn_loop, name="tether-sim-host", daemon=True
        )
        self._spawner.start()

    def _spawn_loop(self) -> None:
        while (reply := self._spawns.get()) is not None:
            try:
                reply.put(self._spawn())
            except BaseException as exc:
                reply.put(exc)

    def _spawn(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The runtime's crash points belong to the worker process: episode processes (which
        # write results into the artifact store too) have their own, under CRASH_ENV.
        env = child_environment(dict(os.environ), "sim.")
        env |= {"MUJOCO_GL": "disable", "OPENBLAS_NUM_THREADS": "1"}
        argv = [sys.executable, "-m", "tether.families.sim._host", str(os.getpid())]
        argv.append(str(theirs.fileno()))
        try:
            with open(self._log, "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=env,
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            if ours.recv(16) != b"ready":  # the host died during its imports
                raise EpisodeFailed(f"the episode host exited with {proc.wait()}")
        except BaseException:
            ours.close()
            raise
        return proc, ours

    def _restart(self) -> socket.socket:
        if self._control is not None:
            self._control.close()
        reply: queue.Queue[object] = queue.Queue()
        self._spawns.put(reply)
        got = reply.get()
        if isinstance(got, BaseException):
            raise EpisodeFailed(f"cannot start the episode host: {got}") from got
        self._proc, self._control = got  # type: ignore[misc]
        assert self._control is not None
        return self._control

    def submit(self, job: dict[str, Any]) -> io.TextIOWrapper:
        """Send a job to the host; returns the read end of the attempt's event pipe."""
        read_fd, write_fd = os.pipe()
        try:
            with self._lock:
                for _ in range(2):
                    control = self._control
                    if control is None or self._proc is None or self._proc.poll() is not None:
                        control = self._restart()
                    try:
                        socket.send_fds(control, [canonical_json(job)], [write_fd])
                        break
                    except OSError:
                        self._proc = None
                else:
                    raise EpisodeFailed("the episode host does not accept jobs")
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return open(read_fd, encoding="utf-8")

    def warm(self) -> None:
        """Start the host now (if it is not running) and wait until it is ready."""
        with self._lock:
            if self._control is None or self._proc is None or self._proc.poll() is not None:
                self._restart()

    def close(self) -> None:
        """Close the control socket (the host exits) and stop the spawner thread."""
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self._proc is not None:
                self._proc.wait()
                self._proc = None
        self._spawns.put(None)


def _check_attempt(attempt: int) -> None:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise InvalidEpisodeRequest(f"attempt must be an integer >= 1, got {attempt!r}")
