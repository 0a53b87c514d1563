"""`tether db prune` as a user runs it: help with every default, JSON, one-line typed errors with
the documented exit codes (0 ok, 1 failed, 2 usage), nothing created or changed by mistake.

On a data directory, whose catalog is a SQLite file (`--vacuum` is SQLite's); pruning a catalog
URL runs on both backends in test_prune_url.py."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tether.activities import Catalog
from tether.activities.dbcli import _parser, parse_duration
from tether.storage._schema import LATEST
from tether.storage._urls import sqlite_url

from tests.activities.support import ManualClock, admission, bound_claim, key, result
from tests.activities.test_retention import settle_one

DAY_MS = 86_400_000


def tether(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TETHER_DEBUG": ""},
    )


def one_line(done: subprocess.CompletedProcess[str], prefix: str) -> str:
    assert "Traceback" not in done.stderr + done.stdout
    text = (done.stderr or done.stdout).strip()
    assert "\n" not in text and text.startswith(prefix), text
    return text


def data_dir(tmp_path: Path, *, settled: int = 3, unsettled: bool = True) -> Path:
    """A data dir whose catalog has ``settled`` Activities settled in 1970 (ManualClock) and,
    with ``unsettled``, one admitted and one with a result pending observation."""
    d = tmp_path / "data"
    d.mkdir(parents=True)
    with Catalog.open(sqlite_url(d / "catalog.db"), clock=ManualClock()) as cat:
        for i in range(settled):
            settle_one(cat, key(f"s{i}"))
        if unsettled:
            cat.admit(admission(key("admitted", kind="other")))
            c = bound_claim(cat, key("pending"))
            cat.record_result(key("pending"), c.fence, result("pending"))
    return d


def rows(d: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(d / "catalog.db")
    try:
        return conn.execute("SELECT * FROM activities ORDER BY activity_id").fetchall()
    finally:
        conn.close()


def test_help_lists_every_flag_with_its_default_or_required() -> None:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    prune = sub.choices["prune"]
    text = prune.format_help()
    flags = [a for a in prune._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in flags} == {
        "data_dir",
        "catalog",
        "older_than",
        "dry_run",
        "batch",
        "vacuum",
        "json",
    }
    for action in flags:
        assert action.option_strings[0] in text
        assert action.help is not None
        assert "(default: " in action.help or "(required" in action.help, action.dest
    assert "(default: 256)" in " ".join(text.split())
    done = tether("db", "prune", "--help")
    assert done.returncode == 0 and "--older-than DURATION" in done.stdout
    assert "exit codes: 0 done" in done.stdout


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("45s", 45_000),
        ("90m", 5_400_000),
        ("12h", 43_200_000),
        ("30d", 30 * DAY_MS),
        ("2w", 14 * DAY_MS),
        ("0s", 0),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


def test_prune_compacts_settled_records_only_and_reports_json(tmp_path: Path) -> None:
    d = data_dir(tmp_path)
    before = {r[2]: r for r in rows(d)}
    dry = tether("db", "prune", "--data-dir", str(d), "--older-than", "30d", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True and report["compactable"] == 3
    assert {r[2]: r for r in rows(d)} == before  # a dry run changes nothing

    done = tether("db", "prune", "--data-dir", str(d), "--older-than", "30d", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["compacted"] == 3 and report["dry_run"] is False
    assert report["artifacts"] == "kept" and report["data_dir"] == str(d.resolve())
    assert set(report["catalog_after"]) == {"file_bytes", "wal_bytes", "free_bytes"}
    with Catalog.open(f"sqlite://{d / 'catalog.db'}") as cat:
        for i in range(3):
            rec = cat.get(key(f"s{i}"))
            assert rec is not None and rec.compacted and rec.settlement is not None
    after = {r[2]: r for r in rows(d)}
    for unsettled in ("admitted", "pending"):
        assert after[unsettled] == before[unsettled]

    again = tether("db", "prune", "--data-dir", str(d), "--older-than", "30d")
    assert again.returncode == 0 and again.stderr == ""
    assert again.stdout.startswith("compacted 0 settled Activities older than 30d")
    assert "artifact payloads are kept" in again.stdout


def test_a_limit_longer_than_the_records_age_keeps_them(tmp_path: Path) -> None:
    d = data_dir(tmp_path)
    before = rows(d)
    done = tether("db", "prune", "--data-dir", str(d), "--older-than", "36500d", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["compacted"] == 0
    assert rows(d) == before


def test_vacuum_returns_the_free_pages(tmp_path: Path) -> None:
    d = data_dir(tmp_path, settled=300, unsettled=False)
    done = tether("db", "prune", "--data-dir", str(d), "--older-than", "1d", "--vacuum", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["compacted"] == 300 and report["vacuumed"] is True
    assert report["catalog_after"]["free_bytes"] == 0
    assert report["catalog_after"]["file_bytes"] < report["catalog_before"]["file_bytes"]


@pytest.mark.parametrize(
    ("setup", "argv", "code", "prefix"),
    [
        ("missing", ["--older-than", "1d"], 2, "tether db: no_such_directory:"),
        ("file", ["--older-than", "1d"], 2, "tether db: not_a_directory:"),
        ("empty", ["--older-than", "1d"], 2, "tether db: not_a_data_dir:"),
        ("garbage", ["--older-than", "1d"], 2, "tether db: not_a_data_dir:"),
        ("other_sqlite", ["--older-than", "1d"], 2, "tether db: not_a_data_dir:"),
        ("ok", ["--older-than", "30"], 2, "tether db: bad_duration:"),
        ("ok", ["--older-than", "3 days"], 2, "tether db: bad_duration:"),
        ("ok", ["--older-than=-3d"], 2, "tether db: bad_duration:"),
        ("ok", ["--older-than", "999999d"], 2, "tether db: bad_duration:"),
        ("ok", [], 2, "tether db: usage: the following arguments are required: --older-than"),
        ("ok", ["--older-than", "1d", "--batch", "0"], 2, "tether db: usage:"),
        # Past SQLite's integers: it was an OverflowError, exit 70 (ignored with --dry-run).
        ("ok", ["--older-than", "1d", "--batch", str(2**63)], 2, "tether db: usage: --batch"),
        ("ok", ["--older-than", "1d", "--batch", str(2**63), "--dry-run"], 2, "tether db: usage:"),
        ("ok", ["--older-than", "1d", "--bogus"], 2, "tether db: usage: unrecognized"),
        ("newer", ["--older-than", "1d"], 5, "tether db: catalog_newer:"),
        ("v2", ["--older-than", "1d", "--dry-run"], 5, "tether db: migration_needed:"),
        # One migration policy: prune never migrates, it names `tether db upgrade`.
        ("v2", ["--older-than", "1d"], 5, "tether db: migration_needed:"),
        # A catalog cut short was `not_a_data_dir` (2) here, `store_truncated` (5) elsewhere.
        ("truncated", ["--older-than", "1d"], 5, "tether db: store_truncated:"),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code_and_changes_nothing(
    tmp_path: Path, setup: str, argv: list[str], code: int, prefix: str
) -> None:
    d = tmp_path / "data"
    if setup == "file":
        d.write_text("precious\n")
    elif setup != "missing":
        d.mkdir()
    if setup == "garbage":
        (d / "catalog.db").write_text("not a database\n")
    if setup == "other_sqlite":
        conn = sqlite3.connect(d / "catalog.db")
        conn.execute("CREATE TABLE t (x)")
        conn.close()
    if setup in ("ok", "newer", "v2"):
        d.rmdir()
        d = data_dir(tmp_path)
    if setup == "truncated":
        d.rmdir()
        d = data_dir(tmp_path)
        for sidecar in d.glob("catalog.db-*"):
            sidecar.unlink()
        os.truncate(d / "catalog.db", 4096)
    if setup in ("newer", "v2"):
        conn = sqlite3.connect(d / "catalog.db")
        conn.execute(
            "UPDATE schema_version SET version = ?", (LATEST + 1 if setup == "newer" else 2,)
        )
        conn.commit()
        conn.close()

    # SQLite's own -wal/-shm sidecars of an existing catalog.db may appear (a read opens
    # them); nothing else may.
    def names() -> list[str]:
        return sorted(p.name for p in tmp_path.rglob("*") if not p.name.endswith(("-wal", "-shm")))

    snapshot = names()
    contents = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    if setup in ("newer", "v2"):
        versions = rows(d)
    done = tether("db", "prune", "--data-dir", str(d), *argv)
    assert done.returncode == code, (done.stdout, done.stderr)
    one_line(done, prefix)
    assert done.stdout == ""
    assert names() == snapshot  # nothing created
    if setup in ("file", "garbage", "other_sqlite", "truncated"):
        assert {p: p.read_bytes() for p in contents} == contents
    if setup in ("newer", "v2"):
        assert rows(d) == versions  # neither migrated nor compacted
    as_json = tether("db", "prune", "--data-dir", str(d), *argv, "--json")
    # With --json the refusal is one document on stdout, and still the same line on stderr.
    assert as_json.returncode == code and as_json.stderr == done.stderr
    error = json.loads(as_json.stdout)
    assert error["status"] == "refused"
    assert prefix.split(": ")[1].rstrip(":") == error["code"]
    assert error["message"] and error["error"]


def test_db_without_a_command_is_a_usage_error_and_help_is_not() -> None:
    done = tether("db")
    assert done.returncode == 2
    one_line(done, "tether db: usage: name a command: prune, status or upgrade")
    helped = tether("db", "--help")
    assert helped.returncode == 0
    assert all(c in helped.stdout for c in ("prune", "status", "upgrade"))
    assert "prune" in tether("--help").stdout and "db" in tether("--help").stdout


def test_status_and_upgrade_share_prunes_error_shape_and_exit_codes(tmp_path: Path) -> None:
    """One dispatcher: a usage error of `status`/`upgrade` is the same one typed line (exit 2)
    or JSON object as prune's; a store that needs an upgrade is exit 1 and the upgrade 0."""
    missing = tether("db", "status")
    assert missing.returncode == 2
    one_line(missing, "tether db: usage: the following arguments are required: URL")
    bad = tether("db", "upgrade", "mysql://h/x", "--json")
    assert bad.returncode == 2 and bad.stderr.startswith("tether db: bad_url:")
    assert json.loads(bad.stdout)["code"] == "bad_url"  # as the stores' own opens say
    d = data_dir(tmp_path)
    conn = sqlite3.connect(d / "catalog.db")
    conn.execute("UPDATE schema_version SET version = ?", (LATEST + 1,))
    conn.commit()
    conn.close()
    url = f"sqlite://{d / 'catalog.db'}"
    newer = tether("db", "status", url, "--json")
    assert newer.returncode == 1
    assert json.loads(newer.stdout)["stores"][0]["state"] == "newer than this Tether"
    # An upgrade cannot bring a newer schema back: the store cannot be used as it is (exit 5),
    # by the code prune gives it too.
    failed = tether("db", "upgrade", url)
    assert failed.returncode == 5
    one_line(failed, "tether db: catalog_newer:")
    # A mistyped path is a usage error (as a database the server does not have), never a
    # store to upgrade (exit 1), and nothing is created.
    typo = tmp_path / "no-such" / "catalgo.db"
    for flags in ((), ("--json",)):
        absent = tether("db", "status", f"sqlite://{typo}", *flags)
        assert absent.returncode == 2, (absent.stdout, absent.stderr)
        one_line(absent, "tether db: no_such_database:")
        if flags:
            assert json.loads(absent.stdout)["code"] == "no_such_database"
    assert not typo.parent.exists()


def test_prune_reads_a_data_dir_whose_path_holds_a_percent_sign(tmp_path: Path) -> None:
    """A path is a name, never a URL: `%20` in it is three characters (SQLite's `file:` URI
    decodes them unless quoted, and prune called the data dir no Tether data directory)."""
    d = data_dir(tmp_path / "lab%20a")
    done = tether("db", "prune", "--data-dir", str(d), "--older-than", "30d", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["compacted"] == 3


def test_a_directory_that_is_no_data_dir_keeps_its_mode(tmp_path: Path) -> None:
    """`db prune --data-dir ~` (or `operator --data-dir ~ list`) was refused, and it had
    tightened the directory to 0700 first: a data dir's own check, on one that is none."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    done = tether("db", "prune", "--data-dir", str(shared), "--older-than", "30d")
    assert done.returncode == 2, (done.stdout, done.stderr)
    one_line(done, "tether db: not_a_data_dir:")
    listed = tether("operator", "--data-dir", str(shared), "list")
    assert listed.returncode == 2, (listed.stdout, listed.stderr)
    assert "not_a_data_dir" in listed.stderr and "holds no catalog.db" in listed.stderr
    assert json.loads(listed.stdout)["code"] == "not_a_data_dir"  # not an empty list
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755


def test_a_usage_line_names_the_help_to_read(tmp_path: Path) -> None:
    """As every command's usage line ends; prune's own checks ended without it."""
    for argv in (
        ["--catalog", "postgresql://db/x", "--vacuum", "--older-than", "1d"],
        ["--data-dir", str(tmp_path), "--older-than", "1d", "--batch", "0"],
        ["--older-than", "1d"],
    ):
        done = tether("db", "prune", *argv)
        assert done.returncode == 2, done.stderr
        one_line(done, "tether db: usage: ")
        assert done.stderr.rstrip().endswith("(see `tether db prune --help`)"), done.stderr
