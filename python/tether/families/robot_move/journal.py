"""Robot-move facts in the provider operations journal (`tether.operations`).

A robot move is one journal operation (bound request, start markers, preimages, the sent log,
the result pointer with the result inline, retry-guard proofs); this module only names the
robot-move records in it:

    proof-guard-<n>     the retry guard that lets attempt n start (ConfirmedAbsent's proof)
    proof-reissue-<n>   the adapter's proof behind an operator's re-issue of attempt n
    proof-fence-floor   the fence below which the device owner refuses this move's commands

Unknown evidence, its revisions and the operator's decisions are not here: the Activity catalog
holds them (the evidence document in the artifact store, by ref and digest).

Beside the journal, `clock-floor.json` holds the store's clock floor: a wall-clock time the
family has already decided by (`MoveStore.clock_floor_ms`). It only grows, and it is durable
before any move is decided expired by it, so a move once expired stays expired for every later
or stale attempt, even after the host's clock steps back.

Rules: attempt n > 1 starts only with its guard or re-issue proof present (and only when the
catalog let the attempt execute); a published result is terminal.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.families.robot_move.request import (
    ConfirmedAbsent,
    MoveRequest,
    canonical_json,
    digest,
)
from tether.operations import Journal, JournalError
from tether.operations import Operation as JournalOperation
from tether.operations._durable import create_exclusive, write_durable


class StoreConflict(Exception):
    """A record that contradicts what is already durable (different request, used decision)."""


def write_new(path: Path, doc: Any) -> bool:
    """Create `path` with `doc` only if absent (atomic, durable). True if this call created it."""
    return create_exclusive(path, canonical_json(doc))


def read_json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Operation:
    """One robot move's records in the journal."""

    entry: JournalOperation

    @property
    def path(self) -> Path:
        return self.entry.path

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def request(self) -> MoveRequest:
        return MoveRequest.from_dict(self.entry.request)

    def attempts(self) -> list[int]:
        return self.entry.attempts()

    def next_attempt(self) -> int:
        """The number the next attempt would carry (1 when none started)."""
        return self.entry.next_attempt()

    def start_attempt(self, number: int, info: dict[str, Any]) -> None:
        if number > 1 and self.guard(number) is None and self.reissue_proof(number) is None:
            raise StoreConflict(f"attempt {number} has no retry guard")
        try:
            self.entry.start(number, info)
        except JournalError as exc:
            raise StoreConflict(str(exc)) from exc

    def record_preimage(self, number: int, state: dict[str, Any]) -> None:
        self.entry.record_preimage(number, state)

    def preimage(self, number: int) -> dict[str, Any] | None:
        return self.entry.preimage(number)

    def log_sent(self, record: dict[str, Any]) -> None:
        """Append one effectful frame's evidence, durable before the frame is written."""
        self.entry.log_sent(record)

    def sent(self) -> list[dict[str, Any]]:
        return self.entry.sent()

    def record_guard(self, number: int, guard: dict[str, Any]) -> dict[str, Any]:
        doc = {**guard, "for_attempt": number, "recorded_at_ms": now_ms()}
        if self.guard(number) is not None:
            raise StoreConflict(f"a guard for attempt {number} already exists")
        try:
            self.entry.record_proof(f"guard-{number}", doc)
        except JournalError as exc:
            raise StoreConflict(str(exc)) from exc
        return self.guard(number) or doc

    def guard(self, number: int) -> dict[str, Any] | None:
        proof = self.entry.proof(f"guard-{number}")
        if proof is None:
            return None
        return {k: v for k, v in proof.items() if k not in ("proof", "digest")}

    def reissue_proof(self, number: int) -> dict[str, Any] | None:
        """The adapter's proof behind an operator's re-issue of attempt `number` (inert until a
        catalog decision references it: only the catalog lets an attempt execute)."""
        proof = self.entry.proof(f"reissue-{number}")
        if proof is None:
            return None
        return {k: v for k, v in proof.items() if k not in ("proof", "digest")}

    def record_reissue_proof(self, number: int, proof: dict[str, Any]) -> dict[str, Any]:
        try:
            self.entry.record_proof(f"reissue-{number}", {**proof, "recorded_at_ms": now_ms()})
        except JournalError:
            pass  # a proof taken before a crash stands
        return self.reissue_proof(number) or proof

    def fence_floor(self) -> int:
        """The fence below which this move's commands are refused (0: none set)."""
        proof = self.entry.proof("fence-floor")
        return int(proof["fence"]) if proof is not None else 0

    def raise_fence_floor(self, fence: int) -> int:
        """Refuse this move's commands from any attempt under `fence` (create-if-absent: the
        first floor stands). Returns the floor in force."""
        try:
            self.entry.record_proof("fence-floor", {"fence": fence})
        except JournalError:
            pass
        return self.fence_floor()

    def record_result(self, result: dict[str, Any]) -> dict[str, Any]:
        """Terminal success (the result inline in the journal's result pointer); idempotent
        for the same document, a different one is a conflict."""
        doc = {**result, "digest": digest(result)}
        existing = self.result()
        if existing is not None and existing.get("failed"):
            raise StoreConflict("the move already failed")
        try:
            self.entry.publish({"digest": doc["digest"], "inline": doc})
        except JournalError as exc:
            raise StoreConflict("a different result is already recorded") from exc
        return self.result() or doc

    def record_absent(self, conclusion: ConfirmedAbsent) -> dict[str, Any]:
        """The guard proof of the next attempt (a repeat after a crash reuses it)."""
        number = self.next_attempt()
        existing = self.guard(number)
        if existing is not None:
            return existing
        return self.record_guard(number, conclusion.guard)

    def record_failed(self, failure: dict[str, Any]) -> None:
        doc = {**failure, "digest": digest(failure), "failed": True}
        try:
            self.entry.publish({"digest": doc["digest"], "inline": doc, "failed": True})
        except JournalError:
            pass  # a result is already published: it stands

    def _published(self) -> dict[str, Any] | None:
        pointer = self.entry.result()
        if pointer is None:
            return None
        return dict(pointer.get("inline") or {}) | {"failed": bool(pointer.get("failed"))}

    def result(self) -> dict[str, Any] | None:
        doc = self._published()
        if doc is None or doc.pop("failed"):
            return None
        return doc

    def failed(self) -> dict[str, Any] | None:
        doc = self._published()
        if doc is None or not doc.pop("failed"):
            return None
        return doc

    @property
    def terminal(self) -> bool:
        return self.entry.result() is not None

    def status(self) -> str:
        if self.result() is not None:
            return "done"
        if self.failed() is not None:
            return "failed"
        return "pending" if not self.attempts() else "in_flight"


#: The clock floor's file under a `MoveStore` root, and the lock file its raises take.
CLOCK_FLOOR = "clock-floor.json"
CLOCK_FLOOR_LOCK = "clock-floor.lock"


class MoveStore:
    """All robot-move operations in one operations journal (`root`), and its clock floor.
    Shareable across threads and processes."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.journal = Journal(self.root)
        self._checked = False
        self._floor_lock = threading.Lock()
        self._floor_ms: int | None = None  # the durable floor as last read or written here

    def _read_floor(self) -> int:
        try:
            doc = read_json(self.root / CLOCK_FLOOR)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            raise JournalError(
                "journal_corrupt",
                f"{self.root / CLOCK_FLOOR} is unreadable: {exc}",
                path=str(self.root / CLOCK_FLOOR),
            ) from exc
        at = doc.get("at_ms") if isinstance(doc, dict) else None
        if not isinstance(at, int) or isinstance(at, bool):
            raise JournalError(
                "journal_corrupt",
                f"{self.root / CLOCK_FLOOR} holds no time",
                path=str(self.root / CLOCK_FLOOR),
            )
        return at

    def clock_floor_ms(self, *, fresh: bool = False) -> int:
        """The durable clock floor (0: none recorded): read from disk once and kept (this
        store's raises keep it current), or read again with `fresh` (another process may
        have raised it). The kept value is read without the lock: a raise in progress (its
        syncs) never holds up a reader, which sees the floor before or after it."""
        known = self._floor_ms
        if known is not None and not fresh:
            return known
        with self._floor_lock:
            if self._floor_ms is None or fresh:
                self._floor_ms = max(self._floor_ms or 0, self._read_floor())
            return self._floor_ms

    def passed(self, at_ms: int) -> bool:
        """Whether the store's time (the host's wall clock, never below the clock floor) has
        reached `at_ms`. Before answering no, the floor is read from disk again: a time
        another process decided by counts too."""
        if max(now_ms(), self.clock_floor_ms()) >= at_ms:
            return True
        return max(now_ms(), self.clock_floor_ms(fresh=True)) >= at_ms

    def raise_clock_floor(self, at_ms: int) -> int:
        """Make the clock floor at least `at_ms`, durably, before returning: call it before a
        decision that `at_ms` has passed is recorded anywhere. Nothing is written when the
        floor is there already; when it must grow it grows to the wall clock if that is later
        (one file write and its syncs then cover every time up to now). Under a file lock, so
        concurrent raises from several processes only ever grow it. Returns the floor."""
        with self._floor_lock:
            if self._floor_ms is not None and self._floor_ms >= at_ms:
                return self._floor_ms
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / CLOCK_FLOOR_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                floor = self._read_floor()
                if floor < at_ms:
                    floor = max(at_ms, now_ms())
                    write_durable(self.root / CLOCK_FLOOR, canonical_json({"at_ms": floor}))
            finally:
                os.close(fd)  # releases the lock
            self._floor_ms = floor
            return floor

    def _check_layout(self) -> None:
        """Refuse a store of the layout before the journal (one directory per id with an
        `operation.json`), naming what to do: nothing in it is read or changed."""
        if self._checked:
            return
        if self.root.is_dir():
            old = sorted(p.name for p in self.root.iterdir() if (p / "operation.json").is_file())
            if old:
                raise JournalError(
                    "old_layout",
                    f"{self.root} is a robot-move store of the layout before the operations "
                    f"journal ({len(old)} moves, e.g. {old[0]}): finish or abandon its moves with "
                    "the release that wrote it, then move the directory aside",
                    path=str(self.root),
                    moves=old,
                )
        self._checked = True

    def bind(self, op_id: str, request: MoveRequest) -> Operation:
        """Bind the operation id to its request, durably, before any byte goes out."""
        self._check_layout()
        try:
            entry = self.journal.bind(op_id, request.as_dict(), device=request.robot)
        except JournalError as exc:
            if exc.code == "request_conflict":
                raise StoreConflict(f"operation {op_id} is bound to a different request") from exc
            raise
        return Operation(entry)

    def get(self, op_id: str) -> Operation | None:
        self._check_layout()
        entry = self.journal.get(op_id)
        return None if entry is None else Operation(entry)

    def all(self) -> list[Operation]:
        self._check_layout()
        return [Operation(e) for e in self.journal.operations()]
