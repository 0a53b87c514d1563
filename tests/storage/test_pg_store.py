"""The PostgreSQL catalog store itself: concurrent claimants on separate connections, the
claim plan, the server clock and the session settings."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.storage._pg import _literal
from tether.storage._postgres import PostgresCatalogStore, PostgresClock

from tests.activities.support import ManualClock, admission, key, result


def test_claimants_on_separate_connections_skip_each_others_rows(pg_url: str) -> None:
    clock = ManualClock()
    keys = [key(f"p{i:03d}") for i in range(80)]
    with Catalog.open(pg_url, clock=clock) as cat:
        for k in keys:
            cat.admit(admission(k))
    claimed: list[ActivityKey] = []
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with Catalog.open(pg_url, clock=clock) as mine:  # its own server session
                while (c := mine.claim(name, 60_000)) is not None:
                    mine.bind_provider_operation(c.key, c.fence, operation_id_for(c.key))
                    mine.record_result(c.key, c.fence, result(c.key.activity_id))
                    claimed.append(c.key)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(f"host-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert sorted(claimed, key=lambda k: k.activity_id) == keys  # each exactly once


def test_the_claim_walks_the_claimable_index(pg_url: str) -> None:
    """With 50,000 finished rows (no `claimable_from_ms`) the claim's plan is the partial
    claimable index: finished and leased rows are never read."""
    store = PostgresCatalogStore(pg_url)
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO activities (world_id, kind, activity_id, source_run_id, source_tick,"
            " source_token, input_ref, input_digest, admitted_at_ms, fence, attempt_count,"
            " retry_authorized, evidence_revision, awaiting_decision, lease_boot_id,"
            " pending_observation, unsettled, version)"
            " SELECT 'w', 'k', 'done-' || i, 'r', 1, 't', 'in', 'd', 0, 1, 1, 0, 0, 0, '', 0,"
            " 0, 3 FROM generate_series(1, 50000) AS i"
        )
        conn.execute("ANALYZE activities")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT * FROM activities WHERE claimable_from_ms IS NOT NULL"
                " AND claimable_from_ms <= 5 AND kind = ANY(%s) ORDER BY claimable_from_ms,"
                " kind, world_id, activity_id LIMIT 1 FOR UPDATE SKIP LOCKED",
                (["k"],),
            )
        )
    assert "activities_claimable" in plan and "Seq Scan" not in plan, plan


def test_the_server_clock_and_the_session_settings(pg_url: str) -> None:
    store = PostgresCatalogStore(pg_url)
    try:
        clock = store.server_clock()
        a, b = clock.now(), clock.now()
        assert a.boot_id == b.boot_id and a.boot_id.startswith(("pg-kernel:", "pg:"))
        assert b.boot_ms >= a.boot_ms
        wall = PostgresClock(store, mode="wall")
        w = wall.now()
        assert w.boot_id.startswith("pg:") and w.boot_ms >= 0
        # The boots are set once per session, as the server names them.
        ((system, started),) = store._session.read(
            "boots",
            "SELECT (SELECT system_identifier FROM pg_control_system())::text,"
            " (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text",
        )
        assert w.boot_id == f"pg:{system}:{started}"
        if clock.mode == "kernel":
            ((boot,),) = store._session.read(
                "boot", "SELECT pg_read_file('/proc/sys/kernel/random/boot_id')"
            )
            assert a.boot_id == "pg-kernel:" + boot.strip()
        # A broken connection is replaced (the read that found it broken is sent again on
        # the new one), and the new session sets them again.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (store.backend_pid,))
        assert clock.now().boot_id == a.boot_id and wall.now().boot_id == w.boot_id
        settings = dict(
            store._session.read(
                "settings",
                "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit',"
                " 'statement_timeout', 'idle_in_transaction_session_timeout', 'lock_timeout')",
            )
        )
        assert settings["synchronous_commit"] == "on"
        assert int(settings["statement_timeout"]) > 0 and int(settings["lock_timeout"]) > 0
        assert int(settings["idle_in_transaction_session_timeout"]) > 0
    finally:
        store.close()


def test_synchronous_commit_off_in_the_url_is_overridden(pg_url: str) -> None:
    url = pg_url.replace("options=", "options=-csynchronous_commit%3Doff%20")
    store = PostgresCatalogStore(url)
    try:
        assert store._session.read("s", "SHOW synchronous_commit") == [("on",)]
    finally:
        store.close()


def test_a_catalog_on_the_server_clock_by_default(pg_url: str) -> None:
    with Catalog.open(pg_url) as cat:
        assert isinstance(cat.clock, PostgresClock)
        rec = cat.admit(admission(key()))
        assert rec.lease_boot_id == cat.now().boot_id


def _back_to_version_2(conn: psycopg.Connection[Any]) -> None:
    """Undo catalog versions 4 (the artifacts table) and 3 (the bound host) on a fresh
    catalog: version 2's layout."""
    conn.execute("DROP TABLE artifacts")
    conn.execute("DROP INDEX activities_claimable")
    conn.execute("ALTER TABLE activities DROP COLUMN bound_host")
    conn.execute(
        "CREATE INDEX activities_claimable ON activities"
        " (claimable_from_ms, kind, world_id, activity_id) WHERE claimable_from_ms IS NOT NULL"
    )
    conn.execute("UPDATE tether_schema_version SET version = 2 WHERE store = 'catalog'")


def test_a_version_2_postgres_catalog_gains_bound_hosts_through_upgrade(pg_url: str) -> None:
    """Catalog version 3 adds `bound_host`: a version-2 catalog refuses to open naming `tether
    db upgrade`; the upgrade keeps every row (bound to no host) and rebuilds the claimable
    index with the bound host, so device-bound work is claimed on its host only."""
    from tether.cli import main as tether
    from tether.errors import SchemaOutdated, WrongHost

    clock = ManualClock()
    old = key("old")
    with Catalog.open(pg_url, clock=clock) as cat:
        cat.admit(admission(old))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _back_to_version_2(conn)
    with pytest.raises(SchemaOutdated, match=r"version 2, this Tether needs 4.*tether db upgrade"):
        Catalog.open(pg_url, clock=clock)
    assert tether(["db", "upgrade", pg_url, "--store", "catalog"]) == 0
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'activities_claimable'"
            " AND schemaname = current_schema()"
        ).fetchone()
    assert row is not None and "bound_host" in row[0]
    with Catalog.open(pg_url, clock=clock) as cat:
        rec = cat.get(old)
        assert rec is not None and rec.bound_host == ""
        bound = key("bound")
        cat.admit(dataclasses.replace(admission(bound), bound_host="arm-host"))
        with pytest.raises(WrongHost):
            cat.claim_key(bound, "w", 1000, host="other-host")
        c = cat.claim("w", 1000, host="other-host")
        assert c is not None and c.key == old
        assert cat.claim("w", 1000, host="other-host") is None
        c = cat.claim("w", 1000, host="arm-host")
        assert c is not None and c.key == bound and c.record.bound_host == "arm-host"


def test_a_version_3_postgres_catalog_gains_the_shared_artifacts_through_upgrade(
    pg_url: str, tmp_path: Path
) -> None:
    """Catalog version 4 adds the hosts' shared artifacts table: a version-3 catalog refuses
    to open naming `tether db upgrade`; after it, payloads above the inline bound are stored
    there and its rows are kept."""
    from tether.cli import main as tether
    from tether.errors import SchemaOutdated
    from tether.runtime import ArtifactStore
    from tether.runtime._artifacts import shared_for

    old = key("old")
    with Catalog.open(pg_url) as cat:
        cat.admit(admission(old))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE artifacts")
        conn.execute("UPDATE tether_schema_version SET version = 3 WHERE store = 'catalog'")
    with pytest.raises(SchemaOutdated, match=r"version 3, this Tether needs 4.*tether db upgrade"):
        Catalog.open(pg_url)
    assert tether(["db", "upgrade", pg_url, "--store", "catalog"]) == 0
    with Catalog.open(pg_url) as cat:
        assert cat.get(old) is not None
    store = ArtifactStore(tmp_path / "artifacts", shared=shared_for(pg_url))
    try:
        ref = store.put_bytes(b"q" * 1000, "application/octet-stream")
        assert store.get(ref) == b"q" * 1000
    finally:
        store.close()
    assert not list((tmp_path / "artifacts" / "sha256").rglob("*"))


def test_a_version_1_postgres_catalog_gains_retention_through_upgrade(pg_url: str) -> None:
    """Catalog version 2 on PostgreSQL adds retention: a version-1 catalog (issue 14's layout)
    refuses to open naming `tether db upgrade`; the upgrade adds the columns and the index, and
    existing settled rows become compactable from their settlement time (the core computes it,
    not SQL); unsettled rows never. Compaction then works."""
    from tether.cli import main as tether
    from tether.errors import SchemaOutdated
    from tether.storage import _pg_schema

    from tests.activities.support import bound_claim, evidence_for, receipt

    clock = ManualClock()
    settled, pending = key("settled"), key("pending")
    with Catalog.open(pg_url, clock=clock) as cat:
        for k in (settled, pending):
            c = bound_claim(cat, k)
            cat.record_result(k, c.fence, result(k.activity_id))
        cat.settle(settled, receipt(9), evidence_for(settled, result("settled")))
        settled_at = cat.get(settled).settlement.settled_at_ms  # type: ignore[union-attr]
    assert _pg_schema.latest("catalog") == 4
    # Back to version 1: the table as issue 14 created it, without the retention columns
    # (nor version 3's bound host and its claimable index).
    conninfo = pg_url
    with psycopg.connect(conninfo, autocommit=True) as conn:
        _back_to_version_2(conn)
        conn.execute("DROP INDEX activities_compactable")
        conn.execute("ALTER TABLE activities DROP COLUMN compacted_at_ms")
        conn.execute("ALTER TABLE activities DROP COLUMN compactable_from_ms")
        conn.execute("UPDATE tether_schema_version SET version = 1 WHERE store = 'catalog'")
    with pytest.raises(SchemaOutdated, match=r"version 1, this Tether needs 4.*tether db upgrade"):
        Catalog.open(pg_url, clock=clock)
    assert tether(["db", "upgrade", pg_url, "--store", "catalog"]) == 0
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'activities_compactable'"
            " AND schemaname = current_schema()"
        ).fetchone()
    assert row is not None and "WHERE (compactable_from_ms IS NOT NULL)" in row[0]
    with Catalog.open(pg_url, clock=clock) as cat:
        s, p = cat.get(settled), cat.get(pending)
        assert s is not None and p is not None
        assert (s.compactable_from_ms, s.compacted_at_ms) == (settled_at, None)
        assert (p.compactable_from_ms, p.compacted_at_ms) == (None, None)
        assert [r.key for r in cat.iter_compactable(0)] == [settled]
        assert cat.compact_settled(0) == 1
        assert cat.get(settled).compacted and not cat.get(pending).compacted  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "it's",
        "back\\slash",
        "'\\'\\\\''",
        "line\nbreak\ttab",
        "é€ unicode",
        "",
        0,
        -7,
        2**63 - 1,
        -(2**63),
        True,
        False,
        None,
        ["k1", "k'2", 'k"3', "k\\4", "", "a,b", "{x}"],
        [],
    ],
)
def test_an_execute_argument_reads_back_as_the_driver_would_bind_it(
    pg_url: str, value: object
) -> None:
    """The stores' own literals (`_literal`) read back on the server exactly as the value the
    driver binds; a type they do not handle, or a NUL, is left to the driver."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        literal = _literal(value)
        assert literal is not None
        kind = "text[]" if isinstance(value, list) else "text"
        (got,) = conn.execute(f"SELECT ({literal})::{kind}").fetchone()  # type: ignore[misc]
        (want,) = conn.execute(f"SELECT %s::{kind}", (value,)).fetchone()  # type: ignore[misc]
        assert got == want
    assert _literal("nul\0") is None and _literal(1.5) is None and _literal([1]) is None
