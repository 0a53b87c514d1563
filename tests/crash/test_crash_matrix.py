"""The crash matrix: SIGKILL a real Host+worker process at each named window, then restart.

For every window a fresh process on the same data directory must finish the work with zero
duplicate effects in the provider journal, no lost result and the exact outcome named below.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from journal_provider import BLIND_KIND, KIND, Journal
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.runtime import ArtifactStore, evidence_entity
from tether.runtime._artifacts import shared_for
from tether.world import SqliteLedger, open_ledger

from tests.backends import SLOW_ON_POSTGRES

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "scenario.py"


def run_scenario(
    data: Path,
    n: int,
    *extra: str,
    crash: str | None = None,
    random_crash: str | None = None,
    url: str | None = None,
) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    if crash:
        env["TETHER_CRASH_AT"] = crash
    if random_crash:
        env["TETHER_CRASH_RANDOM"] = random_crash
    proc = subprocess.run(
        [sys.executable, str(SCENARIO), str(data), str(n), *extra]
        + ([] if url is None else ["--store-url", url]),
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"scenario exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.returncode


@dataclass(frozen=True)
class Expect:
    """Provider calls and attempts the window must end with (per activity)."""

    executes: int
    reconciles: int
    attempts: int


# Window -> exact outcome with the deduplicating provider.
WINDOWS = {
    # projected from the retained receipt, executed once
    "after_intent_tick": Expect(executes=1, reconciles=0, attempts=1),
    "after_admission": Expect(executes=1, reconciles=0, attempts=1),
    # reclaimed under a new fence (nothing was bound), executed once
    "after_claim": Expect(executes=1, reconciles=0, attempts=2),
    # bound, no effect: reconcile -> ConfirmedAbsent + guard -> exactly one execution
    "after_bind": Expect(executes=1, reconciles=1, attempts=3),
    # killed inside the provider's transaction: the effect rolled back -> absent -> one more
    "during_effect": Expect(executes=2, reconciles=1, attempts=3),
    # effect done, result not recorded: reconcile -> Recovered, no second effect
    "after_effect": Expect(executes=1, reconciles=1, attempts=2),
    # result durable: restaged or settled from what is durable, no new attempt
    "after_result": Expect(executes=1, reconciles=0, attempts=1),
    "after_staging": Expect(executes=1, reconciles=0, attempts=1),
    "after_observation_tick": Expect(executes=1, reconciles=0, attempts=1),
    "after_settlement": Expect(executes=1, reconciles=0, attempts=1),
}


@dataclass(frozen=True)
class Killed:
    """What is durable right after the SIGKILL at a window, before any restart."""

    head_tick: int
    post_commit_pending: bool
    admitted: bool
    attempts: int
    bound: bool
    effects: int
    result: bool
    settled: bool


# Window -> the exact durable state the kill leaves behind (proves the kill hit that window).
KILLED = {
    "after_intent_tick": Killed(1, True, False, 0, False, 0, False, False),
    "after_admission": Killed(1, True, True, 0, False, 0, False, False),
    "after_claim": Killed(1, False, True, 1, False, 0, False, False),
    "after_bind": Killed(1, False, True, 1, True, 0, False, False),
    "during_effect": Killed(1, False, True, 1, True, 0, False, False),
    "after_effect": Killed(1, False, True, 1, True, 1, False, False),
    "after_result": Killed(1, False, True, 1, True, 1, True, False),
    "after_staging": Killed(1, False, True, 1, True, 1, True, False),
    "after_observation_tick": Killed(2, True, True, 1, True, 1, True, False),
    "after_settlement": Killed(2, True, True, 1, True, 1, True, True),
}


def killed_state(data: Path, url: str | None = None) -> Killed:
    ledger = open_ledger(url) if url else SqliteLedger.open(data / "world.db")
    catalog = Catalog.open(url or "sqlite:///" + str(data / "catalog.db"))
    try:
        head = ledger.head("w")
        pending = ledger.pending_post_commit("w") is not None
        rec = catalog.get(ActivityKey(world_id="w", kind=KIND, activity_id="task-0000"))
    finally:
        catalog.close()
        ledger.close()
    return Killed(
        head_tick=head.tick,
        post_commit_pending=pending,
        admitted=rec is not None,
        attempts=0 if rec is None else rec.attempt_count,
        bound=rec is not None and rec.operation_id is not None,
        effects=sum(Journal(data / "provider.db").effects().values()),
        result=rec is not None and rec.result is not None,
        settled=rec is not None and rec.settlement is not None,
    )


def check_settled(data: Path, n: int, kind: str = KIND, url: str | None = None) -> None:
    """Zero duplicate effects, no lost result, and each settlement names its observing tick
    (the stores in `data`, or at the PostgreSQL `url`)."""
    journal = Journal(data / "provider.db")
    effects = journal.effects()
    catalog = Catalog.open(url or "sqlite:///" + str(data / "catalog.db"))
    ledger = open_ledger(url) if url else SqliteLedger.open(data / "world.db")
    store = ArtifactStore(data / "artifacts", shared=shared_for(url))
    try:
        head = ledger.head("w")
        for i in range(n):
            key = ActivityKey(world_id="w", kind=kind, activity_id=f"task-{i:04d}")
            op = operation_id_for(key)
            assert effects.get(op) == 1, f"{key}: {effects.get(op)} effects"
            rec = catalog.get(key)
            assert rec is not None and rec.result is not None and rec.settlement is not None
            payload = store.get(rec.result)  # no lost result: durable and digest-checked
            assert op.encode() in payload
            s = rec.settlement.receipt
            assert s.run_id == head.run_id and s.tick <= head.tick
            assert s.tick > rec.source.tick
            # The settlement tick is the one that committed the completion evidence.
            tick_changes = _changed_at(data, s.tick, url)
            assert (evidence_entity(kind, key.activity_id), "tether.completion") in tick_changes
            assert (key.activity_id, f"task.status.{kind}") in tick_changes
        assert len(effects) == n
    finally:
        catalog.close()
        ledger.close()
        store.close()


def _changed_at(data: Path, tick: int, url: str | None = None) -> set[tuple[str, str]]:
    sql = "SELECT entity, component FROM components WHERE world_id = 'w' AND tick = ?"
    if url is not None:
        import psycopg

        with psycopg.connect(url) as conn:
            return {(r[0], r[1]) for r in conn.execute(sql.replace("?", "%s"), (tick,))}
    db = sqlite3.connect(data / "world.db")
    try:
        rows = db.execute(
            "SELECT entity, component FROM components WHERE world_id = 'w' AND tick = ?", (tick,)
        ).fetchall()
    finally:
        db.close()
    return {(r[0], r[1]) for r in rows}


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_sigkill_at_window_then_restart_settles_exactly_once(
    window: str, tmp_path: Path, store_url: str
) -> None:
    """On each backend: SIGKILL the Host process at the window, restart, exactly once."""
    url = None if store_url.startswith("sqlite:") else store_url
    assert run_scenario(tmp_path, 1, crash=window, url=url) == -signal.SIGKILL
    assert killed_state(tmp_path, url) == KILLED[window]
    assert run_scenario(tmp_path, 1, url=url) == 0
    check_settled(tmp_path, 1, url=url)
    journal = Journal(tmp_path / "provider.db")
    expect = WINDOWS[window]
    assert len(journal.calls("execute")) == expect.executes
    assert len(journal.calls("reconcile")) == expect.reconciles
    catalog = Catalog.open(url or "sqlite:///" + str(tmp_path / "catalog.db"))
    try:
        rec = catalog.get(ActivityKey(world_id="w", kind=KIND, activity_id="task-0000"))
        assert rec is not None and rec.attempt_count == expect.attempts
    finally:
        catalog.close()
    # The fenced execute calls only ever come from execution-authorised attempts, in order.
    fences = [f for _, _, f in journal.calls()]
    assert fences == sorted(fences)


def _pg(store_url: str) -> str | None:
    """The PostgreSQL URL of both stores, or None for SQLite files in the data dir."""
    return None if store_url.startswith("sqlite:") else store_url


@SLOW_ON_POSTGRES  # the catalog only names the reference; the payload is a file, or a row
def test_large_results_survive_a_crash_by_reference(tmp_path: Path, store_url: str) -> None:
    url = _pg(store_url)
    rc = run_scenario(tmp_path, 2, "--pad", "5000", crash="after_result", url=url)
    assert rc == -signal.SIGKILL
    assert run_scenario(tmp_path, 2, "--pad", "5000", url=url) == 0
    check_settled(tmp_path, 2, url=url)
    if url is None:  # SQLite: one host's payloads are files of its data dir
        files = list((tmp_path / "artifacts" / "sha256").rglob("*"))
        assert any(f.is_file() and f.stat().st_size > 5000 for f in files)
    else:  # PostgreSQL: the hosts' shared artifacts table
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT max(size) FROM artifacts").fetchone()
        assert row is not None and row[0] is not None and row[0] > 5000


@SLOW_ON_POSTGRES  # three Host processes; the windows above already kill on PostgreSQL
def test_blind_provider_parks_unknown_and_is_never_executed_again(
    tmp_path: Path, store_url: str
) -> None:
    url = _pg(store_url)
    rc = run_scenario(tmp_path, 1, "--blind", crash="after_blind_effect", url=url)
    assert rc == -signal.SIGKILL
    assert run_scenario(tmp_path, 1, "--blind", url=url) == 0
    assert run_scenario(tmp_path, 1, "--blind", url=url) == 0  # a second restart: no change
    journal = Journal(tmp_path / "provider.db")
    key = ActivityKey(world_id="w", kind=BLIND_KIND, activity_id="task-0000")
    op = operation_id_for(key)
    assert journal.effects() == {op: 1}
    assert [m for _, m, _ in journal.calls()] == ["execute", "reconcile"]
    catalog = Catalog.open(url or "sqlite:///" + str(tmp_path / "catalog.db"))
    try:
        rec = catalog.get(key)
        assert rec is not None and rec.awaiting_decision and rec.result is None
        assert rec.settlement is None
        assert [r.key for r in catalog.iter_awaiting_decision()] == [key]
    finally:
        catalog.close()


def _sweep(
    tmp_path: Path,
    n: int,
    workers: int,
    seed: int,
    prob: float,
    max_runs: int,
    url: str | None = None,
) -> int:
    rnd = random.Random(seed)
    kills = 0
    for _ in range(max_runs):
        rc = run_scenario(
            tmp_path,
            n,
            "--workers",
            str(workers),
            "--pad",
            str(rnd.choice([0, 600])),
            random_crash=f"{rnd.randrange(1 << 30)}:{prob}",
            url=url,
        )
        if rc == 0:
            break
        kills += 1
    else:
        assert run_scenario(tmp_path, n, "--workers", str(workers), url=url) == 0
    check_settled(tmp_path, n, url=url)
    journal = Journal(tmp_path / "provider.db")
    executes: dict[str, int] = {}
    for op, method, _ in journal.calls():
        executes[op] = executes.get(op, 0) + (method == "execute")
    assert len(executes) == n
    return kills


@SLOW_ON_POSTGRES  # every window is killed on PostgreSQL by default; random kills take longer
def test_random_kill_sweep_sampled(tmp_path: Path, store_url: str) -> None:
    kills = _sweep(tmp_path, n=12, workers=3, seed=7, prob=0.05, max_runs=8, url=_pg(store_url))
    assert kills >= 1


@pytest.mark.slow
def test_random_kill_sweep_200_activities_3_workers(tmp_path: Path, store_url: str) -> None:
    url = _pg(store_url)
    kills = _sweep(tmp_path, n=200, workers=3, seed=2026, prob=0.002, max_runs=40, url=url)
    assert kills >= 3


def _spawn_worker(
    data: Path, workers: int, crash: str | None = None, catalog_url: str | None = None
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if crash:
        env["TETHER_CRASH_AT"] = crash
    argv = [sys.executable, "-m", "tether", "worker", str(data)]
    argv += ["--families", "journal_provider:families", "--workers", str(workers)]
    argv += ["--lease-ms", "400"]
    if catalog_url is not None:
        argv += ["--catalog", catalog_url, "--world", catalog_url]
    return subprocess.Popen(argv, env=env, cwd=HERE, text=True, stderr=subprocess.PIPE)


#: The windows that fall inside a worker; each is also run with the worker in its own process.
WORKER_WINDOWS = ("after_claim", "after_bind", "during_effect", "after_effect", "after_result")


@pytest.mark.parametrize("window", WORKER_WINDOWS)
def test_separate_worker_process_killed_at_window_is_recovered(
    window: str, tmp_path: Path, store_url: str
) -> None:
    """On each backend: a worker process SIGKILLed at the window, a fresh one recovers."""
    from journal_provider import intents, make_family
    from tether.runtime import Host

    n = 3
    url = None if store_url.startswith("sqlite:") else store_url
    stores = {} if url is None else {"catalog_url": url, "world_url": url}
    host = Host(tmp_path, [make_family(tmp_path)], workers=0, **stores)
    host.create_world("w")
    host.commit_tick("w", intents(n))
    host.start()  # observer only: staging and observation ticks in this process
    try:
        doomed = _spawn_worker(tmp_path, 1, crash=window, catalog_url=url)
        doomed.communicate(timeout=120)
        assert doomed.returncode == -signal.SIGKILL
        fresh = _spawn_worker(tmp_path, 2, catalog_url=url)
        keys = [ActivityKey(world_id="w", kind=KIND, activity_id=f"task-{i:04d}") for i in range(n)]
        try:
            for _ in range(12_000):
                if all((r := host.get(k)) is not None and r.settlement for k in keys):
                    break
                threading.Event().wait(0.01)
        finally:
            fresh.send_signal(signal.SIGTERM)  # clean shutdown of the worker process
            _, err = fresh.communicate(timeout=120)
        assert fresh.returncode == 0, err
    finally:
        host.close()
    check_settled(tmp_path, n, url=url)
    journal = Journal(tmp_path / "provider.db")
    expect = WINDOWS[window]  # the killed activity's exact outcome; the others ran once each
    assert len(journal.calls("execute")) == n - 1 + expect.executes
    assert len(journal.calls("reconcile")) == expect.reconciles
