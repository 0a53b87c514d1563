"""`tether._priority`: a stop's thread runs raised, with no automatic garbage collection, and
gives both back; a process that may not raise priorities still stops, and says so once; the
daemon's start-up heap is frozen. Real scheduler priorities (this suite runs as root in CI;
the refusal case runs in a child that drops to an unprivileged user)."""

from __future__ import annotations

import gc
import json
import os
import pwd
import subprocess
import sys
import threading

import pytest
from tether import _priority
from tether._priority import QUIET_THRESHOLDS, STOP_NICE, raise_thread, stop_priority


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _may_raise() -> bool:
    """Whether this process may raise a thread's priority (tried on a thread of its own)."""
    result: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) - 1)
            result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return result[0]


needs_raise = pytest.mark.skipif(
    not _may_raise(), reason="raising a priority needs CAP_SYS_NICE (root in CI)"
)


@needs_raise
def test_a_stop_runs_raised_without_automatic_collection_and_gives_both_back() -> None:
    before = _nice()
    assert gc.isenabled()
    with stop_priority():
        assert _nice() == STOP_NICE
        assert not gc.isenabled()
    assert _nice() == before and gc.isenabled()


@needs_raise
def test_overlapping_stops_keep_the_collector_off_until_the_last_one_ends() -> None:
    entered, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def other_stop() -> None:
        with stop_priority():
            seen.append(_nice())
            entered.set()
            release.wait(10)

    t = threading.Thread(target=other_stop)
    with stop_priority():
        t.start()
        assert entered.wait(10)
    # This stop ended, the other runs on: still no automatic collection, and it is still raised.
    assert not gc.isenabled() and seen == [STOP_NICE] and _nice() != STOP_NICE
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_a_collector_turned_off_before_a_stop_stays_off_after_it() -> None:
    gc.disable()
    try:
        with stop_priority():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@needs_raise
def test_raise_thread_only_ever_raises_and_says_what_it_changed() -> None:
    tid = threading.get_native_id()
    before = _nice()
    try:
        assert raise_thread(tid, before - 3) == before
        assert _nice() == before - 3
        assert raise_thread(tid, before) is None  # that would lower it: nothing changed
        assert _nice() == before - 3
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, before)


CHILD = """
import gc, json, logging, os, sys, threading
from tether import _priority
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("tether.priority").addHandler(Keep())
logging.getLogger("tether.priority").setLevel(logging.INFO)
uid, gid = int(sys.argv[1]), int(sys.argv[2])
try:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
except PermissionError as exc:
    print(json.dumps({"skip": f"cannot drop to uid {uid}: {exc}"}))
    sys.exit(0)
tid = threading.get_native_id()
inside = []
for _ in range(2):
    with _priority.stop_priority():
        inside.append([os.getpriority(os.PRIO_PROCESS, tid), gc.isenabled()])
_priority.quiet_heap()
print(json.dumps({"inside": inside, "after": gc.isenabled(), "log": records,
                  "frozen": gc.get_freeze_count(), "thresholds": list(gc.get_threshold())}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the child drops from root to another user")
def test_without_permission_a_stop_still_runs_unraised_and_says_so_once() -> None:
    nobody = pwd.getpwnam("nobody")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(nobody.pw_uid), str(nobody.pw_gid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    doc = json.loads(out.stdout)
    if "skip" in doc:
        pytest.skip(doc["skip"])
    assert doc["inside"] == [[0, False], [0, False]]  # unraised, still no collection
    assert doc["after"] is True
    assert doc["log"] == ["thread priority not raised: not permitted"]
    # The daemon's heap: frozen once started, full collections a tenth as often.
    assert doc["frozen"] > 1000 and doc["thresholds"] == list(QUIET_THRESHOLDS)


def test_the_module_keeps_no_count_of_stops_once_they_end() -> None:
    with stop_priority(), stop_priority():
        pass
    assert _priority._stops == 0
