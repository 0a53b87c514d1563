"""The PostgreSQL catalog store itself: concurrent claimants on separate connections, the
claim plan, the server clock and the session settings."""

from __future__ import annotations

import threading

import psycopg
from tether.activities import ActivityKey, Catalog, operation_id_for
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
