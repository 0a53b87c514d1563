"""The Host: wires a world ledger, the Activity catalog, families and worker threads.

Tick protocol (seed section 2), all under the exact-world lock except staging and workers:
1. Before committing tick T+1, finish the post-commit work of the head T from its retained
   receipt (this is also what a restart does first).
2. Commit the tick: caller writes, processor writes, staged facts and completion evidence.
   Every family's processors run in every tick on the pre-tick snapshot plus that family's
   observations being committed (possibly none); they alone decide semantic transitions.
3. Post-commit work of the new head U: the receipt reader checks U; every family projection
   runs on U's read-only snapshot and the projector hands its requests to the catalog's
   `admit` (the core's rule: a replay, or the same input from a later tick, is a no-op that
   keeps the first source binding, so a projection may ask for every unobserved intent in
   every tick; any other difference fails closed); every completion evidence
   written in U that matches its recorded result settles the Activity against U's exact
   receipt; then the ledger records the work done, which unblocks tick U+1.
Staging runs outside the lock, is idempotent, and is repeated after restart for every
completed but unobserved result until a tick commits it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType

from tether.activities import (
    ABANDONED_MEDIA_TYPE,
    ActivityKey,
    ActivityRecord,
    Admission,
    Catalog,
    ClockLike,
    ResultRef,
    as_clock,
)
from tether.errors import AdmissionConflict
from tether.runtime._artifacts import DEFAULT_INLINE_BOUND, ArtifactStore
from tether.runtime._crash import crash_point
from tether.runtime._errors import (
    ActivityRuntimeError,
    ArtifactError,
    FamilyError,
    HostClosed,
    ProjectionConflict,
)
from tether.runtime._family import (
    COMPLETION_COMPONENT,
    Family,
    Observation,
    ProgressEvent,
    StagedResult,
    families_by_kind,
    observation_for,
    verify_completion,
)
from tether.runtime._worker import Worker
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    SqliteLedger,
    StaleWriter,
    UnsettledActivities,
    WorldLedger,
    WorldSnapshot,
    Writer,
    canonical_json,
)

log = logging.getLogger("tether.runtime.host")


class Host:
    """One process's Tether runtime over a data directory.

    The data directory holds `world.db` (the SQLite ledger, unless `ledger` is given),
    `catalog.db` (the Activity catalog) and `artifacts/`.

    Args:
        data_dir: the data directory (created if missing).
        families: the registered families; each kind belongs to exactly one.
        workers: number of in-process worker threads started by `start`.
        ledger: a world engine implementing `WorldLedger` (default: SQLite in `data_dir`);
            the caller keeps ownership of a ledger it passes (the Host does not close it).
        lease_ms: attempt lease length (1 ms to 7 days, `MAX_LEASE_MS`), on the lease clock.
        poll_interval_s: idle sleep of worker and observer loops.
        progress_listener: receives every `ctx.progress(...)` of in-process workers.
        inline_bound: results up to this many bytes travel inside their reference.
        clock: the catalog's clock (default `SystemClock`: leases and backoff on
            CLOCK_BOOTTIME with the boot id, record times on the wall clock); tests pass a
            controllable one, or a plain millisecond callable (a `FixedBootClock`).
        observe: whether `start` runs the observer loop that stages and commits observations.
        page_size: page size of the catalog scans (they always page to exhaustion).
    """

    def __init__(
        self,
        data_dir: str | Path,
        families: Sequence[Family],
        *,
        workers: int = 1,
        ledger: WorldLedger | None = None,
        lease_ms: int = 30_000,
        poll_interval_s: float = 0.02,
        progress_listener: Callable[[ProgressEvent], None] | None = None,
        inline_bound: int = DEFAULT_INLINE_BOUND,
        clock: ClockLike | None = None,
        observe: bool = True,
        page_size: int = 256,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.families = tuple(families)
        self._by_kind = families_by_kind(self.families)
        self.catalog_url = "sqlite:///" + str(self.data_dir / "catalog.db")
        self._clock = as_clock(clock)
        self._owns_ledger = ledger is None
        self.ledger: WorldLedger = ledger or SqliteLedger.open(self.data_dir / "world.db")
        self.catalog = self._open_catalog()
        self.artifacts = ArtifactStore(self.data_dir / "artifacts", inline_bound=inline_bound)
        self.lease_ms = lease_ms
        self.poll_interval_s = poll_interval_s
        self.progress_listener = progress_listener
        self._n_workers = workers
        self._observe = observe
        self.page_size = page_size
        self._writers: dict[str, Writer] = {}
        self._fenced: set[str] = set()  # worlds whose writer a newer one superseded
        self._staged: dict[ActivityKey, Observation] = {}
        self._staged_mutex = threading.Lock()
        self._catalog_mutex = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workers: list[Worker] = []
        self._closed = False
        self._instance = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # -- lifecycle ----------------------------------------------------------------------

    def _open_catalog(self) -> Catalog:
        return Catalog.open(self.catalog_url, clock=self._clock)

    def new_worker(self, name: str | None = None, *, stop: threading.Event | None = None) -> Worker:
        """A worker over this Host's catalog, artifacts and families (not started)."""
        return Worker(
            open_catalog=self._open_catalog,
            artifacts=self.artifacts,
            families=self.families,
            owner=f"{self._instance}/{name or uuid.uuid4().hex[:6]}",
            lease_ms=self.lease_ms,
            emit=self.progress_listener,
            stop=stop,
        )

    def recover(self) -> None:
        """Fence earlier writers, finish every head's pending post-commit work, then restage."""
        for world_id in self.ledger.worlds():
            with self.ledger.lock(world_id):
                self._writers[world_id] = self.ledger.acquire_writer(world_id)
                self._fenced.discard(world_id)
                self._finish_post_commit(world_id)
        self.restage()

    def start(self) -> Host:
        """Recover, then start the worker threads and the observer loop (once)."""
        self._check_open()
        if self._threads:
            raise ActivityRuntimeError("the Host is already started")
        self.recover()
        for i in range(self._n_workers):
            worker = self.new_worker(f"w{i}", stop=self._stop)
            self._workers.append(worker)
            t = threading.Thread(
                target=worker.run, args=(self.poll_interval_s,), name=f"tether-worker-{i}"
            )
            t.start()
            self._threads.append(t)
        if self._observe:
            t = threading.Thread(target=self._observer, name="tether-observer")
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        """Stop loops (attempts in flight finish first), then close storage. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        for t in self._threads:
            t.join()
        for w in self._workers:
            w.close()
        self._closed = True
        self.catalog.close()
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

    def _observer(self) -> None:
        while not self._stop.is_set():
            try:
                committed = self.observe_once()
            except Exception:  # keep observing; the failure is logged and retried
                log.exception("observer step failed")
                committed = []
            if not committed:
                self._stop.wait(self.poll_interval_s)

    # -- worlds and ticks ---------------------------------------------------------------

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world and become its writer."""
        self._check_open()
        receipt = self.ledger.create_world(world_id)
        with self.ledger.lock(world_id):
            self._writers[world_id] = self.ledger.acquire_writer(world_id)
        return receipt

    def _writer(self, world_id: str) -> Writer:
        writer = self._writers.get(world_id)
        if writer is None:
            writer = self._writers[world_id] = self.ledger.acquire_writer(world_id)
        return writer

    def get(self, key: ActivityKey) -> ActivityRecord | None:
        """The Activity's control record (thread-safe read through the Host's catalog)."""
        with self._catalog_mutex:
            return self.catalog.get(key)

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's committed head."""
        return self.ledger.head(world_id)

    def snapshot(self, world_id: str) -> WorldSnapshot:
        """A read-only snapshot at the world's head."""
        return self.ledger.read_at(self.ledger.head(world_id))

    def commit_tick(
        self, world_id: str, writes: Iterable[ComponentWrite] = ()
    ) -> CommittedTickReceipt:
        """Commit one tick with `writes` plus staged observations and processor writes.

        The head's pending post-commit work is finished first; the new tick's post-commit
        work (projection, settlement) runs before this returns.
        """
        self._check_open()
        with self.ledger.lock(world_id):
            self._finish_post_commit(world_id)
            head = self.ledger.head(world_id)
            observations = self._observations_for(world_id)
            tick_writes = list(writes) + self._processor_writes(head, observations)
            fact_keys: set[tuple[str, str]] = set()
            for obs in observations:
                for w in (*obs.facts, obs.evidence):
                    fact_keys.add((w.entity, w.component))
                    tick_writes.append(w)
            taken = [(w.entity, w.component) for w in tick_writes]
            if len(set(taken)) != len(taken):
                raise FamilyError("a tick writes one component twice (facts are not overridable)")
            receipt = self.ledger.commit(self._writer(world_id), head, tick_writes)
            crash_point("after_observation_tick" if observations else "after_intent_tick")
            with self._staged_mutex:
                for obs in observations:
                    if self._staged.get(obs.key) is obs:
                        del self._staged[obs.key]
            self._post_commit(receipt)
            return receipt

    def _observations_for(self, world_id: str) -> list[Observation]:
        with self._staged_mutex:
            staged = [o for k, o in self._staged.items() if k.world_id == world_id]
        staged.sort(key=lambda o: (o.key.kind, o.key.activity_id))
        live = []
        for obs in staged:
            with self._catalog_mutex:
                rec = self.catalog.get(obs.key)
            if rec is not None and rec.pending_observation and rec.result == obs.result:
                live.append(obs)
            else:
                with self._staged_mutex:
                    self._staged.pop(obs.key, None)
        return live

    def _processor_writes(
        self, head: CommittedTickReceipt, observations: list[Observation]
    ) -> list[ComponentWrite]:
        if not any(fam.processors for fam in self.families):
            return []
        snapshot = self.ledger.read_at(head)
        out: list[ComponentWrite] = []
        for fam in self.families:
            mine = [o for o in observations if o.key.kind in fam.kinds]
            for processor in fam.processors:
                writes = list(processor(snapshot, mine))
                if not all(isinstance(w, ComponentWrite) for w in writes):
                    raise FamilyError(f"a processor of {fam.name!r} returned a non-ComponentWrite")
                out.extend(writes)
        return out

    # -- post-commit work ---------------------------------------------------------------

    def _finish_post_commit(self, world_id: str) -> None:
        pending = self.ledger.pending_post_commit(world_id)
        if pending is not None:
            self._post_commit(pending)

    def _post_commit(self, receipt: CommittedTickReceipt) -> None:
        self.ledger.check_receipt(receipt)  # fail closed before admitting or settling
        snapshot = self.ledger.read_at(receipt)
        self._project(snapshot)
        self._settle(snapshot)
        self.ledger.complete_post_commit(receipt)

    def _project(self, snapshot: WorldSnapshot) -> None:
        receipt = snapshot.receipt
        for fam in self.families:
            for req in fam.run_projection(snapshot):
                ref = self.artifacts.put_bytes(canonical_json(req.input), "application/json")
                key = ActivityKey(
                    world_id=receipt.world_id, kind=req.kind, activity_id=req.activity_id
                )
                # Whether a request for an admitted key is that Activity (a replay, or the same
                # input from a later tick: a no-op, its source binding stays) or a conflict is
                # the core's rule, decided inside `admit`.
                admission = Admission(
                    key=key, source=receipt, input_ref=ref.ref, input_digest=ref.digest
                )
                # The reader runs again at each catalog write: under this process's lock the
                # head cannot move, but a newer writer in another process can.
                self.ledger.check_receipt(receipt)
                try:
                    with self._catalog_mutex:
                        self.catalog.admit(admission)
                except AdmissionConflict as e:
                    raise ProjectionConflict(
                        f"{receipt} asks for {key} with input {ref.digest}, which conflicts"
                        f" with its admission: {e}"
                    ) from e
                crash_point("after_admission")

    def _settle(self, snapshot: WorldSnapshot) -> None:
        receipt = snapshot.receipt
        for entity, component in sorted(snapshot.changes):
            if component != COMPLETION_COMPONENT:
                continue
            ev = snapshot.get(entity, component)
            if not isinstance(ev, dict):
                continue
            key = ActivityKey(
                world_id=receipt.world_id,
                kind=str(ev.get("kind")),
                activity_id=str(ev.get("activity_id")),
            )
            with self._catalog_mutex:
                rec = self.catalog.get(key)
            if rec is None or rec.result is None or not rec.pending_observation:
                continue
            digest = verify_completion(snapshot, key, rec.result)
            if digest is None:
                log.warning("incomplete completion evidence for %s at %s", key, receipt)
                continue
            self.ledger.check_receipt(receipt)
            with self._catalog_mutex:
                self.catalog.settle(key, receipt, digest)
            crash_point("after_settlement")

    # -- staging ------------------------------------------------------------------------

    def restage(self) -> int:
        """Stage every completed but unobserved result (pages the pending set to exhaustion).

        A result whose payload is missing or corrupt, or whose family's staging raises, is not
        staged (and is logged); the others still are. An operator's abandon decision records a
        failed result with no payload: it is staged with an empty payload and `result.failed`
        set.
        """
        count = 0
        worlds = set(self.ledger.worlds())
        with self._catalog_mutex:
            pending: list[ActivityRecord] = list(
                self.catalog.iter_pending_observation(page_size=self.page_size)
            )
        for rec in pending:
            if rec.key.world_id not in worlds or rec.result is None:
                continue
            family = self._by_kind.get(rec.key.kind)
            if family is None:
                continue
            try:
                payload = self._payload(rec.result)  # durable before staging, digest-checked
            except ArtifactError:
                log.exception("result of %s is not durable; not staged", rec.key)
                continue
            try:
                obs = observation_for(family, StagedResult(rec.key, rec.result, payload))
            except Exception:
                # One family's staging bug must not stall every other observation: this
                # result stays pending (and is retried each pass); the rest are staged.
                log.exception("family %r failed to stage %s; not staged", family.name, rec.key)
                continue
            with self._staged_mutex:
                self._staged[rec.key] = obs
            count += 1
            crash_point("after_staging")
        return count

    def _payload(self, result: ResultRef) -> bytes:
        if result.failed and result.media_type == ABANDONED_MEDIA_TYPE:
            return b""  # an operator abandoned it: the reference names a decision, not bytes
        return self.artifacts.get(result)

    def staged_worlds(self) -> list[str]:
        """Worlds with staged observations waiting for a tick."""
        with self._staged_mutex:
            return sorted({k.world_id for k in self._staged})

    def observe_once(self) -> list[CommittedTickReceipt]:
        """Restage, then commit one observation tick per world that has staged observations."""
        self.restage()
        receipts = []
        for world_id in self.staged_worlds():
            if self.ledger.close_state(world_id)[0] != "open":
                continue  # reserved for close: the observation waits for a reopen
            if world_id in self._fenced:
                continue  # a newer writer owns the world; it restages and observes itself
            try:
                receipts.append(self.commit_tick(world_id))
            except StaleWriter:
                log.warning("world %r has a newer writer; this Host stops observing it", world_id)
                self._fenced.add(world_id)
        return receipts

    def wait_settled(self, world_id: str, timeout_s: float) -> bool:
        """Block until every admitted Activity of the world settled; False on timeout.

        Needs the started loops (or another process) to make progress.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._catalog_mutex:
                if not self.catalog.has_unsettled(world_id):
                    return True
            if time.monotonic() >= deadline or self._stop.wait(self.poll_interval_s):
                return False

    # -- world lifecycle ----------------------------------------------------------------

    def fork_world(self, source_world: str, new_world: str) -> CommittedTickReceipt:
        """Fork `source_world` at its head once every Activity of it has settled.

        Raises:
            UnsettledActivities: the source has an admitted Activity without settlement.
        """
        self._check_open()
        with self.ledger.lock(source_world):
            self._finish_post_commit(source_world)
            head = self.ledger.head(source_world)
            with self._catalog_mutex:
                unsettled = self.catalog.has_unsettled(source_world)
            if unsettled:
                raise UnsettledActivities(f"world {source_world!r} has unsettled Activities")
            # The lock is per process: the ledger re-checks `head` (still the head, its
            # post-commit work done) in the fork's own transaction against other processes.
            receipt = self.ledger.fork(head, new_world)
        with self.ledger.lock(new_world):
            self._writers[new_world] = self.ledger.acquire_writer(new_world)
        return receipt

    def destroy_world(self, world_id: str, *, sticky: bool = False) -> None:
        """Destroy `world_id` once every Activity of it has settled.

        A public destroy (`sticky=False`) reserves the close first and, on refusal or failure,
        rolls back only that provisional reservation so workers can still stage observations.
        A caller holding cleanup authority passes `sticky=True`; that reservation stays.

        Raises:
            UnsettledActivities: the world has an admitted Activity without settlement.
        """
        self._check_open()
        self.ledger.reserve_close(world_id, sticky=sticky)
        try:
            with self.ledger.lock(world_id):
                self._finish_post_commit(world_id)
                head = self.ledger.head(world_id)
                with self._catalog_mutex:
                    unsettled = self.catalog.has_unsettled(world_id)
                if unsettled:
                    raise UnsettledActivities(f"world {world_id!r} has unsettled Activities")
                self.ledger.destroy(world_id, head)
                self._writers.pop(world_id, None)
        except BaseException:
            self.ledger.rollback_close(world_id)
            raise
