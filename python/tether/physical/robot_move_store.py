"""Durable per-operation records of robot moves (files, fsynced) and the operator's decisions.

One directory per provider operation id:

    operation.json      bound before the first byte: op id, kind, request and its digest
                        (create-if-absent; a different request under the same id is refused)
    attempt-<n>.json    start marker of attempt n (create-if-absent: one starter per attempt)
    preimage-<n>.json   the device state read before attempt n staged anything
    sent.jsonl          every effectful frame, appended and fsynced before it is written
    guard-<n>.json      the retry guard that lets attempt n start (ConfirmedAbsent or re-issue)
    evidence-<r>.json   Unknown evidence, revision r (the move is parked)
    decision-<r>.json   the operator's decision on revision r (create-if-absent: single use)
    result.json         the final result (completed, or done by an operator's verdict)
    failed.json         the final failed result (abandoned by an operator)

Rules: a parked move (latest evidence without a decision) never executes; attempt n > 1 starts
only with guard-n present; result/failed are terminal.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.operations._durable import create_exclusive
from tether.physical.robot_move import (
    Conclusion,
    ConfirmedAbsent,
    MoveRequest,
    Recovered,
    canonical_json,
    digest,
)

_ATTEMPT = re.compile(r"^attempt-(\d+)\.json$")
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
    """One operation directory."""

    path: Path

    @property
    def id(self) -> str:
        return str(read_json(self.path / "operation.json")["operation_id"])

    @property
    def request(self) -> MoveRequest:
        return MoveRequest.from_dict(read_json(self.path / "operation.json")["request"])

    def attempts(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.path.iterdir() if (m := _ATTEMPT.match(p.name)))

    def evidence_revisions(self) -> list[int]:
        return sorted(
            int(m.group(1)) for p in self.path.iterdir() if (m := _EVIDENCE.match(p.name))
        )

    def next_attempt(self) -> int:
        """The number the next attempt would carry (1 when none started)."""
        attempts = self.attempts()
        return (attempts[-1] if attempts else 0) + 1

    def start_attempt(self, number: int, info: dict[str, Any]) -> None:
        if number > 1 and not (self.path / f"guard-{number}.json").exists():
            raise StoreConflict(f"attempt {number} has no retry guard")
        if not write_new(self.path / f"attempt-{number}.json", {"attempt": number, **info}):
            raise StoreConflict(f"attempt {number} was already started")

    def record_preimage(self, number: int, state: dict[str, Any]) -> None:
        write_new(self.path / f"preimage-{number}.json", state)

    def preimage(self, number: int) -> dict[str, Any] | None:
        p = self.path / f"preimage-{number}.json"
        return dict(read_json(p)) if p.exists() else None

    def log_sent(self, record: dict[str, Any]) -> None:
        """Append one effectful frame's evidence, durable before the frame is written."""
        fd = os.open(self.path / "sent.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, canonical_json(record) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def sent(self) -> list[dict[str, Any]]:
        p = self.path / "sent.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                break  # a torn last line after a crash
        return out

    def record_guard(self, number: int, guard: dict[str, Any]) -> dict[str, Any]:
        doc = {**guard, "for_attempt": number, "recorded_at_ms": now_ms()}
        if not write_new(self.path / f"guard-{number}.json", doc):
            raise StoreConflict(f"a guard for attempt {number} already exists")
        return doc

    def guard(self, number: int) -> dict[str, Any] | None:
        p = self.path / f"guard-{number}.json"
        return dict(read_json(p)) if p.exists() else None

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
        """Terminal success; idempotent for the same document."""
        doc = {**result, "digest": digest(result)}
        if not write_new(self.path / "result.json", doc):
            existing = dict(read_json(self.path / "result.json"))
            if existing.get("digest") != doc["digest"]:
                raise StoreConflict("a different result is already recorded")
            return existing
        return doc

    def record_conclusion(self, conclusion: Conclusion) -> tuple[str, dict[str, Any]]:
        """Make a reconcile conclusion durable; the one place both the `tether move` worker and
        the runtime family turn a conclusion into records. Returns (kind, durable document):
        `recovered` -> the result; `confirmed_absent` -> the guard that lets the next attempt
        start (a reconcile repeated after a crash finds the guard already there and reuses it);
        `unknown` -> a new evidence revision, which parks the operation for an operator."""
        if isinstance(conclusion, Recovered):
            return "recovered", self.record_result(conclusion.result)
        if isinstance(conclusion, ConfirmedAbsent):
            number = self.next_attempt()
            try:
                return "confirmed_absent", self.record_guard(number, conclusion.guard)
            except StoreConflict:
                existing = self.guard(number)
                if existing is None:  # pragma: no cover - write_new said it exists
                    raise
                return "confirmed_absent", existing
        revision = self.record_evidence(conclusion.evidence)
        return "unknown", self.evidence(revision) or {**conclusion.evidence, "revision": revision}

    def record_failed(self, failure: dict[str, Any]) -> None:
        write_new(self.path / "failed.json", {**failure, "digest": digest(failure)})

    def result(self) -> dict[str, Any] | None:
        p = self.path / "result.json"
        return dict(read_json(p)) if p.exists() else None

    def failed(self) -> dict[str, Any] | None:
        p = self.path / "failed.json"
        return dict(read_json(p)) if p.exists() else None

    @property
    def parked(self) -> bool:
        """Latest evidence is waiting for a decision (never executes by itself)."""
        revisions = self.evidence_revisions()
        return bool(revisions) and self.decision(revisions[-1]) is None and not self.terminal

    @property
    def terminal(self) -> bool:
        return (self.path / "result.json").exists() or (self.path / "failed.json").exists()

    def status(self) -> str:
        if self.result() is not None:
            return "done"
        if self.failed() is not None:
            return "failed"
        if self.parked:
            return "awaiting_decision"
        return "pending" if not self.attempts() else "in_flight"


class MoveStore:
    """All robot-move operations under one root directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _dir(self, op_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", op_id):
            raise StoreConflict(f"operation id {op_id!r} is not a safe name")
        return self.root / op_id.replace(":", "_")

    def bind(self, op_id: str, request: MoveRequest) -> Operation:
        """Bind the operation id to its request, durably, before any byte goes out."""
        path = self._dir(op_id)
        path.mkdir(parents=True, exist_ok=True)
        doc = {
            "operation_id": op_id,
            "request": request.as_dict(),
            "request_digest": request.digest,
            "retry_class": request.retry_class.value,
            "bound_at_ms": now_ms(),
        }
        if not write_new(path / "operation.json", doc):
            existing = read_json(path / "operation.json")
            if existing.get("request_digest") != request.digest:
                raise StoreConflict(f"operation {op_id} is bound to a different request")
        return Operation(path)

    def get(self, op_id: str) -> Operation | None:
        path = self._dir(op_id)
        return Operation(path) if (path / "operation.json").exists() else None

    def all(self) -> list[Operation]:
        if not self.root.exists():
            return []
        return [
            Operation(p) for p in sorted(self.root.iterdir()) if (p / "operation.json").exists()
        ]
