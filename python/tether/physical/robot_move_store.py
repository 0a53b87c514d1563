"""Robot-move facts in the provider operations journal (`tether.operations`).

A robot move is one journal operation (bound request, start markers, preimages, the sent log,
the result pointer with the result inline, retry-guard proofs); this module only names the
robot-move records in it:

    proof-guard-<n>     the retry guard that lets attempt n start (ConfirmedAbsent's proof, or
                        the adapter's re-issue proof an operator's decision authorised)
    proof-fence-floor   the fence below which the device owner refuses this move's commands

Standalone `tether move` runs still keep their Unknown evidence and operator decisions in two
files beside the journal records (`evidence-<r>.json`, `decision-<r>.json`): the runtime path
keeps both in the Activity catalog instead.

Rules: a parked move (latest evidence without a decision) never executes; attempt n > 1 starts
only with its guard proof present; a published result is terminal.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.operations import Journal, JournalError
from tether.operations import Operation as JournalOperation
from tether.operations._durable import create_exclusive
from tether.physical.robot_move import (
    Conclusion,
    ConfirmedAbsent,
    MoveRequest,
    Recovered,
    canonical_json,
    digest,
)

_EVIDENCE = re.compile(r"^evidence-(\d+)\.json$")


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

    def evidence_revisions(self) -> list[int]:
        return sorted(
            int(m.group(1)) for p in self.path.iterdir() if (m := _EVIDENCE.match(p.name))
        )

    def next_attempt(self) -> int:
        """The number the next attempt would carry (1 when none started)."""
        return self.entry.next_attempt()

    def start_attempt(self, number: int, info: dict[str, Any]) -> None:
        if number > 1 and self.guard(number) is None:
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

    def record_evidence(self, evidence: dict[str, Any]) -> int:
        revisions = self.evidence_revisions()
        for revision in range((revisions[-1] if revisions else 0) + 1, 10_000):
            doc = {**evidence, "revision": revision, "recorded_at_ms": now_ms()}
            if write_new(self.path / f"evidence-{revision}.json", doc):
                return revision
        raise StoreConflict("too many evidence revisions")

    def evidence(self, revision: int | None = None) -> dict[str, Any] | None:
        revisions = self.evidence_revisions()
        if not revisions:
            return None
        rev = revisions[-1] if revision is None else revision
        p = self.path / f"evidence-{rev}.json"
        return dict(read_json(p)) if p.exists() else None

    def decision(self, revision: int) -> dict[str, Any] | None:
        p = self.path / f"decision-{revision}.json"
        return dict(read_json(p)) if p.exists() else None

    def record_decision(self, revision: int, decision: dict[str, Any]) -> None:
        if not write_new(self.path / f"decision-{revision}.json", decision):
            raise StoreConflict(f"evidence revision {revision} was already decided")

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

    def record_conclusion(self, conclusion: Conclusion) -> tuple[str, dict[str, Any]]:
        """Make a reconcile conclusion durable; the one place both the `tether move` worker and
        the runtime family turn a conclusion into records. Returns (kind, durable document):
        `recovered` -> the result; `confirmed_absent` -> the guard that lets the next attempt
        start (a reconcile repeated after a crash finds the guard already there and reuses it);
        `unknown` -> a new evidence revision, which parks the operation for an operator."""
        if isinstance(conclusion, Recovered):
            return "recovered", self.record_result(conclusion.result)
        if isinstance(conclusion, ConfirmedAbsent):
            return "confirmed_absent", self.record_absent(conclusion)
        revision = self.record_evidence(conclusion.evidence)
        return "unknown", self.evidence(revision) or {**conclusion.evidence, "revision": revision}

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
    def parked(self) -> bool:
        """Latest evidence is waiting for a decision (never executes by itself)."""
        revisions = self.evidence_revisions()
        return bool(revisions) and self.decision(revisions[-1]) is None and not self.terminal

    @property
    def terminal(self) -> bool:
        return self.entry.result() is not None

    def status(self) -> str:
        if self.result() is not None:
            return "done"
        if self.failed() is not None:
            return "failed"
        if self.parked:
            return "awaiting_decision"
        return "pending" if not self.attempts() else "in_flight"


class MoveStore:
    """All robot-move operations in one operations journal (`root`)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.journal = Journal(self.root)
        self._checked = False

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
