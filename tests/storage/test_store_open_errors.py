"""A store that cannot be opened stops `tether serve`, `tether worker` and `tether db` with the
exit code of the table, one line naming the host and the cause (never a password, never a
traceback) and, with ``--json``, its stable code: a server that cannot be reached
(`unreachable`, 7), a refused login (`login_refused`, 1), a database the server does not have
or a bad URL (`no_such_database`, `bad_url`, 2), a schema to upgrade first
(`migration_needed`, 5), one SQLite file named for both the catalog and the world ledger
(`same_store_file`, 2, before anything is written)."""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tether import _exit
from tether.activities import Catalog
from tether.errors import NoSuchSchema, SameStoreFile, SchemaOutdated
from tether.runtime import Host
from tether.runtime.worker_main import _check_stores
from tether.storage import SqliteCatalogStore
from tether.storage._pg import connect_failure
from tether.storage._schema import LATEST
from tether.storage._urls import redact
from tether.testing._postgres import schema_url
from tether.world import SqliteLedger, open_ledger

CRASH = Path(__file__).resolve().parents[1] / "crash"
#: A password in a URL: it may reach the server, never the output.
SECRET = "Sekrit-Pw-4711"
UNREACHABLE = f"postgresql://ann:{SECRET}@127.0.0.1:1/test"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join([str(CRASH), env.get("PYTHONPATH", "")])
    return env


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return _run_env({}, *argv)


def _run_env(extra: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), **extra},
    )


def _config(tmp_path: Path) -> Path:
    """A host.toml with no robot: the daemon opens its stores and serves the sim family."""
    path = tmp_path / "host.toml"
    path.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[serve]\ndata_dir = "{tmp_path / "data"}"\nsse = "off"\nlive = "off"\n'
        'families = ["tether.serve.families:sim_families"]\n'
    )
    return path


def _serve(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return _run("serve", "--config", str(_config(tmp_path)), *argv)


def _worker(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "wdata").mkdir(mode=0o700, exist_ok=True)  # the test family's journal is there
    return _run("worker", str(tmp_path / "wdata"), "--families", "journal_provider:families", *argv)


def _refusal(done: subprocess.CompletedProcess[str], prog: str) -> str:
    """The one line on stderr (after the daemon's own log lines), checked for no traceback
    and no password."""
    assert "Traceback" not in done.stdout + done.stderr and SECRET not in done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith(f"{prog}: ")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    (doc,) = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert doc["status"] == "refused"
    return doc


def _variant(url: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2]
    if user is not None:
        parts = parts._replace(netloc=f"{user}@{hostport}")
    if database is not None:
        parts = parts._replace(path=f"/{database}")
    return urlunsplit(parts)


# -- a server that cannot be reached, a refused login, a bad URL ---------------------------


@pytest.mark.parametrize(
    ("cause", "code"),
    [
        ('connection to server at "db", port 1 failed: Connection refused', "unreachable"),
        (
            "failed to resolve host 'db.invalid': [Errno -2] Name or service not known",
            "unreachable",
        ),
        ('connection to server at "db", port 5432 failed: timeout expired', "unreachable"),
        (
            'connection to server at "db", port 5432 failed: FATAL:  password authentication'
            ' failed for user "ann"',
            "login_refused",
        ),
        (
            'connection to server at "db", port 5432 failed: fe_sendauth: no password supplied',
            "login_refused",
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  role "x" does not exist',
            "login_refused",
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  no pg_hba.conf entry for host',
            "login_refused",
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  database "x" does not exist',
            "no_such_database",
        ),
        # A Unix socket that is not there, or whose server is gone: reported at once.
        (
            'connection is bad: connection to server on socket "/run/postgresql/.s.PGSQL.5999"'
            " failed: No such file or directory",
            "unreachable",
        ),
        (
            'connection is bad: connection to server on socket "/tmp/s/.s.PGSQL.5432" failed:'
            " Connection refused",
            "unreachable",
        ),
        ('connection is bad: invalid sslmode value: "bogus"', "bad_url"),
        ('connection is bad: invalid port number: "99999"', "bad_url"),
        ("bad value for connect_timeout: 'abc'", "bad_url"),
        ('failed: FATAL:  unrecognized configuration parameter "x"', "bad_url"),
    ],
)
def test_a_failed_connection_is_classified_by_its_cause(cause: str, code: str) -> None:
    assert connect_failure(cause) == code


def test_serve_on_a_server_that_cannot_be_reached_exits_unavailable(
    tmp_path: Path, pg_url: str
) -> None:
    # Both stores on PostgreSQL (`mixed_stores` otherwise): the catalog's server, or only the
    # world ledger's, cannot be reached.
    cases = (
        ["--catalog", UNREACHABLE, "--world", UNREACHABLE],
        ["--catalog", pg_url, "--world", UNREACHABLE],
    )
    for argv, store in zip(cases, ("(the catalog)", "(the world ledger)"), strict=True):
        plain = _serve(tmp_path, *argv)
        assert plain.returncode == _exit.UNAVAILABLE, plain.stderr
        line = _refusal(plain, "tether serve")
        assert "127.0.0.1:1/test" in line and "Connection refused" in line, line
        assert store in line, line  # on one server, which store could not connect
        as_json = _serve(tmp_path, *argv, "--json")
        assert as_json.returncode == _exit.UNAVAILABLE, as_json.stderr
        _refusal(as_json, "tether serve")
        assert _json(as_json)["code"] == "unreachable"
    worker = _worker(tmp_path, "--catalog", UNREACHABLE, "--world", UNREACHABLE)
    assert worker.returncode == _exit.UNAVAILABLE
    line = _refusal(worker, "tether worker")
    assert "127.0.0.1:1/test" in line and line.startswith("tether worker: unreachable: ")
    prune = _run("db", "prune", "--catalog", UNREACHABLE, "--older-than", "1d", "--json")
    assert prune.returncode == _exit.UNAVAILABLE, prune.stderr
    assert _json(prune)["code"] == "unreachable"
    # `--debug` shows where it failed, as every other command does, and still no password.
    debugged = _run("--debug", "db", "status", UNREACHABLE)
    assert debugged.returncode == _exit.UNAVAILABLE
    assert "Traceback" in debugged.stderr and SECRET not in debugged.stderr
    assert debugged.stderr.splitlines()[-1].startswith("tether db: unreachable: ")


def test_a_unix_socket_with_no_server_behind_it_is_unreachable(tmp_path: Path) -> None:
    """A local server that is down (its socket missing, or left behind by a dead server) is
    `unreachable` (exit 7, worth retrying), not a bad URL."""
    stale = tmp_path / "sock"
    stale.mkdir()
    listener = socket.socket(socket.AF_UNIX)  # a socket file nobody accepts on
    listener.bind(str(stale / ".s.PGSQL.5432"))
    listener.close()
    for directory, port in ((tmp_path / "none", "5999"), (stale, "5432")):
        url = f"postgresql:///test?host={directory}&port={port}&user=ann"
        status = _run("db", "status", url, "--json")
        assert status.returncode == _exit.UNAVAILABLE, status.stderr
        assert _json(status)["code"] == "unreachable"
        worker = _worker(tmp_path, "--catalog", url, "--world", url)
        assert worker.returncode == _exit.UNAVAILABLE, worker.stderr
        assert _refusal(worker, "tether worker").startswith("tether worker: unreachable: ")


def test_a_schema_the_server_does_not_have_is_named_and_nothing_is_created(
    pg_base: str, tmp_path: Path
) -> None:
    """A search path naming no schema (a typo in the URL): `no_such_schema` (exit 2) from
    every command that opens a store, and `tether db prune --dry-run` creates no catalog in
    an empty schema to report "nothing changed" about."""
    missing = schema_url(pg_base, "tether_no_such_schema")
    with pytest.raises(NoSuchSchema, match="tether_no_such_schema"):
        Catalog.open(missing)
    worker = _worker(tmp_path, "--catalog", missing)
    assert worker.returncode == _exit.USAGE, worker.stderr
    assert _refusal(worker, "tether worker").startswith("tether worker: no_such_schema: ")
    served = _serve(tmp_path, "--catalog", missing, "--world", missing, "--json")
    assert (served.returncode, _json(served)["code"]) == (_exit.USAGE, "no_such_schema")
    empty = "tether_empty_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {empty}")
    try:
        url = schema_url(pg_base, empty)
        pruned = _run("db", "prune", "--catalog", url, "--older-than", "1d", "--dry-run")
        assert pruned.returncode == _exit.USAGE and "holds no Tether catalog" in pruned.stderr
        # A worker only checks the world: one not made yet is not made by it, also where the
        # catalog shares its schema (the usual one-database setup).
        _check_stores(None, url)
        status = _run("db", "status", url, "--json")
        assert json.loads(status.stdout)["stores"] == [], status.stdout
        _check_stores(url, url)
        status = _run("db", "status", url, "--json")
        assert [s["store"] for s in json.loads(status.stdout)["stores"]] == ["catalog"]
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {empty} CASCADE")


def _ready_line(wdata: Path, config: Path, families: str) -> str:
    """`tether worker WDATA --config CONFIG --families F`'s ready line, with
    `$TETHER_HOST_CONFIG` set but empty; the worker is stopped after it."""
    argv = ["worker", str(wdata), "--config", str(config), "--families", families]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), "TETHER_HOST_CONFIG": ""},
    )
    try:
        assert proc.stderr is not None
        ready = proc.stderr.readline()
        assert ready.startswith("tether worker ready: "), ready + proc.stderr.read()
        return ready
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_a_worker_takes_its_stores_and_host_name_from_the_host_configuration(
    pg_url: str, tmp_path: Path
) -> None:
    """`tether worker --config host.toml` (or `$TETHER_HOST_CONFIG`) works on the stores its
    `[serve]` names, as `tether serve` on that file does, never on a SQLite catalog of its own
    data dir; a flag still wins; a misspelt key of the file is refused before anything."""
    config = _config(tmp_path)
    missing = schema_url(pg_url, "tether_no_such_schema")
    with config.open("a") as f:
        f.write(f'catalog = "{pg_url}"\nworld = "{pg_url}"\nhost_name = "cell-7"\n')
    wdata = tmp_path / "wdata"
    for how in (["--config", str(config)], []):
        env = {} if how else {"TETHER_HOST_CONFIG": str(config)}
        done = _run_env(
            env,
            "worker",
            str(wdata),
            "--families",
            "journal_provider:families",
            "--catalog",
            missing,
            *how,
        )
        assert done.returncode == _exit.USAGE, done.stderr  # the flag's catalog, not the file's
        assert _refusal(done, "tether worker").startswith("tether worker: no_such_schema: ")
    ready = _ready_line(wdata, config, "journal_provider:families")
    assert "for host 'cell-7'" in ready and f"on catalog {redact(pg_url)}" in ready, ready
    assert not (wdata / "catalog.db").exists()  # no catalog of its own beside the shared one
    # The families read the same file, also where the variable is set but empty; an empty
    # --host is still refused, never replaced by the file's.
    ready = _ready_line(wdata, config, "tether.families.robot_move.family:families_from_env")
    assert "robot_move" in ready, ready
    empty = _run("worker", str(wdata), "--config", str(config), "--host", "", "--families", "x:y")
    assert empty.returncode == _exit.USAGE and "--host must be" in empty.stderr
    config.write_text(config.read_text() + "wrokers = 2\n")
    typo = _run("worker", str(wdata), "--config", str(config), "--families", "x:y")
    assert typo.returncode == _exit.USAGE, typo.stderr
    assert "wrokers" in _refusal(typo, "tether worker")


def test_a_scheme_is_read_in_any_case_and_a_misspelt_one_is_a_bad_url(
    pg_url: str, tmp_path: Path
) -> None:
    """``POSTGRESQL://`` opens both stores and `tether db` as the lower case does; a
    misspelt scheme is `bad_url` (exit 2), not a file of this host beside a shared store
    (`mixed_stores`)."""
    upper = "POSTGRESQL" + pg_url[len("postgresql") :]
    Catalog.open(upper).close()
    open_ledger(upper).close()
    status = _run("db", "status", upper, "--json")
    assert status.returncode == 0, status.stderr
    assert {s["store"] for s in json.loads(status.stdout)["stores"]} == {"catalog", "world"}
    typo = "postgresq" + pg_url[len("postgresql") :]
    served = _serve(tmp_path, "--catalog", typo, "--world", pg_url, "--json")
    assert (served.returncode, _json(served)["code"]) == (_exit.USAGE, "bad_url"), served.stderr
    assert "unsupported catalog URL" in _refusal(served, "tether serve")


def test_a_families_factory_that_fails_is_a_configuration_error(tmp_path: Path) -> None:
    """A factory that raises (here `json.loads`, which `tether worker` calls with a path) is
    `bad_families` (exit 2), one line, never an internal error (70)."""
    (tmp_path / "wd").mkdir()
    worker = _run("worker", str(tmp_path / "wd"), "--families", "json:loads")
    assert worker.returncode == _exit.USAGE, worker.stderr
    line = _refusal(worker, "tether worker")
    assert line.startswith("tether worker: bad_families: ") and "TypeError" in line
    missing = _run("worker", str(tmp_path / "wd"), "--families", "no_such_module_x:families")
    assert missing.returncode == _exit.USAGE, missing.stderr
    line = _refusal(missing, "tether worker")
    assert line.startswith("tether worker: bad_families: ") and "no_such_module_x" in line
    config = _config(tmp_path)
    config.write_text(
        config.read_text().replace("tether.serve.families:sim_families", "json:loads")
    )
    served = _run("serve", "--config", str(config), "--json")
    assert (served.returncode, _json(served)["code"]) == (_exit.USAGE, "bad_families")


def test_a_refused_login_a_missing_database_and_a_bad_url_exit_per_the_table(
    pg_base: str, tmp_path: Path
) -> None:
    cases = [
        (_variant(pg_base, user="tether_no_such_role"), _exit.FAILED, "login_refused"),
        (_variant(pg_base, database="tether_no_such_db"), _exit.USAGE, "no_such_database"),
        (pg_base + ("&" if "?" in pg_base else "?") + "sslmode=bogus", _exit.USAGE, "bad_url"),
        (f"mysql://ann:{SECRET}@db/x", _exit.USAGE, "bad_url"),
        # A session that cannot write, asked for: the server answers, a store cannot use it.
        (
            pg_base + ("&" if "?" in pg_base else "?") + "target_session_attrs=read-only",
            _exit.USAGE,
            "bad_url",
        ),
    ]
    for url, exit_code, code in cases:
        served = _serve(tmp_path, "--catalog", url, "--world", url, "--json")
        assert (served.returncode, _json(served)["code"]) == (exit_code, code), served.stderr
        _refusal(served, "tether serve")
        worker = _worker(tmp_path, "--catalog", url)
        assert worker.returncode == exit_code, (url, worker.stderr)
        _refusal(worker, "tether worker")
    for url, exit_code, code in cases:
        status = _run("db", "status", url, "--json")
        assert (status.returncode, _json(status)["code"]) == (exit_code, code), status.stderr


def test_serve_names_its_stores_without_their_password_and_its_log_stays_json(
    pg_url: str, tmp_path: Path
) -> None:
    """`tether serve --catalog URL --world URL` with a password in the URL: its ready document,
    its ready line on a terminal's words and `tether status` name both stores (the password
    masked), and the warning that the password shows in the command line is a record of its
    JSON log stream (off a terminal), never a plain line in it."""
    parts = urlsplit(pg_url)
    user, _, host = parts.netloc.rpartition("@")
    user = user.partition(":")[0] or getpass.getuser()  # libpq's default: the OS user
    url = urlunsplit(parts._replace(netloc=f"{user}:{SECRET}@{host}"))  # trust auth: accepted
    config = _config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), "--catalog", url,
         "--world", url, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["catalog"] == ready["world"] == redact(url), ready
        assert host in ready["catalog"] and "***" in ready["catalog"]
        status = _run("status", "--config", str(config), "--json")
        daemon = json.loads(status.stdout)["daemon"]
        assert (daemon["catalog"], daemon["world"]) == (redact(url), redact(url)), daemon
        words = _run("status", "--config", str(config))
        assert f"catalog {redact(url)}, world {redact(url)}" in words.stdout, words.stdout
        assert SECRET not in status.stdout + words.stdout
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line a JSON record
    warned = [r for r in records if "visible to every local user" in r["msg"]]
    assert [r["flag"] for r in warned] == ["--catalog", "--world"], warned
    assert SECRET not in err


def test_a_worker_warns_of_a_password_on_its_command_line_naming_itself(
    pg_url: str, tmp_path: Path
) -> None:
    """`tether worker` writes no log stream of its own: its warning is its own line, naming
    it, never a bare message."""
    parts = urlsplit(pg_url)
    user, _, host = parts.netloc.rpartition("@")
    user = user.partition(":")[0] or getpass.getuser()
    url = urlunsplit(parts._replace(netloc=f"{user}:{SECRET}@{host}"))
    (tmp_path / "wdata").mkdir(mode=0o700)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", str(tmp_path / "wdata"), "--families",
         "journal_provider:families", "--catalog", url, "--world", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )  # fmt: skip
    said = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if line.startswith("tether worker ready"):
                break
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[1]
    err = "".join(said) + rest
    warned = [ln for ln in err.splitlines() if "visible to every local user" in ln]
    assert len(warned) == 2, err
    assert all(ln.startswith("tether worker: warning: the password in --") for ln in warned), err
    assert SECRET not in err


def test_a_daemon_in_its_data_dir_names_its_store_files(tmp_path: Path) -> None:
    from tether.serve.cli import ready_words

    config = _config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    data = (tmp_path / "data").absolute()
    assert (ready["catalog"], ready["world"]) == (str(data / "catalog.db"), str(data / "world.db"))
    assert f"catalog {data / 'catalog.db'}, world {data / 'world.db'}" in ready_words(ready)


def test_with_several_hosts_the_servers_refusal_is_named_whichever_host_was_tried_last(
    pg_base: str,
) -> None:
    """A primary and a standby, one of them down: the server that answered refused the login.
    The driver's error leads with the last host tried; the refusal is still the cause, in
    either order, and every host's own failure is on the one line."""
    parts = urlsplit(pg_base)
    live = parts.netloc.rpartition("@")[2]
    for hosts in (f"127.0.0.1:1,{live}", f"{live},127.0.0.1:1"):
        url = urlunsplit(parts._replace(netloc=f"tether_no_such_role:{SECRET}@{hosts}"))
        status = _run("db", "status", url, "--json")
        doc = _json(status)
        assert (status.returncode, doc["code"]) == (_exit.FAILED, "login_refused"), status.stderr
        line = _refusal(status, "tether db")
        assert "port 1 failed" in line and 'role "tether_no_such_role"' in line, line
        assert len(status.stderr.strip().splitlines()) == 1, status.stderr


# -- a schema to upgrade first ---------------------------------------------------------------


def test_schema_outdated_carries_its_code_and_maps_to_store_unusable() -> None:
    older = SchemaOutdated("older", "catalog", 2, 3)
    assert (older.code, _exit.for_error(older)) == ("migration_needed", _exit.STORE_UNUSABLE)
    assert older.details == {"store": "catalog", "found": 2, "latest": 3}
    for store in ("catalog", "world"):
        newer = SchemaOutdated("newer", store, 4, 3)
        assert (newer.code, _exit.for_error(newer)) == (f"{store}_newer", _exit.STORE_UNUSABLE)


def test_an_older_postgres_schema_is_migration_needed_for_every_command(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    Catalog.open(pg_url).close()
    open_ledger(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # an older Tether's catalog
        conn.execute(
            "UPDATE tether_schema_version SET version = version - 1 WHERE store = 'catalog'"
        )
    served = _serve(tmp_path, "--catalog", pg_url, "--world", pg_url, "--json")
    assert served.returncode == _exit.STORE_UNUSABLE, served.stderr
    assert "tether db upgrade" in _refusal(served, "tether serve")
    doc = _json(served)
    assert doc["code"] == "migration_needed" and doc["details"]["store"] == "catalog"
    # Refused before anything was served: no control socket, no listener.
    assert "control socket" not in served.stderr and "listening" not in served.stderr
    worker = _worker(tmp_path, "--catalog", pg_url, "--world", pg_url)
    assert worker.returncode == _exit.STORE_UNUSABLE, worker.stderr
    prune = _run("db", "prune", "--catalog", pg_url, "--older-than", "1d", "--json")
    assert (prune.returncode, _json(prune)["code"]) == (_exit.STORE_UNUSABLE, "migration_needed")
    status = _run("db", "status", pg_url)  # a report, not a refusal: "needs upgrade", exit 1
    assert status.returncode == _exit.FAILED and "needs upgrade" in status.stdout
    # The refusal's command names this database (its schema too), quoted for a shell: the
    # URL copied from it reaches the store (this one's older version is faked, so it is
    # reported, not upgraded).
    command = _refusal(served, "tether serve").rsplit("run `", 1)[1].rstrip("`")
    argv = shlex.split(command)
    assert argv[:3] == ["tether", "db", "upgrade"] and argv[3:] == [pg_url], command
    copied = _run("db", "status", argv[3])
    assert copied.returncode == _exit.FAILED and "needs upgrade" in copied.stdout, copied


def test_an_older_sqlite_catalog_is_migration_needed_for_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    Catalog.open(f"sqlite://{data / 'catalog.db'}").close()
    conn = sqlite3.connect(data / "catalog.db")
    conn.execute("UPDATE schema_version SET version = ?", (LATEST - 1,))
    conn.commit()
    conn.close()
    served = _serve(tmp_path, "--json")
    assert served.returncode == _exit.STORE_UNUSABLE, served.stderr
    assert _json(served)["code"] == "migration_needed"
    assert "control socket" not in served.stderr and "listening" not in served.stderr
    prune = _run(
        "db", "prune", "--catalog", f"sqlite://{data / 'catalog.db'}", "--older-than", "1d"
    )
    assert prune.returncode == _exit.STORE_UNUSABLE, prune.stderr
    assert _refusal(prune, "tether db").startswith("tether db: migration_needed: ")


# -- one SQLite file for both stores ---------------------------------------------------------


def test_serve_refuses_one_sqlite_file_for_the_catalog_and_the_world(tmp_path: Path) -> None:
    same = tmp_path / "stores.db"
    default_catalog = tmp_path / "data" / "catalog.db"
    for argv in (
        ["--catalog", f"sqlite://{same}", "--world", f"sqlite://{same}"],
        ["--world", f"sqlite:///{default_catalog}"],  # the default catalog, spelt otherwise
    ):
        done = _serve(tmp_path, *argv, "--json")
        assert done.returncode == _exit.USAGE, done.stderr
        assert "must be different files" in _refusal(done, "tether serve")
        assert _json(done)["code"] == "same_store_file"
        assert not same.exists() and not (tmp_path / "data").exists()  # nothing written
    worker = _worker(tmp_path, "--catalog", f"sqlite://{same}", "--world", f"sqlite://{same}")
    assert worker.returncode == _exit.USAGE and "must be different files" in worker.stderr
    assert not same.exists() and not (tmp_path / "wdata" / "provider.db").exists()


def test_a_sqlite_file_of_the_other_store_is_refused_as_such_and_left_unchanged(
    tmp_path: Path,
) -> None:
    """A world ledger given as the catalog (or the reverse) is `same_store_file` (exit 2),
    named as the store it holds, never read as an old schema of the store asked for (the
    world's version 2 was reported as a catalog to `tether db upgrade`, and an upgrade would
    have written catalog tables into the world ledger)."""
    world, catalog = tmp_path / "world.db", tmp_path / "catalog.db"
    open_ledger(f"sqlite://{world}").close()
    Catalog.open(f"sqlite://{catalog}").close()
    before = {p: p.read_bytes() for p in (world, catalog)}
    for opening, path, holds in (
        (Catalog.open, world, "world"),
        (lambda p: SqliteCatalogStore(p.removeprefix("sqlite://"), upgrade=True), world, "world"),
        (open_ledger, catalog, "catalog"),
        (
            lambda p: SqliteLedger.open(p.removeprefix("sqlite://"), upgrade=True),
            catalog,
            "catalog",
        ),
    ):
        with pytest.raises(SameStoreFile) as info:
            opening(f"sqlite://{path}")
        assert info.value.details == {"path": str(path), "holds": holds}
    with pytest.raises(SameStoreFile):  # `tether worker --world` checks it, never skips it
        _check_stores(None, f"sqlite://{catalog}")
    worker = _worker(tmp_path, "--catalog", f"sqlite://{world}")
    assert worker.returncode == _exit.USAGE, worker.stderr
    line = _refusal(worker, "tether worker")
    assert "same_store_file" in line and "holds a world ledger, not a catalog" in line
    assert {p: p.read_bytes() for p in before} == before


def test_a_host_refuses_one_sqlite_file_for_both_stores_before_creating_anything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    link = tmp_path / "link"
    link.symlink_to(data, target_is_directory=True)
    with pytest.raises(SameStoreFile) as info:
        Host(data, [], workers=0, world_url=f"sqlite://{link / 'catalog.db'}")
    assert info.value.code == "same_store_file" and _exit.for_error(info.value) == _exit.USAGE
    assert not data.exists()


def test_db_upgrade_refuses_the_other_store_than_a_sqlite_file_holds(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.db"
    Catalog.open(f"sqlite://{catalog}").close()
    before = catalog.read_bytes()
    done = _run("db", "upgrade", f"sqlite://{catalog}", "--store", "world", "--json")
    assert done.returncode == _exit.USAGE, done.stderr
    assert "must be different files" in _refusal(done, "tether db")
    assert _json(done)["code"] == "same_store_file"
    assert catalog.read_bytes() == before


def test_serve_refuses_a_shared_catalog_with_a_local_world_and_the_other_way_round(
    tmp_path: Path, pg_url: str
) -> None:
    """Hosts share both stores or neither (`mixed_stores`, 2): refused before any store is
    opened, so nothing is created on the server or in the data dir."""
    for flag, shared in (("--catalog", "catalog"), ("--world", "world ledger")):
        for json_flag in ((), ("--json",)):
            served = _serve(tmp_path, flag, pg_url, *json_flag)
            assert served.returncode == 2, served.stderr
            line = _refusal(served, "tether serve")
            assert "mixed_stores" in line and f"the {shared} is on PostgreSQL" in line
            if json_flag:
                assert _json(served)["code"] == "mixed_stores"
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    # A worker given a world ledger takes the same rule: a shared world with the data dir's
    # catalog (it would claim from a catalog no host admits into), or the other way round.
    for argv, shared in (
        (("--world", pg_url), "world ledger"),
        (("--world", pg_url, "--catalog", f"sqlite:///{tmp_path / 'w.db'}"), "world ledger"),
        (("--catalog", pg_url, "--world", f"sqlite:///{tmp_path / 'w.db'}"), "catalog"),
    ):
        worker = _worker(tmp_path, *argv)
        assert worker.returncode == 2, worker.stderr
        line = _refusal(worker, "tether worker")
        assert line.startswith("tether worker: mixed_stores: ") and f"the {shared} is" in line
    assert not (tmp_path / "w.db").exists() and not (tmp_path / "wdata" / "catalog.db").exists()
    # A misspelled scheme is a bad URL (no file of this host), for the worker as for serve.
    typo = pg_url.replace("postgresql://", "postgresq://", 1)
    assert typo != pg_url
    for argv, store in (
        (("--catalog", typo, "--world", pg_url), "catalog"),
        (("--catalog", pg_url, "--world", "mysql://db/x"), "world"),
    ):
        worker = _worker(tmp_path, *argv)
        assert worker.returncode == 2, worker.stderr
        line = _refusal(worker, "tether worker")
        assert line.startswith(f"tether worker: bad_url: unsupported {store} URL "), line
        assert "sqlite:///abs/path.db or postgresql://host/db" in line
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT to_regclass('activities'), to_regclass('worlds')").fetchone()
    assert row == (None, None)


@pytest.mark.parametrize("host", ["bad name", "x@y", "h" * 65])
def test_a_worker_on_a_shared_catalog_is_refused_a_host_name_no_daemon_there_can_have(
    tmp_path: Path, pg_url: str, host: str
) -> None:
    """On a catalog hosts share, device work is bound to a daemon's `host_name`, which there is
    1 to 64 of A-Z a-z 0-9 _ . : + - (as `tether serve` refuses otherwise): a worker under
    another name would run and silently never claim such work, so it is refused (exit 2)."""
    done = _worker(tmp_path, "--catalog", pg_url, "--world", pg_url, "--host", host)
    assert done.returncode == _exit.USAGE, done.stdout + done.stderr
    assert _refusal(done, "tether worker").startswith("tether worker: bad_host_name: --host ")


def test_a_worker_whose_world_ledger_cannot_be_reached_names_that_store(
    tmp_path: Path, pg_url: str
) -> None:
    """With the catalog and the world ledger on two servers, the refusal says which one failed:
    `(the world ledger)`, as it says `(the catalog)` of the other."""
    done = _worker(tmp_path, "--catalog", pg_url, "--world", UNREACHABLE)
    assert done.returncode == _exit.UNAVAILABLE, done.stdout + done.stderr
    line = _refusal(done, "tether worker")
    assert line.startswith("tether worker: unreachable: ") and "(the world ledger)" in line, line


def test_a_worker_on_its_data_dirs_own_catalog_cut_short_is_refused_before_ready(
    tmp_path: Path,
) -> None:
    """Without `--catalog` a worker works on DATA_DIR/catalog.db; a file there that is not a
    catalog (cut short, or another file) was found only after "ready" was printed."""
    wdata = tmp_path / "wdata"
    wdata.mkdir(mode=0o700)
    Catalog.open(f"sqlite://{wdata / 'catalog.db'}").close()
    whole = (wdata / "catalog.db").read_bytes()
    (wdata / "catalog.db").write_bytes(whole[: len(whole) // 2])
    worker = _worker(tmp_path)
    assert worker.returncode == _exit.STORE_UNUSABLE, worker.stderr
    assert _refusal(worker, "tether worker").startswith("tether worker: store_truncated: ")
    assert "ready" not in worker.stderr
    assert (wdata / "catalog.db").read_bytes() == whole[: len(whole) // 2]  # nothing written


def test_a_statement_the_server_refuses_names_its_code_for_every_command(
    pg_base: str, tmp_path: Path
) -> None:
    """A schema holding another program's `activities` table, and a role that may not read a
    store another role made: each was an uncoded line (`CatalogStorageError`), exit 1 here
    and 2 for `tether operator`. The server's SQLSTATE names it: `store_damaged` (5) and
    `schema_denied` (1), whichever command opens the store."""
    taken = "tether_taken_" + uuid.uuid4().hex[:8]
    owned = "tether_owned_" + uuid.uuid4().hex[:8]
    role = "tether_reader_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {taken}")
        admin.execute(f"CREATE TABLE {taken}.activities (id int)")
        admin.execute(f"CREATE SCHEMA {owned}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {owned} TO {role}")
    try:
        Catalog.open(schema_url(pg_base, owned)).close()  # made by the server's own role
        denied = _variant(schema_url(pg_base, owned), user=role)
        for url, exit_code, code in (
            (schema_url(pg_base, taken), _exit.STORE_UNUSABLE, "store_damaged"),
            (denied, _exit.FAILED, "schema_denied"),
        ):
            served = _serve(tmp_path, "--catalog", url, "--world", url, "--json")
            assert (served.returncode, _json(served)["code"]) == (exit_code, code), served.stderr
            assert _refusal(served, "tether serve").startswith(f"tether serve: {code}: ")
            upgraded = _run("db", "upgrade", url)
            assert upgraded.returncode == exit_code, upgraded.stderr
            assert _refusal(upgraded, "tether db").startswith(f"tether db: {code}: ")
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {taken} CASCADE")
            admin.execute(f"DROP SCHEMA {owned} CASCADE")
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
