"""What every Tether session forces whatever the URL, role or database asks: READ COMMITTED
(both stores' writers wait on a row lock and re-read; a stricter default fails them), UTF-8
(the stores send any text); and the server clock on a server without the kernel's files."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from tether.activities import Catalog
from tether.storage._pg import connect
from tether.storage._postgres import PostgresCatalogStore, PostgresClock
from tether.world import open_ledger

from tests.activities.support import ManualClock, admission, key

#: A URL option (added to ``options=``) making every transaction REPEATABLE READ by default.
REPEATABLE_READ = "-cdefault_transaction_isolation%3Drepeatable%5C%20read%20"


class SessionProblem(Exception):
    pass


def _lock_waiters(conn: psycopg.Connection[object], at_least: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND application_name = 'tether-world'"
        ).fetchone()
        if row is not None and row[0] >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} writers waited for the row lock")


def test_concurrent_writer_acquisitions_succeed_under_a_repeatable_read_default(
    pg_url: str, pg_base: str
) -> None:
    url = pg_url.replace("options=", "options=" + REPEATABLE_READ)
    ledgers = [open_ledger(url) for _ in range(2)]
    epochs: list[int] = []
    errors: list[BaseException] = []

    def acquire(i: int) -> None:
        try:
            epochs.append(ledgers[i].acquire_writer("w").epoch)
        except BaseException as e:
            errors.append(e)

    try:
        ledgers[0].create_world("w")
        with psycopg.connect(url, autocommit=True) as holder, psycopg.connect(pg_base) as watch:
            # Both acquisitions wait on the world's row while another writer holds it; each
            # then finds the row changed since its transaction began.
            with holder.transaction():
                holder.execute("UPDATE worlds SET writer_epoch = writer_epoch WHERE world_id = 'w'")
                threads = [threading.Thread(target=acquire, args=(i,)) for i in range(2)]
                for t in threads:
                    t.start()
                _lock_waiters(watch, 2, timeout_s=10)
        for t in threads:
            t.join(timeout=30)
        assert errors == []
        assert len(set(epochs)) == 2
    finally:
        for ledger in ledgers:
            ledger.close()


def test_a_catalog_session_is_read_committed_whatever_the_url_asks(pg_url: str) -> None:
    url = pg_url.replace("options=", "options=-cdefault_transaction_isolation%3Dserializable%20")
    store = PostgresCatalogStore(url)
    try:
        assert store._session.read("s", "SHOW transaction_isolation") == [("read committed",)]
    finally:
        store.close()


def test_a_store_session_writes_even_where_the_url_asks_read_only(pg_url: str) -> None:
    """A URL (or a role's default) asking read-only transactions would let a store open,
    then fail every claim and write for ever: each session writes."""
    url = pg_url.replace("options=", "options=-cdefault_transaction_read_only%3Don%20")
    with Catalog.open(url, clock=ManualClock()) as cat:
        k = key("read-only-1")
        cat.admit(admission(k))
        claim = cat.claim("host", 10_000)
        assert claim is not None and claim.key == k


@pytest.mark.parametrize(
    "latin1", ["&client_encoding=LATIN1", "options=-cclient_encoding%3DLATIN1%20"]
)
def test_a_session_speaks_utf8_whatever_the_url_asks(pg_url: str, latin1: str) -> None:
    url = pg_url + latin1 if latin1.startswith("&") else pg_url.replace("options=", latin1)
    conn = connect(url, SessionProblem, application="tether-test")
    try:
        assert conn.info.encoding == "utf-8"
    finally:
        conn.close()
    with Catalog.open(url, clock=ManualClock()) as cat:  # texts no LATIN1 can carry
        k = key("ロボット-1", world="世界")
        cat.admit(admission(k))
        claim = cat.claim("ホスト", 10_000)
        assert claim is not None and claim.key == k


def _superuser(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def test_the_kernel_clock_is_chosen_only_where_the_server_has_its_files(pg_url: str) -> None:
    """Linux has /proc: here the missing file is another path of the same statement, and a
    session whose kernel boot came out empty (as `BOOTS` leaves it without the file)."""
    if not _superuser(pg_url):
        pytest.skip("needs a role that may read server files")
    missing = PostgresClock.BOOTS.replace(
        "/proc/sys/kernel/random/boot_id", "/proc/no-such-dir/boot_id"
    )
    assert missing != PostgresClock.BOOTS
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(missing)  # a missing file is an empty boot, not an error
        assert conn.execute("SELECT current_setting('tether.kernel_boot')").fetchone() == ("",)
    store = PostgresCatalogStore(pg_url)
    try:
        assert store.server_clock().mode == "kernel"  # this server has the files
        store._session.read("boot", "SELECT set_config('tether.kernel_boot', '', false)")
        assert PostgresClock(store).mode == "wall"
    finally:
        store.close()
