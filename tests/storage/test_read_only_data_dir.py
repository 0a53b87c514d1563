"""A data dir on a read-only mount is said so by every command, by one code and one exit:
`read_only_storage`, exit 6 (`STORAGE_IO`), one line naming the store and why. Before, `db
prune` called it no Tether data directory, `db status` and `db upgrade` failed with a bare
`OperationalError`, `operator list` with the class name of a storage error, and `serve` with
an errno name.

The mount is a real read-only bind mount (root only: skipped elsewhere), removed after."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether import _exit
from tether.activities import Catalog
from tether.storage._urls import sqlite_url
from tether.world import open_ledger

from tests._serve import tether

SIM = "tether.serve.families:sim_families"


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A data dir holding a catalog and a world ledger, seen through a read-only mount."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    source, mounted = tmp_path / "src", tmp_path / "ro"
    (source / "data").mkdir(parents=True)
    mounted.mkdir()
    with Catalog.open(sqlite_url(source / "data" / "catalog.db")):
        pass
    open_ledger(sqlite_url(source / "data" / "world.db")).close()
    for leftover in (source / "data").glob("*-wakeup"):
        leftover.rmdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"no bind mount here: {bind.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mounted)], check=True)
        yield mounted / "data"
    finally:
        subprocess.run(["umount", "-l", str(mounted)], check=True)


def _refused(done: subprocess.CompletedProcess[str], prog: str) -> dict[str, object]:
    assert done.returncode == _exit.STORAGE_IO, done.stdout + done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert (doc["status"], doc["code"]) == ("refused", "read_only_storage"), doc
    assert done.stderr.startswith(f"{prog}: read_only_storage: "), done.stderr
    assert "Traceback" not in done.stderr
    return doc


def test_every_store_command_says_a_read_only_data_dir_alike(read_only: Path) -> None:
    catalog = sqlite_url(read_only / "catalog.db")
    for argv in (
        ["db", "prune", "--data-dir", str(read_only), "--older-than", "1d"],
        ["db", "prune", "--data-dir", str(read_only), "--older-than", "1d", "--dry-run"],
        ["db", "status", catalog],
        ["db", "upgrade", sqlite_url(read_only / "world.db")],
        ["operator", "list", "--data-dir", str(read_only)],
    ):
        prog = "tether " + argv[0]
        doc = _refused(tether(*argv, "--json"), prog)
        assert "read-only file system" in str(doc["message"]), doc


def test_a_daemon_on_a_read_only_state_dir_is_refused_by_the_same_code(
    read_only: Path, tmp_path: Path
) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{read_only / "state"}"\n[serve]\nfamilies = ["{SIM}"]\n'
    )
    _refused(tether("serve", "--config", str(config), "--json"), "tether serve")


def test_the_demo_on_a_read_only_mount_says_so_with_its_code(read_only: Path) -> None:
    """`tether demo --data-dir` that cannot be created on a read-only mount was `usage`,
    exit 2; on an existing one its hint said to free space."""
    fresh = tether(
        "demo", "--data-dir", str(read_only / "new"), "--port", "0", "--moves", "0", "--json"
    )
    doc = _refused(fresh, "tether demo")
    assert "cannot be created" in str(doc["message"]), doc
    existing = tether("demo", "--data-dir", str(read_only), "--port", "0", "--moves", "0", "--json")
    assert existing.returncode == _exit.STORAGE_IO, existing.stdout + existing.stderr
    doc = json.loads(existing.stdout.strip().splitlines()[-1])
    assert doc["code"] == "read_only_storage", doc
    assert "make it writable" in str(doc["message"]) and "free space" not in str(doc["message"])
