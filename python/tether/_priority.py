"""A stop goes ahead of the machine's other work: its thread's scheduling priority, and no
automatic garbage collection while it runs.

On a robot host the daemon shares its cores with planners, perception and its own backlog. A
stop that waits for a core behind them, or behind a full garbage collection of the daemon's
heap (tens of milliseconds, every thread held), is a late stop. So:

- `stop_priority()` runs its block with the calling thread at `STOP_NICE` (Linux schedules
  threads, so only this thread is raised), with the collector's automatic runs off in this
  process (collection resumes when the last overlapping stop ends, if it ran before the
  first; garbage made meanwhile is collected then), and with the stop's reads, writes and
  waits keeping the interpreter lock (`tether._held.holding`). The thread's priority is
  restored when the block ends.
- `raise_thread(native_id, nice)` raises a thread that every stop passes through (the gRPC
  server's dispatcher and pool threads, at `DISPATCH_NICE`).
- `quiet_heap()`, once a long-running process has started: its start-up heap (modules,
  configuration, generated protocol classes) moves out of the collector's scans for good
  (`gc.freeze`), young collections run a fourteenth as often and full ones a tenth as often
  (`QUIET_THRESHOLDS`).

Raising a priority needs CAP_SYS_NICE or a nice limit (`ulimit -e`, `LimitNICE=` in a systemd
unit). Without it nothing is raised, nothing fails, and one log line says so.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from collections.abc import Iterator
from typing import Final

from tether import _held

log = logging.getLogger("tether.priority")

#: A stopping thread's nice value (the highest priority an ordinary thread can have).
STOP_NICE: Final = -20
#: The nice value of the threads every gRPC call, a Stop's too, passes through: grpcio's
#: dispatcher and the pool threads that serve the calls.
DISPATCH_NICE: Final = -10
#: The collector's thresholds once `quiet_heap` ran: a young collection every 10,000 net
#: allocations of container objects (CPython's default is 700: a worker's step of 10 Activities
#: makes thousands of row tuples that die young, and at 700 the collector scanned them ~14x as
#: often, a tenth of a PostgreSQL worker's CPU; `benches/pg_queue.py`), and generation 2 every
#: 100 generation-1 runs (the default is 10).
QUIET_THRESHOLDS: Final = (10_000, 10, 100)

_lock = threading.Lock()
_stops = 0
_collecting = True  # whether the collector ran automatically when the first stop began
_refused = False


def _refusal(nice: int, exc: OSError) -> None:
    global _refused
    with _lock:
        if _refused:
            return
        _refused = True
    log.info(
        "thread priority not raised: not permitted",
        extra={"nice": nice, "cause": exc.strerror or str(exc)},
    )


def raise_thread(native_id: int, nice: int) -> int | None:
    """Set thread `native_id`'s nice value to `nice` when that raises its priority; its
    previous nice value, or None when nothing was changed (already as high, not permitted)."""
    try:
        before = os.getpriority(os.PRIO_PROCESS, native_id)
        if before <= nice:
            return None
        os.setpriority(os.PRIO_PROCESS, native_id, nice)
    except OSError as exc:
        _refusal(nice, exc)
        return None
    return before


@contextlib.contextmanager
def stop_priority() -> Iterator[None]:
    """The block at `STOP_NICE`, with no automatic garbage collection in this process."""
    global _stops, _collecting
    with _lock:
        if not _stops:
            _collecting = gc.isenabled()
        _stops += 1
        gc.disable()
    tid = threading.get_native_id()
    before = raise_thread(tid, STOP_NICE)
    try:
        with _held.holding():  # its reads, writes and waits keep the interpreter lock
            yield
    finally:
        if before is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, before)  # lowering is always permitted
            except OSError:
                pass
        with _lock:
            _stops -= 1
            if not _stops and _collecting:
                gc.enable()


def quiet_heap() -> None:
    """Collect once, freeze what is left (see the module docstring), and set
    `QUIET_THRESHOLDS`. For a long-running process, once it has started."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*QUIET_THRESHOLDS)
