"""Test providers with a durable SQLite effect journal keyed by provider operation id.

`JournalProvider` deduplicates atomically by operation id (create-if-absent), which is the
retry guard seed section 2 asks for; `BlindProvider` can neither deduplicate nor read back, so
its adapter can only conclude Unknown. Both log every call in their own transaction, so a
test can count executions, effects and reconciliations after a SIGKILL.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.activities import Evidence, ResultRef, RetryGuard
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    ConfirmedAbsent,
    Family,
    Observation,
    ReconcileOutcome,
    Recovered,
    StagedResult,
    Unknown,
    crash_point,
)
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

KIND = "crash.effect"
BLIND_KIND = "crash.blind"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    op_id   TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    result  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blind_effects (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id   TEXT NOT NULL,
    request TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id  TEXT NOT NULL,
    method TEXT NOT NULL,
    fence  INTEGER NOT NULL
);
"""


class Journal:
    """The provider's durable journal (`provider.db`). One connection per call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with self._db() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            yield db
        finally:
            db.close()

    def log_call(self, op_id: str, method: str, fence: int) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO calls (op_id, method, fence) VALUES (?, ?, ?)", (op_id, method, fence)
            )

    def perform(self, op_id: str, request: dict[str, Any]) -> dict[str, Any]:
        """Apply the effect once per operation id (atomic create-if-absent); return its result."""
        result = {"op": op_id, "value": int(request.get("n", 0)) * 2, "pad": request.get("pad", 0)}
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT result FROM effects WHERE op_id = ?", (op_id,)).fetchone()
            if row is not None:
                db.execute("ROLLBACK")
                return dict(json.loads(row[0]))
            db.execute(
                "INSERT INTO effects (op_id, request, result) VALUES (?, ?, ?)",
                (op_id, json.dumps(request, sort_keys=True), json.dumps(result, sort_keys=True)),
            )
            crash_point("during_effect")  # killed here, the transaction (the effect) rolls back
            db.execute("COMMIT")
        return result

    def lookup(self, op_id: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT result FROM effects WHERE op_id = ?", (op_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def perform_blind(self, op_id: str, request: dict[str, Any]) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO blind_effects (op_id, request) VALUES (?, ?)",
                (op_id, json.dumps(request, sort_keys=True)),
            )

    def effects(self) -> dict[str, int]:
        """Effects per operation id (deduplicated and blind journals together)."""
        with self._db() as db:
            rows = db.execute(
                "SELECT op_id, COUNT(*) FROM (SELECT op_id FROM effects"
                " UNION ALL SELECT op_id FROM blind_effects) GROUP BY op_id"
            ).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def calls(self, method: str | None = None) -> list[tuple[str, str, int]]:
        with self._db() as db:
            rows = db.execute("SELECT op_id, method, fence FROM calls ORDER BY seq").fetchall()
        return [(r[0], r[1], int(r[2])) for r in rows if method is None or r[1] == method]


def _payload(result: dict[str, Any]) -> bytes:
    body = dict(result)
    body["blob"] = "x" * int(body.get("pad", 0))  # pad > inline bound forces an artifact file
    return canonical_json(body)


class DedupAdapter:
    """Adapter over `Journal.perform`: its guard is the journal's create-if-absent by op id."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        self.journal.log_call(ctx.operation_id, "execute", ctx.fence)
        ctx.progress({"phase": "executing", "op": ctx.operation_id})
        result = self.journal.perform(ctx.operation_id, request)
        ctx.heartbeat()
        return ctx.artifacts.put_bytes(_payload(result), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        self.journal.log_call(ctx.operation_id, "reconcile", ctx.fence)
        found = self.journal.lookup(ctx.operation_id)
        if found is not None:
            return Recovered(ctx.artifacts.put_bytes(_payload(found), "application/json"))
        guard = canonical_json({"dedupe": "effects.op_id primary key", "op": ctx.operation_id})
        return ConfirmedAbsent(
            RetryGuard(
                ref=f"journal:create-if-absent/{ctx.operation_id}",
                digest="sha256:" + hashlib.sha256(guard).hexdigest(),
            )
        )


class BlindAdapter:
    """Adapter over a provider that can neither deduplicate nor read back: reconcile is Unknown."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        self.journal.log_call(ctx.operation_id, "execute", ctx.fence)
        self.journal.perform_blind(ctx.operation_id, request)
        crash_point("after_blind_effect")
        return ctx.artifacts.put_bytes(canonical_json({"op": ctx.operation_id}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        self.journal.log_call(ctx.operation_id, "reconcile", ctx.fence)
        note = canonical_json({"op": ctx.operation_id, "why": "provider cannot read back"})
        ref = ctx.artifacts.put_bytes(note, "application/json")
        return Unknown(Evidence(ref=ref.ref, digest=ref.digest), retry_after_ms=60_000)


def projection_for(kinds: tuple[str, ...]) -> Callable[[WorldSnapshot], list[ActivityRequest]]:
    """A pure projection: one Activity per `task.intent` of one of `kinds` this tick wrote."""

    def project_tasks(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        out = []
        for entity, value in snapshot.changed("task.intent"):
            if isinstance(value, dict) and value.get("kind") in kinds:
                out.append(ActivityRequest(str(value["kind"]), entity, value))
        return out

    return project_tasks


def stage_task(staged: StagedResult) -> list[ComponentWrite]:
    """The complete fact set of one result: the observed value on the task entity."""
    if staged.result.failed:
        fact = {"failed": True, "media_type": staged.result.media_type, "kind": staged.key.kind}
        return [ComponentWrite(staged.key.activity_id, f"task.observed.{staged.key.kind}", fact)]
    body = staged.json()
    fact = {"value": body.get("value"), "op": body["op"], "kind": staged.key.kind}
    return [ComponentWrite(staged.key.activity_id, f"task.observed.{staged.key.kind}", fact)]


def mark_done(snapshot: WorldSnapshot, observations: list[Observation]) -> list[ComponentWrite]:
    """The family's processor: the only code that moves a task to `done`."""
    return [
        ComponentWrite(o.key.activity_id, f"task.status.{o.key.kind}", "done") for o in observations
    ]


def make_family(
    data_dir: str | Path, *, name: str = "crashtest", kinds: tuple[str, ...] = (KIND,)
) -> Family:
    journal = Journal(Path(data_dir) / "provider.db")
    return Family(
        name=name,
        kinds=kinds,
        project=projection_for(kinds),
        adapter=DedupAdapter(journal),
        stage=stage_task,
        processors=(mark_done,),
    )


def make_blind_family(data_dir: str | Path) -> Family:
    journal = Journal(Path(data_dir) / "provider.db")
    return Family(
        name="blindtest",
        kinds=(BLIND_KIND,),
        project=projection_for((BLIND_KIND,)),
        adapter=BlindAdapter(journal),
        stage=stage_task,
        processors=(mark_done,),
    )


def intents(
    n: int, *, kind: str = KIND, pad: int = 0, prefix: str = "task"
) -> list[ComponentWrite]:
    return [
        ComponentWrite(f"{prefix}-{i:04d}", "task.intent", {"kind": kind, "n": i, "pad": pad})
        for i in range(n)
    ]


def families(data_dir: Path) -> list[Family]:
    """The `tether worker --families journal_provider:families` factory."""
    return [make_family(data_dir)]
