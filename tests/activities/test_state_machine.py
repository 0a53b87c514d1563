"""Random interleavings of several workers, an operator, a jumping clock and reboots against one
catalog, with the catalog invariants checked after every step, on both backends: a fresh
SQLite file per example, and one PostgreSQL schema per test whose tables are emptied between
examples (fewer examples there by default: every step is a few server round trips;
`TETHER_SLOW=1` runs the slow profile's count on SQLite and `PG_SLOW_EXAMPLES` on PostgreSQL,
where the profile's 2,000 would take well over an hour)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from tether.activities import (
    ActivityKey,
    ActivityRecord,
    Catalog,
    Decision,
    Evidence,
    RetryGuard,
    operation_id_for,
    settlement_evidence_digest,
)
from tether.errors import CatalogRejection

from tests.activities.support import ManualClock, admission, receipt, result
from tests.backends import empty_catalog

# Equal activity ids across worlds and kinds: isolation is part of what is checked.
KEYS = (
    ActivityKey("w1", "sim.rollout", "a"),
    ActivityKey("w2", "sim.rollout", "a"),
    ActivityKey("w1", "robot.move", "a"),
)
WORKERS = ("worker-0", "worker-1", "worker-2")
keys = st.sampled_from(KEYS)
workers = st.sampled_from(WORKERS)
leases = st.integers(1, 3_000)


#: Examples on PostgreSQL in the default run, and with TETHER_SLOW=1.
PG_EXAMPLES = 3
PG_SLOW_EXAMPLES = 200
STEPS = 60


class CatalogMachine(RuleBasedStateMachine):
    #: The PostgreSQL schema the machine runs on (None: a fresh SQLite file per example).
    pg_url: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tether-catalog-sm-"))
        self.clock = ManualClock()
        if self.pg_url is None:
            self.catalog = Catalog.open(
                f"sqlite://{self.dir / 'c.db'}", clock=self.clock, synchronous="NORMAL"
            )
        else:
            empty_catalog(self.pg_url)
            self.catalog = Catalog.open(self.pg_url, clock=self.clock)
        # What each worker believes it holds: key and fence of its latest claim.
        self.held: dict[str, tuple[ActivityKey, int]] = {}
        self.max_fence: dict[ActivityKey, int] = {}
        self.results: dict[ActivityKey, object] = {}
        self.settlements: dict[ActivityKey, object] = {}
        # Unused execution permissions from confirmed absences (adapter or operator).
        self.absences: dict[ActivityKey, int] = {}

    def teardown(self) -> None:
        self.catalog.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def admit_all(self) -> None:
        for key in KEYS:
            self.catalog.admit(admission(key))

    def _get(self, key: ActivityKey) -> ActivityRecord | None:
        return self.catalog.get(key)

    def _lease_live(self, rec: ActivityRecord) -> bool:
        """The model's rule: a lease is live on its own boot until its expiry."""
        return (
            rec.attempt is not None
            and rec.lease_boot_id == self.clock.boot_id
            and self.clock.now_ms < rec.attempt.lease_expires_ms
        )

    def _live(self, rec: ActivityRecord | None, fence: int) -> bool:
        return rec is not None and rec.fence == fence and self._lease_live(rec)

    def _by_worker(self, worker: str, op: str, *args: object) -> None:
        """Run a fenced operation as ``worker``; a stale fence must never change the record."""
        if worker not in self.held:
            return
        key, fence = self.held[worker]
        before = self._get(key)
        live = self._live(before, fence)
        try:
            after = getattr(self.catalog, op)(key, fence, *args)
        except CatalogRejection:
            assert self._get(key) == before, f"rejected {op} changed the record"
            return
        if not live:
            assert after == before, f"{op} under a stale fence changed the record"
        event(f"{op} accepted")
        self._observe(key, after)

    def _observe(self, key: ActivityKey, rec: ActivityRecord) -> None:
        if rec.result is not None and key not in self.results:
            self.results[key] = rec.result
        if rec.settlement is not None and key not in self.settlements:
            self.settlements[key] = rec.settlement
        if rec.retry_guard is not None and rec.retry_guard.authorizes_execution:
            self.absences[key] = 1
        self.max_fence[key] = max(self.max_fence.get(key, 0), rec.fence)

    @rule(key=keys)
    def admit(self, key: ActivityKey) -> None:
        self.catalog.admit(admission(key))

    @rule(ms=st.integers(-500, 5_000))
    def clock_jumps(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(boot_ms=st.integers(0, 2_000))
    def reboot(self, boot_ms: int) -> None:
        """A new boot: its lease clock starts again near zero; every older lease is gone."""
        self.clock.boot_id = f"{self.clock.boot_id}+"
        self.clock.now_ms = boot_ms

    @rule(worker=workers, lease=leases, kinds=st.sampled_from([None, ["robot.move"]]))
    def claim(self, worker: str, lease: int, kinds: list[str] | None) -> None:
        befores = {k: self._get(k) for k in KEYS}
        claim = self.catalog.claim(worker, lease, kinds=kinds)
        if claim is None:
            for k, rec in befores.items():
                if kinds is None or k.kind in kinds:
                    assert rec is None or not rec.claimable(self.clock.now())
            return
        before = befores[claim.key]
        assert kinds is None or claim.key.kind in kinds
        assert before is not None and before.claimable(self.clock.now())
        assert claim.fence > self.max_fence.get(claim.key, 0), "fences strictly increase"
        assert not self._lease_live(before), "claimed over a live lease"
        if claim.attempt.may_execute:
            assert not before.awaiting_decision, "execute attempt while a decision is awaited"
        if claim.attempt.may_execute and before.operation_id is not None:
            assert self.absences.get(claim.key, 0) == 1, "execute after bind without absence"
            self.absences[claim.key] = 0
            event("execute after confirmed absence")
        event("claim may_execute" if claim.attempt.may_execute else "claim reconcile-only")
        self.held[worker] = (claim.key, claim.fence)
        self._observe(claim.key, claim.record)

    @rule(worker=workers, lease=leases)
    def claim_and_bind(self, worker: str, lease: int) -> None:
        """The common worker path, so that reconciliation states are reached often."""
        self.claim(worker, lease, None)
        self.bind(worker)

    @rule(worker=workers, lease=leases, backoff=st.integers(0, 2_000))
    def claim_and_record_unknown(self, worker: str, lease: int, backoff: int) -> None:
        """A claim whose reconciliation cannot tell, so operator decisions are reached often."""
        self.claim(worker, lease, None)
        self.record_unknown(worker, backoff)

    @rule(worker=workers, lease=leases)
    def renew(self, worker: str, lease: int) -> None:
        self._by_worker(worker, "renew", lease)

    @rule(worker=workers)
    def release(self, worker: str) -> None:
        self._by_worker(worker, "release")

    @rule(worker=workers)
    def bind(self, worker: str) -> None:
        if worker in self.held:
            self._by_worker(
                worker, "bind_provider_operation", operation_id_for(self.held[worker][0])
            )

    @rule(worker=workers, name=st.sampled_from(["r1", "r2"]))
    def record_result(self, worker: str, name: str) -> None:
        self._by_worker(worker, "record_result", result(name))

    @rule(worker=workers)
    def confirm_absent(self, worker: str) -> None:
        self._by_worker(worker, "confirm_absent", RetryGuard("provider://dedup", "sha256:g"))

    @rule(worker=workers, backoff=st.integers(0, 2_000))
    def record_unknown(self, worker: str, backoff: int) -> None:
        self._by_worker(worker, "record_unknown", Evidence("ev://x", "sha256:e"), backoff)

    @rule(
        key=keys,
        outcome=st.sampled_from(["recovered", "absent", "abandon"]),
        stale=st.booleans(),
    )
    def resolve(self, key: ActivityKey, outcome: str, stale: bool) -> None:
        before = self._get(key)
        if before is None:
            return
        revision = before.evidence_revision - (1 if stale else 0)
        if outcome == "recovered":
            d = Decision.recovered(result("op"), evidence_revision=revision, operator="ops")
        elif outcome == "absent":
            guard = RetryGuard("provider://proof", "sha256:p")
            d = Decision.absent(guard, evidence_revision=revision, operator="ops")
        else:
            d = Decision.abandon(evidence_revision=revision, operator="ops")
        try:
            after = self.catalog.resolve(key, d)
        except CatalogRejection:
            assert self._get(key) == before
            return
        assert before.awaiting_decision and not stale
        assert after.fence > before.fence, "a decision raises the fence"
        event(f"resolve {outcome}")
        self._observe(key, after)

    @rule(outcome=st.sampled_from(["recovered", "absent", "abandon"]))
    def resolve_awaiting(self, outcome: str) -> None:
        """The operator decides on the current revision of an activity that awaits a decision."""
        for key in KEYS:
            rec = self._get(key)
            if rec is not None and rec.awaiting_decision:
                self.resolve(key, outcome, False)
                return

    @rule(key=keys, good=st.booleans(), tick=st.integers(1, 6))
    def settle(self, key: ActivityKey, good: bool, tick: int) -> None:
        before = self._get(key)
        if before is None:
            return
        digest = (
            settlement_evidence_digest(key, before.result)
            if good and before.result is not None
            else "sha256:wrong"
        )
        try:
            after = self.catalog.settle(key, receipt(tick, world=key.world_id), digest)
        except CatalogRejection:
            assert self._get(key) == before
            return
        event("settle accepted")
        self._observe(key, after)

    @rule(tick=st.integers(1, 6))
    def settle_recorded(self, tick: int) -> None:
        """The family observes a recorded result (or, at a tick not later than the source
        tick, tries to and is refused)."""
        for key in KEYS:
            rec = self._get(key)
            if rec is not None and rec.result is not None and rec.settlement is None:
                self.settle(key, True, tick)
                return

    @invariant()
    def catalog_invariants(self) -> None:
        live_holders: dict[ActivityKey, int] = {}
        for key, fence in self.held.values():
            if self._live(self._get(key), fence):
                live_holders[key] = live_holders.get(key, 0) + 1
        assert all(n <= 1 for n in live_holders.values()), "at most one live attempt"
        unsettled: dict[str, bool] = {"w1": False, "w2": False}
        for key in KEYS:
            rec = self._get(key)
            if rec is None:
                continue
            unsettled[key.world_id] |= rec.settlement is None
            assert rec.key == key
            assert rec.fence >= self.max_fence.get(key, 0), "fences never decrease"
            if key in self.results:
                assert rec.result == self.results[key], "a recorded result never changes"
            if key in self.settlements:
                assert rec.settlement == self.settlements[key]
            if rec.settlement is not None:
                assert rec.result is not None
                expected = settlement_evidence_digest(key, rec.result)
                assert rec.settlement.evidence_digest == expected, "settled with a wrong digest"
                assert rec.settlement.receipt.tick > rec.source.tick
            assert (rec.claimable_from_ms is None) == (rec.result is not None)
            assert rec.pending_observation == (rec.result is not None and rec.settlement is None)
            assert rec.unsettled == (rec.settlement is None)
            if rec.attempt is not None:
                assert rec.attempt.fence == rec.fence
            self._observe(key, rec)
        for world, expected in unsettled.items():
            assert self.catalog.has_unsettled(world) == expected, "the lifecycle gate is exact"


def test_catalog_state_machine(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "sqlite":
        run_state_machine_as_test(CatalogMachine, settings=settings(stateful_step_count=STEPS))
        return

    class PgCatalogMachine(CatalogMachine):
        pg_url = str(request.getfixturevalue("pg_url"))

    examples = PG_SLOW_EXAMPLES if os.environ.get("TETHER_SLOW") else PG_EXAMPLES
    run_state_machine_as_test(
        PgCatalogMachine, settings=settings(stateful_step_count=STEPS, max_examples=examples)
    )
