"""The Host: one process's Tether runtime, composed of one part per job over a data directory.

The parts, each built only from the ports it uses (see each module for its rules):
- `Projector` admits what a committed tick's projections ask for (catalog, artifacts, reader);
- `Settler` settles what a committed tick observed (catalog, reader);
- `ObservationStager` stages completed but unobserved results (catalog, artifacts, world
  index);
- `Ticker` commits ticks and runs each head's post-commit work (ledger, stager, projector,
  settler), as this process's writer;
- `Observer` commits observation ticks from staged results (stager, close states, ticker);
- `WorkerPool` runs the worker threads (a catalog opener, artifacts, families);
- `WorldLifecycle` creates, forks and destroys worlds (ledger, unsettled oracle, ticker).

Idle loops never poll: each waits on a `Wakeup` over the catalog's doorbell (workers: an
Activity became claimable, or the earliest claimable time is reached; the observer: a result
was recorded; `wait_settled`: a settlement), with a fallback poll of at least 1 s for a ring
that never came.

The Host opens the storage, wires the parts and keeps the public API. It adds no lock: the
catalog is thread-safe (its store serialises every transaction) and ticks of one world
serialise on the ledger's exact-world lock. Staging runs outside that lock, is idempotent and
is repeated after restart for every completed but unobserved result until a tick commits it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from tether.activities import (
    MAX_LEASE_MS,
    ActivityKey,
    ActivityRecord,
    Catalog,
    ClockLike,
    as_clock,
)
from tether.runtime._artifacts import DEFAULT_INLINE_BOUND, ArtifactStore, shared_for
from tether.runtime._errors import ActivityRuntimeError, HostClosed, owned_by
from tether.runtime._family import Family, ProgressEvent, families_by_kind
from tether.runtime._lifecycle import WorldLifecycle
from tether.runtime._observer import Observer
from tether.runtime._pool import WorkerPool
from tether.runtime._projector import Projector
from tether.runtime._settler import Settler
from tether.runtime._stager import ObservationStager
from tether.runtime._ticker import Ticker
from tether.runtime._wakeup import (
    CLAIMABLE,
    DEFAULT_FALLBACK_S,
    MAX_FALLBACK_S,
    MIN_FALLBACK_S,
    RESULT,
    SETTLED,
    Wakeup,
)
from tether.runtime._worker import MAX_WORKERS, Worker
from tether.storage._urls import check_separate_files, sqlite_url
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    SqliteLedger,
    StaleWriter,
    WorldLedger,
    WorldSnapshot,
    open_ledger,
)

#: The longest `wait_settled` timeout (a year).
MAX_WAIT_S: Final = 365 * 86_400.0


class Host:
    """One process's Tether runtime over a data directory.

    The data directory holds `world.db` (the SQLite ledger, unless `ledger` is given),
    `catalog.db` (the Activity catalog), `catalog.db-wakeup/` (the doorbell's sockets, one per
    listening process: how loops in other processes learn of a commit) and `artifacts/`.

    Args:
        data_dir: the data directory (created if missing).
        families: the registered families; each kind belongs to exactly one.
        workers: number of in-process worker threads started by `start`.
        ledger: a world engine implementing `WorldLedger` (default: SQLite in `data_dir`);
            the caller keeps ownership of a ledger it passes (the Host does not close it).
        lease_ms: attempt lease length (1 ms to 7 days, `MAX_LEASE_MS`), on the lease clock.
        fallback_poll_s: the longest idle sleep of the worker and observer loops and of
            `wait_settled` without a wakeup (at least 1 s, `MIN_FALLBACK_S`); they wake on the
            catalog's doorbell (see `Wakeup`), so this only bounds a lost ring.
        progress_listener: receives every `ctx.progress(...)` of in-process workers.
        inline_bound: results up to this many bytes travel inside their reference.
        clock: the catalog's clock (default `SystemClock`: leases and backoff on
            CLOCK_BOOTTIME with the boot id, record times on the wall clock); tests pass a
            controllable one, or a plain millisecond callable (a `FixedBootClock`).
        observe: whether `start` runs the observer loop that stages and commits observations.
        page_size: page size of the catalog scans (they always page to exhaustion).
        catalog_url: the catalog (default `catalog.db` in `data_dir`); a ``postgresql://``
            URL shares it with other hosts (pair it with a PostgreSQL `ledger`,
            `world_url`).
        world_url: the world ledger the Host opens and owns when no `ledger` is given
            (`tether.world.open_ledger`; default `world.db` in `data_dir`). It and the catalog
            are never one SQLite file (`SameStoreFile`, before anything is created).
        pause: called by the background loops (each worker before each claim and each attempt
            of a shared batch, the observer before each pass); it may block: `tether serve`
            passes its `StopFirst.wait_clear`, so background work waits while a stop runs.
        world_owner: on a world ledger shared by hosts (PostgreSQL), the host whose worlds
            this Host writes, recovers and observes: those named `<id>@<world_owner>`
            (`tether.runtime._errors.owned_by`); another host's world is never fenced from
            here (`WorldOfAnotherHost`). None (the default): every world of the ledger.
        on_fenced: told (world id, the `StaleWriter`) when a tick of a world finds a newer
            writer of it, in any process, before the error is raised: this Host writes that
            world no more (`tether serve` then stops: another daemon took its host name while
            its claim's connection was down, and wrote its worlds).

    Attributes:
        projector, settler, stager, ticker, observer, pool, lifecycle: the parts.
    """

    def __init__(
        self,
        data_dir: str | Path,
        families: Sequence[Family],
        *,
        workers: int = 1,
        ledger: WorldLedger | None = None,
        lease_ms: int = 30_000,
        fallback_poll_s: float = DEFAULT_FALLBACK_S,
        progress_listener: Callable[[ProgressEvent], None] | None = None,
        inline_bound: int = DEFAULT_INLINE_BOUND,
        clock: ClockLike | None = None,
        observe: bool = True,
        page_size: int = 256,
        catalog_url: str | None = None,
        world_url: str | None = None,
        host_name: str | None = None,
        pause: Callable[[], None] | None = None,
        world_owner: str | None = None,
        on_fenced: Callable[[str, StaleWriter], None] | None = None,
    ) -> None:
        if (
            not isinstance(fallback_poll_s, int | float)
            or isinstance(fallback_poll_s, bool)
            or not MIN_FALLBACK_S <= fallback_poll_s <= MAX_FALLBACK_S
        ):  # before any storage is opened; past a day a wait's deadline overflows time_t
            raise ActivityRuntimeError(
                f"fallback_poll_s must be {MIN_FALLBACK_S} to {MAX_FALLBACK_S} s, not"
                f" {fallback_poll_s!r}"
            )
        if (
            not isinstance(workers, int)
            or isinstance(workers, bool)
            or not 0 <= workers <= MAX_WORKERS
        ):
            raise ActivityRuntimeError(
                f"workers must be an int in 0..{MAX_WORKERS} (0: none; `new_worker` runs them),"
                f" not {workers!r}"
            )
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ActivityRuntimeError(f"page_size must be an int >= 1, not {page_size!r}")
        if (
            not isinstance(lease_ms, int)
            or isinstance(lease_ms, bool)
            or not 1 <= lease_ms <= MAX_LEASE_MS
        ):  # every claim would be refused, and the workers would do nothing, said only in logs
            raise ActivityRuntimeError(
                f"lease_ms must be an int in 1..{MAX_LEASE_MS} (7 days), not {lease_ms!r}"
            )
        self.data_dir = Path(data_dir).resolve()
        # sqlite:///abs/path.db: the form `tether db` takes, pasted from a message as it is.
        self.catalog_url = catalog_url or sqlite_url((self.data_dir / "catalog.db").absolute())
        if ledger is None:  # one SQLite file for both stores: refused before anything is made
            check_separate_files(
                self.catalog_url, world_url or sqlite_url(self.data_dir / "world.db")
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.families = tuple(families)
        families_by_kind(self.families)  # a bad registration fails before storage opens
        # None: the catalog's own default (this host's clock; a PostgreSQL server's clock).
        self._clock = None if clock is None else as_clock(clock)
        self._owns_ledger = ledger is None
        self.ledger: WorldLedger = ledger or (
            open_ledger(world_url) if world_url else SqliteLedger.open(self.data_dir / "world.db")
        )
        self.catalog = self._open_catalog()
        # On a PostgreSQL catalog, payloads go to its table: every host sharing it reads them.
        self.artifacts = ArtifactStore(
            self.data_dir / "artifacts",
            inline_bound=inline_bound,
            shared=shared_for(self.catalog_url),
        )
        self.lease_ms = lease_ms
        self.fallback_poll_s = fallback_poll_s
        self.progress_listener = progress_listener
        self._n_workers = workers
        self._observe = observe
        self.page_size = page_size
        self._stop = threading.Event()
        bell = self.catalog.doorbell
        self._wakeups = {
            topic: Wakeup(self._stop, fallback_poll_s, doorbell=bell, topic=topic)
            for topic in (CLAIMABLE, RESULT, SETTLED)
        }
        self._started = False
        self._closed = False
        self.projector = Projector(self.families, self.catalog, self.artifacts, self.ledger)
        self.settler = Settler(self.catalog, self.ledger)
        self.stager = ObservationStager(
            self.families,
            self.catalog,
            self.artifacts,
            self.ledger,
            page_size=page_size,
            owner=world_owner,
        )
        self.ticker = Ticker(
            self.ledger,
            self.families,
            self.stager,
            self.projector,
            self.settler,
            owner=world_owner,
            on_fenced=on_fenced,
        )
        self.observer = Observer(
            self.stager, self.ledger, self.ticker, wakeup=self._wakeups[RESULT], pause=pause
        )
        self.lifecycle = WorldLifecycle(self.ledger, self.catalog, self.ticker)
        self.pool = WorkerPool(
            self._open_catalog,
            self.artifacts,
            self.families,
            instance=f"{os.getpid()}-{uuid.uuid4().hex[:8]}",
            lease_ms=lease_ms,
            emit=progress_listener,
            wakeup=self._wakeups[CLAIMABLE],
            host=host_name,
            pause=pause,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def _open_catalog(self) -> Catalog:
        return Catalog.open(self.catalog_url, clock=self._clock)

    def open_catalog(self) -> Catalog:
        """A catalog connection of its own over this Host's catalog (its reads wait for no
        other connection's); the caller closes it."""
        self._check_open()
        return self._open_catalog()

    def new_worker(self, name: str | None = None, *, stop: threading.Event | None = None) -> Worker:
        """A worker over this Host's catalog, artifacts and families (not started)."""
        self._check_open()
        return self.pool.new_worker(name, stop=stop)

    def recover(self) -> None:
        """Fence earlier writers, finish every head's pending post-commit work, then restage:
        of every world this Host writes (on a shared ledger, its `world_owner`'s only)."""
        self._check_open()
        for world_id in self.ledger.worlds():
            if not owned_by(world_id, self.ticker.owner):
                continue  # another host's world: never fenced from here
            self.observer.resume(world_id)
            self.ticker.recover(world_id)
        self.restage()

    def start(self) -> Host:
        """Recover, then start the worker threads and the observer loop (once)."""
        self._check_open()
        if self._started:
            raise ActivityRuntimeError("the Host is already started")
        self.recover()
        self._started = True
        self.pool.start(self._n_workers)
        if self._observe:
            self.observer.start()
        return self

    def close(self) -> None:
        """Stop loops (attempts in flight finish first), then close storage. Idempotent."""
        if self._closed:
            return
        for wakeup in self._wakeups.values():
            wakeup.stop_all()
        self.pool.close()
        self.observer.join()
        for wakeup in self._wakeups.values():
            wakeup.close()
        self._closed = True
        self.catalog.close()
        self.artifacts.close()
        if self._owns_ledger:
            self.ledger.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosed("the Host is closed")

    # -- worlds and ticks ---------------------------------------------------------------

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world and become its writer."""
        self._check_open()
        return self.lifecycle.create(world_id)

    def get(self, key: ActivityKey) -> ActivityRecord | None:
        """The Activity's control record (the catalog is thread-safe)."""
        self._check_open()
        return self.catalog.get(key)

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's committed head."""
        self._check_open()
        return self.ledger.head(world_id)

    def snapshot(self, world_id: str) -> WorldSnapshot:
        """A read-only snapshot at the world's head."""
        self._check_open()
        return self.ledger.read_at(self.ledger.head(world_id))

    def commit_tick(
        self,
        world_id: str,
        writes: Iterable[ComponentWrite] = (),
        *,
        admitted: list[ActivityRecord] | None = None,
    ) -> CommittedTickReceipt:
        """Commit one tick with `writes` plus staged observations and processor writes.

        The head's pending post-commit work is finished first; the new tick's post-commit
        work (projection, settlement) runs before this returns. `admitted`, if given, is
        extended with the catalog records that work admitted (see `Ticker.commit`).
        """
        self._check_open()
        return self.ticker.commit(world_id, writes, admitted=admitted)

    # -- staging and observation --------------------------------------------------------

    def restage(self) -> int:
        """Stage every completed but unobserved result (see `ObservationStager.restage`)."""
        self._check_open()
        return self.stager.restage()

    def staged_worlds(self) -> list[str]:
        """Worlds with staged observations waiting for a tick."""
        return self.stager.staged_worlds()

    def observe_once(self) -> list[CommittedTickReceipt]:
        """Restage, then commit one observation tick per world that has staged observations."""
        self._check_open()
        return self.observer.observe_once()

    def wait_settled(self, world_id: str, timeout_s: float) -> bool:
        """Block until every admitted Activity of the world settled; False on timeout.

        Needs the started loops (or another process) to make progress. Event-driven: it
        wakes when a settlement commits, here or in another process on the data directory.
        """
        self._check_open()
        if (
            not isinstance(timeout_s, int | float)
            or isinstance(timeout_s, bool)
            or not 0 <= timeout_s <= MAX_WAIT_S
        ):  # NaN never times out; past a year a deadline is no deadline
            raise ActivityRuntimeError(f"timeout_s must be 0 to {MAX_WAIT_S} s, not {timeout_s!r}")
        wakeup = self._wakeups[SETTLED]
        deadline = time.monotonic() + timeout_s
        while True:
            mark = wakeup.mark()  # before the check: a settlement after it is never lost
            if not self.catalog.has_unsettled(world_id):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or wakeup.wait(mark, delay_s=remaining):
                return False

    # -- world lifecycle ----------------------------------------------------------------

    def fork_world(self, source_world: str, new_world: str) -> CommittedTickReceipt:
        """Fork `source_world` at its head once every Activity of it has settled.

        Raises:
            UnsettledActivities: the source has an admitted Activity without settlement.
        """
        self._check_open()
        return self.lifecycle.fork(source_world, new_world)

    def destroy_world(self, world_id: str, *, sticky: bool = False) -> None:
        """Destroy `world_id` once every Activity of it has settled (see `WorldLifecycle`).

        Raises:
            UnsettledActivities: the world has an admitted Activity without settlement.
        """
        self._check_open()
        self.lifecycle.destroy(world_id, sticky=sticky)
