"""The simulation provider: runs episodes in worker-owned processes, reconciles them from files.

Each attempt runs in its own process, forked by the provider's episode host (`_host.py`, a
pre-imported child of the worker); both die with their parent (PR_SET_PDEATHSIG), so killing
the worker kills the attempt.

Every provider operation id owns one directory under the provider root:

    operation.json        the operation id and request digest (create-if-absent, then checked)
    attempt-<n>.start     start marker: created by the episode child itself, atomically and only
                          if absent, naming the child (pid, /proc start time, boot id, host)
    attempt-<n>.fenced    tombstone: a later attempt fenced attempt n off; a child that finds it
                          after creating its marker exits without running
    result.json           the published result: a reference (ref, digest, media type, size) to
                          the complete result file (arrays + summary) in the artifact store; the
                          child makes the file durable there first, then creates this pointer
                          (synced, create-if-absent: the first published result is never
                          replaced), so a crashed child leaves at most an unreferenced artifact
                          or a dot-temp file, never a partial result
    guard-<n>.json        the retry guard: proof that every earlier attempt's child is gone
    evidence-<n>.json     why attempt n's reconciliation could not decide (Unknown)

The result file is made durable once: the episode process writes it straight into the
content-addressed artifact store the runtime records results from (the `artifacts` argument,
the Host's store), and the adapter hands that reference on without copying the bytes.

Rules (seeded simulation, seed section 4): the first published result is reused and never
recomputed; a start marker without a result is Unknown while its child may still run; once
every earlier attempt is fenced and its recorded child is provably gone, the absence is confirmed
and the guard file is the proof that lets exactly one fresh attempt start (its own marker is
create-if-absent, so a second starter of the same attempt fails). Fencing and the marker are
both write-then-check, so a stale child and a reconciler can never both miss each other.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from tether.families.sim.errors import (
    AttemptAlreadyStarted,
    AttemptFenced,
    EpisodeFailed,
    InvalidEpisodeRequest,
    ResultCorrupt,
    SimError,
    StaleAttemptAlive,
)
from tether.operations._durable import create_exclusive, write_durable
from tether.runtime import ArtifactError, ArtifactStore

# Child exit codes (the child is `python -m tether.families.sim._child`).
EXIT_OK = 0
EXIT_PARENT_GONE = 10
EXIT_ALREADY_STARTED = 11
EXIT_FENCED = 12
EXIT_BAD_REQUEST = 13
_EXIT_ERRORS: dict[int, type[SimError]] = {
    EXIT_ALREADY_STARTED: AttemptAlreadyStarted,
    EXIT_FENCED: AttemptFenced,
    EXIT_BAD_REQUEST: InvalidEpisodeRequest,
}
#: The crash-point variable (the one mechanism, `tether._crash`); the sim's points are named
#: `sim.*` and count attempts (`sim.x` attempt 1, `sim.x@k` attempt k, `sim.x@*` every one).
CRASH_ENV = _CRASH_ENV
_ATTEMPT_FILE = re.compile(r"^attempt-(\d+)\.start$")


def crash_point(name: str, attempt: int) -> None:
    """SIGKILL this process at a named point of `attempt`, for crash tests."""
    _crash_point(name, attempt=attempt)


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class OperationDir:
    """The files of one provider operation id (see the module docstring)."""

    path: Path

    def marker(self, attempt: int) -> Path:
        """Start marker of `attempt`."""
        return self.path / f"attempt-{attempt}.start"

    def tombstone(self, attempt: int) -> Path:
        """Fence tombstone of `attempt`."""
        return self.path / f"attempt-{attempt}.fenced"

    @property
    def result(self) -> Path:
        """The published result: a pointer to the result file in the artifact store."""
        return self.path / "result.json"

    def guard(self, attempt: int) -> Path:
        """Retry-guard proof written by `attempt`'s reconciliation."""
        return self.path / f"guard-{attempt}.json"

    def evidence(self, attempt: int) -> Path:
        """Unknown-evidence written by `attempt`'s reconciliation."""
        return self.path / f"evidence-{attempt}.json"

    def stderr(self, attempt: int) -> Path:
        """The episode child's stderr of `attempt` (diagnostics only)."""
        return self.path / f"attempt-{attempt}.stderr"

    def started_attempts(self) -> list[int]:
        """Attempt numbers that have a start marker, ascending."""
        found = (_ATTEMPT_FILE.match(p.name) for p in self.path.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def read_marker(self, attempt: int) -> dict[str, Any]:
        """The parsed marker of `attempt`; raises `ResultCorrupt` if it is unreadable."""
        try:
            raw = json.loads(self.marker(attempt).read_bytes())
            ProcessIdentity.from_dict(raw["child"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ResultCorrupt(f"start marker {self.marker(attempt)} is unreadable") from exc
        if not isinstance(raw, dict):
            raise ResultCorrupt(f"start marker {self.marker(attempt)} is not an object")
        return raw


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
    """No result, and every earlier attempt is fenced and its child provably gone."""

    guard_path: Path
    guard_digest: str
    proof: dict[str, Any]


@dataclass(frozen=True)
class StillUnknown:
    """An earlier attempt's child may still be running (or cannot be checked from here)."""

    evidence_path: Path
    evidence_digest: str
    reason: str


ReconcileFact = ResultFound | ProvenAbsent | StillUnknown


class SimProvider:
    """Runs and reconciles seeded simulation operations under one root directory."""

    def __init__(self, root: Path | str, *, artifacts: ArtifactStore | None = None) -> None:
        self.root = Path(root)
        (self.root / "ops").mkdir(parents=True, exist_ok=True)
        #: Where results are written unless a call names another store (the adapter passes the
        #: Host's, so the runtime records the very file the episode process made durable).
        self.artifacts = artifacts or ArtifactStore(self.root / "artifacts")
        self._host_lock = threading.Lock()
        self._host: _EpisodeHost | None = None

    def operation_dir(self, operation_id: str) -> OperationDir:
        """The directory of `operation_id` (created on first use)."""
        if not isinstance(operation_id, str) or not operation_id:
            raise InvalidEpisodeRequest("operation_id must be a non-empty string")
        name = hashlib.sha256(operation_id.encode()).hexdigest()[:40]
        path = self.root / "ops" / name
        path.mkdir(exist_ok=True)
        return OperationDir(path)

    def _bind(self, operation_id: str, request: EpisodeRequest) -> OperationDir:
        op = self.operation_dir(operation_id)
        record = _canonical({"operation_id": operation_id, "request_digest": request.digest()})
        if not create_exclusive(op.path / "operation.json", record):
            existing = (op.path / "operation.json").read_bytes()
            if existing != record:
                raise InvalidEpisodeRequest(
                    f"operation {operation_id!r} is already bound to a different request"
                )
        return op

    def _published(
        self, op: OperationDir, store: ArtifactStore | None, *, reused: bool
    ) -> EpisodeOutcome | None:
        try:
            raw = json.loads(op.result.read_bytes())
            ref = ResultRef(
                ref=str(raw["ref"]),
                digest=str(raw["digest"]),
                media_type=str(raw["media_type"]),
                size=int(raw["size"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ResultCorrupt(f"result pointer {op.result} is unreadable") from exc
        return EpisodeOutcome(op.result, ref, reused, store or self.artifacts)

    def find_result(
        self, operation_id: str, *, artifacts: ArtifactStore | None = None
    ) -> EpisodeOutcome | None:
        """The published result of `operation_id`, verified, or None if none was published.

        Raises `ResultCorrupt` if a result was published but its file is missing from
        `artifacts` or does not verify: a lost result is never mistaken for an absent one.
        """
        outcome = self._published(self.operation_dir(operation_id), artifacts, reused=True)
        if outcome is not None:
            outcome.run  # noqa: B018 - verify a result at rest before anyone reuses it
        return outcome

    def _fence_earlier(self, op: OperationDir, attempt: int, by: str) -> list[dict[str, Any]]:
        """Tombstone every attempt below `attempt`, then observe each earlier marker's child."""
        record = _canonical({"fenced_by_attempt": attempt, "by": by})
        for k in range(1, attempt):
            create_exclusive(op.tombstone(k), record)
        observations = []
        for k in op.started_attempts():
            if k == attempt:
                continue
            marker = op.read_marker(k)
            child = ProcessIdentity.from_dict(marker["child"])
            alive, seen = child.observe()
            observations.append(
                {"attempt": k, "child": child.to_dict(), "alive": alive, "observed": seen}
            )
        return observations

    def reconcile(
        self, operation_id: str, attempt: int, *, artifacts: ArtifactStore | None = None
    ) -> ReconcileFact:
        """Decide, from files and /proc only, what happened to earlier attempts of the operation.

        Args:
            operation_id: the stable provider operation id bound before any attempt ran.
            attempt: the reconciling attempt number; every lower attempt is fenced off.
            artifacts: the store results are published in (default: the provider's own).
        """
        _check_attempt(attempt)
        found = self.find_result(operation_id, artifacts=artifacts)
        if found is not None:
            return ResultFound(found)
        op = self.operation_dir(operation_id)
        observations = self._fence_earlier(op, attempt, "reconcile")
        # A child may have published between the first look and the fence: look again.
        found = self.find_result(operation_id, artifacts=artifacts)
        if found is not None:
            return ResultFound(found)
        undecided = [o for o in observations if o["alive"] is not False]
        if undecided:
            evidence = _canonical(
                {"operation_id": operation_id, "attempt": attempt, "children": undecided}
            )
            write_durable(op.evidence(attempt), evidence)
            return StillUnknown(
                evidence_path=op.evidence(attempt),
                evidence_digest=_sha256(evidence),
                reason="; ".join(o["observed"] for o in undecided),
            )
        proof = {
            "operation_id": operation_id,
            "attempt": attempt,
            "fenced_attempts": list(range(1, attempt)),
            "children_gone": observations,
        }
        guard = _canonical(proof)
        write_durable(op.guard(attempt), guard)
        return ProvenAbsent(guard_path=op.guard(attempt), guard_digest=_sha256(guard), proof=proof)

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
        and publishes its reference; the returned outcome carries that reference.

        The child dies with the calling thread (PR_SET_PDEATHSIG), so call this from a thread
        that outlives the episode. If `progress` or `on_start` raises (say, the lease was lost),
        the child is killed before the exception propagates. Raises `StaleAttemptAlive` if an
        earlier attempt's child may still run, `EpisodeFailed` if the child ended without a
        result, and the child's own typed errors (already started, fenced, bad request).
        """
        _check_attempt(attempt)
        req = request if isinstance(request, EpisodeRequest) else EpisodeRequest.from_dict(request)
        op = self._bind(operation_id, req)
        found = self.find_result(operation_id, artifacts=artifacts)
        if found is not None:
            return found
        observations = self._fence_earlier(op, attempt, "execute")
        found = self.find_result(operation_id, artifacts=artifacts)
        if found is not None:
            return found
        alive = [o for o in observations if o["alive"] is not False]
        if alive:
            raise StaleAttemptAlive("; ".join(o["observed"] for o in alive))
        store = artifacts or self.artifacts
        self._run_child(op, operation_id, attempt, req, store, progress, on_start)
        outcome = self._published(op, store, reused=False)
        if outcome is None:  # pragma: no cover - _run_child returns only once it is published
            raise EpisodeFailed(f"attempt {attempt} of {operation_id!r} published no result")
        crash_point("sim.result_durable", attempt)
        return outcome

    def _run_child(
        self,
        op: OperationDir,
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
        if code == EXIT_OK and op.result.exists():
            return
        tail = op.stderr(attempt).read_text(errors="replace")[-2000:]
        error = _EXIT_ERRORS.get(code or -1, EpisodeFailed)
        what = "died without finishing" if code is None else f"exited with {code}"
        raise error(f"episode process of attempt {attempt} {what}: {tail.strip()}")

    def _episode_host(self) -> _EpisodeHost:
        with self._host_lock:
            if self._host is None:
                self._host = _EpisodeHost(self.root / "episode-host.log")
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


def _identity_or_none(pid: int) -> ProcessIdentity | None:
    try:
        return ProcessIdentity.of(pid)
    except ProcessLookupError:
        return None


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
                        socket.send_fds(control, [_canonical(job)], [write_fd])
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
