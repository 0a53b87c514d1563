"""The throwaway PostgreSQL cluster (started even though the system server is up), password
credentials from the environment or a password file, and one-line connection errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tether import _exit
from tether.activities import Catalog
from tether.errors import CatalogStorageError, WorldError
from tether.testing._postgres import ThrowawayCluster, pg_bin_dir
from tether.world import open_ledger

from tests.activities.support import ManualClock, admission, key

PASSWORD = "Tether-throwaway-7f3a"
CRASH = Path(__file__).resolve().parents[1] / "crash"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    with ThrowawayCluster(password=PASSWORD) as c:
        yield c


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))


def _passfile(tmp_path: Path, cluster: ThrowawayCluster, password: str) -> Path:
    path = tmp_path / "pgpass"
    path.write_text(f"127.0.0.1:{cluster.port}:*:postgres:{password}\n")
    path.chmod(0o600)  # libpq ignores a password file others can read
    return path


def test_the_throwaway_cluster_runs_beside_the_system_server(cluster: ThrowawayCluster) -> None:
    assert cluster.port != 5432 and cluster.dir is not None
    assert (cluster.dir / "data" / "PG_VERSION").exists()


def test_a_password_from_a_file_opens_both_stores(
    cluster: ThrowawayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_credentials: None
) -> None:
    monkeypatch.setenv("PGPASSFILE", str(_passfile(tmp_path, cluster, PASSWORD)))
    with Catalog.open(cluster.url, clock=ManualClock()) as cat:
        cat.admit(admission(key()))
        assert cat.get(key()) is not None
    ledger = open_ledger(cluster.url)
    try:
        assert ledger.create_world(f"w-{time.monotonic_ns()}").tick == 0
    finally:
        ledger.close()


def test_a_wrong_password_is_one_line_naming_the_host_and_the_cause(
    cluster: ThrowawayCluster, monkeypatch: pytest.MonkeyPatch, no_credentials: None
) -> None:
    monkeypatch.setenv("PGPASSWORD", "wrong-password-9")
    with pytest.raises(CatalogStorageError) as info:
        Catalog.open(cluster.url)
    text = str(info.value)
    assert f"127.0.0.1:{cluster.port}/test" in text and "password authentication failed" in text
    assert "\n" not in text and "wrong-password-9" not in text
    with pytest.raises(WorldError, match="password authentication failed"):
        open_ledger(cluster.url)
    # A password in the URL is used, but never shown either.
    url = cluster.url.replace("postgres@", "postgres:url-secret-3@")
    with pytest.raises(CatalogStorageError) as info:
        Catalog.open(url)
    assert "url-secret-3" not in str(info.value)


def test_a_password_file_others_can_read_is_named_as_why_no_password_was_supplied(
    cluster: ThrowawayCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_credentials: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """libpq ignores a password file others can read (saying so only in a warning of its own
    on stderr): the refusal names the file, its mode and the fix, never the password; and
    libpq's warning, a second line beside the refusal's, is not printed."""
    path = _passfile(tmp_path, cluster, PASSWORD)
    path.chmod(0o644)
    monkeypatch.setenv("PGPASSFILE", str(path))
    capfd.readouterr()
    with pytest.raises(CatalogStorageError) as info:
        Catalog.open(cluster.url)
    assert "WARNING" not in capfd.readouterr().err
    text = str(info.value)
    assert "no password supplied" in text and "\n" not in text, text
    assert f"the password file {path} was ignored: its mode 0644" in text, text
    assert f"chmod 600 {path}" in text and PASSWORD not in text
    path.chmod(0o600)  # the same file, private: it is read
    Catalog.open(cluster.url).close()


def _worker(data: Path, url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(CRASH), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "tether", "worker", str(data), "--families"]
    argv += ["journal_provider:families", "--catalog", url, "--world", url]
    return subprocess.Popen(
        argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_tether_worker_on_a_password_server(cluster: ThrowawayCluster, tmp_path: Path) -> None:
    bad = _worker(
        tmp_path, cluster.url, {"PGPASSWORD": "nope-nope-1", "PGPASSFILE": "/nonexistent"}
    )
    out, err = bad.communicate(timeout=60)
    assert bad.returncode == _exit.FAILED, err  # a refused login (`login_refused`): reached
    assert err.count("\n") == 1 and f"127.0.0.1:{cluster.port}" in err
    assert "password authentication failed" in err and "nope-nope-1" not in err + out
    unreachable = _worker(tmp_path, "postgresql://127.0.0.1:1/test", {})
    _, err = unreachable.communicate(timeout=60)
    assert (
        unreachable.returncode == _exit.UNAVAILABLE
        and "127.0.0.1:1/test" in err
        and "refused" in err
    )
    good = _worker(
        tmp_path, cluster.url, {"PGPASSFILE": str(_passfile(tmp_path, cluster, PASSWORD))}
    )
    try:
        time.sleep(2.0)
        assert good.poll() is None, good.stderr.read() if good.stderr else ""
    finally:
        good.send_signal(signal.SIGTERM)
        out, err = good.communicate(timeout=60)
    assert good.returncode == 0, err
    assert PASSWORD not in out + err


def test_serve_and_db_on_a_wrong_password_are_a_refused_login(
    cluster: ThrowawayCluster, tmp_path: Path
) -> None:
    """The server was reached and refused the credential: FAILED (`login_refused`), in one
    line naming the host and the cause, never the password."""
    import json

    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[serve]\ndata_dir = "{tmp_path / "data"}"\nsse = "off"\nlive = "off"\n'
        'families = ["tether.serve.families:sim_families"]\n'
    )
    env = {**os.environ, "PGPASSWORD": "nope-nope-2", "PGPASSFILE": "/nonexistent"}
    for argv in (
        ["serve", "--config", str(config), "--catalog", cluster.url, "--world", cluster.url],
        ["db", "status", cluster.url],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "tether", *argv, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == _exit.FAILED, done.stderr
        (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("tether ")]
        assert f"127.0.0.1:{cluster.port}" in line and "password authentication failed" in line
        doc = json.loads(done.stdout.splitlines()[-1])
        assert doc["code"] == "login_refused"
        if argv[0] == "db":  # a refused login is no unreachable server, in its class either
            assert doc["error"] == "DatabaseError", doc
        assert "nope-nope-2" not in done.stdout + done.stderr


def _sim_host(tmp_path: Path, url: str) -> Path:
    """A sim-only host.toml whose stores are both at `url`, every listener off."""
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n[serve]\nsse = "off"\n'
        f'console = "off"\nlive = "off"\ncatalog = "{url}"\nworld = "{url}"\n'
        'families = ["tether.serve.families:sim_families"]\n'
    )
    return config


def _upgraded(c: ThrowawayCluster, env: dict[str, str]) -> None:
    """`tether db upgrade` of the cluster's database: both stores made."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", "db", "upgrade", c.url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr


def _cluster_pids(c: ThrowawayCluster) -> list[int]:
    """The postmaster of `c` and every process it started (its backends and helpers)."""
    assert c.dir is not None
    postmaster = int((c.dir / "data" / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            pids.append(int(stat.parent.name))
    return pids


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_process_stopped_while_its_database_is_frozen_exits_within_its_bound(
    tmp_path: Path, command: str
) -> None:
    """A frozen server answers no statement and runs none of its own timeouts: a worker or a
    daemon whose threads wait on it is still stopped by SIGTERM, after
    `TETHER_SHUTDOWN_BOUND_S`, in one line and exit 1 (before, it stayed alive until the
    server was thawed)."""
    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    with ThrowawayCluster() as c:
        env = {**os.environ, "TETHER_SHUTDOWN_BOUND_S": "2"}
        env.pop("PGPASSWORD", None)
        _upgraded(c, env)
        if command == "worker":
            argv = [sys.executable, "-m", "tether", "worker", str(tmp_path / "data")]
            argv += ["--families", "tether.families.sim.adapter:worker_families"]
            argv += ["--catalog", c.url, "--world", c.url, "--workers", "2"]
            argv += ["--fallback-poll-s", "1"]
        else:
            config = _sim_host(tmp_path, c.url)
            argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        frozen: list[int] = []
        try:
            assert proc.stderr is not None and proc.stdout is not None
            if command == "worker":
                line = proc.stderr.readline()
                assert "tether worker ready" in line, line + proc.stderr.read()
            else:
                line = proc.stdout.readline()
                assert '"ready": true' in line, line + proc.stderr.read()
            with psycopg.connect(c.url, autocommit=True) as conn:
                deadline = time.monotonic() + 60
                while True:  # its doorbell and each worker are connected, idle
                    n = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'test'"
                        " AND pid != pg_backend_pid()"
                    ).fetchone()
                    if n is not None and n[0] >= 4:
                        break
                    assert time.monotonic() < deadline and proc.poll() is None, n
                    time.sleep(0.1)
            time.sleep(0.5)
            frozen = _cluster_pids(c)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(2.5)  # each worker's next claim (the fallback poll) waits on it
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=30)
            took = time.monotonic() - start
            said = proc.stderr.read()
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        assert rc == 1 and took < 15, (rc, took, said)
        assert f"tether {command}: shutdown_stalled:" in said and "Traceback" not in said, said


def test_a_server_outage_is_said_once_by_the_doorbell_and_its_end_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """While its server is down the doorbell retries each second: it says so once (not once
    a retry), in one line, and once that it listens again."""
    import logging

    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    caplog.set_level(logging.INFO, logger="tether.storage")
    with ThrowawayCluster() as c, Catalog.open(c.url) as cat:
        doorbell = cat.doorbell
        assert doorbell is not None
        doorbell.listen()
        try:
            c.pause()
            time.sleep(4.5)  # four reconnects or more, each refused
            c.resume()
            deadline = time.monotonic() + 30
            while not any("listening again" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
                time.sleep(0.1)
        finally:
            doorbell.unlisten()
    said = [r.getMessage() for r in caplog.records if "doorbell" in r.getMessage()]
    down = [m for m in said if "cannot listen" in m or "connection lost" in m]
    assert len(down) == 1, said  # the outage's start, once: not once a refused reconnect
    assert all("\n" not in m and "\t" not in m for m in said), said
    assert [m for m in said if "listening again after" in m], said


def test_status_during_a_database_outage_shows_the_daemon_and_says_what_is_unknown(
    tmp_path: Path,
) -> None:
    """`tether status` asks the daemon, which owns its devices: a store it cannot read now
    (the server stopped) leaves the rest shown, exit 0, and says what is not known."""
    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    with ThrowawayCluster() as c:
        env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
        config = _sim_host(tmp_path, c.url)
        status = [sys.executable, "-m", "tether", "status", "--config", str(config)]
        argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        ) as proc:
            try:
                assert proc.stdout is not None and '"ready": true' in proc.stdout.readline()
                c.pause()
                done = subprocess.run(
                    [*status, "--json"], capture_output=True, text=True, timeout=60, env=env
                )
                assert done.returncode == 0, done.stderr
                doc = json.loads(done.stdout)
                assert doc["activities"] is None and doc["parked"] is None
                assert f"127.0.0.1:{c.port}" in doc["stores_error"], doc
                assert doc["daemon"]["pid"] == proc.pid
                words = subprocess.run(status, capture_output=True, text=True, timeout=60, env=env)
                assert words.returncode == 0, words.stderr
                assert "activities and decisions unknown" in words.stdout
                c.resume()
            finally:
                proc.terminate()
                proc.wait(60)


def test_status_while_the_database_hangs_answers_with_what_is_not_known(tmp_path: Path) -> None:
    """A database that hangs (rather than refusing) leaves `tether status` answering within its
    bound: the daemon's own part, and `stores_error` saying the catalog did not answer, exit 0
    (before, the daemon never answered the status at all); once thawed, the counts are back."""
    import json

    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    with ThrowawayCluster() as c:
        env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
        _upgraded(c, env)
        config = _sim_host(tmp_path, c.url)
        argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
        status = [sys.executable, "-m", "tether", "status", "--config", str(config), "--json"]

        def asked() -> subprocess.CompletedProcess[str]:
            return subprocess.run(status, capture_output=True, text=True, timeout=60, env=env)

        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        try:  # the daemon is stopped whatever fails (a daemon left behind outlives the test)
            assert proc.stdout is not None and '"ready": true' in proc.stdout.readline()
            before = asked()
            assert before.returncode == 0 and json.loads(before.stdout)["activities"] is not None
            frozen = _cluster_pids(c)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                hung = asked()
                took = time.monotonic() - start
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
            assert hung.returncode == 0, hung.stdout + hung.stderr
            doc = json.loads(hung.stdout)
            assert doc["stores_error"].startswith("storage_stalled: "), doc
            assert doc["activities"] is None and doc["daemon"]["pid"] == proc.pid
            assert took < 9, took  # within the daemon's bound, inside status's own wait
            deadline = time.monotonic() + 30
            while True:  # the hung read ends once thawed; a later status reads again
                doc = json.loads(asked().stdout)
                if doc.get("activities") is not None:
                    break
                assert time.monotonic() < deadline, doc
                time.sleep(0.5)
            assert "stores_error" not in doc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


def test_a_move_whose_daemon_cannot_read_it_back_is_not_a_lost_daemon(tmp_path: Path) -> None:
    """`tether move` through a daemon on PostgreSQL, the server stopped mid-move: the daemon
    runs on and answered that its catalog read failed; the move said "tether serve stopped
    answering" (`daemon_lost`). It says the daemon could not read the move back."""
    import json

    from tests._serve import clean_env, serve_config
    from tests.adapters._dxl_setup import emulator_process

    if pg_bin_dir() is None and os.geteuid() != 0:
        pytest.skip("no PostgreSQL binaries and not root to install them")
    with ThrowawayCluster() as c, emulator_process(tmp_path, speed_scale=1.0) as emu:
        env = {k: v for k, v in clean_env().items() if k != "PGPASSWORD"}
        _upgraded(c, env)
        extra = f'\n[serve]\nsse = "off"\ncatalog = "{c.url}"\nworld = "{c.url}"\n'
        config = serve_config(tmp_path, emu.path, extra=extra)
        config.write_text(
            config.read_text().replace("speed = 2.0\nfirst_motion_speed = 0.5", "speed = 0.2")
        )
        argv = [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        try:
            assert proc.stdout is not None and '"ready": true' in proc.stdout.readline()
            move = [sys.executable, "-m", "tether", "move", "--config", str(config), "--robot"]
            move += ["arm", "--joint", "a=0.4", "--activity", "cut-off", "--json"]
            mover = subprocess.Popen(
                move, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            assert mover.stdout is not None
            first = mover.stdout.readline()  # its first progress: the move runs
            assert "progress" in first, first + (mover.stderr.read() if mover.stderr else "")
            c.pause()
            out, err = mover.communicate(timeout=120)
            doc = json.loads(out.strip().splitlines()[-1])
            assert mover.returncode == 4, (out, err)
            assert (doc["status"], doc["reason"]) == ("pending", "daemon_failed"), doc
            assert "could not read the move back" in doc["error"], doc
            assert proc.poll() is None  # the daemon runs on
            c.resume()
        finally:
            proc.terminate()
            proc.wait(60)
            assert proc.stdout is not None
            proc.stdout.close()
