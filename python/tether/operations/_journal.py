"""The provider operations journal: what every provider operation was bound to, started and sent.

One directory per provider operation id, under `<root>/ops/<sha256(id)[:40]>/` (the id is
validated first and never names a path itself):

    bound.json          the operation id, device, request and its digest: create-if-absent and
                        kept forever (pruning keeps it, so a pruned id can never start again)
    attempt-<n>.start   start marker of attempt n (create-if-absent: one starter per attempt)
    attempt-<n>.fenced  tombstone: a later attempt fenced attempt n out (its starter refuses)
    preimage-<n>.json   the state read before attempt n did anything (create-if-absent)
    sent.jsonl          every effectful command, appended and fsynced before it is sent
    result-<n>.pending  a result attempt n made durable but has not published yet
    result.json         the published result pointer (create-if-absent: the first one stands)
    proof-<name>.json   a proof behind a retry guard (neutralised stages, children gone)
    pruned.json         retention removed the payloads; what it kept

Rules (facts only: the journal decides no transition, the catalog does):
- Another request under a bound id is a `request_conflict`; the same one is a no-op.
- An attempt starts once, never after it was fenced out, never on a pruned id.
- A pending result is published after its digest is verified (`publish_pending`) or removed
  with the fenced-out attempt that made it (`discard_pending`); it is never left behind.
- Queries by state (`bound`, `started`, `published`, `pruned`), device and age read the
  directory only; retention prunes published operations older than `retention_ms`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tether.operations._durable import create_exclusive, fsync_dir, write_durable
from tether.operations._errors import JournalError

#: Operation id syntax: starts with a letter or digit (so never `.` or `..`), at most 256 bytes.
OPERATION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+@-]{0,255}")
#: The states `Journal.query` filters on, derived from the files present.
STATES: Final = ("bound", "started", "published", "pruned")
_START = re.compile(r"^attempt-(\d+)\.start$")
_PENDING = re.compile(r"^result-(\d+)\.pending$")
_PROOF = re.compile(r"^proof-([A-Za-z0-9_.-]{1,64})\.json$")
_PROOF_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no spaces: the bytes every digest in the journal is taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest_of(obj: Any) -> str:
    """`sha256:` digest of the canonical JSON of `obj`."""
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def wall_ms() -> int:
    return int(time.time() * 1000)


def check_operation_id(operation_id: object) -> str:
    """The id itself, if it is a safe operation id; `bad_operation_id` otherwise."""
    if not isinstance(operation_id, str) or not OPERATION_ID.fullmatch(operation_id):
        raise JournalError(
            "bad_operation_id",
            f"{operation_id!r} is not an operation id (a letter or digit, then letters, digits "
            "and _ . : + @ -, at most 256)",
            operation_id=repr(operation_id),
        )
    return operation_id


#: The key of a pre-image file that holds its place in the sent log (not part of the state).
_PREIMAGE_POSITION = "journal_sent_before"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise JournalError(
            "journal_corrupt", f"{path} is unreadable: {exc}", path=str(path)
        ) from exc


def _attempt(number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"attempt numbers start at 1, got {number!r}")
    return number


@dataclass(frozen=True)
class Operation:
    """The facts of one provider operation (see the module docstring for the files)."""

    path: Path

    # --- the binding ---

    @property
    def bound(self) -> dict[str, Any]:
        doc = _read(self.path / "bound.json")
        if not isinstance(doc, dict):
            raise JournalError(
                "journal_corrupt", f"{self.path} has no binding", path=str(self.path)
            )
        return doc

    @property
    def id(self) -> str:
        return str(self.bound["operation_id"])

    @property
    def device(self) -> str | None:
        device = self.bound.get("device")
        return None if device is None else str(device)

    @property
    def request(self) -> Any:
        return self.bound.get("request")

    @property
    def request_digest(self) -> str:
        return str(self.bound["request_digest"])

    # --- attempts ---

    def attempts(self) -> list[int]:
        """Attempt numbers with a start marker, ascending."""
        found = (_START.match(p.name) for p in self.path.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def next_attempt(self) -> int:
        attempts = self.attempts()
        return (attempts[-1] if attempts else 0) + 1

    def start(self, attempt: int, info: Mapping[str, Any]) -> dict[str, Any]:
        """Create attempt `attempt`'s start marker; refused if it exists, if the attempt was
        fenced out, or if the operation was pruned. Returns the marker."""
        _attempt(attempt)
        if self.pruned is not None:
            raise JournalError(
                "operation_pruned", f"operation {self.id} was pruned; it never starts again"
            )
        if self.fenced(attempt):
            raise JournalError(
                "attempt_fenced", f"attempt {attempt} of {self.id} was fenced out", attempt=attempt
            )
        marker = {"attempt": attempt, "started_at_ms": wall_ms(), **info}
        if not create_exclusive(self.path / f"attempt-{attempt}.start", canonical_json(marker)):
            raise JournalError(
                "attempt_already_started",
                f"attempt {attempt} of {self.id} was already started",
                attempt=attempt,
            )
        # The fence is write-then-check on both sides: a tombstone that landed between the check
        # above and the marker still stops this starter.
        if self.fenced(attempt):
            raise JournalError(
                "attempt_fenced", f"attempt {attempt} of {self.id} was fenced out", attempt=attempt
            )
        return marker

    def marker(self, attempt: int) -> dict[str, Any] | None:
        doc = _read(self.path / f"attempt-{_attempt(attempt)}.start")
        return None if doc is None else dict(doc)

    def fence(self, attempt: int, by: Mapping[str, Any]) -> bool:
        """Tombstone `attempt` (create-if-absent); True if this call did."""
        path = self.path / f"attempt-{_attempt(attempt)}.fenced"
        return create_exclusive(path, canonical_json({"fenced_at_ms": wall_ms(), **by}))

    def fenced(self, attempt: int) -> bool:
        return (self.path / f"attempt-{_attempt(attempt)}.fenced").exists()

    def record_preimage(self, attempt: int, state: Mapping[str, Any]) -> dict[str, Any]:
        """The state read before `attempt` did anything; the first one recorded stands. The
        file also keeps how many commands the sent log held when it was read (its place among
        them: `preimage_position`)."""
        if _PREIMAGE_POSITION in state:
            raise ValueError(f"{_PREIMAGE_POSITION!r} is the journal's own key")
        path = self.path / f"preimage-{_attempt(attempt)}.json"
        doc = {**dict(state), _PREIMAGE_POSITION: len(self.sent())}
        create_exclusive(path, canonical_json(doc))
        return self._preimage(path) or {}

    def preimage(self, attempt: int) -> dict[str, Any] | None:
        return self._preimage(self.path / f"preimage-{_attempt(attempt)}.json")

    def preimage_position(self, attempt: int) -> int | None:
        """How many commands (of every attempt) were in the sent log when `attempt`'s
        pre-image was recorded (None: none recorded, or recorded before this was kept)."""
        doc = _read(self.path / f"preimage-{_attempt(attempt)}.json")
        pos = None if doc is None else doc.get(_PREIMAGE_POSITION)
        return pos if isinstance(pos, int) and not isinstance(pos, bool) else None

    @staticmethod
    def _preimage(path: Path) -> dict[str, Any] | None:
        doc = _read(path)
        if doc is None:
            return None
        out = dict(doc)
        out.pop(_PREIMAGE_POSITION, None)
        return out

    # --- the sent log ---

    def log_sent(self, record: Mapping[str, Any]) -> None:
        """Append one effectful command, durable before the caller sends it."""
        line = canonical_json(dict(record)) + b"\n"
        fd = os.open(self.path / "sent.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def sent(self, attempt: int | None = None) -> list[dict[str, Any]]:
        """Every logged command (of `attempt` only, if given), oldest first. A torn last line
        (a crash mid-append, so the command was never sent) is not a command."""
        try:
            text = (self.path / "sent.jsonl").read_text()
        except FileNotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                break
            if attempt is None or rec.get("attempt") == attempt:
                out.append(rec)
        return out

    # --- results ---

    def result(self) -> dict[str, Any] | None:
        """The published result pointer, if any."""
        doc = _read(self.path / "result.json")
        return None if doc is None else dict(doc)

    def publish(self, pointer: Mapping[str, Any]) -> dict[str, Any]:
        """Publish a result pointer (it must carry `digest`); the first one stands and the same
        one again is a no-op; another is a `result_conflict`."""
        doc = dict(pointer)
        if not isinstance(doc.get("digest"), str):
            raise ValueError("a result pointer carries its digest")
        if not create_exclusive(self.path / "result.json", canonical_json(doc)):
            existing = self.result() or {}
            if existing.get("digest") != doc["digest"]:
                raise JournalError(
                    "result_conflict",
                    f"operation {self.id} already published another result",
                    published=existing.get("digest"),
                    offered=doc["digest"],
                )
            return existing
        return doc

    def stage_result(self, attempt: int, pointer: Mapping[str, Any]) -> None:
        """Record that `attempt` made a result durable (before it publishes it)."""
        write_durable(
            self.path / f"result-{_attempt(attempt)}.pending", canonical_json(dict(pointer))
        )

    def pending(self) -> dict[int, dict[str, Any]]:
        """Results made durable but not published, by attempt."""
        out = {}
        for p in self.path.iterdir():
            m = _PENDING.match(p.name)
            if m:
                out[int(m.group(1))] = dict(_read(p))
        return out

    def publish_pending(
        self, attempt: int, verify: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        """Publish `attempt`'s pending result if `verify` (its digest check) accepts it and the
        attempt was not fenced out; None (and nothing published) otherwise."""
        pointer = self.pending().get(_attempt(attempt))
        if pointer is None or self.fenced(attempt) or not verify(pointer):
            return None
        doc = self.publish(pointer)
        (self.path / f"result-{attempt}.pending").unlink(missing_ok=True)
        fsync_dir(self.path)
        return doc

    def discard_pending(
        self, attempt: int, remove: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any] | None:
        """Remove `attempt`'s pending result (after `remove` deleted its payload), once the
        attempt is fenced out or its result failed verification. Returns what was removed."""
        path = self.path / f"result-{_attempt(attempt)}.pending"
        pointer = _read(path)
        if pointer is None:
            return None
        published = self.result()
        if remove is not None and (
            published is None or published.get("digest") != pointer.get("digest")
        ):
            remove(dict(pointer))
        path.unlink(missing_ok=True)
        fsync_dir(self.path)
        return dict(pointer)

    # --- proofs behind retry guards ---

    def record_proof(self, name: str, proof: Mapping[str, Any]) -> dict[str, Any]:
        """Record a retry guard's proof under `name` (create-if-absent); the same proof again
        is a no-op, another under that name a `proof_conflict`. Returns it with its digest."""
        if not _PROOF_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a proof name")
        doc = {**proof, "proof": name}
        path = self.path / f"proof-{name}.json"
        if not create_exclusive(path, canonical_json(doc)):
            existing = dict(_read(path))
            if digest_of(existing) != digest_of(doc):
                raise JournalError(
                    "proof_conflict", f"operation {self.id} has another proof named {name}"
                )
        return {**doc, "digest": digest_of(doc)}

    def proof(self, name: str) -> dict[str, Any] | None:
        if not _PROOF_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a proof name")
        doc = _read(self.path / f"proof-{name}.json")
        return None if doc is None else {**doc, "digest": digest_of(doc)}

    def proofs(self) -> list[str]:
        found = (_PROOF.match(p.name) for p in self.path.iterdir())
        return sorted(m.group(1) for m in found if m)

    # --- derived views ---

    @property
    def pruned(self) -> dict[str, Any] | None:
        doc = _read(self.path / "pruned.json")
        return None if doc is None else dict(doc)

    @property
    def state(self) -> str:
        """`pruned`, `published`, `started` or `bound` (the files present; decides nothing)."""
        if (self.path / "pruned.json").exists():
            return "pruned"
        if (self.path / "result.json").exists():
            return "published"
        return "started" if self.attempts() else "bound"

    def updated_at_ms(self) -> int:
        """The newest fact's time (file modification times)."""
        return max(int(p.stat().st_mtime * 1000) for p in self.path.iterdir())

    def summary(self, now_ms: int | None = None) -> dict[str, Any]:
        now = wall_ms() if now_ms is None else now_ms
        bound = self.bound
        updated = self.updated_at_ms()
        return {
            "operation_id": bound["operation_id"],
            "device": bound.get("device"),
            "state": self.state,
            "attempts": self.attempts(),
            "bound_at_ms": bound.get("bound_at_ms"),
            "updated_at_ms": updated,
            "age_ms": max(0, now - updated),
        }


class Journal:
    """Every provider operation under one root (one adapter's, or a shared one).

    Shareable by threads and processes: every record is create-if-absent, an atomic rename, or
    an fsynced append. ``retention_ms`` (None: keep everything) is what `prune` uses by default.
    """

    def __init__(self, root: str | os.PathLike[str], *, retention_ms: int | None = None) -> None:
        if retention_ms is not None and (isinstance(retention_ms, bool) or retention_ms < 0):
            raise ValueError("retention_ms is a non-negative number of milliseconds or None")
        self.root = Path(root)
        self.retention_ms = retention_ms
        self._ops = self.root / "ops"

    def _path(self, operation_id: str) -> Path:
        name = hashlib.sha256(check_operation_id(operation_id).encode()).hexdigest()[:40]
        return self._ops / name

    def bind(self, operation_id: str, request: Any, *, device: str | None = None) -> Operation:
        """Bind `operation_id` to `request` (JSON data) durably, before any effect: the first
        binding stands, the same request again returns it, another is a `request_conflict`."""
        path = self._path(operation_id)
        request_digest = digest_of(request)
        doc = {
            "operation_id": operation_id,
            "device": device,
            "request": request,
            "request_digest": request_digest,
            "bound_at_ms": wall_ms(),
        }
        path.mkdir(parents=True, exist_ok=True)
        if not create_exclusive(path / "bound.json", canonical_json(doc)):
            existing = Operation(path).bound
            if existing.get("operation_id") != operation_id:  # pragma: no cover - sha256 clash
                raise JournalError("journal_corrupt", f"{path} belongs to another operation id")
            if existing.get("request_digest") != request_digest:
                raise JournalError(
                    "request_conflict",
                    f"operation {operation_id} is bound to a different request",
                    operation_id=operation_id,
                    bound=existing.get("request_digest"),
                    offered=request_digest,
                )
        return Operation(path)

    def entry(self, operation_id: str) -> Operation:
        """The directory of `operation_id`, bound or not (created): for the facts a provider
        records before any binding, such as the fence tombstones a reconciler writes for an id
        no attempt bound yet. An unbound entry is not listed and `get` returns None for it."""
        path = self._path(operation_id)
        path.mkdir(parents=True, exist_ok=True)
        return Operation(path)

    def get(self, operation_id: str) -> Operation | None:
        """The bound operation, or None (an unsafe id is refused before any path is named)."""
        path = self._path(operation_id)
        if not (path / "bound.json").exists():
            return None
        op = Operation(path)
        if op.id != operation_id:  # pragma: no cover - sha256 clash
            raise JournalError("journal_corrupt", f"{path} belongs to another operation id")
        return op

    def operations(self) -> Iterator[Operation]:
        if not self._ops.is_dir():
            return
        for p in sorted(self._ops.iterdir()):
            if (p / "bound.json").exists():
                yield Operation(p)

    def query(
        self,
        *,
        state: str | None = None,
        device: str | None = None,
        older_than_ms: int | None = None,
        now_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        """Summaries of the operations in `state`, of `device`, whose newest fact is older than
        `older_than_ms`, oldest bound first."""
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of {STATES}, got {state!r}")
        now = wall_ms() if now_ms is None else now_ms
        out = []
        for op in self.operations():
            s = op.summary(now)
            if state is not None and s["state"] != state:
                continue
            if device is not None and s["device"] != device:
                continue
            if older_than_ms is not None and s["age_ms"] < older_than_ms:
                continue
            out.append(s)
        return sorted(out, key=lambda s: (s["bound_at_ms"] or 0, s["operation_id"]))

    def prune(self, *, retention_ms: int | None = None, now_ms: int | None = None) -> list[str]:
        """Remove the payloads of published operations older than the retention (the argument,
        else the journal's; None keeps everything). Each keeps `bound.json`, its result pointer
        and a `pruned.json`, so its id can never start again. Returns the pruned ids."""
        keep_ms = self.retention_ms if retention_ms is None else retention_ms
        if keep_ms is None:
            return []
        pruned = []
        for s in self.query(state="published", older_than_ms=keep_ms, now_ms=now_ms):
            op = self.get(s["operation_id"])
            assert op is not None
            result = op.result()
            # The marker goes first: a crash mid-prune leaves a pruned operation with some
            # payload left, never a removed payload under an operation that could start again.
            write_durable(
                op.path / "pruned.json",
                canonical_json({"pruned_at_ms": wall_ms(), "attempts": op.attempts()}),
            )
            for p in op.path.iterdir():
                if p.name not in ("bound.json", "result.json", "pruned.json"):
                    if p.is_dir():
                        shutil.rmtree(p)
                    else:
                        p.unlink()
            fsync_dir(op.path)
            assert result is not None
            pruned.append(s["operation_id"])
        return pruned
