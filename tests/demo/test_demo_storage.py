"""Storage edges of `tether demo`: a catalog or world file cut to 0 bytes or to half, and a full
disk, are one typed line and a documented exit code, and nothing is lost."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether import _exit
from tether._sqlite_files import StoreFileError, check_sqlite_file, prepare_sqlite_file

from tests.demo._support import demo_argv

SMALL = ["--targets", "2", "--episodes", "1", "--steps", "200", "--port", "0"]
BIG = ["--targets", "2", "--episodes", "2", "--steps", "20000", "--port", "0"]
EXIT_STORE, EXIT_DISK = _exit.STORE_UNUSABLE, _exit.STORAGE_IO


def _demo(data: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def fsize() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        demo_argv(data, *args),
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        preexec_fn=fsize,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("finished")
    done = _demo(data, *SMALL)
    assert done.returncode == 0, done.stderr
    assert not (data / "catalog.db-wal").exists() and not (data / "world.db-wal").exists()
    return data


@pytest.mark.parametrize("store", ["catalog.db", "world.db"])
@pytest.mark.parametrize("cut", ["empty", "half"])
def test_a_store_cut_short_is_one_line_exit_3_and_nothing_is_lost(
    finished: Path, tmp_path: Path, store: str, cut: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(finished, data)
    original = (data / store).read_bytes()
    damaged = b"" if cut == "empty" else original[: len(original) // 2]
    (data / store).write_bytes(damaged)
    refused = _demo(data, *SMALL)
    assert refused.returncode == EXIT_STORE, refused.stdout + refused.stderr
    line = _one_line(refused)
    assert line.startswith("tether demo: store_truncated: ") and str(data / store) in line
    assert (data / store).read_bytes() == damaged  # nothing was written to it
    # The other commands that open it refuse it in one line too.
    url = "sqlite:///" + str(data / store)
    status = subprocess.run(
        [sys.executable, "-m", "tether", "db", "status", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == EXIT_STORE and "store_truncated" in _one_line(status)
    if store == "catalog.db":
        listed = subprocess.run(
            [sys.executable, "-m", "tether", "operator", "--data-dir", str(data), "list"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == EXIT_STORE and "store_truncated" in _one_line(listed)
    # Nothing lost: with the file restored the same command resumes and runs nothing again.
    (data / store).write_bytes(original)
    resumed = _demo(data, *SMALL)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming (2 activities already settled)" in resumed.stdout


def test_a_file_that_is_no_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "catalog.db").write_bytes(b"not a database, " * 512)
    refused = _demo(tmp_path, *SMALL)
    assert refused.returncode == EXIT_STORE
    assert _one_line(refused).startswith("tether demo: not_a_database: ")


def test_the_file_checks(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    prepare_sqlite_file(db, what="the test store")  # created complete, never 0 bytes
    assert db.stat().st_size > 0 and not list(tmp_path.glob(".x.db.new-*"))
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (v BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(3000),) for _ in range(40)])
    conn.commit()
    conn.close()
    check_sqlite_file(db, what="the test store")
    data = db.read_bytes()
    for size, problem in ((0, "0 bytes"), (50, "shorter than its header"), (4096 + 7, "pages")):
        db.write_bytes(data[:size])
        with pytest.raises(StoreFileError, match=problem) as refused:
            check_sqlite_file(db, what="the test store")
        assert refused.value.code == "store_truncated"
    db.write_bytes(data[: len(data) // 2 // 4096 * 4096])
    with pytest.raises(StoreFileError, match="header records"):
        check_sqlite_file(db, what="the test store")
    # A write-ahead log that holds the missing pages (an interrupted checkpoint) is no damage.
    Path(f"{db}-wal").write_bytes(b"\0" * (32 + (4096 + 24) * (len(data) // 4096)))
    check_sqlite_file(db, what="the test store")
    check_sqlite_file(tmp_path / "missing.db", what="the test store")  # created when opened


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (needs the right to mount; skipped without it)."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _one_result_per_operation(data: Path) -> None:
    for entry in (data / "operations" / "ops").iterdir():
        assert sorted(p.name for p in entry.glob("result*")) == ["result.json"]


def test_a_full_disk_is_one_line_exit_4_and_the_same_command_then_resumes(
    small_disk: Path,
) -> None:
    data = small_disk / "data"
    full = _demo(data, *BIG)
    assert full.returncode == EXIT_DISK, full.stdout + full.stderr
    line = _one_line(full)
    assert line.startswith("tether demo: disk_full: no space left on the disk under ")
    assert "run the same command again" in line
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = _demo(data, *BIG)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "2/2 reaches" in resumed.stdout or "reaches within tolerance" in resumed.stdout
    _one_result_per_operation(data)


def test_a_file_size_limit_is_one_line_exit_4_and_the_same_command_then_resumes(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    limited = _demo(data, *BIG, limit=400_000)  # a real RLIMIT_FSIZE: writes past it are EFBIG
    assert limited.returncode == EXIT_DISK, limited.stdout + limited.stderr
    assert _one_line(limited).startswith("tether demo: file_too_large: ")
    resumed = _demo(data, *BIG)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _one_result_per_operation(data)
    assert (
        json.loads(
            (data / "operations" / "ops").iterdir().__next__().joinpath("bound.json").read_bytes()
        )["request"]["steps"]
        == 20000
    )
