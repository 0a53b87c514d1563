"""Event-driven loops: doorbell wakeups in one process and across two, lease and backoff timers,
a lost ring covered by the fallback poll, and idle loops that do not spin.

Timings are never asserted tightly: a fallback poll far longer than the test (600 s) means
only a wakeup or a timer can explain that the work finished at all; the benchmarks
(benches/runtime_activities.py) carry the latency numbers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey, Evidence, operation_id_for
from tether.runtime import MIN_FALLBACK_S, SETTLED, ActivityRuntimeError, Host, Wakeup
from tether.storage import wakeup_dir_for
from tether.storage._pg_doorbell import PostgresDoorbell

NEVER_S = 600.0  # a fallback poll no test waits for
CRASH = Path(__file__).resolve().parents[1] / "crash"


@pytest.fixture
def stores(store_url: str) -> dict[str, str]:
    """The Host arguments of the test's backend (`backend` runs each test on both): SQLite
    files in the data directory (the datagram doorbell), or a PostgreSQL schema of its own
    for both stores (LISTEN/NOTIFY)."""
    if store_url.startswith("sqlite://"):
        return {}
    return {"catalog_url": store_url, "world_url": store_url}


def _key(i: int) -> ActivityKey:
    return ActivityKey("w", KIND, f"task-{i:04d}")


def _until(predicate: object, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_workers_wake_on_an_admission_and_the_observer_on_a_result(
    tmp_path: Path, stores: dict[str, str]
) -> None:
    fam = [make_family(tmp_path)]
    with Host(tmp_path, fam, workers=2, fallback_poll_s=NEVER_S, **stores) as host:
        host.create_world("w")
        host.start()
        assert _until(lambda: host.pool.wakeup.waits >= 2 and host.observer.wakeup.waits >= 1)
        for round_ in range(3):
            host.commit_tick("w", intents(2, prefix=f"r{round_}"))
            assert host.wait_settled("w", timeout_s=60)  # the fallback would take 600 s
        assert host.pool.wakeup.rung >= 1 and host.observer.wakeup.rung >= 1
        assert host.pool.wakeup.timeouts == 0 and host.observer.wakeup.timeouts == 0


def test_wait_settled_wakes_on_the_settlement(tmp_path: Path, stores: dict[str, str]) -> None:
    fam = [make_family(tmp_path)]
    with Host(tmp_path, fam, workers=1, fallback_poll_s=NEVER_S, **stores) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        settled = host._wakeups[SETTLED]
        host.start()
        assert host.wait_settled("w", timeout_s=60)
        assert settled.timeouts == 0
        assert host.wait_settled("nothing-admitted", timeout_s=0)  # nothing to wait for


def _spawn_worker(data: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join([str(CRASH), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "tether", "worker", str(data)]
    argv += ["--families", "journal_provider:families", *extra]
    return subprocess.Popen(argv, env=env, cwd=CRASH, text=True, stderr=subprocess.PIPE)


def _sockets_of(data: Path, pid: int) -> list[Path]:
    directory = wakeup_dir_for(data / "catalog.db")
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if p.name.startswith(f"{pid}-")]


def test_a_worker_process_wakes_on_an_admission_in_another_process(tmp_path: Path) -> None:
    host = Host(tmp_path, [make_family(tmp_path)], workers=0, fallback_poll_s=NEVER_S)
    try:
        host.create_world("w")
        host.start()  # the observer only: the worker process runs the attempts
        proc = _spawn_worker(tmp_path, "--fallback-poll-s", str(NEVER_S))
        try:
            assert _until(lambda: bool(_sockets_of(tmp_path, proc.pid)))  # it listens
            for round_ in range(2):
                time.sleep(0.5)  # margin for the worker process to reach its idle wait
                host.commit_tick("w", intents(1, prefix=f"r{round_}"))
                # Claimed in the worker process, observed here: both woken through the data
                # directory, each of them long before its 600 s fallback poll.
                assert host.wait_settled("w", timeout_s=120)
            assert host.observer.wakeup.rung >= 1 and host.observer.wakeup.timeouts == 0
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)  # an idle worker process stops at once
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert time.monotonic() - started < NEVER_S / 2
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert _sockets_of(tmp_path, proc.pid) == []  # it removed its socket
    finally:
        host.close()


def test_a_worker_process_on_a_postgresql_catalog_wakes_on_an_admission_elsewhere(
    tmp_path: Path, pg_url: str
) -> None:
    """The same wakeup over LISTEN/NOTIFY: the Host's commit in this process notifies inside
    its transaction, the `tether worker --catalog URL` process is woken by it; no datagram
    doorbell is involved (no wakeup directory appears)."""
    stores = {"catalog_url": pg_url, "world_url": pg_url}
    host = Host(tmp_path, [make_family(tmp_path)], workers=0, fallback_poll_s=NEVER_S, **stores)
    try:
        bell = host.catalog.doorbell
        assert isinstance(bell, PostgresDoorbell)
        host.create_world("w")
        host.start()  # the observer only: the worker process runs the attempts
        proc = _spawn_worker(
            tmp_path, "--catalog", pg_url, "--world", pg_url, "--fallback-poll-s", str(NEVER_S)
        )
        try:
            for round_ in range(2):
                time.sleep(0.5)  # margin for the worker process to reach its idle wait
                assert proc.poll() is None, proc.communicate()[1]
                host.commit_tick("w", intents(1, prefix=f"r{round_}"))
                # Claimed over there after a NOTIFY, observed here after another: each long
                # before its 600 s fallback poll.
                assert host.wait_settled("w", timeout_s=120)
            assert host.observer.wakeup.rung >= 1 and host.observer.wakeup.timeouts == 0
            assert bell.received >= 1
            started = time.monotonic()
            # SIGHUP (a closed ssh session) as SIGTERM: it stops at once, cleanly (exit 0); it
            # was killed by the default action (exit 129, no safe-stop of a robot it drove).
            proc.send_signal(signal.SIGHUP)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert time.monotonic() - started < NEVER_S / 2
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        records = [host.catalog.get(ActivityKey("w", KIND, f"r{r}-0000")) for r in range(2)]
        assert all(r is not None and r.settlement is not None for r in records)
        assert not wakeup_dir_for(tmp_path / "catalog.db").exists()
    finally:
        host.close()


def test_the_lease_and_backoff_timers_follow_the_core_on_the_fake_clock(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1))
        waiting = env.new_worker("waiting")
        try:
            assert waiting.idle_delay_s() == 0.0  # claimable now
            gone = env.catalog.claim_key(_key(0), "crashed-worker", 5_000)
            env.catalog.bind_provider_operation(_key(0), gone.fence, operation_id_for(_key(0)))
            assert not waiting.run_once()
            assert waiting.idle_delay_s() == 5.0  # until the dead worker's lease runs out
            env.clock.advance(4_000)
            assert waiting.idle_delay_s() == 1.0
            env.clock.step(-3_600_000)  # a wall-clock step moves no timer
            assert waiting.idle_delay_s() == 1.0
            env.clock.advance(1_000)
            assert waiting.idle_delay_s() == 0.0
            claim = env.catalog.claim_key(_key(0), "reconciler", 5_000)
            assert claim.fence == gone.fence + 1
            evidence = Evidence("artifact://why", "sha256:why")
            env.catalog.record_unknown(_key(0), claim.fence, evidence, 2_000)
            assert waiting.idle_delay_s() == 2.0  # the reconciliation backoff
            env.clock.advance(2_000)
            assert waiting.run_once()  # reconcile-only, after the backoff
        finally:
            waiting.close()
        assert env.get(_key(0)).attempt_count == 3  # type: ignore[union-attr]


def test_an_idle_worker_reclaims_when_the_dead_workers_lease_runs_out(
    tmp_path: Path, stores: dict[str, str]
) -> None:
    lease_ms = 300
    with Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=0,
        observe=False,
        fallback_poll_s=NEVER_S,
        **stores,
    ) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        dead = host.catalog.claim_key(_key(0), "died-before-anything", lease_ms)
        stop = threading.Event()
        wakeup = Wakeup(stop, NEVER_S, doorbell=host.catalog.doorbell)
        worker = host.new_worker("reclaimer", stop=stop)
        thread = threading.Thread(target=worker.run, kwargs={"wakeup": wakeup})
        thread.start()
        try:
            # Only the timer can explain the reclaim: a claim rings nothing, the fallback is
            # 600 s away. Its attempt ran to its result before the worker is stopped (a stop
            # between the claim and the bind releases the attempt instead).
            assert _until(
                lambda: (r := host.get(_key(0))) is not None and r.recorded_result is not None
            )
        finally:
            wakeup.stop_all()
            thread.join(timeout=60)
            worker.close()
            wakeup.close()
        rec = host.get(_key(0))
        assert rec is not None and rec.attempt_count == 2 and not thread.is_alive()
        assert dead.attempt.lease_expires_ms is not None
        second = rec.recorded_result
        assert second is not None and second.attempt == 2  # reclaimed (unbound: it executed)
        assert wakeup.rung == 0  # woken by its timer, not by a ring


def test_a_lost_ring_is_covered_by_the_fallback_poll(
    tmp_path: Path, stores: dict[str, str]
) -> None:
    with Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=1,
        observe=False,
        fallback_poll_s=MIN_FALLBACK_S,
        **stores,
    ) as host:
        host.create_world("w")
        host.start()
        assert _until(lambda: host.pool.wakeup.waits >= 1)
        bell = host.catalog.doorbell
        if stores:
            # PostgreSQL: the NOTIFY is part of the commit, so what gets lost is its delivery
            # (this process's doorbell receives it and drops it): nobody is woken.
            bell._raise = lambda topics: None  # type: ignore[method-assign]
        else:
            # The admitting connection "dies" between its commit and its ring: nobody is told.
            host.catalog.store._ring = lambda old, new: None  # type: ignore[attr-defined]
        host.commit_tick("w", intents(1))
        assert _until(lambda: (r := host.get(_key(0))) is not None and r.result is not None)
        assert host.pool.wakeup.rung == 0 and host.pool.wakeup.timeouts >= 1
        if stores:
            assert isinstance(bell, PostgresDoorbell) and bell.received >= 1  # sent, then lost


def test_an_idle_host_does_not_spin(tmp_path: Path, stores: dict[str, str]) -> None:
    idle_s = 2.5
    fam = [make_family(tmp_path)]
    with Host(tmp_path, fam, workers=2, fallback_poll_s=MIN_FALLBACK_S, **stores) as host:
        host.create_world("w")
        host.start()
        loops = [host.pool.wakeup, host.observer.wakeup]
        assert _until(lambda: loops[0].waits >= 2 and loops[1].waits >= 1)
        waits = sum(w.waits for w in loops)
        cpu = time.process_time()
        time.sleep(idle_s)
        cpu = time.process_time() - cpu
        waits = sum(w.waits for w in loops) - waits
    # Three loops, each at most one pass per fallback poll (plus one in flight): a polling
    # loop would make hundreds. CPU: generous for a loaded 2-core machine.
    assert waits <= 3 * (idle_s / MIN_FALLBACK_S + 2)
    assert cpu < 0.5


def test_stop_wakes_every_idle_loop_at_once(tmp_path: Path, stores: dict[str, str]) -> None:
    host = Host(tmp_path, [make_family(tmp_path)], workers=3, fallback_poll_s=NEVER_S, **stores)
    host.create_world("w")
    host.start()
    assert _until(lambda: host.pool.wakeup.waits >= 3 and host.observer.wakeup.waits >= 1)
    started = time.monotonic()
    host.close()
    assert time.monotonic() - started < NEVER_S / 2


def test_a_fallback_poll_under_a_second_is_refused(tmp_path: Path, stores: dict[str, str]) -> None:
    with pytest.raises(ActivityRuntimeError):
        Host(tmp_path, [make_family(tmp_path)], fallback_poll_s=0.02, **stores)
    # Refused before any storage opened: no catalog file, no table in the PostgreSQL schema.
    assert not (tmp_path / "catalog.db").exists() and not (tmp_path / "world.db").exists()
    if stores:
        import psycopg

        with psycopg.connect(stores["catalog_url"], autocommit=True) as conn:
            made = conn.execute(
                "SELECT count(*) FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            ).fetchone()
        assert made == (0,)
