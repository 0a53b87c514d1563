"""`WorkerPool`: this process's Activity workers, each claiming fenced attempts in its thread.

Workers claim outside every world lock and never open the world ledger; each has its own
catalog connection (plus one for heartbeats, opened at its first renewal). Idle
workers wait on the pool's `Wakeup` until an Activity becomes claimable (see `Worker.run`).
Closing the pool sets its stop event, wakes the idle workers and lets attempts in flight
finish first (an unbound attempt claimed after the stop is released, see `Worker`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence

from tether.activities import Catalog
from tether.runtime._artifacts import ArtifactStore
from tether.runtime._errors import ActivityRuntimeError
from tether.runtime._family import Family, ProgressEvent
from tether.runtime._wakeup import Wakeup
from tether.runtime._worker import Worker


class WorkerPool:
    """Worker threads over one catalog file and artifact store. Single owner: its creator.

    Args:
        open_catalog: opens a fresh catalog connection (each worker opens its own).
        artifacts: the data directory's artifact store.
        families: the families whose kinds the workers claim.
        instance: prefix of every claim owner name (`instance/name`), unique per process.
        lease_ms: attempt lease length.
        emit: receives every adapter's progress (from any worker thread).
        host: the host the workers run on (see `Worker`; None: unbound work only).
        wakeup: what idle workers wait on (topic `CLAIMABLE`); its stop event stops them. The
            pool does not close it: its creator does.
        pause: each worker's `pause` (see `Worker`).
    """

    def __init__(
        self,
        open_catalog: Callable[[], Catalog],
        artifacts: ArtifactStore,
        families: Sequence[Family],
        *,
        instance: str,
        lease_ms: int = 30_000,
        emit: Callable[[ProgressEvent], None] | None = None,
        wakeup: Wakeup,
        host: str | None = None,
        pause: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.pause = pause
        self.open_catalog = open_catalog
        self.artifacts = artifacts
        self.families = tuple(families)
        self.instance = instance
        self.lease_ms = lease_ms
        self.emit = emit
        self.wakeup = wakeup
        self._workers: list[Worker] = []
        self._threads: list[threading.Thread] = []

    def new_worker(self, name: str | None = None, *, stop: threading.Event | None = None) -> Worker:
        """A worker over the pool's catalog, artifacts and families (not started).

        The caller owns it (closes it); `stop` defaults to a fresh event of its own.
        """
        return Worker(
            open_catalog=self.open_catalog,
            artifacts=self.artifacts,
            families=self.families,
            owner=f"{self.instance}/{name or uuid.uuid4().hex[:6]}",
            lease_ms=self.lease_ms,
            emit=self.emit,
            stop=stop,
            host=self.host,
            pause=self.pause,
        )

    @property
    def size(self) -> int:
        """How many worker threads the pool started."""
        return len(self._threads)

    def start(self, workers: int) -> None:
        """Start `workers` worker threads (once), named `w0`, `w1`, ..."""
        if self._threads:
            raise ActivityRuntimeError("the worker pool is already started")
        for i in range(workers):
            worker = self.new_worker(f"w{i}", stop=self.wakeup.stop)
            self._workers.append(worker)
            t = threading.Thread(
                target=worker.run, kwargs={"wakeup": self.wakeup}, name=f"tether-worker-{i}"
            )
            t.start()
            self._threads.append(t)

    def join(self) -> None:
        """Wait until every worker thread finished (they finish once the stop event is set)."""
        for t in self._threads:
            t.join()

    def close(self) -> None:
        """Stop the workers, wait for attempts in flight, close their connections. Idempotent."""
        self.wakeup.stop_all()
        self.join()
        for w in self._workers:
            w.close()
        self._workers.clear()
