"""`Worker.run_batch`: attempts that will never start (the adapter's `never_starts` hint)
share their catalog transactions; any other attempt runs alone, as `run_once` runs it."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hosttools import catalog_failing, make_env
from journal_provider import KIND, DedupAdapter, Journal, intents, make_family
from tether._coded import CodedError
from tether.activities import ActivityKey
from tether.runtime import MIN_FALLBACK_S, Wakeup, WorkerPool
from tether.runtime._worker import TYPED_END_LEASE_MS
from tether.testing import ActivityEnvironment


class _Hinting(DedupAdapter):
    """Says even-numbered tasks never start (a hint only: `execute` still runs each)."""

    def never_starts(self, request: dict[str, Any]) -> bool:
        return int(request["n"]) % 2 == 0


def _worker(env: ActivityEnvironment) -> Any:
    pool = WorkerPool(
        env.open_catalog,
        env.artifacts,
        env.families,
        instance="batch-test",
        lease_ms=env.lease_ms,
        wakeup=Wakeup(threading.Event(), MIN_FALLBACK_S, doorbell=env.catalog.doorbell),
    )
    return pool.new_worker("w0")


def test_attempts_that_never_start_share_their_catalog_transactions(tmp_path: Path) -> None:
    n = 10
    family = make_family(tmp_path)
    family = replace(family, adapter=_Hinting(Journal(tmp_path / "provider.db")))
    with make_env([family], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(n))
        worker = _worker(env)
        try:
            store = worker.catalog.store
            before = store.commits
            assert worker.run_batch()  # task-0000 never starts: it and every such task
            batch = store.commits - before
            evens = [ActivityKey("w", KIND, f"task-{i:04d}") for i in range(0, n, 2)]
            odds = [ActivityKey("w", KIND, f"task-{i:04d}") for i in range(1, n, 2)]
            assert all(env.get(k).result is not None for k in evens)  # type: ignore[union-attr]
            assert all(env.get(k).attempt is None for k in odds)  # type: ignore[union-attr]
            # claim, claim of the rest, bind, results: not three per Activity (PostgreSQL's
            # session counts one commit more on the worker's new connection)
            sqlite = type(store).__name__.startswith("Sqlite")
            assert batch == 4 if sqlite else batch == 5, batch
            while worker.run_batch():
                pass
        finally:
            worker.close()
        records = [env.get(ActivityKey("w", KIND, f"task-{i:04d}")) for i in range(n)]
        assert all(r is not None and r.result is not None for r in records)
        assert {r.recorded_result.attempt for r in records if r and r.recorded_result} == {1}
        journal = Journal(tmp_path / "provider.db")
        assert sorted(journal.effects().values()) == [1] * n  # each executed once
        assert len(journal.calls("execute")) == n and journal.calls("reconcile") == []


def test_a_repeating_failure_is_logged_once(tmp_path: Path, caplog: Any, monkeypatch: Any) -> None:
    """A worker whose every claim fails (its catalog's server down, here its connection
    closed) logs the traceback once, then one line at most every `REPEAT_LOG_S`, not a
    traceback at every fallback poll."""
    import logging

    from tether.runtime import _failing

    family = make_family(tmp_path)
    with make_env([family], data_dir=tmp_path / "d") as env:
        worker = _worker_of(env)
        monkeypatch.setattr(_failing, "REPEAT_LOG_S", 3600.0)
        wakeup = Wakeup(worker.stop, MIN_FALLBACK_S, doorbell=env.catalog.doorbell)
        caplog.set_level(logging.INFO, logger="tether.runtime")
        with catalog_failing(worker.catalog):  # every claim now fails the same way
            runner = threading.Thread(target=worker.run, kwargs={"wakeup": wakeup})
            runner.start()
            try:
                threading.Event().wait(MIN_FALLBACK_S * 2.5)  # three failing claims
            finally:
                worker.stop.set()
                wakeup.stop_all()
                runner.join(10)
        if getattr(worker.catalog.store, "conninfo", None) is not None:
            worker.close()
        records = [r for r in caplog.records if r.name.startswith("tether.runtime")]
        failed = [r for r in records if "attempt failed" in r.getMessage()]
        assert len(failed) == 1, records
        # One line, as every coded failure is: the store's error carries its code (a closed
        # SQLite catalog: `catalog_closed`; on PostgreSQL the table gone: `store_damaged`).
        assert failed[0].exc_info is None, records
        assert not [r for r in records if r.exc_info and r is not failed[0]], records


def _worker_of(env: ActivityEnvironment) -> Any:
    return _worker(env)


class _StoppedMidway(DedupAdapter):
    """Performs its effect, then ends the attempt with a typed error (a robot stopped under
    it): what happened is for the reconcile to find."""

    def execute(self, ctx: Any, request: dict[str, Any]) -> Any:
        self.journal.perform(ctx.operation_id, request)
        raise CodedError("stopped_by_operator", "stopped while it ran")


def test_a_typed_error_of_execute_gives_the_lease_up_so_it_reconciles_at_once(
    tmp_path: Path,
) -> None:
    """An execute that ends with a typed error (a stopped robot) acts no more: its lease is
    given up at once, so the next claim reconciles now, not after the rest of the lease (the
    record read as running meanwhile). Any other exception still keeps the lease."""
    family = make_family(tmp_path)
    family = replace(family, adapter=_StoppedMidway(Journal(tmp_path / "provider.db")))
    with make_env([family], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        first = env.run_attempt()
        assert first is not None and first.result is None
        assert env.lease_ms > TYPED_END_LEASE_MS
        env.clock.advance(TYPED_END_LEASE_MS)  # seconds, not the lease
        again = env.run_attempt()
        assert again is not None and again.result is not None, again  # reconciled: recovered
        assert not again.result.failed


class _RefusedBeforeAnyEffect(DedupAdapter):
    """Refuses every execute with a typed error before any effect (a servo refusing its setup
    write): each reconcile proves it absent, and the next attempt executes again."""

    def execute(self, ctx: Any, request: dict[str, Any]) -> Any:
        self.journal.log_call(ctx.operation_id, "execute", ctx.fence)
        raise CodedError("device_refused", "the setup write was refused")


def test_an_execute_that_keeps_failing_typed_backs_off_to_the_lease(tmp_path: Path) -> None:
    """Execute fails typed, reconcile proves absent, execute again: the shortened lease
    doubles per attempt (`typed_end_lease_ms`), so the loop never runs faster than that
    backoff, and from the lease on is as slow as before."""
    from tether.runtime._worker import typed_end_lease_ms

    journal = Journal(tmp_path / "provider.db")
    family = replace(make_family(tmp_path), adapter=_RefusedBeforeAnyEffect(journal))
    with make_env([family], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        assert [typed_end_lease_ms(n, 60_000) for n in (1, 2, 3, 4, 5)] == [
            5_000,
            10_000,
            20_000,
            40_000,
            60_000,
        ]
        for number in (1, 3, 5):  # attempts 1, 3, 5 execute; 2, 4 reconcile (absent)
            ran = env.run_attempt()
            assert ran is not None and ran.attempt is not None
            assert ran.attempt.number == number and ran.attempt.may_execute
            wait = typed_end_lease_ms(number, env.lease_ms)
            env.clock.advance(wait - 1)
            assert env.run_attempt() is None, number  # not before its backoff
            env.clock.advance(1)
            absent = env.run_attempt()  # the reconcile: nothing happened, absent
            assert absent is not None and absent.result is None and absent.attempt is None
        assert len(journal.calls("execute")) == 3


def test_an_expected_coded_failure_is_one_line_and_the_count_is_every_failure(
    caplog: Any,
) -> None:
    """A store that cannot be reached is an expected, coded failure: one line (a driver's
    newlines folded), no traceback; "working again" counts every failure since the last
    success, of whichever kind."""
    import logging

    from tether.runtime._failing import Failing

    log = logging.getLogger("tether.runtime.test_failing")
    caplog.set_level(logging.INFO, logger="tether.runtime.test_failing")
    failing = Failing(log, "observer", "step")
    failing.failed(CodedError("unreachable", "server closed\n\tThis probably means it died"))
    failing.failed(CodedError("unreachable", "connection refused"))
    failing.failed(RuntimeError("a bug"))
    failing.over()
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("observer: step failed: unreachable: server closed This probably means it died", False),
        ("observer: step failed: unreachable: connection refused", False),
        ("observer: step failed", True),
        ("observer: working again after 3 failures", False),
    ], lines


def test_a_loops_failure_keeps_its_traceback_unless_it_is_an_expected_coded_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A coded condition (a world that is gone, a closed Host) is one line; a family's broken
    contract, coded too, keeps the traceback that shows where the family broke it."""
    import logging

    from tether.runtime import FamilyError, HostClosed, ProviderIOForbidden
    from tether.runtime._failing import Failing
    from tether.world import WorldNotFound

    log = logging.getLogger("tests.failing")
    with caplog.at_level(logging.ERROR, logger="tests.failing"):
        for exc in (
            WorldNotFound("w"),
            HostClosed("closed"),
            FamilyError("broken"),
            ProviderIOForbidden("io"),
        ):
            Failing(log, "loop", "step").failed(exc)
    traced = [r.exc_info is not None for r in caplog.records]
    assert traced == [False, False, True, True]
