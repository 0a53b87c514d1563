"""`WorkerPool` (and the `Wakeup` its idle workers wait on) alone, over `tether.testing`."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, Journal, intents, make_family
from tether.activities import ActivityKey
from tether.runtime import MIN_FALLBACK_S, ActivityRuntimeError, Wakeup, WorkerPool
from tether.testing import ActivityEnvironment


def _key(i: int) -> ActivityKey:
    return ActivityKey("w", KIND, f"task-{i:04d}")


def _pool(env: ActivityEnvironment, stop: threading.Event, fallback_s: float) -> WorkerPool:
    return WorkerPool(
        env.open_catalog,
        env.artifacts,
        env.families,
        instance="pool-test",
        lease_ms=env.lease_ms,
        emit=env.progress.append,
        wakeup=Wakeup(stop, fallback_s, doorbell=env.catalog.doorbell),
    )


def test_two_workers_run_each_activity_once_to_its_result(tmp_path: Path) -> None:
    n = 12
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(n))
        stop = threading.Event()
        pool = _pool(env, stop, MIN_FALLBACK_S)
        pool.start(2)
        try:
            assert pool.size == 2
            deadline = time.monotonic() + 60
            while len(env.pending_observation()) < n and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            pool.close()
        assert stop.is_set()
        records = [env.get(_key(i)) for i in range(n)]
        assert all(r is not None and r.result is not None for r in records)
        attempts = {r.recorded_result.attempt for r in records if r and r.recorded_result}
        assert attempts == {1}  # every result came from the first attempt
        journal = Journal(tmp_path / "provider.db")
        assert sorted(journal.effects().values()) == [1] * n
        assert len(journal.calls("execute")) == n and journal.calls("reconcile") == []
        assert {e.key for e in env.progress} == {_key(i) for i in range(n)}


def test_workers_claim_under_the_pools_instance_name(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        worker = _pool(env, threading.Event(), MIN_FALLBACK_S).new_worker("solo")
        try:
            assert worker.owner == "pool-test/solo"
            claim = worker.catalog.claim(worker.owner, 60_000, kinds=worker.kinds)
            assert claim is not None and claim.attempt.owner == "pool-test/solo"
        finally:
            worker.close()


def test_closing_wakes_idle_workers_at_once_and_a_pool_starts_once(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        pool = _pool(env, threading.Event(), 600.0)  # idle waits far longer than the test
        pool.start(2)
        with pytest.raises(ActivityRuntimeError):
            pool.start(1)
        deadline = time.monotonic() + 30
        while pool.wakeup.waits < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # let both go idle on the wakeup
        assert pool.wakeup.waits == 2
        started = time.monotonic()
        pool.close()
        assert time.monotonic() - started < 30  # woken by the stop, not by the fallback poll
        assert pool.wakeup.timeouts == 0 and pool.wakeup.rung == 0
        pool.close()  # idempotent
        pool.wakeup.close()


def test_wakeup_returns_on_stop_after_its_delay_or_fallback_and_refuses_a_fast_poll() -> None:
    stop = threading.Event()
    wakeup = Wakeup(stop, MIN_FALLBACK_S)  # no doorbell: the timers and the stop event only
    assert wakeup.wait(delay_s=0.0) is False and not wakeup.stopping
    assert wakeup.timeouts == 1
    stop.set()
    assert Wakeup(stop, 600.0).wait() is True and wakeup.stopping
    for fast in (-1.0, 0.0, 0.02, 0.999):
        with pytest.raises(ActivityRuntimeError):
            Wakeup(stop, fast)


def test_workers_claim_nothing_while_their_pause_holds_them(tmp_path: Path) -> None:
    """`pause` (the daemon's stop-first wait) is asked before every claim: while it blocks, no
    Activity is claimed; once it lets go, the workers run them all."""
    n = 4
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(n))
        stop, go = threading.Event(), threading.Event()
        asked = threading.Event()

        def pause() -> None:
            asked.set()
            go.wait(30)

        pool = WorkerPool(
            env.open_catalog,
            env.artifacts,
            env.families,
            instance="pause-test",
            lease_ms=env.lease_ms,
            wakeup=Wakeup(stop, MIN_FALLBACK_S, doorbell=env.catalog.doorbell),
            pause=pause,
        )
        pool.start(2)
        try:
            assert asked.wait(30)
            time.sleep(0.3)  # free to claim, were it not for the pause
            assert all(env.get(_key(i)).attempt is None for i in range(n))  # type: ignore[union-attr]
            go.set()
            deadline = time.monotonic() + 60
            while len(env.pending_observation()) < n and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            go.set()
            pool.close()
        assert all(env.get(_key(i)).result is not None for i in range(n))  # type: ignore[union-attr]
