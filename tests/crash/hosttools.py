"""Shared helpers for in-process Host tests: a manual clock, a Host factory, keys, draining."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from journal_provider import KIND, make_family
from tether.activities import ActivityKey
from tether.runtime import Family, Host
from tether.testing import ActivityEnvironment
from tether.world import CommittedTickReceipt

from tests import backends
from tests._hosts import HandClock as Clock
from tests._hosts import drain as drain


def make_host(tmp_path: Path, *families: Family, clock: Clock | None = None, **kw: Any) -> Host:
    """A Host over `tmp_path` with no threads, its catalog and ledger on the test's backend
    (`tests/conftest.py` runs every test that calls this on SQLite and on PostgreSQL)."""
    fams = families or (make_family(tmp_path),)
    if "ledger" not in kw:
        kw = {**store_kw(tmp_path), **kw}
    return Host(tmp_path, fams, workers=0, observe=False, clock=clock or Clock(), **kw)


def make_env(families: Sequence[Family] = (), *, data_dir: Path, **kw: Any) -> ActivityEnvironment:
    """An `ActivityEnvironment` over `data_dir`, its catalog and ledger on the test's backend
    (`tests/conftest.py` runs every test that calls this on SQLite and on PostgreSQL)."""
    if "ledger" not in kw:
        kw = {**store_kw(data_dir), **kw}
    return ActivityEnvironment(families, data_dir=data_dir, **kw)


def store_kw(data_dir: Path) -> dict[str, str]:
    """The Host arguments that put `data_dir`'s catalog and ledger on the test's backend."""
    if backends.schema_for_dir is None:
        return {}
    url = backends.schema_for_dir(data_dir)
    return {"catalog_url": url, "world_url": url}


def world_sql(data_dir: Path, sql: str, *args: object) -> None:
    """Run one raw statement (``?`` placeholders) on `data_dir`'s world ledger, as a test that
    tampers with the stored ledger does, on whichever backend the test runs."""
    _raw(data_dir, "world.db", sql, args)


def catalog_dump(data_dir: Path) -> str:
    """Every stored catalog value of `data_dir`, as text (to prove what never entered it)."""
    if backends.schema_for_dir is None:
        raw = sqlite3.connect(data_dir / "catalog.db")
        try:
            return "\n".join(raw.iterdump())
        finally:
            raw.close()
    import psycopg

    with psycopg.connect(backends.schema_for_dir(data_dir), autocommit=True) as conn:
        return "\n".join(r[0] for r in conn.execute("SELECT activities::text FROM activities"))


def take_payload(data_dir: Path, hexdigest: str) -> Callable[[], None]:
    """Remove the stored payload `hexdigest` of `data_dir`'s Host (a file of its data dir, or
    on PostgreSQL a row of the catalog's shared artifacts table), as a test of a lost payload
    does; returns what puts it back."""
    if backends.schema_for_dir is None:
        path = data_dir / "artifacts" / "sha256" / hexdigest[:2] / hexdigest
        data = path.read_bytes()
        path.unlink()

        def write_back() -> None:
            path.write_bytes(data)

        return write_back
    import psycopg

    url = backends.schema_for_dir(data_dir)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "DELETE FROM artifacts WHERE hexdigest = %s RETURNING size, data", (hexdigest,)
        ).fetchone()
    assert row is not None, f"no payload {hexdigest} stored"

    def put_back() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO artifacts (hexdigest, size, data) VALUES (%s, %s, %s)",
                (hexdigest, row[0], row[1]),
            )

    return put_back


def _raw(data_dir: Path, file: str, sql: str, args: tuple[object, ...]) -> None:
    if backends.schema_for_dir is None:
        raw = sqlite3.connect(data_dir / file)
        try:
            raw.execute(sql, args)
            raw.commit()
        finally:
            raw.close()
        return
    import psycopg

    with psycopg.connect(backends.schema_for_dir(data_dir), autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]


def akey(i: int, world: str = "w", kind: str = KIND) -> ActivityKey:
    return ActivityKey(world_id=world, kind=kind, activity_id=f"task-{i:04d}")


def same(receipt: CommittedTickReceipt, other: Any) -> bool:
    return (receipt.world_id, receipt.run_id, receipt.tick, receipt.visibility_token) == (
        other.world_id,
        other.run_id,
        other.tick,
        other.visibility_token,
    )


@contextmanager
def catalog_failing(catalog: Any) -> Iterator[None]:
    """Every use of ``catalog`` fails the same way inside the block, as when its store is gone:
    a SQLite catalog is closed; a PostgreSQL one, which would reconnect, has its activities
    table renamed away (and back at the end)."""
    import psycopg

    conninfo = getattr(catalog.store, "conninfo", None)
    if conninfo is None:
        catalog.close()
        yield
        return
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("ALTER TABLE activities RENAME TO activities_away")
    try:
        yield
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute("ALTER TABLE activities_away RENAME TO activities")
