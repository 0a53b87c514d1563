"""The catalog doorbell: which commits ring, in-process waits, sockets in the data directory."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tether import _core
from tether.activities import Catalog, operation_id_for
from tether.storage import (
    CLAIMABLE,
    RESULT,
    SETTLED,
    Doorbell,
    changed_topics,
    wakeup_dir_for,
)
from tether.storage._doorbell import LISTING_TTL_S

from tests.activities.support import (
    ManualClock,
    admission,
    evidence_for,
    key,
    receipt,
    result,
)

COLUMNS = tuple(_core.catalog_columns())


def _row(**values: object) -> tuple[object, ...]:
    base = dict.fromkeys(COLUMNS)
    base.update(pending_observation=0, unsettled=1)
    base.update(values)
    return tuple(base[c] for c in COLUMNS)


@pytest.mark.parametrize(
    ("old", "new", "topics"),
    [
        (None, _row(claimable_from_ms=5), CLAIMABLE),  # admitted
        (_row(claimable_from_ms=5), _row(claimable_from_ms=30_005), 0),  # claimed: later
        (_row(claimable_from_ms=30_005), _row(claimable_from_ms=31_000), 0),  # renewed
        (_row(claimable_from_ms=30_005), _row(claimable_from_ms=10), CLAIMABLE),  # released
        (_row(claimable_from_ms=None), _row(claimable_from_ms=10), CLAIMABLE),  # a decision
        (_row(claimable_from_ms=9), _row(claimable_from_ms=None, pending_observation=1), RESULT),
        (_row(pending_observation=1), _row(pending_observation=1), 0),  # still pending
        (_row(pending_observation=1), _row(unsettled=0), SETTLED),
        (_row(unsettled=0), _row(unsettled=0), 0),
    ],
)
def test_the_topics_a_change_rings_come_from_the_core_columns(
    old: tuple[object, ...] | None, new: tuple[object, ...], topics: int
) -> None:
    assert changed_topics(old, new) == topics


def test_catalog_commits_ring_what_a_loop_waits_for(tmp_path: Path) -> None:
    clock = ManualClock()
    with Catalog.open(f"sqlite://{tmp_path}/c.db", clock=clock) as cat:
        bell = cat.doorbell
        marks = {t: bell.mark(t) for t in (CLAIMABLE, RESULT, SETTLED)}
        k = key()
        cat.admit(admission(k))
        assert bell.mark(CLAIMABLE) == marks[CLAIMABLE] + 1
        cat.admit(admission(k))  # an identical admission changes nothing: no ring
        claim = cat.claim("w", 1_000)
        assert claim is not None
        assert bell.mark(CLAIMABLE) == marks[CLAIMABLE] + 1  # a claim wakes nobody
        cat.bind_provider_operation(k, claim.fence, operation_id_for(k))
        res = result()
        cat.record_result(k, claim.fence, res)
        assert bell.mark(RESULT) == marks[RESULT] + 1
        cat.settle(k, receipt(4), evidence_for(k, res))
        assert bell.mark(SETTLED) == marks[SETTLED] + 1
        assert bell.mark(CLAIMABLE) == marks[CLAIMABLE] + 1


def test_a_wait_returns_on_a_ring_after_its_mark_and_never_loses_one(tmp_path: Path) -> None:
    bell = Doorbell.for_catalog(tmp_path / "c.db")
    mark = bell.mark(RESULT)
    bell.ring(RESULT)  # rings before the wait began: the mark still differs
    assert bell.wait(RESULT, mark, 600.0) is True
    mark = bell.mark(RESULT)
    assert bell.wait(RESULT, mark, 0.01) is False  # nothing rang: the timeout
    bell.ring(CLAIMABLE)
    assert bell.wait(RESULT, mark, 0.01) is False  # another topic does not wake it
    woke = threading.Event()

    def waiter() -> None:
        if bell.wait(RESULT, mark, 600.0):
            woke.set()

    t = threading.Thread(target=waiter)
    t.start()
    bell.ring(RESULT | SETTLED)
    t.join(timeout=60)
    assert woke.is_set() and not t.is_alive()


def test_poke_wakes_a_waiter_to_see_its_stop_event(tmp_path: Path) -> None:
    bell = Doorbell.for_catalog(tmp_path / "c.db")
    stop = threading.Event()
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(bell.wait(CLAIMABLE, bell.mark(1), 600, stop)))
    t.start()
    time.sleep(0.05)
    stop.set()
    bell.poke()
    t.join(timeout=60)
    assert out == [False] and not t.is_alive()


def test_one_doorbell_per_catalog_file_per_process(tmp_path: Path) -> None:
    a = Doorbell.for_catalog(tmp_path / "c.db")
    assert Doorbell.for_catalog(str(tmp_path / "c.db")) is a
    assert Doorbell.for_catalog(tmp_path / "other.db") is not a
    assert a.directory == wakeup_dir_for(tmp_path / "c.db") == tmp_path / "c.db-wakeup"


def test_listening_binds_a_private_socket_in_a_private_directory(tmp_path: Path) -> None:
    bell = Doorbell.for_catalog(tmp_path / "c.db")
    os.mkdir(bell.directory, 0o755)
    os.chmod(bell.directory, 0o755)  # a loose mode (a copy, a umask) is tightened
    bell.listen()
    try:
        path = bell.socket_path
        assert path is not None and bell.listening
        assert stat.S_IMODE(os.stat(bell.directory).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert path.name.startswith(f"{os.getpid()}-")
    finally:
        bell.unlisten()
    assert not bell.listening and not path.exists()  # removed on the last unlisten


def test_a_directory_that_is_a_file_leaves_the_process_to_its_own_rings(tmp_path: Path) -> None:
    bell = Doorbell.for_catalog(tmp_path / "c.db")
    bell.directory.write_text("not a directory")
    bell.listen()  # logged, not raised: waiters fall back to their poll
    try:
        assert not bell.listening
        mark = bell.mark(CLAIMABLE)
        bell.ring(CLAIMABLE)
        assert bell.wait(CLAIMABLE, mark, 0.0) is True
    finally:
        bell.unlisten()


_LISTENER = """
import sys, time
from tether.storage import Doorbell, RESULT
bell = Doorbell.for_catalog(sys.argv[1])
bell.listen()
mark = bell.mark(RESULT)
print(bell.socket_path, flush=True)
print("rang" if bell.wait(RESULT, mark, 120.0) else "timeout", flush=True)
"""


def _listener(catalog: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _LISTENER, str(catalog)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_ring_reaches_a_waiter_in_another_process(tmp_path: Path) -> None:
    catalog = tmp_path / "c.db"
    proc, sock = _listener(catalog)
    try:
        assert sock.exists()
        bell = Doorbell.for_catalog(catalog)
        time.sleep(LISTING_TTL_S)
        bell.ring(RESULT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert out.strip() == "rang"  # within its 120 s wait: only the datagram explains it
    assert bell.sent >= 1


def test_a_socket_its_dead_process_left_is_removed_by_the_next_ring(tmp_path: Path) -> None:
    catalog = tmp_path / "c.db"
    bell = Doorbell.for_catalog(catalog)
    directory = bell.directory
    directory.mkdir(mode=0o700)
    # What a SIGKILLed listener leaves: a socket file nobody is bound to any more.
    stale = directory / "999999-deadbeef0000.sock"
    # Bound through the directory's descriptor, as the doorbell binds its own: a temp dir's
    # path (under pytest-xdist's per-process one, say) may be too long for a socket address.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(f"/proc/self/fd/{fd}/{stale.name}")
    finally:
        os.close(fd)
    unrelated = directory / "notes.txt"
    unrelated.write_text("not a socket of ours")
    assert stale.exists()
    time.sleep(LISTING_TTL_S)
    bell.ring(CLAIMABLE)
    assert not stale.exists() and bell.stale_removed == 1
    assert unrelated.exists()  # only sockets are ours to remove


def test_listening_sweeps_the_sockets_of_dead_processes(tmp_path: Path) -> None:
    catalog = tmp_path / "c.db"
    proc, sock = _listener(catalog)
    proc.kill()  # SIGKILL: its socket file stays behind
    proc.communicate(timeout=60)
    assert sock.exists()
    bell = Doorbell.for_catalog(catalog)
    bell.listen()
    try:
        assert not sock.exists() and bell.stale_removed == 1
    finally:
        bell.unlisten()


def test_a_removed_socket_file_is_rebound_and_rings_reach_it_again(tmp_path: Path) -> None:
    catalog = tmp_path / "c.db"
    bell = Doorbell.for_catalog(catalog)
    bell.listen()
    try:
        first = bell.socket_path
        assert first is not None
        assert bell.repair() is False  # nothing to repair
        first.unlink()  # an operator cleaned the directory
        assert bell.repair() is True
        second = bell.socket_path
        assert second is not None and second != first and second.exists()
        mark = bell.mark(SETTLED)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from tether.storage import Doorbell, SETTLED;"
                " b = Doorbell.for_catalog(sys.argv[1]); b.ring(SETTLED); print(b.sent)",
                str(catalog),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert proc.stdout.strip() == "1"  # it found the new socket
        assert bell.wait(SETTLED, mark, 60.0) is True and bell.received >= 1
    finally:
        bell.unlisten()


def test_a_long_directory_path_still_binds_and_rings(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    catalog = deep / "catalog.db"
    assert len(str(wakeup_dir_for(catalog))) > 108  # too long for a plain AF_UNIX address
    proc, sock = _listener(catalog)
    try:
        assert sock.exists()
        bell = Doorbell.for_catalog(catalog)
        time.sleep(LISTING_TTL_S)
        bell.ring(RESULT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert out.strip() == "rang"


def test_a_result_ring_of_this_process_names_its_records(tmp_path: Path) -> None:
    """`results_since` answers the keys this process's catalog commits gave a result, in
    order (single and batched writes); a RESULT ring naming no key (as one from another
    process is) makes it answer None: the reader cannot tell and re-reads everything."""
    clock = ManualClock()
    with Catalog.open(f"sqlite://{tmp_path}/c.db", clock=clock) as cat:
        bell = cat.doorbell
        mark, keys = bell.results_since(0)
        a, b, c = key("a"), key("b"), key("c")
        for k in (a, b, c):
            cat.admit(admission(k))
        assert bell.results_since(mark) == (mark, [])  # admissions give no result
        claims = {}
        for _ in range(3):
            claim = cat.claim("w", 10_000)
            assert claim is not None
            claims[claim.record.key] = claim
            cat.bind_provider_operation(
                claim.record.key, claim.fence, operation_id_for(claim.record.key)
            )
        cat.record_result(a, claims[a].fence, result())
        mark2, keys = bell.results_since(mark)
        assert keys == [(a.world_id, a.kind, a.activity_id)]
        done = cat.record_results([(k, claims[k].fence, result()) for k in (b, c)])
        assert not any(isinstance(d, Exception) for d in done)
        mark3, keys = bell.results_since(mark2)
        assert sorted(keys or []) == sorted((k.world_id, k.kind, k.activity_id) for k in (b, c))
        assert bell.results_since(mark3) == (mark3, [])
        bell.ring(RESULT)  # what a ring from another process raises here: no keys
        mark4, keys = bell.results_since(mark3)
        assert keys is None and mark4 > mark3
        assert bell.results_since(mark4) == (mark4, [])


def test_a_reader_further_behind_than_the_kept_keys_is_told_to_re_read(tmp_path: Path) -> None:
    from tether.storage._doorbell import RESULT_KEYS_KEPT

    bell = Doorbell.for_catalog(tmp_path / "c.db")
    mark, _ = bell.results_since(0)
    for i in range(RESULT_KEYS_KEPT):
        bell.ring(RESULT, [("w", "k", f"a{i}")])
    now, keys = bell.results_since(mark)
    assert keys is not None and len(keys) == RESULT_KEYS_KEPT
    bell.ring(RESULT, [("w", "k", "one-more")])
    assert bell.results_since(mark) == (now + 1, None)  # the oldest key was dropped
    assert bell.results_since(now) == (now + 1, [("w", "k", "one-more")])
