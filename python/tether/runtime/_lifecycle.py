"""`WorldLifecycle`: creates, forks and destroys worlds behind the unsettled-work gate.

Rules (seed section 5, "World lifecycle interaction"):
- Fork and destroy hold the source world's exact-world lock, finish its retained head's
  post-commit work, and are refused (`UnsettledActivities`) while the world has any admitted
  Activity without an exact later-receipt settlement. A fork inherits no control record.
- The world lock is per process: the ledger re-checks, in the fork's or destroy's own
  transaction, that the head judged settled is still the head with its post-commit work done.
- A public destroy reserves the close first and, on refusal or failure, rolls back only that
  provisional reservation so workers can still stage observations; a reservation made with
  cleanup authority (`sticky=True`) stays.
"""

from __future__ import annotations

from tether.runtime._errors import check_owned
from tether.runtime._ports import UnsettledOracle
from tether.runtime._ticker import Ticker
from tether.world import CommittedTickReceipt, UnsettledActivities, WorldLedger


class WorldLifecycle:
    """World creation, fork and destroy for one process. Shareable across threads.

    Args:
        ledger: the world ledger (lock, head, create, fork, close reservation, destroy).
        catalog: the unsettled-work oracle.
        ticker: finishes a head's post-commit work and holds this process's writers.
    """

    def __init__(self, ledger: WorldLedger, catalog: UnsettledOracle, ticker: Ticker) -> None:
        self.ledger = ledger
        self.catalog = catalog
        self.ticker = ticker

    def create(self, world_id: str) -> CommittedTickReceipt:
        """Create a world and become its writer (`WorldOfAnotherHost`, nothing created, for a
        world the ticker's owner does not write)."""
        check_owned(world_id, self.ticker.owner)
        receipt = self.ledger.create_world(world_id)
        self.ticker.acquire(world_id)
        return receipt

    def fork(self, source_world: str, new_world: str) -> CommittedTickReceipt:
        """Fork `source_world` at its head once every Activity of it has settled.

        Raises:
            UnsettledActivities: the source has an admitted Activity without settlement.
        """
        check_owned(source_world, self.ticker.owner)
        check_owned(new_world, self.ticker.owner)
        with self.ledger.lock(source_world):
            self.ticker.finish_post_commit(source_world)
            head = self.ledger.head(source_world)
            unsettled = self.catalog.has_unsettled(source_world)
            if unsettled:
                raise UnsettledActivities(f"world {source_world!r} has unsettled Activities")
            # The lock is per process: the ledger re-checks `head` (still the head, its
            # post-commit work done) in the fork's own transaction against other processes.
            receipt = self.ledger.fork(head, new_world)
        self.ticker.acquire(new_world)
        return receipt

    def destroy(self, world_id: str, *, sticky: bool = False) -> None:
        """Destroy `world_id` once every Activity of it has settled.

        A public destroy (`sticky=False`) reserves the close first and, on refusal or failure,
        rolls back only that provisional reservation so workers can still stage observations.
        A caller holding cleanup authority passes `sticky=True`; that reservation stays.

        Raises:
            UnsettledActivities: the world has an admitted Activity without settlement.
        """
        check_owned(world_id, self.ticker.owner)  # another host's world is its own to end
        self.ledger.reserve_close(world_id, sticky=sticky)
        try:
            with self.ledger.lock(world_id):
                self.ticker.finish_post_commit(world_id)
                head = self.ledger.head(world_id)
                unsettled = self.catalog.has_unsettled(world_id)
                if unsettled:
                    raise UnsettledActivities(f"world {world_id!r} has unsettled Activities")
                self.ledger.destroy(world_id, head)
                self.ticker.drop(world_id)
        except BaseException:
            self.ledger.rollback_close(world_id)
            raise
