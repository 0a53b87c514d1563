"""`tether._held`: inside `holding()` (a stop's priority) a stop's reads, writes, waits and
syncs keep the interpreter lock, so no other thread of the process runs between them; each
behaves as the `os` call it stands for, errors included; outside it they are those calls."""

from __future__ import annotations

import contextlib
import errno
import os
import pty
import sys
import threading
import time
import tty
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tether import _held
from tether._priority import stop_priority


@contextmanager
def counting() -> Iterator[Callable[[], int]]:
    """A busy thread counting while it holds the interpreter lock; a read of its count."""
    count = [0]
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    while count[0] == 0:
        time.sleep(0.001)
    try:
        yield lambda: count[0]
    finally:
        done.set()
        thread.join()


def _stamps_during_waits(held: bool) -> int:
    """How many times another thread ran while this one waited 15 ms on a quiet pipe, three
    times. The other thread wakes every 0.5 ms; each wait starts just after this thread took
    the interpreter lock back, so it is never the switch interval that hands it over."""
    read, write = os.pipe()
    stamps: list[float] = []
    windows: list[tuple[float, float]] = []
    done = threading.Event()

    def other() -> None:
        while not done.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    try:
        with _held.holding() if held else contextlib.nullcontext():
            for _ in range(3):
                time.sleep(0.002)
                started = time.perf_counter()
                assert not _held.wait_readable(read, 15)
                windows.append((started, time.perf_counter()))
    finally:
        done.set()
        thread.join()
        os.close(read)
        os.close(write)
    return sum(1 for t in stamps for a, b in windows if a < t < b)


def test_a_held_wait_lets_no_other_thread_run_and_a_plain_one_does() -> None:
    assert _stamps_during_waits(held=False) > 0  # the lock let go: the other thread ran
    assert _stamps_during_waits(held=True) == 0  # nothing else ran while the stop waited


def test_a_held_wait_keeps_the_lock_only_so_long() -> None:
    """A device that does not answer: the lock is kept `HELD_WAIT_MS`, then let go."""
    read, write = os.pipe()
    try:
        with counting() as count, _held.holding():
            before = count()
            started = time.monotonic()
            assert not _held.wait_readable(read, _held.HELD_WAIT_MS + 80)
            assert time.monotonic() - started >= (_held.HELD_WAIT_MS + 80) / 1000 * 0.9
            assert count() > before  # the rest of the wait let the other thread run
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("held", [False, True])
def test_each_call_is_the_os_call_it_stands_for(tmp_path: Path, held: bool) -> None:
    def run() -> None:
        read, write = os.pipe()
        try:
            assert _held.write(write, b"frame") == 5
            assert _held.wait_readable(read, 1000)
            assert _held.read(read, 4096) == b"frame"
            os.set_blocking(read, False)
            with pytest.raises(BlockingIOError):
                _held.read(read, 10)
        finally:
            os.close(read)
            os.close(write)
        record = tmp_path / "record"
        record.write_bytes(b"x" * 512)
        fd = _held.open_fd(record, os.O_WRONLY | os.O_CLOEXEC)
        try:
            assert _held.size(fd) == 512
            assert _held.pwrite(fd, b"y" * 512, 0) == 512
            _held.fdatasync(fd)
        finally:
            _held.close(fd)
        assert _held.read_file(record) == b"y" * 512
        with pytest.raises(FileNotFoundError) as info:
            _held.open_fd(tmp_path / "missing", os.O_RDONLY)
        assert info.value.errno == errno.ENOENT and info.value.filename == str(tmp_path / "missing")
        with pytest.raises(OSError) as bad:
            _held.fdatasync(999_999)
        assert bad.value.errno == errno.EBADF
        master, slave = pty.openpty()
        tty.setraw(slave)  # a serial line: bytes, not lines
        try:
            os.write(master, b"stale status")
            assert _held.wait_readable(slave, 1000)
            _held.flush_input(slave)  # what was received and not read is dropped
            assert not _held.wait_readable(slave, 20)
        finally:
            os.close(master)
            os.close(slave)

    if held:
        with _held.holding():
            assert _held.active()
            run()
    else:
        assert not _held.active()
        run()


def test_a_stop_holds_on_and_gives_the_switch_interval_back() -> None:
    before = sys.getswitchinterval()
    with stop_priority():
        assert _held.active()
        assert sys.getswitchinterval() == _held.HELD_SWITCH_S
        with stop_priority():  # nested: still held, given back once, by the outermost
            assert _held.active()
        assert _held.active() and sys.getswitchinterval() == _held.HELD_SWITCH_S
    assert not _held.active()
    assert sys.getswitchinterval() == before
    other: list[bool] = []
    with stop_priority():
        thread = threading.Thread(target=lambda: other.append(_held.active()))
        thread.start()
        thread.join()
    assert other == [False]  # only the stop's own thread keeps the lock
