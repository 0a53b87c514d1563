"""The provider the multi-host tests drive: a durable effect journal shared by every host.

Every call (`execute`, `reconcile`) is logged with the calling host (``TETHER_MH_HOST``) and
fence before it acts: those are the start markers. The effect is applied once per provider
operation id (create-if-absent in one SQLite transaction), which is the retry guard's proof:
the effect log holds one row per operation that happened, so a duplicate effect would show
there. A request may ask its first attempt to hold (``hold_s``) between its start marker and
its effect, so a test can kill, cut or pause a host mid-attempt.

A request naming a ``host`` is device work bound to that host (`ActivityRequest.host`);
without one it is simulation work any host may run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.activities import ResultRef, RetryGuard
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    ConfirmedAbsent,
    Family,
    Observation,
    ReconcileOutcome,
    Recovered,
    StagedResult,
)
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

KIND = "mh.effect"
HOST_ENV = "TETHER_MH_HOST"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    op_id  TEXT PRIMARY KEY,
    host   TEXT NOT NULL,
    fence  INTEGER NOT NULL,
    result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    op_id  TEXT NOT NULL,
    method TEXT NOT NULL,
    fence  INTEGER NOT NULL,
    host   TEXT NOT NULL
);
"""


class Journal:
    """The provider's journal (`provider.db` in the shared data directory)."""

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

    def log_call(self, op_id: str, method: str, fence: int, host: str) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO calls (op_id, method, fence, host) VALUES (?, ?, ?, ?)",
                (op_id, method, fence, host),
            )

    def perform(self, op_id: str, fence: int, host: str, n: int) -> dict[str, Any]:
        """Apply the effect once per operation id; return the effect's result."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT result FROM effects WHERE op_id = ?", (op_id,)).fetchone()
            if row is not None:
                db.execute("ROLLBACK")
                return dict(json.loads(row[0]))
            result = {"op": op_id, "value": n * 2, "by": host, "fence": fence}
            db.execute(
                "INSERT INTO effects (op_id, host, fence, result) VALUES (?, ?, ?, ?)",
                (op_id, host, fence, json.dumps(result, sort_keys=True)),
            )
            db.execute("COMMIT")
        return result

    def lookup(self, op_id: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT result FROM effects WHERE op_id = ?", (op_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def effects(self) -> dict[str, int]:
        """Effect rows per operation id (the primary key makes a second one impossible; the
        count is what the assertions read)."""
        with self._db() as db:
            rows = db.execute("SELECT op_id, COUNT(*) FROM effects GROUP BY op_id").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def effect_host(self, op_id: str) -> str | None:
        with self._db() as db:
            row = db.execute("SELECT host FROM effects WHERE op_id = ?", (op_id,)).fetchone()
        return None if row is None else str(row[0])

    def calls(self, op_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(op_id, method, fence, host) in call order."""
        with self._db() as db:
            rows = db.execute(
                "SELECT op_id, method, fence, host FROM calls ORDER BY seq"
            ).fetchall()
        return [(r[0], r[1], int(r[2]), r[3]) for r in rows if op_id is None or r[0] == op_id]


def _here() -> str:
    return os.environ.get(HOST_ENV, "test-process")


class JournalAdapter:
    """Executes through the journal; reconciles by reading it back (dedupe is the guard)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        self.journal.log_call(ctx.operation_id, "execute", ctx.fence, _here())
        hold = float(request.get("hold_s", 0))
        if hold and ctx.attempt == 1:
            time.sleep(hold)  # the window a test kills, cuts or pauses the host in
        result = self.journal.perform(ctx.operation_id, ctx.fence, _here(), int(request["n"]))
        return ctx.artifacts.put_bytes(canonical_json(result), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        self.journal.log_call(ctx.operation_id, "reconcile", ctx.fence, _here())
        found = self.journal.lookup(ctx.operation_id)
        if found is not None:
            return Recovered(ctx.artifacts.put_bytes(canonical_json(found), "application/json"))
        guard = canonical_json({"dedupe": "effects.op_id primary key", "op": ctx.operation_id})
        return ConfirmedAbsent(
            RetryGuard(
                ref=f"journal:create-if-absent/{ctx.operation_id}",
                digest="sha256:" + hashlib.sha256(guard).hexdigest(),
            )
        )


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    """One Activity per `task.intent` this tick wrote, bound to the intent's host if any."""
    out = []
    for entity, value in snapshot.changed("task.intent"):
        if isinstance(value, dict):
            out.append(ActivityRequest(KIND, entity, value, host=str(value.get("host", ""))))
    return out


def stage(staged: StagedResult) -> list[ComponentWrite]:
    body = staged.json()
    fact = {"value": body["value"], "op": body["op"], "by": body["by"]}
    return [ComponentWrite(staged.key.activity_id, "task.observed", fact)]


def mark_done(snapshot: WorldSnapshot, observations: list[Observation]) -> list[ComponentWrite]:
    return [ComponentWrite(o.key.activity_id, "task.status", "done") for o in observations]


def make_family(data_dir: str | Path) -> Family:
    return Family(
        name="multihost",
        kinds=(KIND,),
        project=project,
        adapter=JournalAdapter(Journal(Path(data_dir) / "provider.db")),
        stage=stage,
        processors=(mark_done,),
    )


def families(data_dir: Path) -> list[Family]:
    """The `tether worker --families mh_provider:families` factory."""
    return [make_family(data_dir)]


def intent(name: str, n: int, *, host: str = "", hold_s: float = 0.0) -> ComponentWrite:
    value: dict[str, Any] = {"n": n}
    if host:
        value["host"] = host
    if hold_s:
        value["hold_s"] = hold_s
    return ComponentWrite(name, "task.intent", value)
