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

Both batch alike (`--batch`, 10): Tether admits 100 per transaction and each worker claims
`--batch` per transaction; pgqueuer enqueues 100 per statement and dequeues and completes
`--batch`. A Tether worker runs `Catalog.work_step`s, one transaction each: it settles (against
the later receipt) what its previous step recorded, records the results of what its previous
claim executed, and claims and binds its next batch (the core decides each settlement, each
result, each claim and each bind per Activity; the bind still precedes any effect, and every
step of one Activity is its own commit, after the one before it landed). Tether's
claim-to-complete runs from the call that claimed an Activity to the return of the one that
settled it (two steps later); pgqueuer's from its dequeue returning to its completion. A
Tether run of one Activity per transaction (`--unbatched-jobs`) is printed for reference.

Each worker count runs `--rounds` (3) alternating rounds of both systems (pgqueuer first in
every other round), each on fresh tables, and compares the medians of their jobs/s: one round
of each is at the mercy of this machine's noise (pgqueuer alone has ranged from 3,600 to 5,000
jobs/s between runs). The
process runs with the collector settings of Tether's long-running processes (`quiet_heap`,
as `tether serve` and `tether worker` set them once started), pgqueuer's rounds too.

Reported, per system: jobs/s and claim-to-complete p50/p99 at 1, 4 and 8 workers; write
transactions per job (Tether: the COMMITs its stores sent; pgqueuer: its statements that
write: enqueues, dequeues that returned jobs, completions); the bench database's server
commits per job (`xact_commit`: also each NOTIFY a listener received and each empty poll);
round trips per job; CPU per job of this process (the clients) and of the database's server
backends (/proc, local server only). Then, for Tether:
- claim p50 with 1,000,000 non-claimable rows (leased far ahead or finished, bulk-inserted
  with SQL) against 1,000, claims alternating between the two (target <= 1.5x);
- enqueue-to-claim p95, from the admit call (and from its commit returning) to a
  LISTEN/NOTIFY-woken worker's claim returning, against the raw commit time of a one-row
  UPDATE timed between the samples (each after the same idle pause), and against the
  back-to-back raw commits timed at the start (target <= 4x, judged on the interleaved one).
  On the server clock an admission is one round trip (its record stamped with the inserting
  statement's reading) and the woken claim takes the admission its notification announced in
  one more (`Catalog.claim`; see the README's PostgreSQL section): two commits, each durable.

The bench uses a database of its own on the server (created and dropped), so the transaction
counts are its alone. Usage:
    python benches/pg_queue.py [--url postgresql://127.0.0.1:5432/test] [--jobs N] [--batch N]
        [--unbatched-jobs N] [--workers 1 4 8] [--rounds N] [--big-rows N] [--small-rows N]
        [--claims N] [--latency-samples N] [--skip-size]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
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
from tether._priority import quiet_heap
from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Claim,
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


class Probe:
    """CPU spent between `start` and `stop`: this process's (the clients', every thread) and
    the server backends' of the bench database (read from /proc: the server must be local;
    otherwise server CPU is reported as unknown)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.client_s = 0.0
        self.server_s: float | None = None
        #: The clients' round trips to the server (set by the run).
        self.round_trips = 0
        self._tick = os.sysconf("SC_CLK_TCK")

    def _backends(self) -> dict[int, float]:
        out: dict[int, float] = {}
        with psycopg.connect(self.server.url, autocommit=True) as c:
            pids = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid != pg_backend_pid()"
            ).fetchall()
        for (pid,) in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            out[int(pid)] = (int(fields[11]) + int(fields[12])) / self._tick
        return out

    @staticmethod
    def _self_s() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def start(self) -> None:
        self._b0 = self._backends()
        self._c0 = self._self_s()

    def stop(self) -> None:
        self.client_s = self._self_s() - self._c0
        b1 = self._backends()
        if not b1 and not self._b0:
            return  # not a local server
        self.server_s = sum(v - self._b0.get(pid, 0.0) for pid, v in b1.items())


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


def tether_run(
    url: str, jobs: int, workers: int, batch: int, probe: Probe
) -> tuple[float, list[float], int]:
    """(seconds from the first admission to the last settlement, claim-to-settle seconds,
    transactions committed by the clients).

    With ``batch`` > 1 the projector admits 100 per transaction and each worker runs
    `Catalog.work_step`s: one transaction settles what its previous step recorded, records
    the results of what its last claims executed, and claims and binds up to ``batch`` more.
    The core still decides each Activity, and each Activity's claim, result and settlement
    are three successive commits."""
    keys = [ActivityKey("bench-world", KIND, f"a{i:07d}") for i in range(jobs)]
    result_for = {
        k: ResultRef(f"artifact://{k.activity_id}", "sha256:r", "application/json", 1) for k in keys
    }
    latencies: list[float] = []
    claimed: dict[ActivityKey, float] = {}  # each Activity's claim call (work_step's start)
    done = threading.Event()
    count = [0]
    lock = threading.Lock()
    stop = threading.Event()
    admitting = Catalog.open(url)
    wakeup = Wakeup(stop, 1.0, doorbell=admitting.doorbell, topic=CLAIMABLE)

    def work_batched(cat: Catalog, name: str) -> None:
        # One transaction per step: settle what the previous step recorded, record what the
        # last claims executed (the work itself is empty), claim and bind the next batch.
        # Each Activity is claimed, recorded and settled by three successive commits.
        held: list[Claim] = []  # claimed and executed: recorded by the next step
        recorded: list[tuple[ActivityKey, float]] = []  # settled by the next step
        while not stop.is_set():
            mark = wakeup.mark()
            t0 = time.perf_counter()
            step = cat.work_step(
                name,
                60_000,
                batch,
                kinds=[KIND],
                results=[(c.key, c.attempt.fence, result_for[c.key]) for c in held],
                settlements=[
                    (k, LATER, settlement_evidence_digest(k, result_for[k])) for k, _ in recorded
                ],
            )
            t1 = time.perf_counter()
            assert not step.refused, step.refused
            assert all(c.attempt.may_execute and c.record.operation_id for c in step.claims)
            if recorded:
                with lock:
                    latencies.extend(t1 - claimed_at for _, claimed_at in recorded)
                    count[0] += len(recorded)
                    if count[0] == jobs:
                        done.set()
            recorded = [(c.key, claimed[c.key]) for c in held]
            held = list(step.claims)
            for c in held:
                claimed[c.key] = t0
            if not (held or recorded):
                wakeup.wait(mark, delay_s=None)

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
    probe.start()
    commits0 = sum(_commits(c) for c in [admitting, *cats])
    trips0 = sum(_trips(c) for c in [admitting, *cats])
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
    probe.stop()
    commits = sum(_commits(c) for c in [admitting, *cats]) - commits0
    probe.round_trips = sum(_trips(c) for c in [admitting, *cats]) - trips0
    stop.set()
    wakeup.stop_all()
    for t in threads:
        t.join(30)
    for c in cats:
        c.close()
    wakeup.close()
    admitting.close()
    assert count[0] == jobs, count
    return elapsed, latencies, commits


def _commits(cat: Catalog) -> int:
    return int(getattr(cat.store, "commits", 0))


def _trips(cat: Catalog) -> int:
    return int(getattr(cat.store, "round_trips", 0))


def tether_enqueue_to_claim(
    url: str, raw_url: str, n: int
) -> tuple[list[float], list[float], list[float]]:
    """Seconds to a LISTEN/NOTIFY-woken worker's claim returning, from the admission's call
    and from its return (its commit acknowledged), one admission at a time; and, between
    samples, the seconds of one raw commit (`raw_commit_ms`'s UPDATE), so the ratio compares
    times taken under the same load."""
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
    from_call, from_return, raws = [], [], []
    raw = psycopg.connect(raw_url, autocommit=True)
    raw.execute("SET synchronous_commit = on")
    for i in range(n):
        k = ActivityKey("bench-world", KIND, f"l{i:07d}")
        t0 = time.perf_counter()
        admitting.admit(Admission(k, SOURCE, "input://x", "sha256:x"))
        t1 = time.perf_counter()
        assert got.acquire(timeout=30)
        from_call.append(claimed_at[k] - t0)
        from_return.append(claimed_at[k] - t1)
        time.sleep(0.005)
        t = time.perf_counter()
        raw.execute("UPDATE bench_raw SET n = n + 1 WHERE id = 1")
        raws.append(time.perf_counter() - t)
        time.sleep(0.005)
    raw.close()
    stop.set()
    wakeup.stop_all()
    thread.join(30)
    wakeup.close()
    worker.close()
    admitting.close()
    return from_call, from_return, raws


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


def tether_claim_p50_us(
    urls: tuple[str, str], fillers: tuple[int, int], claims: int
) -> tuple[float, float]:
    """Claim p50 (us) in two catalogs holding ``fillers`` non-claimable rows each (leased far
    ahead or finished, bulk-inserted with SQL) and ``claims`` claimable ones; the claims
    alternate between the two, so both are timed under the same load."""
    cats = [Catalog.open(url) for url in urls]
    try:
        for cat, url, filler in zip(cats, urls, fillers, strict=True):
            assert cat.claim("bench", 60_000) is None  # the store is on the server's boot
            with psycopg.connect(url, autocommit=True) as c:
                boot = cat.now().boot_id
                c.execute(_FILL, {"kind": KIND, "far": 2**62, "boot": boot, "n": filler})
                c.execute("ANALYZE activities")
            for i in range(0, claims, 100):
                ks = [ActivityKey("bench-world", KIND, f"c{j:07d}") for j in range(i, i + 100)]
                cat.admit_many([Admission(k, SOURCE, "input://x", "sha256:x") for k in ks[:claims]])
        samples: tuple[list[float], list[float]] = ([], [])
        for _ in range(claims):
            for cat, out in zip(cats, samples, strict=True):
                t = time.perf_counter()
                claim = cat.claim("bench", 60_000)
                out.append(time.perf_counter() - t)
                assert claim is not None
        assert all(cat.claim("bench", 60_000) is None for cat in cats)
    finally:
        for cat in cats:
            cat.close()
    return statistics.median(samples[0]) * 1e6, statistics.median(samples[1]) * 1e6


# -- pgqueuer ---------------------------------------------------------------------------


def pgqueuer_run(
    dsn: str, schema: str, jobs: int, workers: int, batch: int, probe: Probe
) -> tuple[float, list[float], int]:
    """As `tether_run`; the transactions are its statements (each one autocommitted):
    enqueues, dequeues that returned jobs (one that found none writes nothing) and
    completions."""
    import asyncpg
    from pgqueuer.queries import EntrypointExecutionParameter, Queries

    settings = {"search_path": schema, "synchronous_commit": "on"}

    async def run() -> tuple[float, list[float], int]:
        conns = [await asyncpg.connect(dsn, server_settings=settings) for _ in range(workers + 1)]
        producer = Queries.from_asyncpg_connection(conns[0])
        latencies: list[float] = []
        remaining = [jobs]
        statements = [0]
        polls = [0]  # dequeues that found nothing (a round trip, no write)
        entry = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}

        async def work(conn: Any) -> None:
            q = Queries.from_asyncpg_connection(conn)
            qm = uuid.uuid4()
            while remaining[0] > 0:
                got = await q.dequeue(batch, entry, qm, None, timedelta(seconds=60))  # type: ignore[arg-type]
                if not got:
                    polls[0] += 1
                    await asyncio.sleep(0.001)
                    continue
                t0 = time.perf_counter()
                await q.log_jobs([(j, "successful", None) for j in got])
                t1 = time.perf_counter()
                latencies.extend([t1 - t0] * len(got))
                remaining[0] -= len(got)
                statements[0] += 2

        probe.start()
        start = time.perf_counter()
        tasks = [asyncio.create_task(work(c)) for c in conns[1:]]
        for i in range(0, jobs, 100):
            n = min(100, jobs - i)
            await producer.enqueue(["bench"] * n, [b"x"] * n, [0] * n)
            statements[0] += 1
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        probe.stop()
        probe.round_trips = statements[0] + polls[0]
        for c in conns:
            await c.close()
        return elapsed, latencies, statements[0]

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


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measured(
    server: Server, run: Callable[[Probe], tuple[float, list[float], int]], jobs: int
) -> tuple[str, float]:
    """(report lines, jobs/s) of one run."""
    probe = Probe(server)
    before = server.commits()
    elapsed, lat, txns = run(probe)
    after = server.commits()
    cpu = f"CPU/job: clients {probe.client_s / jobs * 1e3:.2f} ms, server " + (
        "unknown" if probe.server_s is None else f"{probe.server_s / jobs * 1e3:.2f} ms"
    )
    line = (
        f"{jobs / elapsed:7,.0f} jobs/s  claim-to-complete p50 {pct(lat, 0.5) * 1e3:6.2f} ms"
        f"  p99 {pct(lat, 0.99) * 1e3:6.2f} ms\n{'':10}write transactions/job {txns / jobs:.2f}"
        f"  server commits/job {(after - before) / jobs:.2f}"
        f"  round trips/job {probe.round_trips / jobs:.2f}\n{'':10}{cpu}"
    )
    return line, jobs / elapsed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="postgresql://127.0.0.1:5432/test")
    p.add_argument(
        "--jobs",
        type=int,
        default=10_000,
        help="jobs per run (10,000: at 8 workers a run of 2,000 lasts 0.3 s, mostly start-up)",
    )
    p.add_argument("--workers", type=int, nargs="*", default=[1, 4, 8], help="none: skip")
    p.add_argument(
        "--batch", type=int, default=10, help="jobs per claim/dequeue, both systems (10)"
    )
    p.add_argument(
        "--unbatched-jobs", type=int, default=300, help="Tether one per transaction (0: skip)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternating rounds of both systems per worker count (medians compared)",
    )
    p.add_argument("--big-rows", type=int, default=1_000_000)
    p.add_argument("--small-rows", type=int, default=1_000)
    p.add_argument("--claims", type=int, default=500)
    p.add_argument("--latency-samples", type=int, default=300)
    p.add_argument("--skip-size", action="store_true", help="skip the 1M-row claim test")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    # The collector settings of Tether's long-running processes (`tether serve`, `tether
    # worker`), whose clients this process stands for; pgqueuer runs under them too.
    quiet_heap()

    server = Server(args.url)
    try:
        raw = raw_commit_ms(server.url)
        print(f"server: {args.url} (bench database {server.name}); synchronous_commit=on")
        print(f"raw commit (one-row UPDATE, autocommit), median: {raw:.3f} ms; load {_load()}")
        rates: dict[tuple[str, int], float] = {}
        for w in args.workers:
            print(f"\n== {w} worker(s); load average {_load()}")
            n = args.unbatched_jobs
            if n:
                url = server.schema(f"tether_{w}")
                line, _rate = measured(server, partial(tether_run, url, n, w, 1), n)
                print(f"tether   one Activity per transaction, {n:,} jobs: {line}")
            runs: dict[str, list[float]] = {"tether": [], "pgqueuer": []}
            for r in range(args.rounds):
                of = f" (round {r + 1} of {args.rounds})" if args.rounds > 1 else ""
                # Odd rounds run pgqueuer first: drift within a round (autovacuum after the
                # first system, a warm cache) falls on each system alike.
                order = ("tether", "pgqueuer") if r % 2 == 0 else ("pgqueuer", "tether")
                for system in order:
                    if system == "tether":
                        url = server.schema(f"tether_b_{w}_{r}")
                        run = partial(tether_run, url, args.jobs, w, args.batch)
                        title = "tether   (admit, claim, bind, result, settle)"
                    else:
                        pgq = f"pgq_{w}_{r}"
                        server.schema(pgq)
                        pgqueuer_install(server.url, pgq)
                        run = partial(pgqueuer_run, server.url, pgq, args.jobs, w, args.batch)
                        title = "pgqueuer (enqueue, dequeue, complete)"
                    line, rate = measured(server, run, args.jobs)
                    runs[system].append(rate)
                    print(f"{title}, {args.jobs:,} jobs{of}:")
                    print(f"{'':10}{line}")
            for system, got in runs.items():
                rates[(system, w)] = statistics.median(got)
            ratio = rates[("tether", w)] / rates[("pgqueuer", w)]
            print(
                f"median jobs/s of {args.rounds} round(s): tether {rates[('tether', w)]:,.0f},"
                f" pgqueuer {rates[('pgqueuer', w)]:,.0f}; tether / pgqueuer: {ratio:.2f}"
            )
        if 8 in args.workers:
            ratio = rates[("tether", 8)] / rates[("pgqueuer", 8)]
            verdict = "PASS" if ratio >= 1.0 else "FAIL"
            print(
                f"\ntarget >= 1.00x pgqueuer's jobs/s at 8 workers, both batching"
                f" {args.batch}: {ratio:.2f}x  {verdict}"
            )

        n = args.latency_samples
        print(f"\n== enqueue-to-claim ({n} admissions, one idle worker); load {_load()}")
        calls, returns, raws = tether_enqueue_to_claim(server.schema("tether_lat"), server.url, n)
        raw_here = statistics.median(raws) * 1e3
        print(f"raw commit interleaved with the samples, median: {raw_here:.3f} ms")
        for what, lat in (("from the admit call", calls), ("from its commit returning", returns)):
            p95 = pct(lat, 0.95) * 1e3
            print(
                f"{what:>26}: p50 {pct(lat, 0.5) * 1e3:.3f} ms  p95 {p95:.3f} ms"
                f" = {p95 / raw_here:.2f}x the interleaved raw commit"
                f" ({p95 / raw:.2f}x the back-to-back one, {raw:.3f} ms)"
            )
        ratio = pct(calls, 0.95) * 1e3 / raw_here
        verdict = "PASS" if ratio <= 4 else "FAIL"
        print(f"target: p95 from the admit call <= 4x raw commit: {ratio:.2f}x  {verdict}")

        if not args.skip_size:
            print(
                f"\n== claim p50 by non-claimable rows ({args.claims} claims each, alternating)"
                f"; load {_load()}"
            )
            small, big = tether_claim_p50_us(
                (server.schema("size_small"), server.schema("size_big")),
                (args.small_rows, args.big_rows),
                args.claims,
            )
            ratio = big / small
            verdict = "PASS" if ratio <= 1.5 else "FAIL"
            print(f"{args.small_rows:>9,} rows: {small:8.1f} us/claim")
            print(f"{args.big_rows:>9,} rows: {big:8.1f} us/claim")
            print(f"target: ratio <= 1.50: {ratio:.2f}  {verdict}")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
