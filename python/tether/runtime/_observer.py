"""`Observer`: stages results and commits one observation tick per world that has some.

Rules (seed section 5 and the world port):
- A world reserved for close is skipped: its observations wait for a reopen.
- When a newer writer (another process) owns a world, this process stops observing it; that
  writer restages and observes itself. `resume` takes the world back after a recovery.
- The loop outlives a failed pass (logged) and sleeps on its `Wakeup` only when a pass
  committed nothing, until a result is recorded (the doorbell's `RESULT` ring, from any
  process) or the fallback poll passes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tether.runtime._errors import ActivityRuntimeError, owned_by
from tether.runtime._failing import Failing
from tether.runtime._ports import CloseStates
from tether.runtime._stager import ObservationStager
from tether.runtime._ticker import Ticker
from tether.runtime._wakeup import Wakeup
from tether.world import CommittedTickReceipt, StaleWriter

log = logging.getLogger("tether.runtime.observer")


class Observer:
    """The observation loop of one process. Single owner: the Host (its thread runs `run`).

    Args:
        stager: the staged observations.
        ledger: each world's close state.
        ticker: commits the observation ticks.
        wakeup: what the loop waits on while idle.
        pause: called before each pass; it may block (see `Worker`'s `pause`).

    It observes only the worlds its ticker writes (`Ticker.owner`): on a world ledger shared
    by hosts, another host's worlds are that host's to observe and settle.
    """

    def __init__(
        self,
        stager: ObservationStager,
        ledger: CloseStates,
        ticker: Ticker,
        *,
        wakeup: Wakeup,
        pause: Callable[[], None] | None = None,
    ) -> None:
        self.stager = stager
        self._pause = pause
        self.ledger = ledger
        self.ticker = ticker
        self.wakeup = wakeup
        self._fenced: set[str] = set()  # worlds whose writer a newer one superseded
        self._thread: threading.Thread | None = None

    @property
    def fenced(self) -> frozenset[str]:
        """Worlds this process stopped observing because a newer writer owns them."""
        return frozenset(self._fenced)

    def resume(self, world_id: str) -> None:
        """Observe `world_id` again (this process became its writer again)."""
        self._fenced.discard(world_id)

    def observe_once(self) -> list[CommittedTickReceipt]:
        """Restage, then commit one observation tick per world that has staged observations."""
        self.stager.restage()
        receipts = []
        for world_id in self.stager.staged_worlds():
            if not owned_by(world_id, self.ticker.owner):
                continue  # another host's world (a shared ledger): that host observes it
            if self.ledger.close_state(world_id)[0] != "open":
                continue  # reserved for close: the observation waits for a reopen
            if world_id in self._fenced:
                continue  # a newer writer owns the world; it restages and observes itself
            try:
                receipts.append(self.ticker.commit(world_id))
            except StaleWriter:
                log.warning("world %r has a newer writer; this Host stops observing it", world_id)
                self._fenced.add(world_id)
        return receipts

    def run(self) -> None:
        """Observe until the wakeup says stop; idle, wait for a result to be recorded."""
        failing = Failing(log, "observer", "step")
        while not self.wakeup.stopping:
            if self._pause is not None:
                self._pause()
            mark = self.wakeup.mark()  # before the pass: a ring after it is never lost
            try:
                committed = self.observe_once()
            except Exception as exc:  # keep observing; the failure is logged and retried
                failing.failed(exc)  # a store that is down: one traceback, then a count
                committed = []
            else:
                failing.over()
            if not committed:
                self.wakeup.wait(mark)

    def start(self) -> None:
        """Run the loop in its own thread (once)."""
        if self._thread is not None:
            raise ActivityRuntimeError("the observer is already started")
        self._thread = threading.Thread(target=self.run, name="tether-observer")
        self._thread.start()

    def join(self) -> None:
        """Wait for the loop's thread to finish (set the wakeup's stop event first)."""
        if self._thread is not None:
            self._thread.join()
