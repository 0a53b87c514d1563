"""`Observer` alone: its staged results, the real ledger's close states and a Ticker."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hosttools import catalog_failing, make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey
from tether.runtime import (
    MIN_FALLBACK_S,
    RESULT,
    Observation,
    ObservationStager,
    Observer,
    Projector,
    Settler,
    Ticker,
    Wakeup,
)
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, WorldSnapshot


def _key(i: int, world: str = "w") -> ActivityKey:
    return ActivityKey(world, KIND, f"task-{i:04d}")


def _observer(env: ActivityEnvironment, stop: threading.Event | None = None) -> Observer:
    stager = ObservationStager(env.families, env.catalog, env.artifacts, env.ledger)
    projector = Projector(env.families, env.catalog, env.artifacts, env.ledger)
    ticker = Ticker(env.ledger, env.families, stager, projector, Settler(env.catalog, env.ledger))
    wakeup = Wakeup(
        stop or threading.Event(), MIN_FALLBACK_S, doorbell=env.catalog.doorbell, topic=RESULT
    )
    return Observer(stager, env.ledger, ticker, wakeup=wakeup)


def _settled(env: ActivityEnvironment, key: ActivityKey) -> bool:
    rec = env.get(key)
    return rec is not None and rec.settlement is not None


def test_one_observation_tick_per_world_with_staged_results(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        for world in ("v", "w"):
            env.create_world(world)
            env.commit_tick(world, intents(2))
        assert env.drain() == 4
        observer = _observer(env)
        receipts = observer.observe_once()
        assert sorted((r.world_id, r.tick) for r in receipts) == [("v", 2), ("w", 2)]
        for r in receipts:
            assert all(env.get(_key(i, r.world_id)).settlement.receipt == r for i in range(2))  # type: ignore[union-attr]
        assert observer.observe_once() == []


def test_a_world_reserved_for_close_waits_for_its_reopen(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        env.drain()
        observer = _observer(env)
        env.ledger.reserve_close("w", sticky=False)
        assert observer.observe_once() == [] and not _settled(env, _key(0))
        env.ledger.rollback_close("w")
        [r] = observer.observe_once()
        assert r.tick == 2 and _settled(env, _key(0))


def test_a_world_with_a_newer_writer_is_left_to_it_until_resumed(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        env.drain()
        observer = _observer(env)
        observer.ticker.acquire("w")
        env.host.ticker.acquire("w")  # another writer takes the world over
        assert observer.observe_once() == [] and observer.fenced == frozenset({"w"})
        assert observer.observe_once() == []  # no retry loop against the newer writer
        observer.resume("w")
        observer.ticker.recover("w")
        [r] = observer.observe_once()
        assert _settled(env, _key(0)) and r.tick == 2 and observer.fenced == frozenset()


def test_the_loop_observes_survives_a_failing_pass_and_stops_on_its_wakeup(
    tmp_path: Path,
) -> None:
    failures = []

    def fails_once(snapshot: WorldSnapshot, obs: Sequence[Observation]) -> list[ComponentWrite]:
        if obs and not failures:
            failures.append(1)
            raise RuntimeError("a processor bug, once")
        return []

    family = make_family(tmp_path)
    family = type(family)(
        family.name, family.kinds, family.project, family.adapter, family.stage, (fails_once,)
    )
    with make_env([family], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        env.drain()
        stop = threading.Event()
        observer = _observer(env, stop)
        observer.start()
        try:
            deadline = time.monotonic() + 30
            while not _settled(env, _key(0)) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            observer.wakeup.stop_all()
            observer.join()
            observer.wakeup.close()
        assert failures == [1] and _settled(env, _key(0))


def test_the_loop_observes_nothing_while_its_pause_holds_it(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        env.drain()
        stop, go, asked = threading.Event(), threading.Event(), threading.Event()

        def pause() -> None:
            asked.set()
            go.wait(30)

        base = _observer(env, stop)
        observer = Observer(base.stager, env.ledger, base.ticker, wakeup=base.wakeup, pause=pause)
        observer.start()
        try:
            assert asked.wait(30)
            time.sleep(0.3)  # a result waits to be observed; the pause holds the pass
            assert not _settled(env, _key(0))
            go.set()
            deadline = time.monotonic() + 30
            while not _settled(env, _key(0)) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            go.set()
            observer.wakeup.stop_all()
            observer.join()
            observer.wakeup.close()
        assert _settled(env, _key(0))


def test_a_step_that_keeps_failing_is_logged_once(tmp_path: Path, caplog: Any) -> None:
    """An observer whose every step fails (its catalog gone, as when the server is down)
    logs the traceback once, then counts: not a traceback at every fallback poll."""
    import logging

    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        stop = threading.Event()
        observer = _observer(env, stop)
        caplog.set_level(logging.INFO, logger="tether.runtime")
        with catalog_failing(env.catalog):  # every restage now fails the same way
            runner = threading.Thread(target=observer.run)
            runner.start()
            try:
                time.sleep(MIN_FALLBACK_S * 3.5)  # four failing steps
            finally:
                stop.set()
                observer.wakeup.stop_all()
                runner.join(10)
        records = [r for r in caplog.records if r.name == "tether.runtime.observer"]
        failed = [r for r in records if "step failed" in r.getMessage()]
        assert len(failed) == 1, records
        # One line, as every coded failure is: the store's error carries its code (a closed
        # SQLite catalog: `catalog_closed`; on PostgreSQL the table gone: `store_damaged`).
        assert failed[0].exc_info is None, records
        assert not [r for r in records if r.exc_info and r is not failed[0]], records
