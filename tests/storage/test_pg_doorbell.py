"""LISTEN/NOTIFY wakeups of a PostgreSQL catalog: a commit that makes work claimable, records a
result or settles wakes listeners on other connections; a rolled-back write wakes nobody;
catalogs in other schemas do not wake each other."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tether.activities import Catalog, operation_id_for
from tether.errors import AdmissionConflict
from tether.storage._pg_doorbell import (
    CHANNEL_MAX_BYTES,
    CHANNEL_PREFIX,
    CLAIMABLE,
    RESULT,
    SETTLED,
    PostgresDoorbell,
    channel_name,
)
from tether.testing._ports import free_port
from tether.testing._postgres import schema_url

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


def test_a_channel_fits_the_server_and_is_one_per_schema() -> None:
    assert channel_name("t_abc") == CHANNEL_PREFIX + "t_abc"  # as deployed catalogs use it
    edge = "s" * (CHANNEL_MAX_BYTES - len(CHANNEL_PREFIX))
    assert channel_name(edge) == CHANNEL_PREFIX + edge
    names = [edge + "x", "a" * 63, "a" * 62 + "b", "é" * 31, "é" * 30 + "e"]
    channels = [channel_name(n) for n in names]
    assert all(len(c.encode()) <= CHANNEL_MAX_BYTES for c in channels), channels
    assert all(c.startswith(CHANNEL_PREFIX) for c in channels)
    assert len(set(channels)) == len(names)


def test_a_catalog_in_a_schema_with_a_long_name_admits_and_wakes_its_listeners(
    pg_base: str,
) -> None:
    schema = ("t_" + uuid.uuid4().hex + "_long_schema_name_").ljust(60, "x")
    assert len(schema) == 60
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = schema_url(pg_base, schema)
    bell = PostgresDoorbell(url)
    try:
        bell.listen()
        with Catalog.open(url, clock=ManualClock()) as cat:
            mark = bell.mark(CLAIMABLE)
            cat.admit(admission(key()))
            assert bell.wait(CLAIMABLE, mark, timeout_s=10)
            assert cat.claim("w", 10_000) is not None
        assert bell.channel == channel_name(schema)
    finally:
        bell.unlisten()
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


class _Forwarder:
    """A loopback TCP port that forwards to the server once `start` is called (refusing
    connections until then): a server that comes up after its clients."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.port = free_port()
        netloc = f"{parts.username + '@' if parts.username else ''}127.0.0.1:{self.port}"
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self._listener: socket.socket | None = None

    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def test_a_listener_whose_first_connect_failed_wakes_everyone_once_it_listens(
    pg_url: str,
) -> None:
    proxy = _Forwarder(pg_url)
    bell = PostgresDoorbell(proxy.url)
    try:
        bell.listen()  # the server is not there: it returns, and its callers scan on their own
        assert bell.channel is None
        marks = {t: bell.mark(t) for t in (CLAIMABLE, RESULT, SETTLED)}
        with Catalog.open(pg_url, clock=ManualClock()) as cat:
            cat.admit(admission(key()))  # rung while nobody listens: lost
        proxy.start()
        for topic, mark in marks.items():  # what was rung meanwhile is lost: everyone re-checks
            assert bell.wait(topic, mark, timeout_s=15), topic
        assert bell.reconnects == 1 and bell.received == 0
    finally:
        bell.unlisten()
        proxy.close()
