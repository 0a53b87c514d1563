"""The pause scenario against pgqueuer (a development-only dependency): a worker paused past
its heartbeat timeout (SIGSTOP) has its job rescued by another worker; continued (SIGCONT), it
completes the job by id and pgqueuer accepts it, while the rescuer is still executing: the
effect ran twice and the completion that counted is the stale worker's. Tether's fence refuses
the same stale worker (`test_netns_hosts`: a worker paused past its lease).

This test asserts pgqueuer's behaviour as observed; it fails if pgqueuer ever refuses the stale
completion (then the comparison in the README must change).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

asyncpg = pytest.importorskip("asyncpg")
pgqueuer_queries = pytest.importorskip("pgqueuer.queries")

HERE = Path(__file__).resolve().parent
HEARTBEAT_S = 1.0


@pytest.fixture
def schema(pg_base: str) -> Iterator[str]:
    name = "pgq_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    yield name
    with psycopg.connect(pg_base, autocommit=True) as c:
        c.execute("SET lock_timeout = '30s'")
        c.execute(f"DROP SCHEMA {name} CASCADE")


def _dsn(pg_base: str) -> str:
    return pg_base.split("?", 1)[0]


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_pgqueuer_accepts_the_stale_completion_of_a_paused_worker(
    pg_base: str, schema: str
) -> None:
    dsn = _dsn(pg_base)
    Queries = pgqueuer_queries.Queries
    Param = pgqueuer_queries.EntrypointExecutionParameter

    async def setup() -> int:
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        q = Queries.from_asyncpg_connection(conn)
        await q.install(create_schema=False)
        await conn.execute(
            "CREATE TABLE effects (seq serial PRIMARY KEY, job_id bigint, worker text)"
        )
        (job_id,) = await q.enqueue("effect", b"move-arm")
        await conn.close()
        return int(job_id)

    job_id = asyncio.run(setup())
    stale = subprocess.Popen(
        [sys.executable, str(HERE / "pgq_worker.py"), dsn, schema, "stale", str(HEARTBEAT_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stale.stdout is not None
        picked = stale.stdout.readline().split()
        assert picked[:2] == ["picked", str(job_id)], picked
        deadline = time.monotonic() + 30
        while not _stopped(stale.pid):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(HEARTBEAT_S * 1.5)  # past the heartbeat timeout

        async def rescue_then_let_the_stale_worker_finish() -> tuple[
            list[str], list[str], list[str], str
        ]:
            conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
            q = Queries.from_asyncpg_connection(conn)
            rescuer = uuid.uuid4()
            jobs = await q.dequeue(
                1, {"effect": Param(concurrency_limit=0)}, rescuer, None,
                timedelta(seconds=HEARTBEAT_S),
            )  # fmt: skip
            assert [j.id for j in jobs] == [job_id]  # rescued: the stale worker's job
            await conn.execute(
                "INSERT INTO effects (job_id, worker) VALUES ($1, 'rescuer')", job_id
            )
            owner = await conn.fetchval(
                "SELECT queue_manager_id::text FROM pgqueuer WHERE id = $1", job_id
            )
            assert owner == str(rescuer)
            # The rescuer is mid-execution; the stale worker is continued and completes by id.
            os.kill(stale.pid, signal.SIGCONT)
            line = await asyncio.to_thread(stale.stdout.readline)  # type: ignore[union-attr]
            log_after_stale = [
                r["status"] for r in await conn.fetch(
                    "SELECT status::text FROM pgqueuer_log WHERE job_id = $1 ORDER BY id", job_id
                )
            ]  # fmt: skip
            await q.log_jobs([(jobs[0], "successful", None)])  # the rescuer finishes
            log_final = [
                r["status"] for r in await conn.fetch(
                    "SELECT status::text FROM pgqueuer_log WHERE job_id = $1 ORDER BY id", job_id
                )
            ]  # fmt: skip
            effects = [
                r["worker"] for r in await conn.fetch("SELECT worker FROM effects ORDER BY seq")
            ]
            await conn.close()
            return log_after_stale, log_final, effects, line.strip()

        after_stale, log_final, effects, line = asyncio.run(
            rescue_then_let_the_stale_worker_finish()
        )
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
        stale.wait(timeout=30)
        if stale.stdout is not None:
            stale.stdout.close()
    assert line == "completed"
    assert stale.returncode == 0
    # The stale worker's completion was accepted while the rescuer held the job.
    assert "successful" in after_stale, after_stale
    assert log_final.count("successful") == 1  # the rescuer's own completion found no row
    assert effects == ["stale", "rescuer"]  # a double execution
