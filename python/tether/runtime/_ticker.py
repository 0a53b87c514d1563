"""`Ticker`: commits ticks and runs each new head's post-commit work, as this process's writer.

Tick protocol (seed section 2), all under the exact-world lock:
1. Before committing tick T+1, finish the post-commit work of the head T from its retained
   receipt (this is also what a restart does first).
2. Commit the tick: caller writes, processor writes, staged facts and completion evidence.
   Every family's processors run in every tick on the pre-tick snapshot plus that family's
   observations being committed (possibly none); they alone decide semantic transitions. A
   tick that writes one component twice is refused (facts are not overridable).
3. Post-commit work of the new head U: the receipt reader checks U; the projector admits what
   U's projections ask for; the settler settles every Activity whose complete evidence U
   wrote; then the ledger records the work done, which unblocks tick U+1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from tether.runtime._crash import crash_point
from tether.runtime._errors import FamilyError
from tether.runtime._family import Family, Observation
from tether.runtime._projector import Projector
from tether.runtime._settler import Settler
from tether.runtime._stager import ObservationStager
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    WorldLedger,
    Writer,
)


class Ticker:
    """This process's tick authority: its writer epoch per world, ticks and post-commit work.

    Shareable across threads: ticks of one world serialise on the ledger's world lock.

    Args:
        ledger: the world ledger (writers, commits, snapshots, the post-commit mark).
        families: the registered families, whose processors run in every tick.
        stager: the staged observations a tick commits.
        projector: admits what a new head's projections ask for.
        settler: settles what a new head observed.
    """

    def __init__(
        self,
        ledger: WorldLedger,
        families: Sequence[Family],
        stager: ObservationStager,
        projector: Projector,
        settler: Settler,
    ) -> None:
        self.ledger = ledger
        self.families = tuple(families)
        self.stager = stager
        self.projector = projector
        self.settler = settler
        self._writers: dict[str, Writer] = {}
        self._writers_mutex = threading.Lock()

    # -- writers ------------------------------------------------------------------------

    def acquire(self, world_id: str) -> Writer:
        """Become the world's writer now (every earlier writer, in any process, is fenced)."""
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

    def commit(self, world_id: str, writes: Iterable[ComponentWrite] = ()) -> CommittedTickReceipt:
        """Commit one tick with `writes` plus staged observations and processor writes.

        The head's pending post-commit work is finished first; the new tick's post-commit
        work (projection, settlement) runs before this returns.
        """
        with self.ledger.lock(world_id):
            self.finish_post_commit(world_id)
            head = self.ledger.head(world_id)
            observations = self.stager.observations_for(world_id)
            tick_writes = list(writes) + self._processor_writes(head, observations)
            fact_keys: set[tuple[str, str]] = set()
            for obs in observations:
                for w in (*obs.facts, obs.evidence):
                    fact_keys.add((w.entity, w.component))
                    tick_writes.append(w)
            taken = [(w.entity, w.component) for w in tick_writes]
            if len(set(taken)) != len(taken):
                raise FamilyError("a tick writes one component twice (facts are not overridable)")
            receipt = self.ledger.commit(self.writer(world_id), head, tick_writes)
            crash_point("after_observation_tick" if observations else "after_intent_tick")
            self.stager.committed(observations)
            self.post_commit(receipt)
            return receipt

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
        """Run the head's post-commit work if the ledger still owes it (call under the lock)."""
        pending = self.ledger.pending_post_commit(world_id)
        if pending is not None:
            self.post_commit(pending)

    def post_commit(self, receipt: CommittedTickReceipt) -> None:
        """Check `receipt`, project and settle at it, then mark its post-commit work done.

        Raises:
            ReceiptRejected: `receipt` is not the world's exact committed head; nothing is
                admitted or settled and the head stays blocked.
        """
        self.ledger.check_receipt(receipt)  # fail closed before admitting or settling
        snapshot = self.ledger.read_at(receipt)
        self.projector.project(snapshot)
        self.settler.settle(snapshot)
        self.ledger.complete_post_commit(receipt)
