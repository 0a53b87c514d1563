"""The catalog's size per 1M settled Activities, before and after `tether db prune`.

Every record goes through the real transitions of the `Catalog` API (admit, claim, bind,
record result, settle), one transaction each, with field values shaped like the runtime's: a
`SqliteLedger` run id and visibility token, the projector's inline input reference of a
~100-byte request (made by the real `ArtifactStore`), a content-addressed result reference,
`operation_id_for`, `settlement_evidence_digest`, a worker owner name and a boot id. The catalog
runs with synchronous=NORMAL so 100k lifecycles fit in one run; the bytes on disk are the same
as with FULL (only when WAL frames are synced differs). Sizes are catalog.db plus its WAL after
`wal_checkpoint(TRUNCATE)`; per 1M they are extrapolated linearly from ``--activities`` (the
empty catalog's fixed size is subtracted first and added back), which the B-tree layout makes
close to exact. Then every record is compacted (`Catalog.compact_settled`, the path of
`tether db prune`) and measured again; ``activities / 10`` more lifecycles show how much the
unvacuumed file reuses; those are compacted too, the file is vacuumed and measured again.

Baseline, in the same run: the smallest table that holds what compaction must keep (key, source
receipt, input digest and settlement receipt with its evidence digest) for the same records,
one WITHOUT ROWID table, vacuumed. The ratio says how close the compacted catalog is to it.

Usage: python benches/catalog_size.py [--activities N] [--dir PATH]   (not a RAM filesystem)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Receipt,
    ResultRef,
    operation_id_for,
    settlement_evidence_digest,
)
from tether.runtime import ArtifactStore
from tether.storage import SqliteCatalogStore

KIND = "physical_ai.sim_episode"
WORLD = "demo"
MILLION = 1_000_000


def space(catalog: Catalog) -> int:
    store = catalog.store
    assert isinstance(store, SqliteCatalogStore)
    assert store.checkpoint(), "nothing else has the file open"
    s = store.space()
    return s["file_bytes"] + s["wal_bytes"]


def lifecycle(catalog: Catalog, artifacts: ArtifactStore, i: int, run_id: str) -> None:
    """One Activity through every transition to settlement, with runtime-shaped values."""
    key = ActivityKey(WORLD, KIND, f"reach-{i:06d}")
    request = {"target": [0.31 + i % 7 / 100, 0.12], "episodes": 2, "steps": 3000, "seed": i}
    inp = artifacts.put_bytes(json.dumps(request).encode(), "application/json")
    assert inp.ref.startswith("inline:")  # below the inline bound: no payload file
    source = Receipt(WORLD, run_id, 2 * i + 1, "vt_" + uuid.uuid4().hex)
    catalog.admit(Admission(key, source, inp.ref, inp.digest))
    claim = catalog.claim("4242-1a2b3c4d/w0", 30_000)
    assert claim is not None and claim.key == key
    catalog.bind_provider_operation(key, claim.fence, operation_id_for(key))
    hexdigest = hashlib.sha256(key.activity_id.encode()).hexdigest()
    # The shape `ArtifactStore.put_bytes` returns for a result above the inline bound (the
    # payload file itself is outside the catalog and not written here).
    result = ResultRef(
        "artifact:sha256/" + hexdigest, "sha256:" + hexdigest, "application/json", 812
    )
    catalog.record_result(key, claim.fence, result)
    later = Receipt(WORLD, run_id, 2 * i + 2, "vt_" + uuid.uuid4().hex)
    catalog.settle(key, later, settlement_evidence_digest(key, result))


def baseline(path: Path, catalog: Catalog) -> int:
    """The kept facts alone, in a bare vacuumed table: bytes."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE kept (world_id TEXT, kind TEXT, activity_id TEXT, source_run_id TEXT,"
        " source_tick INTEGER, source_token TEXT, input_digest TEXT, settled_run_id TEXT,"
        " settled_tick INTEGER, settled_token TEXT, evidence_digest TEXT, settled_at_ms INTEGER,"
        " PRIMARY KEY (world_id, kind, activity_id)) STRICT, WITHOUT ROWID"
    )
    store = catalog.store
    assert isinstance(store, SqliteCatalogStore)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO kept VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        store._db().execute(
            "SELECT world_id, kind, activity_id, source_run_id, source_tick, source_token,"
            " input_digest, settled_run_id, settled_tick, settled_token,"
            " settlement_evidence_digest, settled_at_ms FROM activities"
        ),
    )
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.close()
    return path.stat().st_size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None, help="on-disk directory (not tmpfs)")
    args = parser.parse_args(argv)
    n = args.activities
    directory = Path(tempfile.mkdtemp(prefix="tether-bench-size-", dir=args.dir or "/var/tmp"))
    try:
        url = "sqlite:///" + str(directory / "catalog.db")
        artifacts = ArtifactStore(directory / "artifacts")
        run_id = "run_" + uuid.uuid4().hex
        with Catalog.open(url, synchronous="NORMAL") as catalog:
            empty = space(catalog)
            start = time.perf_counter()
            for i in range(n):
                lifecycle(catalog, artifacts, i, run_id)
            took = time.perf_counter() - start
            settled = space(catalog)
            start = time.perf_counter()
            compacted = catalog.compact_settled(0)
            prune_s = time.perf_counter() - start
            assert compacted == n
            pruned = space(catalog)
            store = catalog.store
            assert isinstance(store, SqliteCatalogStore)
            free = store.space()["free_bytes"]
            # Reuse without VACUUM: n/10 more lifecycles into the pruned file.
            extra = max(1, n // 10)
            for i in range(n, n + extra):
                lifecycle(catalog, artifacts, i, run_id)
            grew = space(catalog) - pruned
            assert catalog.compact_settled(0) == extra  # all n + extra compacted now
            start = time.perf_counter()
            store.vacuum()
            vacuum_s = time.perf_counter() - start
            vacuumed = space(catalog)
            base = baseline(directory / "baseline.db", catalog)

        def per_million(total: int, count: int) -> float:
            return (total - empty) / count * MILLION + empty

        print(f"activities: {n:,} real lifecycles in {took:.1f} s ({n / took:,.0f}/s, NORMAL)")
        print(f"empty catalog:                  {empty:>14,} bytes")
        for label, total, count in (
            ("settled", settled, n),
            ("after prune (no vacuum)", pruned, n),
            ("after prune + VACUUM", vacuumed, n + extra),
        ):
            print(
                f"{label + ':':<32}{total:>14,} bytes  {(total - empty) / count:7.0f} B/activity"
                f"  per 1M (linear): {per_million(total, count) / 1e6:8.1f} MB"
            )
        print(f"prune: {prune_s:.1f} s ({n / prune_s:,.0f} records/s); VACUUM: {vacuum_s:.1f} s")
        print(f"free pages after prune, before VACUUM: {free:,} bytes")
        print(
            f"{extra:,} new lifecycles after prune without VACUUM grow the file by {grew:,} bytes"
            f" ({grew / extra:.0f} B/activity; {(settled - empty) / n:.0f} in a fresh file)"
        )
        print(
            f"baseline (kept facts, bare table, vacuumed): {base:,} bytes"
            f"  {base / (n + extra):7.0f} B/activity"
            f"  per 1M: {base / (n + extra) * MILLION / 1e6:8.1f} MB"
        )
        print(f"ratio compacted+vacuumed / baseline: {(vacuumed - empty) / base:.2f}x")
        per_settled = (settled - empty) / n
        per_vacuumed = (vacuumed - empty) / (n + extra)
        print(f"ratio settled / compacted+vacuumed:  {per_settled / per_vacuumed:.2f}x")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
