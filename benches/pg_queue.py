"""Tether's catalog on PostgreSQL against pgqueuer on the same server, in one run.

Equal work is N jobs, each carried from enqueue to completion, durable at every step the system
promises (`synchronous_commit` on for both):
- Tether: the full Activity lifecycle through `Catalog` on PostgreSQL: admit, claim (`FOR UPDATE
  SKIP LOCKED`, a fence, a lease on the server clock), bind the provider operation, record the
  result, settle against a later receipt with its completion evidence; every rule checked by
  the Rust core per Activity, each step its own transaction. Admission is the projector's (one
  thread); W worker threads, each on its own connection, claim and carry each job to settlement.
- pgqueuer (asyncpg, `Queries`): enqueue (batched, as its API allows), dequeue (batched
  `FOR UPDATE SKIP LOCKED`, heartbeat-based rescue), complete by job id (`log_jobs`, batched);
  W worker tasks, each on its own connection. Its primitives are used directly (no
  QueueManager buffering), the fastest path it offers.

Reported, per system: jobs/s and claim-to-complete p50/p99 at 1, 4 and 8 workers, and server
transactions per job (the bench database's `xact_commit` delta over N: every transaction the
server committed, read-only clock reads included). Then, for Tether:
- claim p50 with 1,000,000 non-claimable rows (leased far ahead or finished, bulk-inserted
  with SQL) against 1,000 (target <= 1.5x);
- enqueue-to-claim p95 (from the admission's commit returning to a LISTEN/NOTIFY-woken
  worker's claim returning) against the raw commit time of a one-row UPDATE on the same
  server in the same run (target <= 4x).

The bench uses a database of its own on the server (created and dropped), so the transaction
counts are its alone. Usage:
    python benches/pg_queue.py [--url postgresql://127.0.0.1:5432/test] [--jobs N]
        [--workers 1 4 8] [--big-rows N] [--small-rows N] [--claims N] [--skip-size]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Receipt,
    ResultRef,
    operation_id_for,
    settlement_evidence_digest,
)
from tether.runtime import Wakeup
from tether.runtime._wakeup import CLAIMABLE
from tether.testing._postgres import schema_url

SOURCE = Receipt("bench-world", "run-1", 1, "tok-1")
LATER = Receipt("bench-world", "run-1", 2, "tok-2")
KIND = "bench.kind"


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


class Server:
    """A database of the bench's own on the server at ``url`` (created, dropped at close)."""

    def __init__(self, url: str) -> None:
        self.admin = url
        self.name = "tether_bench_" + uuid.uuid4().hex[:8]
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"CREATE DATABASE {self.name}")
        base, _, _query = url.partition("?")
        self.url = base.rsplit("/", 1)[0] + "/" + self.name

    def schema(self, name: str) -> str:
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f"CREATE SCHEMA {name}")
        return schema_url(self.url, name)

    def commits(self) -> int:
        """The database's committed transactions so far (every other session closed first,
        so their counts are flushed)."""
        time.sleep(0.2)
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute("SELECT pg_stat_clear_snapshot()")
            row = c.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


def raw_commit_ms(url: str, n: int = 500) -> float:
    """Median milliseconds of one autocommitted one-row UPDATE (synchronous_commit on)."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")
        c.execute("CREATE TABLE IF NOT EXISTS bench_raw (id int PRIMARY KEY, n bigint)")
        c.execute("INSERT INTO bench_raw VALUES (1, 0) ON CONFLICT DO NOTHING")
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            c.execute("UPDATE bench_raw SET n = n + 1 WHERE id = 1")
            samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


# -- Tether -----------------------------------------------------------------------------


def tether_run(url: str, jobs: int, workers: int, batch: int = 1) -> tuple[float, list[float]]:
    """(seconds from the first admission to the last settlement, claim-to-settle seconds).

    With ``batch`` > 1 the projector admits 100 per transaction and each worker claims up to
    ``batch`` per transaction, then binds, records and settles them in one transaction per
    step (`Catalog.*_many`): the core still decides each Activity."""
    keys = [ActivityKey("bench-world", KIND, f"a{i:07d}") for i in range(jobs)]
    result_for = {
        k: ResultRef(f"artifact://{k.activity_id}", "sha256:r", "application/json", 1) for k in keys
    }
    latencies: list[float] = []
    done = threading.Event()
    count = [0]
    lock = threading.Lock()
    stop = threading.Event()
    admitting = Catalog.open(url)
    wakeup = Wakeup(stop, 1.0, doorbell=admitting.doorbell, topic=CLAIMABLE)

    def work_batched(cat: Catalog, name: str) -> None:
        while not stop.is_set():
            mark = wakeup.mark()
            claims = cat.claim_many(name, 60_000, batch, kinds=[KIND])
            if not claims:
                wakeup.wait(mark, delay_s=None)
                continue
            t0 = time.perf_counter()
            bound = cat.bind_many([(c.key, c.attempt.fence) for c in claims])
            assert not any(isinstance(b, Exception) for b in bound), bound
            recorded = cat.record_results(
                [(c.key, c.attempt.fence, result_for[c.key]) for c in claims]
            )
            assert not any(isinstance(r, Exception) for r in recorded), recorded
            settled = cat.settle_many(
                [
                    (c.key, LATER, settlement_evidence_digest(c.key, result_for[c.key]))
                    for c in claims
                ]
            )
            assert not any(isinstance(r, Exception) for r in settled), settled
            t1 = time.perf_counter()
            with lock:
                latencies.extend([t1 - t0] * len(claims))
                count[0] += len(claims)
                if count[0] == jobs:
                    done.set()

    def work(cat: Catalog, name: str) -> None:
        while not stop.is_set():
            mark = wakeup.mark()
            claim = cat.claim(name, 60_000, kinds=[KIND])
            if claim is None:
                wakeup.wait(mark, delay_s=None)
                continue
            t0 = time.perf_counter()
            k = claim.key
            cat.bind_provider_operation(k, claim.fence, operation_id_for(k))
            res = result_for[k]
            cat.record_result(k, claim.fence, res)
            cat.settle(k, LATER, settlement_evidence_digest(k, res))
            t1 = time.perf_counter()
            with lock:
                latencies.append(t1 - t0)
                count[0] += 1
                if count[0] == jobs:
                    done.set()

    cats = [Catalog.open(url) for _ in range(workers)]
    threads = [
        threading.Thread(
            target=work if batch == 1 else work_batched, args=(cats[i], f"w{i}"), daemon=True
        )
        for i in range(workers)
    ]
    for t in threads:
        t.start()
    time.sleep(0.3)  # workers idle on the doorbell
    start = time.perf_counter()
    if batch == 1:
        for k in keys:
            admitting.admit(Admission(k, SOURCE, "input://x", "sha256:x"))
    else:
        for i in range(0, jobs, 100):
            out = admitting.admit_many(
                [Admission(k, SOURCE, "input://x", "sha256:x") for k in keys[i : i + 100]]
            )
            assert not any(isinstance(r, Exception) for r in out)
    done.wait(600)
    elapsed = time.perf_counter() - start
    stop.set()
    wakeup.stop_all()
    for t in threads:
        t.join(30)
    for c in cats:
        c.close()
    wakeup.close()
    admitting.close()
    assert count[0] == jobs, count
    return elapsed, latencies


def tether_enqueue_to_claim(url: str, n: int) -> tuple[list[float], list[float]]:
    """Seconds to a LISTEN/NOTIFY-woken worker's claim returning, from the admission's call
    and from its return (its commit acknowledged), one admission at a time."""
    stop = threading.Event()
    admitting = Catalog.open(url)
    worker = Catalog.open(url)
    wakeup = Wakeup(stop, 1.0, doorbell=worker.doorbell, topic=CLAIMABLE)
    claimed_at: dict[ActivityKey, float] = {}
    got = threading.Semaphore(0)

    def work() -> None:
        while not stop.is_set():
            mark = wakeup.mark()
            claim = worker.claim("lat", 60_000, kinds=[KIND])
            if claim is None:
                wakeup.wait(mark, delay_s=None)
                continue
            claimed_at[claim.key] = time.perf_counter()
            got.release()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    time.sleep(0.3)
    from_call, from_return = [], []
    for i in range(n):
        k = ActivityKey("bench-world", KIND, f"l{i:07d}")
        t0 = time.perf_counter()
        admitting.admit(Admission(k, SOURCE, "input://x", "sha256:x"))
        t1 = time.perf_counter()
        assert got.acquire(timeout=30)
        from_call.append(claimed_at[k] - t0)
        from_return.append(claimed_at[k] - t1)
        time.sleep(0.005)
    stop.set()
    wakeup.stop_all()
    thread.join(30)
    wakeup.close()
    worker.close()
    admitting.close()
    return from_call, from_return


_FILL = """
INSERT INTO activities (
    world_id, kind, activity_id, source_run_id, source_tick, source_token, input_ref,
    input_digest, admitted_at_ms, fence, attempt_count, attempt_owner, lease_expires_ms,
    may_execute, retry_authorized, result_ref, result_digest, result_media_type, result_size,
    result_failed, result_attempt, result_fence, result_at_ms, evidence_revision,
    awaiting_decision, claimable_from_ms, lease_boot_id, pending_observation, unsettled,
    version, bound_host)
SELECT 'fill-world', %(kind)s, 'f' || lpad(i::text, 8, '0'), 'run-1', 1, 'tok-1', 'input://f',
    'sha256:f', 0, 1, 1,
    CASE WHEN i %% 2 = 0 THEN 'holder' END, CASE WHEN i %% 2 = 0 THEN %(far)s END,
    CASE WHEN i %% 2 = 0 THEN 1 END, 0,
    CASE WHEN i %% 2 = 1 THEN 'artifact://f' END, CASE WHEN i %% 2 = 1 THEN 'sha256:f' END,
    CASE WHEN i %% 2 = 1 THEN 'application/json' END, CASE WHEN i %% 2 = 1 THEN 1 END,
    CASE WHEN i %% 2 = 1 THEN 0 END, CASE WHEN i %% 2 = 1 THEN 1 END,
    CASE WHEN i %% 2 = 1 THEN 1 END, CASE WHEN i %% 2 = 1 THEN 0 END, 0, 0,
    CASE WHEN i %% 2 = 0 THEN %(far)s END, %(boot)s, i %% 2, 1, 2, ''
FROM generate_series(0, %(n)s - 1) AS i
"""


def tether_claim_p50_us(url: str, filler: int, claims: int) -> float:
    with Catalog.open(url) as cat:
        assert cat.claim("bench", 60_000) is None  # the store is on the server clock's boot
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(_FILL, {"kind": KIND, "far": 2**62, "boot": cat.now().boot_id, "n": filler})
            c.execute("ANALYZE activities")
        for i in range(claims):
            k = ActivityKey("bench-world", KIND, f"c{i:07d}")
            cat.admit(Admission(k, SOURCE, "input://x", "sha256:x"))
        samples = []
        for _ in range(claims):
            t = time.perf_counter()
            claim = cat.claim("bench", 60_000)
            samples.append(time.perf_counter() - t)
            assert claim is not None
        assert cat.claim("bench", 60_000) is None
    return statistics.median(samples) * 1e6


# -- pgqueuer ---------------------------------------------------------------------------


def pgqueuer_run(dsn: str, schema: str, jobs: int, workers: int) -> tuple[float, list[float]]:
    import asyncpg
    from pgqueuer.queries import EntrypointExecutionParameter, Queries

    settings = {"search_path": schema, "synchronous_commit": "on"}
    batch = 10

    async def run() -> tuple[float, list[float]]:
        conns = [await asyncpg.connect(dsn, server_settings=settings) for _ in range(workers + 1)]
        producer = Queries.from_asyncpg_connection(conns[0])
        latencies: list[float] = []
        remaining = [jobs]
        entry = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}

        async def work(conn: Any) -> None:
            q = Queries.from_asyncpg_connection(conn)
            qm = uuid.uuid4()
            while remaining[0] > 0:
                got = await q.dequeue(batch, entry, qm, None, timedelta(seconds=60))  # type: ignore[arg-type]
                if not got:
                    await asyncio.sleep(0.001)
                    continue
                t0 = time.perf_counter()
                await q.log_jobs([(j, "successful", None) for j in got])
                t1 = time.perf_counter()
                latencies.extend([t1 - t0] * len(got))
                remaining[0] -= len(got)

        start = time.perf_counter()
        tasks = [asyncio.create_task(work(c)) for c in conns[1:]]
        for i in range(0, jobs, 100):
            n = min(100, jobs - i)
            await producer.enqueue(["bench"] * n, [b"x"] * n, [0] * n)
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        for c in conns:
            await c.close()
        return elapsed, latencies

    return asyncio.run(run())


def pgqueuer_install(dsn: str, schema: str) -> None:
    import asyncpg
    from pgqueuer.queries import Queries

    async def go() -> None:
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        await Queries.from_asyncpg_connection(conn).install(create_schema=False)
        await conn.close()

    asyncio.run(go())


# -- main -------------------------------------------------------------------------------


def measured(
    server: Server, run: Callable[[], tuple[float, list[float]]], jobs: int
) -> tuple[str, float]:
    """(one report line, jobs/s) of one run."""
    before = server.commits()
    elapsed, lat = run()
    after = server.commits()
    line = (
        f"{jobs / elapsed:9,.0f} jobs/s  claim-to-complete p50 {pct(lat, 0.5) * 1e3:6.2f} ms"
        f"  p99 {pct(lat, 0.99) * 1e3:6.2f} ms  server txns/job {(after - before) / jobs:5.2f}"
    )
    return line, jobs / elapsed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="postgresql://127.0.0.1:5432/test")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--workers", type=int, nargs="*", default=[1, 4, 8], help="none: skip")
    p.add_argument("--batch", type=int, default=10, help="Tether's batch (pgqueuer uses 10)")
    p.add_argument("--big-rows", type=int, default=1_000_000)
    p.add_argument("--small-rows", type=int, default=1_000)
    p.add_argument("--claims", type=int, default=500)
    p.add_argument("--latency-samples", type=int, default=300)
    p.add_argument("--skip-size", action="store_true", help="skip the 1M-row claim test")
    args = p.parse_args(argv)

    server = Server(args.url)
    try:
        raw = raw_commit_ms(server.url)
        print(f"server: {args.url} (bench database {server.name}); synchronous_commit=on")
        print(f"raw commit (one-row UPDATE, autocommit), median: {raw:.3f} ms")
        rates: dict[tuple[str, int], float] = {}
        for w in args.workers:
            print(f"\n== {args.jobs:,} jobs, {w} worker(s)")
            url = server.schema(f"tether_{w}")
            line, rate = measured(server, partial(tether_run, url, args.jobs, w), args.jobs)
            rates[("tether", w)] = rate
            print(f"tether   (admit, claim, bind, result, settle): {line}")
            url = server.schema(f"tether_b_{w}")
            line, rate = measured(
                server, partial(tether_run, url, args.jobs, w, args.batch), args.jobs
            )
            rates[("tether", w)] = rate
            print(f"tether   batched ({args.batch} per transaction):   {line}")
            pgq = f"pgq_{w}"
            server.schema(pgq)
            pgqueuer_install(server.url, pgq)
            line, rate = measured(
                server, partial(pgqueuer_run, server.url, pgq, args.jobs, w), args.jobs
            )
            rates[("pgqueuer", w)] = rate
            print(f"pgqueuer (enqueue, dequeue, complete):        {line}")
            ratio = rates[("tether", w)] / rates[("pgqueuer", w)]
            print(f"tether batched / pgqueuer jobs/s: {ratio:.2f}")
        if 8 in args.workers:
            ratio = rates[("tether", 8)] / rates[("pgqueuer", 8)]
            verdict = "meets" if ratio >= 1.0 else "MISSES"
            print(
                f"\ntarget >= 1.00x pgqueuer's jobs/s at 8 workers (Tether batched):"
                f" {ratio:.2f}x ({verdict})"
            )

        print(f"\n== enqueue-to-claim ({args.latency_samples} admissions, one idle worker)")
        calls, returns = tether_enqueue_to_claim(server.schema("tether_lat"), args.latency_samples)
        for what, lat in (("from the admit call", calls), ("from its commit returning", returns)):
            p95 = pct(lat, 0.95) * 1e3
            verdict = "meets" if p95 <= 4 * raw else "MISSES"
            print(
                f"{what:>26}: p50 {pct(lat, 0.5) * 1e3:.3f} ms  p95 {p95:.3f} ms"
                f" = {p95 / raw:.2f}x raw commit  (target <= 4x: {verdict})"
            )

        if not args.skip_size:
            print(f"\n== claim p50 by non-claimable rows ({args.claims} claims each)")
            small = tether_claim_p50_us(server.schema("size_small"), args.small_rows, args.claims)
            big = tether_claim_p50_us(server.schema("size_big"), args.big_rows, args.claims)
            ratio = big / small
            verdict = "meets" if ratio <= 1.5 else "MISSES"
            print(f"{args.small_rows:>9,} rows: {small:8.1f} us/claim")
            print(f"{args.big_rows:>9,} rows: {big:8.1f} us/claim")
            print(f"ratio: {ratio:.2f}  (target <= 1.50: {verdict})")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
