"""Two OS processes claiming from one catalog (a SQLite file, a PostgreSQL schema with leases
on the server's clock): every activity is executed exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tether.activities import ActivityKey, Catalog, operation_id_for

from tests.activities.support import admission

REPO = Path(__file__).resolve().parents[2]


def run_workers(tmp_path: Path, activities: int, names: tuple[str, ...], db: str) -> None:
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    keys = [ActivityKey("w1", "sim.rollout", f"a{i:04d}") for i in range(activities)]
    with Catalog.open(db) as cat:
        for k in keys:
            cat.admit(admission(k))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.activities.claim_worker",
                str(db),
                str(effects),
                str(go),
                name,
                str(seed),
            ],
            cwd=REPO,
        )
        for seed, name in enumerate(names)
    ]
    deadline = time.monotonic() + 60
    while not all(Path(f"{go}.{n}.ready").exists() for n in names):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()  # both are imported and waiting: they start claiming together
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = [line.split() for line in effects.read_text().splitlines()]
    per_operation = Counter(op for op, _, _ in lines)
    assert per_operation == Counter({operation_id_for(k): 1 for k in keys})
    with Catalog.open(db) as cat:
        for k in keys:
            rec = cat.get(k)
            assert rec is not None and rec.result is not None
            assert rec.result.ref == f"effect://{operation_id_for(k)}"
    assert {who for _, who, _ in lines} == set(names), "every process did work"


def test_two_processes_execute_every_activity_exactly_once(tmp_path: Path, db_url: str) -> None:
    run_workers(tmp_path, 120, ("proc-a", "proc-b"), db_url)


@pytest.mark.slow
def test_four_processes_execute_a_thousand_activities_exactly_once(
    tmp_path: Path, db_url: str
) -> None:
    run_workers(tmp_path, 1_000, ("proc-a", "proc-b", "proc-c", "proc-d"), db_url)
