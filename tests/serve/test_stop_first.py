"""`StopFirst`: while a stop runs, new ticks and work-lane RPCs wait at their entry."""

from __future__ import annotations

import threading
import time

from tether.serve.daemon import StopFirst


def test_work_entering_while_a_stop_runs_waits_until_it_is_done() -> None:
    first = StopFirst()
    entered = threading.Event()

    def work() -> None:
        first.wait_clear()
        entered.set()

    with first.stopping():
        t = threading.Thread(target=work)
        t.start()
        assert not entered.wait(0.2)  # held while the stop runs
    assert entered.wait(2.0)  # and let in once it is done
    t.join()
    assert first.waited == 1


def test_no_stop_running_lets_work_in_at_once_and_a_long_stop_only_for_the_bound() -> None:
    first = StopFirst()
    start = time.monotonic()
    first.wait_clear()
    assert time.monotonic() - start < 0.05 and first.waited == 0
    with first.stopping(), first.stopping():  # two overlapping stops: both must end
        start = time.monotonic()
        first.wait_clear(timeout_s=0.2)
        assert 0.15 <= time.monotonic() - start < 2.0
