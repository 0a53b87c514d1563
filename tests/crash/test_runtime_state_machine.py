"""A rule-based state machine over the whole runtime: workers that die at chosen points,
lease expiry, observation ticks and Host restarts, in any order Hypothesis picks.

Invariants after every step: no execute call ever happens for an operation whose effect
already exists (no blind replay), every settlement names the tick that committed its
evidence for the recorded result, and at the end everything settles with one effect each.

It runs on both backends: SQLite files in a fresh directory per example, and one PostgreSQL
schema per test (catalog and world ledger) emptied between examples, with fewer examples
there by default (`TETHER_SLOW=1`: the full count on both).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hosttools import Clock
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from journal_provider import KIND, DedupAdapter, Journal, intents, projection_for, stage_task
from tether.activities import ActivityKey, operation_id_for
from tether.runtime import AttemptContext, Family, Host, evidence_entity

from tests.backends import empty_stores

LEASE_MS = 10_000


class WorkerDied(BaseException):
    """Simulated process death inside an adapter (not an Exception: nothing catches it)."""


class Dying(DedupAdapter):
    """The journal adapter, which can die before or after its effect on request."""

    def __init__(self, journal: Journal) -> None:
        super().__init__(journal)
        self.die: str | None = None
        self.replays: list[str] = []

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        if self.journal.lookup(ctx.operation_id) is not None:
            self.replays.append(ctx.operation_id)  # a blind replay: the invariant fails
        if self.die == "before_effect":
            raise WorkerDied
        result = super().execute(ctx, request)
        if self.die == "after_effect":
            raise WorkerDied
        return result


class RuntimeMachine(RuleBasedStateMachine):
    #: The PostgreSQL schema of both stores (None: SQLite files in the example's directory).
    pg_url: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tether-sm-"))
        if self.pg_url is not None:
            empty_stores(self.pg_url)
        self.clock = Clock()
        self.adapter = Dying(Journal(self.dir / "provider.db"))
        self.family = Family("sm", (KIND,), projection_for((KIND,)), self.adapter, stage_task)
        self.host = self._open()
        self.host.create_world("w")
        self.n = 0

    def _open(self) -> Host:
        stores = (
            {} if self.pg_url is None else {"catalog_url": self.pg_url, "world_url": self.pg_url}
        )
        return Host(
            self.dir,
            [self.family],
            workers=0,
            observe=False,
            clock=self.clock,
            lease_ms=LEASE_MS,
            **stores,
        )

    def keys(self) -> list[ActivityKey]:
        return [ActivityKey("w", KIND, f"task-{i:04d}") for i in range(self.n)]

    @precondition(lambda self: self.n < 6)
    @rule(k=st.integers(1, 3))
    def add_intents(self, k: int) -> None:
        writes = intents(self.n + k)[self.n :]
        self.host.commit_tick("w", writes)
        self.n += k

    @rule(die=st.sampled_from([None, None, "before_effect", "after_effect"]))
    def work(self, die: str | None) -> None:
        self.adapter.die = die
        worker = self.host.new_worker()
        try:
            worker.run_once()
        except WorkerDied:
            pass  # the attempt stays leased and bound, exactly as after a SIGKILL
        finally:
            self.adapter.die = None
            worker.close()

    @rule()
    def expire_leases(self) -> None:
        self.clock.now += LEASE_MS + 1

    @rule()
    def observe(self) -> None:
        self.host.observe_once()

    @rule()
    def restart(self) -> None:
        self.host.close()
        self.host = self._open()
        self.host.recover()

    @invariant()
    def no_blind_replay_and_exact_settlements(self) -> None:
        assert self.adapter.replays == []
        for key in self.keys():
            rec = self.host.get(key)
            assert rec is not None
            if rec.settlement is None:
                continue
            assert rec.result is not None
            receipt = rec.settlement.receipt
            snap = self.host.ledger.read_at(receipt)
            entity = evidence_entity(key.kind, key.activity_id)
            assert (entity, "tether.completion") in snap.changes
            assert snap.get(entity, "tether.completion")["result_digest"] == rec.result.digest

    def teardown(self) -> None:
        try:
            for _ in range(4 * self.n + 4):  # drain: everything must settle, one effect each
                self.clock.now += LEASE_MS + 1
                worker = self.host.new_worker()
                while worker.run_once():
                    pass
                worker.close()
                self.host.observe_once()
            for key in self.keys():
                rec = self.host.get(key)
                assert rec is not None and rec.settlement is not None, key
            effects = Journal(self.dir / "provider.db").effects()
            assert effects == {operation_id_for(k): 1 for k in self.keys()}
            assert self.adapter.replays == []
        finally:
            self.host.close()
            shutil.rmtree(self.dir, ignore_errors=True)


slow = bool(os.environ.get("TETHER_SLOW"))
#: Examples per backend in the default run (TETHER_SLOW=1: 200 on each).
EXAMPLES = {"sqlite": 12, "postgres": 2}


def test_runtime_state_machine(backend: str, request: pytest.FixtureRequest) -> None:
    machine = RuntimeMachine
    if backend == "postgres":

        class PgRuntimeMachine(RuntimeMachine):
            pg_url = str(request.getfixturevalue("pg_url"))

        machine = PgRuntimeMachine
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=200 if slow else EXAMPLES[backend],
            stateful_step_count=30 if slow else 12,
            deadline=None,
        ),
    )
