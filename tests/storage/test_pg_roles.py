"""The PostgreSQL stores under a role that is no superuser, as a team's own server gives one: a
login that owns its schema and holds no other right. The catalog clock then runs in its
``wall`` mode; with `pg_read_server_files` and EXECUTE on `pg_read_file` granted, in its
``kernel`` mode. Either way every store opens, and `tether db` works, under that role."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tether import _exit
from tether.activities import Catalog
from tether.errors import CatalogStorageError, SchemaDenied
from tether.storage._host_claim import HostClaim
from tether.testing._postgres import schema_url
from tether.world import open_ledger

from tests.activities.support import admission, key


@pytest.fixture
def role_url(pg_base: str) -> Iterator[tuple[str, str]]:
    """(a URL of a fresh login role with no rights but its own schema, the role's name)."""
    name = "tether_role_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION {name}")
    parts = urlsplit(pg_base)
    host = parts.netloc.rpartition("@")[2]
    url = urlunsplit(parts._replace(netloc=f"{name}@{host}"))
    try:
        yield schema_url(url, name), name
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


def _lifecycle(url: str) -> str:
    """Admit and claim one Activity in a catalog at ``url``; the clock's mode."""
    catalog = Catalog.open(url)
    try:
        k = key("a1")
        catalog.admit(admission(k))
        claim = catalog.claim("w1", 60_000)
        assert claim is not None and claim.key == k
        return str(catalog.store.server_clock().mode)
    finally:
        catalog.close()


def test_a_role_without_rights_opens_every_store_on_the_wall_clock(
    role_url: tuple[str, str],
) -> None:
    url, _ = role_url
    assert _lifecycle(url) == "wall"
    open_ledger(url).close()
    done = subprocess.run(
        [sys.executable, "-m", "tether", "db", "status", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert {s["store"] for s in json.loads(done.stdout)["stores"]} == {"catalog", "world"}


def _grant(pg_base: str, name: str, *, revoke: bool = False) -> None:
    """Give ``name`` (or take back) what reading the kernel clock takes: the role alone is not
    enough, EXECUTE on the function is granted to nobody by default."""
    with psycopg.connect(pg_base, autocommit=True) as admin:
        if revoke:
            admin.execute(f"REVOKE {_EXECUTE} FROM {name}")
        else:
            admin.execute(f"GRANT pg_read_server_files TO {name}")
            admin.execute(f"GRANT {_EXECUTE} TO {name}")


_EXECUTE = "EXECUTE ON FUNCTION pg_read_file(text, bigint, bigint, boolean)"


def test_a_role_granted_server_files_reads_the_kernel_clock_and_each_catalog_keeps_its_own(
    role_url: tuple[str, str], pg_base: str
) -> None:
    """The clock is the catalog's, not the session's: once a catalog's leases run on one
    clock, every host keeps to it, so no host reads another's live lease as one of another
    boot (and takes its Activity)."""
    url, name = role_url
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"GRANT pg_read_server_files TO {name}")
    assert _lifecycle(url) == "wall"  # the role alone may not run pg_read_file
    # A wall-clock catalog stays on the wall clock for a role that may now read the kernel's:
    # the live lease taken above is not another boot's, so nobody takes it over.
    _grant(pg_base, name)
    catalog = Catalog.open(url)
    try:
        assert catalog.store.server_clock().mode == "wall"
        assert catalog.claim("w2", 60_000) is None
    finally:
        catalog.close()
    # A fresh catalog of that role runs on the kernel clock ...
    kernel_url = url.replace(f"search_path%3D{name}", f"search_path%3D{name}_k")
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}_k AUTHORIZATION {name}")
    try:
        assert _lifecycle(kernel_url) == "kernel"
        catalog = Catalog.open(kernel_url)
        try:
            assert catalog.now().boot_id.startswith("pg-kernel:")
            assert catalog.claim("w2", 60_000) is None  # its lease holds on the same clock
        finally:
            catalog.close()
        # ... and a session that may no longer read that clock is refused, not put on another.
        _grant(pg_base, name, revoke=True)
        with pytest.raises(CatalogStorageError, match="pg_read_file") as info:
            Catalog.open(kernel_url)
        assert getattr(info.value, "code", None) == "clock_unavailable"
        assert _exit.for_error(info.value) == _exit.FAILED
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name}_k CASCADE")


def test_a_statement_the_role_may_not_run_is_a_failure_not_an_unreachable_server(
    role_url: tuple[str, str], pg_base: str
) -> None:
    """Stores another role owns: the server answered, so `tether db status` fails (exit 1,
    `schema_denied`, naming the refused right), never `unreachable` (exit 7)."""
    url, name = role_url
    theirs = f"{name}_theirs"
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {theirs}")
        admin.execute(f"GRANT USAGE ON SCHEMA {theirs} TO {name}")
    try:
        Catalog.open(schema_url(pg_base, theirs)).close()  # created by the superuser
        mine = url.replace(f"search_path%3D{name}", f"search_path%3D{theirs}")
        done = subprocess.run(
            [sys.executable, "-m", "tether", "db", "status", mine, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == _exit.FAILED, done.stderr
        doc = json.loads(done.stdout)
        assert doc["code"] == "schema_denied" and "permission denied" in doc["message"], doc
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {theirs} CASCADE")


def test_a_schema_the_role_may_use_but_not_create_in_is_schema_denied_for_every_command(
    role_url: tuple[str, str], pg_base: str, tmp_path: Path
) -> None:
    """A role given a schema it may use but not create tables in (PostgreSQL 15's `public` for
    any role but its owner): creating the stores there is `schema_denied` (exit 1) naming the
    schema and the GRANT, alike from `tether db upgrade`, `tether serve` and `tether worker`;
    never a class name for a code, and nothing is created."""
    url, name = role_url
    usable = f"{name}_use"
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {usable}")
        admin.execute(f"GRANT USAGE ON SCHEMA {usable} TO {name}")
    mine = url.replace(f"search_path%3D{name}", f"search_path%3D{usable}")
    assert mine != url
    try:
        with pytest.raises(SchemaDenied, match=f'GRANT CREATE ON SCHEMA "{usable}"') as info:
            Catalog.open(mine)
        assert info.value.code == "schema_denied"
        config = tmp_path / "host.toml"
        config.write_text(
            f'[serve]\ndata_dir = "{tmp_path / "data"}"\ncatalog = "{mine}"\nworld = "{mine}"\n'
            'families = ["tether.serve.families:sim_families"]\nworkers = 0\n'
        )
        runs = {
            "tether db": ["db", "upgrade", mine, "--json"],
            "tether serve": ["serve", "--config", str(config), "--json"],
            "tether worker": [
                "worker", str(tmp_path / "w"), "--families",
                "tether.families.sim.adapter:worker_families",
                "--catalog", mine, "--world", mine,
            ],
        }  # fmt: skip
        for prog, argv in runs.items():
            done = subprocess.run(
                [sys.executable, "-m", "tether", *argv],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == _exit.FAILED, (prog, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr, done.stderr
            lines = [ln for ln in done.stderr.splitlines() if ln.startswith(f"{prog}: ")]
            assert len(lines) == 1 and "schema_denied" in lines[0], (prog, done.stderr)
            assert usable in lines[0], lines[0]
            docs = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
            assert all(d["code"] == "schema_denied" for d in docs), docs
        with psycopg.connect(pg_base, autocommit=True) as admin:
            tables = admin.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (usable,)
            ).fetchone()
        assert tables == (0,)
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {usable} CASCADE")


def test_a_connection_that_broke_mid_command_is_unreachable_not_a_refusal() -> None:
    """`tether db` tells a statement the server refused (its SQLSTATE: exit 1) from a
    connection that broke under it (none: the server cannot be reached, exit 7)."""
    from tether.activities.dbcli import _answered
    from tether.storage.dbcli import DatabaseError

    def failure(cause: BaseException) -> DatabaseError:
        try:
            raise DatabaseError("schema status failed") from cause
        except DatabaseError as e:
            return e

    assert not _answered(failure(psycopg.OperationalError("server closed the connection")))
    refused = psycopg.errors.InsufficientPrivilege("permission denied")
    assert refused.sqlstate == "42501" and _answered(failure(refused))


def test_stores_in_a_schema_the_role_may_not_use_are_refused_never_missing(
    pg_base: str, role_url: tuple[str, str]
) -> None:
    """A search path naming a schema the role has no USAGE on hides its stores from the role:
    `schema_denied` (exit 1, the server refused) from `tether db` and every open, never "no
    Tether store" (exit 0) nor advice to create a schema that exists."""
    url, name = role_url
    other = "tether_hidden_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {other}")
    hidden = url.replace(f"search_path%3D{name}", f"search_path%3D{other}")
    assert hidden != url
    try:
        Catalog.open(schema_url(pg_base, other)).close()  # the stores are there
        open_ledger(schema_url(pg_base, other)).close()
        with pytest.raises(SchemaDenied, match=other) as info:
            Catalog.open(hidden)
        assert info.value.code == "schema_denied"
        with pytest.raises(SchemaDenied, match=other):  # `tether serve`'s host-name claim
            HostClaim.take(hidden, "h-denied", on_lost=lambda _e: None)
        # Written in capitals (the server folds an unquoted name), or followed by a schema the
        # role may use (which the server would silently work in): refused all the same.
        upper = url.replace(f"search_path%3D{name}", f"search_path%3D{other.upper()}")
        then_own = url.replace(f"search_path%3D{name}", f"search_path%3D{other}%2C{name}")
        for argv in (
            ["status", hidden, "--json"],
            ["upgrade", hidden, "--json"],
            ["status", upper, "--json"],
            ["status", then_own, "--json"],
        ):
            done = subprocess.run(
                [sys.executable, "-m", "tether", "db", *argv],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == _exit.FAILED, (argv, done.stdout, done.stderr)
            assert json.loads(done.stdout or done.stderr)["code"] == "schema_denied", done
        missing = url.replace(f"search_path%3D{name}", "search_path%3Dtether_no_such_x")
        done = subprocess.run(
            [sys.executable, "-m", "tether", "db", "status", missing, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == _exit.USAGE, (done.stdout, done.stderr)
        assert json.loads(done.stdout or done.stderr)["code"] == "no_such_schema"
        plain = subprocess.run(
            [sys.executable, "-m", "tether", "db", "status", missing],
            capture_output=True,
            text=True,
            timeout=120,
        )  # one line: its code, then the message (not the class's name again)
        assert plain.stderr.startswith("tether db: no_such_schema: the search path at "), plain
        assert plain.stderr.count("\n") == 1 and "(search_path tether_no_such_x)" in plain.stderr
        assert plain.stderr.count("tether_no_such_x") == 1, plain.stderr
    finally:
        with psycopg.connect(pg_base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {other} CASCADE")


def test_a_search_path_is_read_as_the_server_reads_it() -> None:
    from tether.storage._pg_schema import search_path_names

    assert search_path_names('"$user", public', "ann") == [("ann", True), ("public", False)]
    assert search_path_names("$user,Lab_A", "ann") == [("ann", True), ("lab_a", False)]
    assert search_path_names(' "Lab ""B"", x" , c ', "ann") == [('Lab "B", x', False), ("c", False)]
    assert search_path_names("", "ann") == []
