"""`Settler`: settles each Activity whose complete observation a committed tick wrote.

Rules (seed sections 2 and 7):
- Only completion evidence written in this exact tick counts (`snapshot.changes`), and only
  when it binds the Activity's recorded result and every listed fact is present with the bound
  digest (`verify_completion`); incomplete evidence settles nothing and is logged.
- The receipt reader runs again before every settlement write, which binds the exact receipt;
  a tick's settlements are one catalog write (`Catalog.settle_many`, one transaction).
- A record not pending observation (no result, or already settled: the core's column) is
  left alone. The records of the observations the tick itself committed were read pending
  observation of their result under the world lock just before (`observed`, see
  `ObservationStager.observations_for`); every tick of the world in this process settles
  under that lock, and a newer writer elsewhere would have fenced the tick, so they are not
  read again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from tether.activities import ActivityKey, ActivityRecord, ResultRef
from tether.runtime._crash import crash_point
from tether.runtime._family import COMPLETION_COMPONENT, verify_completion
from tether.runtime._ports import ReceiptReader, SettlementCatalog
from tether.world import CommittedTickReceipt, WorldSnapshot

log = logging.getLogger("tether.runtime.settler")


class Settler:
    """Binds observed results to the receipt of the tick that committed them. Shareable.

    Args:
        catalog: where settlements are recorded (read a record, settle).
        ledger: the fail-closed receipt reader.
    """

    def __init__(self, catalog: SettlementCatalog, ledger: ReceiptReader) -> None:
        self.catalog = catalog
        self.ledger = ledger
        #: Told each tick's settled records once they are committed (a live view showing them
        #: settled, say). A listener's failure is logged, never the settlement's.
        self.listeners: list[Callable[[list[ActivityRecord]], None]] = []

    def settle(
        self, snapshot: WorldSnapshot, observed: Mapping[ActivityKey, ResultRef] | None = None
    ) -> None:
        """Settle every Activity whose complete evidence `snapshot`'s tick committed.

        `observed`: the result of each observation this tick committed, as its record held
        it pending observation when the tick took it (not read again, see the rules).

        Raises:
            ReceiptRejected: the receipt is not the world's exact committed head.
        """
        receipt = snapshot.receipt
        batch: list[tuple[ActivityKey, CommittedTickReceipt, str]] = []
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
            result = observed.get(key) if observed else None
            if result is None:
                rec = self.catalog.get(key)
                if rec is None or rec.result is None or not rec.pending_observation:
                    continue
                result = rec.result
            digest = verify_completion(snapshot, key, result)
            if digest is None:
                log.warning("incomplete completion evidence for %s at %s", key, receipt)
                continue
            batch.append((key, receipt, digest))
        if not batch:
            return
        # One catalog write for the tick's settlements (one transaction, one sync), each
        # decided by the core on its own, after the reader's check.
        self.ledger.check_receipt(receipt)
        settled = self.catalog.settle_many(batch)
        for outcome in settled:
            if isinstance(outcome, Exception):
                raise outcome
        crash_point("after_settlement")
        records = [r for r in settled if isinstance(r, ActivityRecord)]
        for listener in self.listeners:
            try:
                listener(records)
            except Exception:
                log.exception("a settlement listener failed")
