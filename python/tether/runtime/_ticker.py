"""`Ticker`: commits ticks and runs each new head's post-commit work, as this process's writer.

Tick protocol (seed section 2), all under the exact-world lock:
1. Before committing tick T+1, finish the post-commit work of the head T from its retained
   receipt (this is also what a restart does first).
2. Commit the tick: caller writes, processor writes, staged facts and completion evidence (at
   most `OBSERVATIONS_PER_TICK` staged observations; the others wait for the next tick).
   Every family's processors run in every tick on the pre-tick snapshot plus that family's
   observations being committed (possibly none); they alone decide semantic transitions. A
   tick that writes one component twice is refused (facts are not overridable).
3. Post-commit work of the new head U: the receipt reader checks U; the projector admits what
   U's projections ask for; the settler settles every Activity whose complete evidence U
   wrote; then the ledger records the work done, which unblocks tick U+1.

A tick COMMIT whose reply was lost (`LedgerCommitUnknown`, PostgreSQL) is an unknown outcome,
resolved here before anything else happens: the head is re-read. If it is the tick this commit
would have made (its fresh visibility token), the tick landed and its post-commit work runs
now; if it is still the parent, nothing landed and the tick is decided and committed once more
on that head (the head compare-and-swap makes a second tick on one parent impossible). Lost
commits of the post-commit work (a catalog admission or settlement, the ledger's mark) are
re-read the same way: the ledger's mark says whether the work is still owed, and the owed work
re-reads every record it writes (admissions and settlements are idempotent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from tether.activities import ActivityKey, ActivityRecord, ResultRef
from tether.runtime._crash import crash_point
from tether.runtime._errors import FamilyError, check_owned
from tether.runtime._family import Family, Observation
from tether.runtime._projector import Projector
from tether.runtime._settler import Settler
from tether.runtime._stager import ObservationStager
from tether.storage import CommitUnknown
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    LedgerCommitUnknown,
    ReceiptRejected,
    StaleWriter,
    WorldError,
    WorldLedger,
    Writer,
)

log = logging.getLogger("tether.runtime.ticker")

#: Commits of one tick after a lost COMMIT that the re-read proved did not land.
TICK_COMMIT_TRIES = 2
#: A tick commits at most this many staged observations (the rest go in the next ticks): a
#: tick holds the world lock, and a long one would hold every other tick of the world
#: (a group commit of submitted intents) back for its whole length.
OBSERVATIONS_PER_TICK = 64


class Ticker:
    """This process's tick authority: its writer epoch per world, ticks and post-commit work.

    Shareable across threads: ticks of one world serialise on the ledger's world lock.

    Args:
        ledger: the world ledger (writers, commits, snapshots, the post-commit mark).
        families: the registered families, whose processors run in every tick.
        stager: the staged observations a tick commits.
        projector: admits what a new head's projections ask for.
        settler: settles what a new head observed.
        owner: on a world ledger shared by hosts, the host whose worlds this Ticker writes
            (`owned_by`); it never takes another's writer (`WorldOfAnotherHost`). None: every
            world (a ledger of its own).
    """

    def __init__(
        self,
        ledger: WorldLedger,
        families: Sequence[Family],
        stager: ObservationStager,
        projector: Projector,
        settler: Settler,
        *,
        owner: str | None = None,
        on_fenced: Callable[[str, StaleWriter], None] | None = None,
    ) -> None:
        self.owner = owner
        #: Told when a tick of a world finds a newer writer of it (`StaleWriter`), before it
        #: is raised: this process writes that world no more (see `Host`'s `on_fenced`).
        self.on_fenced = on_fenced
        self.ledger = ledger
        self.families = tuple(families)
        self.stager = stager
        self.projector = projector
        self.settler = settler
        self._writers: dict[str, Writer] = {}
        self._writers_mutex = threading.Lock()

    # -- writers ------------------------------------------------------------------------

    def acquire(self, world_id: str) -> Writer:
        """Become the world's writer now (every earlier writer, in any process, is fenced).

        Raises:
            WorldOfAnotherHost: the world is not this Ticker's `owner`'s (nothing fenced).
        """
        check_owned(world_id, self.owner)
        with self.ledger.lock(world_id):
            writer = self.ledger.acquire_writer(world_id)
            with self._writers_mutex:
                self._writers[world_id] = writer
            return writer

    def writer(self, world_id: str) -> Writer:
        """This process's writer of the world (acquired on first use)."""
        with self._writers_mutex:
            writer = self._writers.get(world_id)
        if writer is None:
            writer = self.acquire(world_id)
        return writer

    def drop(self, world_id: str) -> None:
        """Forget the world's writer (the world was destroyed)."""
        with self._writers_mutex:
            self._writers.pop(world_id, None)

    def recover(self, world_id: str) -> None:
        """Take the world over (fencing earlier writers) and finish its head's pending work."""
        with self.ledger.lock(world_id):
            self.acquire(world_id)
            self.finish_post_commit(world_id)

    # -- ticks --------------------------------------------------------------------------

    def commit(
        self,
        world_id: str,
        writes: Iterable[ComponentWrite] = (),
        *,
        admitted: list[ActivityRecord] | None = None,
    ) -> CommittedTickReceipt:
        """Commit one tick with `writes` plus staged observations and processor writes.

        The head's pending post-commit work is finished first; the new tick's post-commit
        work (projection, settlement) runs before this returns. `admitted`, if given, is
        extended with the catalog records the new tick's projection admitted (none when that
        work's COMMIT reply was lost and it was re-run from the ledger's mark).
        `WorldOfAnotherHost`, before anything is read or run, for another host's world.
        """
        check_owned(world_id, self.owner)
        try:
            return self._commit(world_id, list(writes), admitted)
        except StaleWriter as exc:
            if self.on_fenced is not None:
                self.on_fenced(world_id, exc)
            raise

    def _commit(
        self,
        world_id: str,
        caller_writes: list[ComponentWrite],
        admitted: list[ActivityRecord] | None,
    ) -> CommittedTickReceipt:
        with self.ledger.lock(world_id):
            for attempt in range(1, TICK_COMMIT_TRIES + 1):
                self.finish_post_commit(world_id)
                head = self.ledger.head(world_id)
                observations = self.stager.observations_for(world_id, OBSERVATIONS_PER_TICK)
                tick_writes = caller_writes + self._processor_writes(head, observations)
                for obs in observations:
                    tick_writes.extend((*obs.facts, obs.evidence))
                taken = [(w.entity, w.component) for w in tick_writes]
                if len(set(taken)) != len(taken):
                    raise FamilyError(
                        "a tick writes one component twice (facts are not overridable)"
                    )
                try:
                    receipt = self.ledger.commit(self.writer(world_id), head, tick_writes)
                except LedgerCommitUnknown as e:
                    landed = self._lost_tick(world_id, head, e)
                    if landed is None:
                        if attempt < TICK_COMMIT_TRIES:
                            continue  # nothing landed: decide the tick again on the same head
                        raise WorldError(
                            f"the tick on {head} of {world_id!r} was lost {attempt} times and"
                            " did not land (re-read); the head is unchanged"
                        ) from e
                    receipt = landed
                crash_point("after_observation_tick" if observations else "after_intent_tick")
                self.stager.committed(observations)
                observed = {obs.key: obs.result for obs in observations}
                records = self._post_commit_resolved(receipt, observed)
                if admitted is not None:
                    admitted.extend(records)
                return receipt
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _lost_tick(
        self, world_id: str, parent: CommittedTickReceipt, error: LedgerCommitUnknown
    ) -> CommittedTickReceipt | None:
        """After a tick COMMIT whose reply was lost: re-read the head. The intended receipt if
        the tick landed, None if nothing landed (the head is still `parent`).

        Raises:
            LedgerCommitUnknown: the re-read itself failed, or the error names no tick and the
                head moved: still unknown (nothing was acted on; the next tick or
                `Host.recover` re-reads again).
            StaleWriter: the tick landed but a newer writer (another process) has moved the
                head past it; that writer finished its post-commit work first.
        """
        try:
            head = self.ledger.head(world_id)
        except WorldError as e:
            raise LedgerCommitUnknown(
                f"{error}; the re-read of the head failed too ({e})", error.intended
            ) from e
        intended = error.intended
        if intended is not None and head == intended:
            log.warning(
                "tick %d of %r: its COMMIT reply was lost; re-read: landed", head.tick, world_id
            )
            return head
        if head == parent:
            log.warning(
                "tick on %d of %r: its COMMIT reply was lost; re-read: not landed",
                parent.tick,
                world_id,
            )
            return None
        if intended is not None and self._exists(intended):
            raise StaleWriter(
                f"tick {intended.tick} of {world_id!r} landed, but a newer writer moved the"
                f" head to tick {head.tick} of its run"
            ) from error
        if intended is not None:
            return None  # it did not land; the next try meets the newer head or writer
        raise error

    def _exists(self, receipt: CommittedTickReceipt) -> bool:
        try:
            self.ledger.read_at(receipt)
        except ReceiptRejected:
            return False
        return True

    def _post_commit_resolved(
        self, receipt: CommittedTickReceipt, observed: Mapping[ActivityKey, ResultRef]
    ) -> list[ActivityRecord]:
        """`post_commit`, with a lost COMMIT of its work (catalog or ledger) resolved by a
        re-read: the ledger's mark says whether the work is still owed, and owed work runs
        again, re-reading every record it writes. A second failure leaves the head's work owed
        (the next tick or `Host.recover` finishes it first). Returns the records admitted
        (none after a lost COMMIT). `observed`: see `post_commit`."""
        try:
            return self.post_commit(receipt, observed)
        except (CommitUnknown, LedgerCommitUnknown) as e:
            log.warning(
                "post-commit work of %s: a COMMIT reply was lost (%s); re-reading", receipt, e
            )
            self.finish_post_commit(receipt.world_id)
            return []

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

    def finish_post_commit(self, world_id: str) -> None:
        """Run the head's post-commit work if the ledger still owes it (call under the lock);
        never another host's (`WorldOfAnotherHost`): that host runs its own."""
        check_owned(world_id, self.owner)
        pending = self.ledger.pending_post_commit(world_id)
        if pending is not None:
            self.post_commit(pending)

    def post_commit(
        self,
        receipt: CommittedTickReceipt,
        observed: Mapping[ActivityKey, ResultRef] | None = None,
    ) -> list[ActivityRecord]:
        """Check `receipt`, project and settle at it, then mark its post-commit work done;
        returns the records the projection admitted (`Projector.project`). `observed`: the
        results of the observations `receipt`'s tick committed, read pending observation
        under the world lock by `commit` (see `Settler.settle`); None re-reads every record.

        Raises:
            ReceiptRejected: `receipt` is not the world's exact committed head; nothing is
                admitted or settled and the head stays blocked.
        """
        self.ledger.check_receipt(receipt)  # fail closed before admitting or settling
        snapshot = self.ledger.read_at(receipt)
        admitted = self.projector.project(snapshot)
        self.settler.settle(snapshot, observed)
        self.ledger.complete_post_commit(receipt)
        return admitted
