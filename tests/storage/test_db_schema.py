"""`tether db status` / `tether db upgrade` on both backends, and the refusal that names them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tether.activities import Catalog
from tether.cli import main as tether
from tether.errors import SchemaOutdated
from tether.storage import _pg_schema
from tether.world import open_ledger


def _status(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = tether(["db", "status", url, "--json"])
    out = json.loads(capsys.readouterr().out)
    return code, {s["store"]: (s["version"], s["state"]) for s in out["stores"]}


def test_postgres_status_upgrade_and_an_older_schema_refusing_to_open(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _status(pg_url, capsys) == (0, {})  # nothing there yet
    Catalog.open(pg_url).close()  # a fresh database is created at the latest version
    open_ledger(pg_url).close()
    cat = _pg_schema.latest("catalog")
    assert _status(pg_url, capsys) == (
        0,
        {"catalog": (cat, "current"), "world": (1, "current")},
    )
    # This Tether gains a catalog migration: the current catalog is now older and refuses.
    step = (
        cat + 1,
        ("CREATE TABLE upgrade_probe (n INTEGER)", "INSERT INTO upgrade_probe VALUES (2)"),
    )
    monkeypatch.setitem(_pg_schema.MIGRATIONS, "catalog", (*_pg_schema.CATALOG_MIGRATIONS, step))
    with pytest.raises(SchemaOutdated, match=r"tether db upgrade URL") as info:
        Catalog.open(pg_url)
    assert (info.value.store, info.value.found, info.value.latest) == ("catalog", cat, cat + 1)
    assert _status(pg_url, capsys) == (
        1,
        {"catalog": (cat, "needs upgrade"), "world": (1, "current")},
    )
    assert tether(["db", "upgrade", pg_url]) == 0
    assert _status(pg_url, capsys) == (
        0,
        {"catalog": (cat + 1, "current"), "world": (1, "current")},
    )
    Catalog.open(pg_url).close()
    assert tether(["db", "upgrade", pg_url]) == 0  # idempotent: the step ran once


def test_sqlite_status_and_upgrade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tether.storage import _schema

    path = tmp_path / "catalog.db"
    url = f"sqlite://{path}"
    assert tether(["db", "upgrade", url]) == 2  # no store there, and none named
    assert tether(["db", "upgrade", url, "--store", "catalog"]) == 0
    assert _status(url, capsys) == (0, {"catalog": (_schema.LATEST, "current")})
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (_schema.LATEST + 1,))
    conn.commit()
    conn.close()
    assert _status(url, capsys)[0] == 1  # newer than this Tether: not current
    world = f"sqlite://{tmp_path / 'world.db'}"
    open_ledger(world).close()
    assert _status(world, capsys) == (0, {"world": (1, "current")})


def test_db_errors_are_one_line_and_never_show_a_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tether(["db", "status", "postgresql://ann:s3cret@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and err.count("\n") == 1
    assert "127.0.0.1:1/x" in err and "refused" in err
    assert tether(["db", "status", "mysql://ann:s3cret@h/x"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "unsupported URL" in err
