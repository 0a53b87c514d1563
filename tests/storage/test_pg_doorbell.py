"""LISTEN/NOTIFY wakeups of a PostgreSQL catalog: a commit that makes work claimable, records a
result or settles wakes listeners on other connections; a rolled-back write wakes nobody;
catalogs in other schemas do not wake each other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether.activities import Catalog, operation_id_for
from tether.errors import AdmissionConflict
from tether.storage._pg_doorbell import CLAIMABLE, RESULT, SETTLED, PostgresDoorbell

from tests.activities.support import ManualClock, admission, evidence_for, key, receipt, result


@pytest.fixture
def bell(pg_url: str) -> Iterator[PostgresDoorbell]:
    bell = PostgresDoorbell(pg_url)  # not the shared one: this test owns its listener
    bell.listen()
    yield bell
    bell.unlisten()


def test_commits_wake_listeners_by_topic_and_rollbacks_do_not(
    pg_url: str, bell: PostgresDoorbell
) -> None:
    with Catalog.open(pg_url, clock=ManualClock()) as cat:  # its own connection
        k = key()
        mark = bell.mark(CLAIMABLE)
        cat.admit(admission(k))
        assert bell.wait(CLAIMABLE, mark, timeout_s=10)
        quiet = bell.mark(CLAIMABLE)
        with pytest.raises(AdmissionConflict):
            cat.admit(admission(k, input_digest="sha256:other"))  # rejected: rolled back
        assert not bell.wait(CLAIMABLE, quiet, timeout_s=0.5)
        c = cat.claim("w", 10_000)
        assert c is not None
        cat.bind_provider_operation(k, c.fence, operation_id_for(k))
        mark = bell.mark(RESULT)
        cat.record_result(k, c.fence, result())
        assert bell.wait(RESULT, mark, timeout_s=10)
        mark = bell.mark(SETTLED)
        cat.settle(k, receipt(5), evidence_for(k, result()))
        assert bell.wait(SETTLED, mark, timeout_s=10)
        assert bell.received >= 3


def test_another_schema_rings_another_channel(
    pg_url: str, bell: PostgresDoorbell, pg_base: str
) -> None:
    import uuid

    import psycopg
    from tether.testing._postgres import schema_url

    other = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {other}")
    try:
        mark = bell.mark(CLAIMABLE)
        with Catalog.open(schema_url(pg_base, other), clock=ManualClock()) as cat:
            cat.admit(admission(key()))
        assert not bell.wait(CLAIMABLE, mark, timeout_s=0.5)
    finally:
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {other} CASCADE")


def test_a_lost_listener_connection_reconnects_and_wakes_everyone(
    pg_url: str, bell: PostgresDoorbell, pg_base: str
) -> None:
    import psycopg

    marks = {t: bell.mark(t) for t in (CLAIMABLE, RESULT, SETTLED)}
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'tether-doorbell' AND query LIKE %s",
            (f"LISTEN%{bell.channel}%",),
        )
    for topic, mark in marks.items():  # notifications sent while away are lost: re-check
        assert bell.wait(topic, mark, timeout_s=15)
    assert bell.reconnects == 1
