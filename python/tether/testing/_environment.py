"""`ActivityEnvironment`: the real catalog, ledger and artifact store in a temp dir, a fake clock.

Built for family and adapter authors (and for testing the runtime's parts one at a time): the
storage is the production SQLite catalog and ledger, nothing is mocked; only time is fake, and
every step that a started Host would run in a thread is a method the test calls.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

from tether.activities import ActivityKey, ActivityRecord, Catalog
from tether.runtime import (
    DEFAULT_INLINE_BOUND,
    ActivityRequest,
    ActivityRuntimeError,
    ArtifactStore,
    Family,
    Host,
    ProgressEvent,
    Worker,
)
from tether.testing._clock import FakeClock
from tether.world import CommittedTickReceipt, ComponentWrite, WorldLedger, WorldSnapshot


class ActivityEnvironment:
    """A Tether runtime over real storage in a temp dir, driven step by step on a fake clock.

    Single owner: the test. Underneath is a `Host` with no threads (`workers=0`,
    `observe=False`); its parts (`host.projector`, `host.ticker`, ...) are there too, and any
    part can be built alone from `catalog`, `ledger` and `artifacts`.

    Args:
        families: the families under test (may be empty when testing a part alone).
        data_dir: use this directory (kept on close) instead of a fresh temp dir (removed).
        clock: the fake clock (default: a fresh `FakeClock`).
        ledger: a world engine to use instead of the SQLite ledger (the caller closes it).
        catalog_url, world_url: put the catalog or the world ledger at this URL (e.g. a
            PostgreSQL schema) instead of a SQLite file in `data_dir` (see `Host`).
        lease_ms: attempt lease length; `clock.advance(lease_ms)` lets a lease run out.
        inline_bound: results up to this many bytes travel inside their reference.
        page_size: page size of the catalog scans.

    Attributes:
        data_dir: the data directory (`world.db`, `catalog.db`, `artifacts/`).
        clock: the fake clock every catalog connection of the environment reads.
        host: the thread-less Host over the data directory.
        ledger, catalog, artifacts: the real storage.
        progress: every `ctx.progress(...)` adapters reported, in order.
    """

    def __init__(
        self,
        families: Sequence[Family] = (),
        *,
        data_dir: str | Path | None = None,
        clock: FakeClock | None = None,
        ledger: WorldLedger | None = None,
        catalog_url: str | None = None,
        world_url: str | None = None,
        lease_ms: int = 30_000,
        inline_bound: int = DEFAULT_INLINE_BOUND,
        page_size: int = 256,
    ) -> None:
        self._temp = data_dir is None
        self.data_dir = Path(
            tempfile.mkdtemp(prefix="tether-test-") if data_dir is None else data_dir
        )
        self.clock = clock or FakeClock()
        self.progress: list[ProgressEvent] = []
        try:
            self.host = Host(
                self.data_dir,
                families,
                workers=0,
                observe=False,
                ledger=ledger,
                catalog_url=catalog_url,
                world_url=world_url,
                lease_ms=lease_ms,
                progress_listener=self.progress.append,
                inline_bound=inline_bound,
                clock=self.clock,
                page_size=page_size,
            )
        except BaseException:
            self._remove()
            raise
        self._worker: Worker | None = None
        self._closed = False

    # -- storage and parts --------------------------------------------------------------

    @property
    def families(self) -> tuple[Family, ...]:
        """The families under test."""
        return self.host.families

    @property
    def ledger(self) -> WorldLedger:
        """The world ledger (SQLite in `data_dir` unless one was passed)."""
        return self.host.ledger

    @property
    def catalog(self) -> Catalog:
        """The Activity catalog (SQLite in `data_dir`, reading `clock`)."""
        return self.host.catalog

    @property
    def artifacts(self) -> ArtifactStore:
        """The content-addressed artifact store in `data_dir`."""
        return self.host.artifacts

    @property
    def lease_ms(self) -> int:
        """The attempt lease length."""
        return self.host.lease_ms

    def open_catalog(self) -> Catalog:
        """Another connection to the catalog, on the same fake clock (the caller closes it)."""
        return Catalog.open(self.host.catalog_url, clock=self.clock)

    def new_worker(self, name: str | None = None) -> Worker:
        """A worker of its own (another claimant), on the fake clock; the caller closes it."""
        return self.host.new_worker(name)

    # -- worlds and ticks ---------------------------------------------------------------

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world (genesis tick 0); the environment becomes its writer."""
        return self.host.create_world(world_id)

    def commit_tick(
        self, world_id: str, writes: Iterable[ComponentWrite] = ()
    ) -> CommittedTickReceipt:
        """Commit a tick as the Host does: `writes`, staged observations and processor
        writes; then project (admit) and settle against the new receipt."""
        return self.host.commit_tick(world_id, writes)

    def commit_bare(
        self, world_id: str, writes: Iterable[ComponentWrite] = ()
    ) -> CommittedTickReceipt:
        """Commit `writes` in the ledger alone: no processors, no projection, no settlement.

        This is what a crash right after the commit leaves: the ledger still owes the tick's
        post-commit work, and the next tick (or `host.recover()`) finishes it first.
        """
        writer = self.host.ticker.writer(world_id)
        return self.ledger.commit(writer, self.ledger.head(world_id), list(writes))

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's committed head."""
        return self.ledger.head(world_id)

    def snapshot(self, world_id: str, receipt: CommittedTickReceipt | None = None) -> WorldSnapshot:
        """A read-only snapshot at `receipt` (default: the world's head)."""
        return self.ledger.read_at(receipt or self.ledger.head(world_id))

    def project(self, world_id: str) -> list[ActivityRequest]:
        """What every family's projection asks for at the world's head; admits nothing."""
        snapshot = self.snapshot(world_id)
        return [req for fam in self.families for req in fam.run_projection(snapshot)]

    # -- Activities ---------------------------------------------------------------------

    def key(self, activity_id: str, *, kind: str | None = None, world_id: str = "w") -> ActivityKey:
        """The control key of `activity_id` (`kind` may be left out when one kind exists)."""
        if kind is None:
            kinds = sorted({k for fam in self.families for k in fam.kinds})
            if len(kinds) != 1:
                raise ActivityRuntimeError(f"name the kind: the families own {kinds}")
            kind = kinds[0]
        return ActivityKey(world_id=world_id, kind=kind, activity_id=activity_id)

    def get(self, key: ActivityKey) -> ActivityRecord | None:
        """The Activity's control record, or None if it was never admitted."""
        return self.catalog.get(key)

    def claimable(self, world_id: str | None = None) -> list[ActivityRecord]:
        """Every Activity claimable at the fake clock's now."""
        return list(self.catalog.iter_claimable(world_id=world_id))

    def pending_observation(self, world_id: str | None = None) -> list[ActivityRecord]:
        """Every recorded result no tick has settled yet."""
        return list(self.catalog.iter_pending_observation(world_id=world_id))

    def awaiting_decision(self, world_id: str | None = None) -> list[ActivityRecord]:
        """Every Activity whose reconciliation came back unknown and awaits an operator."""
        return list(self.catalog.iter_awaiting_decision(world_id=world_id))

    def run_attempt(self, world_id: str | None = None) -> ActivityRecord | None:
        """Claim the next claimable Activity (of `world_id`, if given) and run that attempt to
        its recorded conclusion with its family's adapter, exactly as a worker does: bind then
        `execute` on an execution-authorised attempt, `reconcile` on a reconcile-only one.

        Returns the record after the attempt, or None if nothing was claimable. An adapter
        that raises in `execute` records nothing. A typed error (a `CodedError`: a stopped
        robot, a device fault) gives the lease up at once, so the next attempt reconciles
        now; any other exception keeps it: advance the clock by `lease_ms` and the next
        attempt reconciles.
        """
        if self._worker is None:
            self._worker = self.host.new_worker("testing")
        key = self._worker.run_next(world_id=world_id)
        return None if key is None else self.catalog.get(key)

    def drain(self, world_id: str | None = None) -> int:
        """Run attempts until nothing is claimable; return how many ran."""
        n = 0
        while self.run_attempt(world_id) is not None:
            n += 1
        return n

    def restage(self) -> int:
        """Stage every completed but unobserved result; return how many were staged."""
        return self.host.restage()

    def observe(self) -> list[CommittedTickReceipt]:
        """Stage results, then commit one observation tick per world that has some; each
        tick's post-commit work settles what it observed. Returns the new receipts."""
        return self.host.observe_once()

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection; remove the data directory if the environment made it."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._worker is not None:
                self._worker.close()
            self.host.close()
        finally:
            self._remove()

    def _remove(self) -> None:
        if self._temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ActivityEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
