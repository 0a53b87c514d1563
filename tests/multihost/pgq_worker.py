"""A pgqueuer worker for the pause comparison, run as its own process:
``python pgq_worker.py DSN SCHEMA NAME HEARTBEAT_S``.

It dequeues one job of entrypoint ``effect`` as queue manager NAME, applies the job's effect
(one row in ``effects``: pgqueuer names no operation identity a provider could deduplicate on),
prints ``picked <job id> <queue manager id>``, stops itself (SIGSTOP) before completing, and,
once continued, completes the job through pgqueuer (`Queries.log_jobs`, by job id) and prints
``completed``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from datetime import timedelta

import asyncpg
from pgqueuer.queries import EntrypointExecutionParameter, Queries


async def main(dsn: str, schema: str, name: str, heartbeat_s: float) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    q = Queries.from_asyncpg_connection(conn)
    qm = uuid.uuid4()
    jobs = await q.dequeue(
        1,
        {"effect": EntrypointExecutionParameter(concurrency_limit=0)},  # type: ignore[dict-item]
        qm,  # type: ignore[arg-type]
        None,
        timedelta(seconds=heartbeat_s),
    )
    assert len(jobs) == 1, jobs
    job = jobs[0]
    await conn.execute("INSERT INTO effects (job_id, worker) VALUES ($1, $2)", job.id, name)
    print(f"picked {job.id} {qm}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # paused past the heartbeat timeout
    await q.log_jobs([(job, "successful", None)])
    print("completed", flush=True)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
