"""A host name on a shared PostgreSQL catalog is held by one daemon at a time
(`tether.storage._host_claim`): a second claim is refused naming the holder, a claim is
per schema, and a holder that closes, dies or loses its connection lets go."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tether.storage import _host_claim
from tether.storage._host_claim import HostClaim, HostNameTaken, is_shared

from tests.backends import pg_schema
from tests.grpc._freeze_proxy import FreezeProxy


def _holders(base: str, application: str) -> list[int]:
    with psycopg.connect(base, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
            (application,),
        ).fetchall()
    return [r[0] for r in rows]


def test_a_second_claim_of_a_name_is_refused_naming_its_holder(pg_url: str) -> None:
    first = HostClaim.take(pg_url, "arm-host-1")
    try:
        with pytest.raises(HostNameTaken) as info:
            HostClaim.take(pg_url, "arm-host-1")
        assert info.value.code == "host_name_taken"
        assert "'arm-host-1'" in info.value.message
        holder = info.value.details["holder"]
        assert holder.startswith("tether serve pid ") and " arm-host-1 from " in holder, holder
        other = HostClaim.take(pg_url, "arm-host-2")  # another name is free
        other.close()
    finally:
        first.close()
    again = HostClaim.take(pg_url, "arm-host-1")  # closed: free again
    again.close()


def test_a_claim_is_per_catalog_schema(pg_url: str, pg_base: str) -> None:
    with pg_schema(pg_base) as elsewhere:
        one, two = HostClaim.take(pg_url, "arm-host-1"), HostClaim.take(elsewhere, "arm-host-1")
        one.close()
        two.close()


def test_a_holder_killed_lets_its_name_go(pg_url: str) -> None:
    code = (
        "import sys, time\n"
        "from tether.storage._host_claim import HostClaim\n"
        "HostClaim.take(sys.argv[1], 'arm-host-1')\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(HostNameTaken):
            HostClaim.take(pg_url, "arm-host-1")
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while True:
        try:
            HostClaim.take(pg_url, "arm-host-1").close()
            break
        except HostNameTaken:
            assert time.monotonic() < deadline, "a killed holder's name was never let go"
            time.sleep(0.1)


def test_a_claim_whose_connection_broke_takes_its_name_again(
    pg_url: str, pg_base: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_host_claim, "CHECK_S", 0.1)
    claim = HostClaim.take(pg_url, "arm-host-9")
    try:
        application = claim._application()
        (pid,) = _holders(pg_base, application)
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while True:
            held = _holders(pg_base, application)
            if held and held != [pid]:
                break
            assert time.monotonic() < deadline, "the broken claim was never taken again"
            time.sleep(0.05)
        # Taken by another while this one's connection was down: an error says so.
        (pid,) = held
        caplog.set_level(logging.ERROR, logger="tether.storage.host_claim")
        # The watcher's next check is a second away: the thief below takes the name first.
        monkeypatch.setattr(_host_claim, "CHECK_S", 1.0)
        time.sleep(0.3)
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thief = None
        deadline = time.monotonic() + 10
        while thief is None:
            try:
                thief = HostClaim.take(pg_url, "arm-host-9")
            except HostNameTaken:
                assert time.monotonic() < deadline, "the claim was never let go"
        try:
            deadline = time.monotonic() + 10
            while not any(
                "host_name_taken" in r.getMessage() or "held on" in r.getMessage()
                for r in caplog.records
            ):
                assert time.monotonic() < deadline, "the lost claim was never reported"
                time.sleep(0.05)
        finally:
            thief.close()
    finally:
        claim.close()


def test_only_a_postgresql_catalog_is_shared() -> None:
    assert is_shared("postgresql://127.0.0.1/test") and is_shared("postgres://x/y")
    assert not is_shared("sqlite:///tmp/catalog.db") and not is_shared(None)


def test_a_search_path_of_no_schema_is_a_one_line_refusal(pg_base: str) -> None:
    from tether.errors import NoSuchSchema
    from tether.testing._postgres import schema_url

    with pytest.raises(NoSuchSchema, match="names no schema the server has") as info:
        HostClaim.take(schema_url(pg_base, "r_no_such_schema"), "arm-host-1")
    assert info.value.code == "no_such_schema" and "\n" not in str(info.value)


def test_a_claim_closed_while_it_reconnects_lets_go_of_the_new_connection(
    pg_url: str, pg_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_host_claim, "CHECK_S", 0.1)
    claim = HostClaim.take(pg_url, "arm-host-7")
    application = claim._application()
    hold = claim._hold
    reconnecting = threading.Event()

    def slow_hold(**again: bool) -> psycopg.Connection[object]:
        reconnecting.set()
        time.sleep(1.0)  # a reconnect that outlasts close()'s wait would have leaked
        return hold(**again)

    monkeypatch.setattr(claim, "_hold", slow_hold)
    (pid,) = _holders(pg_base, application)
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert reconnecting.wait(10)
    monkeypatch.setattr(_host_claim.threading.Thread, "join", lambda self, timeout=None: None)
    claim.close()  # returns at once, while the reconnect is under way
    time.sleep(1.5)
    assert _holders(pg_base, application) == []  # the new connection was closed, not kept
    HostClaim.take(pg_url, "arm-host-7").close()


def test_a_daemon_whose_name_was_taken_while_it_was_cut_off_stops(
    tmp_path: Path, pg_url: str, pg_base: str
) -> None:
    """`tether serve` on a shared catalog loses its claim's connection; another daemon takes
    the name meanwhile: the first stops (exit 7, `host_name_taken`) rather than claim the
    name's device work beside it."""
    from tests._serve import serve_config

    extra = '\n[serve]\nsse = "off"\nhost_name = "arm-host-5"\n'
    config = serve_config(tmp_path, "/dev/null-unused", extra=extra)
    argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
    argv += ["--catalog", pg_url, "--world", pg_url]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as daemon:
        try:
            assert daemon.stdout is not None and '"ready": true' in daemon.stdout.readline()
            application = next(
                a
                for a in _applications(pg_base)
                if a.startswith("tether serve pid ") and a.endswith(" arm-host-5")
            )
            (pid,) = _holders(pg_base, application)
            with psycopg.connect(pg_base, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            thief = HostClaim.take(pg_url, "arm-host-5")  # before its next check (10 s)
            try:
                _, err = daemon.communicate(timeout=30)
            finally:
                thief.close()
            assert daemon.returncode == 7, err
            assert "host_name_taken" in err and "Traceback" not in err
        finally:
            if daemon.poll() is None:
                daemon.kill()


def _applications(base: str) -> list[str]:
    with psycopg.connect(base, autocommit=True) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity").fetchall()
    return [r[0] for r in rows if r[0]]


def test_a_claim_reconnecting_to_a_schema_gone_for_a_while_keeps_trying(
    pg_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's connection broke and its schema is away (renamed) when it reconnects: the
    reconnect is refused (`no_such_schema`), logged, and tried again; once the schema is back
    the name is claimed again. The watch never dies of it."""
    import uuid

    from tether.testing._postgres import schema_url

    monkeypatch.setattr(_host_claim, "CHECK_S", 0.1)
    name = "tether_claim_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    claim = HostClaim.take(schema_url(pg_base, name), "arm-host-11")
    try:
        application = claim._application()
        (pid,) = _holders(pg_base, application)
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"ALTER SCHEMA {name} RENAME TO {name}_away")
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.5)  # a few refused reconnects
        assert claim._thread is not None and claim._thread.is_alive()
        assert _holders(pg_base, application) == []
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"ALTER SCHEMA {name}_away RENAME TO {name}")
        deadline = time.monotonic() + 10
        while not _holders(pg_base, application):
            assert time.monotonic() < deadline, "the name was never claimed again"
            time.sleep(0.05)
    finally:
        claim.close()
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {name}_away CASCADE")


def test_a_claim_cut_off_takes_its_name_back_from_its_own_earlier_session(
    pg_url: str, pg_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its connection reset on the client side only, a daemon's claim found the name held by
    its own earlier session (alive at the server until its keepalive ends it) and stopped the
    daemon as if another had taken the name (`host_name_taken`, naming its own pid)."""
    monkeypatch.setattr(_host_claim, "CHECK_S", 0.1)
    parts = urlsplit(pg_url)
    proxy = FreezeProxy(f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}")
    via = urlunsplit(
        parts._replace(netloc=parts.netloc.replace(f"{parts.hostname}:{parts.port}", proxy.address))
    )
    lost: list[HostNameTaken] = []
    claim = HostClaim.take(via, "arm-host-5", on_lost=lost.append)
    try:
        application = claim._application()
        (first,) = _holders(pg_base, application)
        proxy.reset_clients()
        deadline = time.monotonic() + 10
        while True:
            held = _holders(pg_base, application)
            if held and held != [first]:
                break
            assert not lost, lost[0].message
            assert time.monotonic() < deadline, "the name was never taken back"
            time.sleep(0.05)
        assert not lost
    finally:
        claim.close()
        proxy.close()


def test_a_daemon_whose_world_another_wrote_while_it_was_cut_off_stops(
    tmp_path: Path, pg_url: str
) -> None:
    """Another daemon took the name while this one's claim was cut off and wrote its world (a
    newer writer); this one took the name back after. It stayed up refusing every submit
    (`stale_writer`) while `tether status` looked healthy. It stops now (exit 7,
    `host_name_taken`), as one whose name is taken does; started again, it writes again."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
    from _dxl_setup import emulator_process
    from tether.client import Client, ClientError
    from tether.world import open_ledger

    from tests._serve import serve_config

    stores = f'catalog = "{pg_url}"\nworld = "{pg_url}"\n'
    extra = f'\n[serve]\nsse = "off"\nhost_name = "arm-host-7"\n{stores}'
    kind = "physical_ai.robot_move.absolute"
    with emulator_process(tmp_path, speed_scale=4.0) as emu:
        config = serve_config(tmp_path, emu.path, extra=extra)
        argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as daemon:
            try:
                assert daemon.stdout is not None and '"ready": true' in daemon.stdout.readline()
                client = Client(config=config)
                first = client.submit(None, "m1", kind, {"robot": "arm", "targets": {"a": 0.1}})
                world = str(first["key"]).split("/")[0]
                assert world == "local@arm-host-7", first
                ledger = open_ledger(pg_url)
                try:
                    ledger.acquire_writer(world)  # the other daemon's writer, newer
                finally:
                    ledger.close()
                with pytest.raises(ClientError):
                    client.submit(None, "m2", kind, {"robot": "arm", "targets": {"a": 0.2}})
                _, err = daemon.communicate(timeout=60)
                assert daemon.returncode == 7, err
                assert "host_name_taken" in err and "Traceback" not in err, err
            finally:
                if daemon.poll() is None:
                    daemon.kill()
