"""`Projector`: the required projector, admitting each family's requests from one exact receipt.

Rules (seed section 2):
- It reads only the committed snapshot it is given and runs every family's pure projection on
  it; it performs no provider I/O (`Family.run_projection` refuses provider entry points).
- Each request's input is made durable first; its reference and digest are what is admitted.
- The family's pure admission check runs on each request first. A request it refuses (it can
  never run) has its refusal document made durable next (`after_refusal_document`) and is
  admitted already failed (`Catalog.admit_refused`): no worker claims it, no provider
  operation is bound, and the stager and observer settle it through a later tick like any
  other failed result. A replay puts the same document (a function of the refusal) and is a
  no-op; a crash between the document and the admission leaves only an unreferenced,
  content-addressed payload that the replay reuses.
- The receipt reader runs again before every catalog write: under this process's world lock
  the head cannot move, but a newer writer in another process can. The admissions of one tick
  that no check refused are one catalog write (`Catalog.admit_many`: one transaction, one
  sync, every admission still decided by the core on its own), after one check.
- A projection may ask for the same request in every tick. Once the catalog admitted a
  request, the projector does not ask it again for the same key, input and host in the same
  run (the core's answer to that replay is fixed: the stored record, unchanged); a restart, a
  new run or anything different asks the catalog again.
- Whether a request is the admitted Activity is the catalog core's rule, decided inside
  `admit`: the identical admission (a replay) and the same input from a later tick of the
  source run (a projection may ask for every unobserved intent in every tick) are no-ops that
  keep the first source binding; any other difference fails closed (`ProjectionConflict`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from tether.activities import ActivityKey, Admission
from tether.errors import AdmissionConflict
from tether.runtime._artifacts import ArtifactStore
from tether.runtime._crash import crash_point
from tether.runtime._errors import ProjectionConflict
from tether.runtime._family import REFUSAL_MEDIA_TYPE, ActivityRequest, Family
from tether.runtime._ports import AdmissionCatalog, ReceiptReader
from tether.world import CommittedTickReceipt, JSONValue, WorldSnapshot, canonical_json

#: Admissions the projector remembers (then it forgets them all and asks the catalog again).
ADMITTED_MEMO = 65_536


class Projector:
    """Admits the Activities a committed tick's projections ask for. Shareable across threads.

    Args:
        families: the registered families, projected in this order.
        catalog: where Activities are admitted.
        artifacts: where each request's input is made durable before it is admitted.
        ledger: the fail-closed receipt reader.
    """

    def __init__(
        self,
        families: Sequence[Family],
        catalog: AdmissionCatalog,
        artifacts: ArtifactStore,
        ledger: ReceiptReader,
    ) -> None:
        self.families = tuple(families)
        self.catalog = catalog
        self.artifacts = artifacts
        self.ledger = ledger
        # What the catalog admitted, per key, in this process: (source run, input, host).
        self._admitted: dict[ActivityKey, tuple[str, JSONValue, str]] = {}
        self._mutex = threading.Lock()

    def project(self, snapshot: WorldSnapshot) -> None:
        """Admit every request the families' projections ask for at `snapshot`'s receipt.

        Raises:
            ReceiptRejected: the receipt is not the world's exact committed head.
            ProjectionConflict: a request differs from what its key was admitted with.
        """
        receipt = snapshot.receipt
        batch: list[tuple[Admission, str, ActivityRequest]] = []  # this tick's admissions
        for fam in self.families:
            for req in fam.run_projection(snapshot):
                key = ActivityKey(
                    world_id=receipt.world_id, kind=req.kind, activity_id=req.activity_id
                )
                with self._mutex:
                    asked = self._admitted.get(key)
                if asked is not None and asked == (receipt.run_id, req.input, req.host):
                    continue  # the core admitted this very request in this run already
                refusal = fam.run_admission_check(req)
                ref = self.artifacts.put_bytes(canonical_json(req.input), "application/json")
                admission = Admission(
                    key=key,
                    source=receipt,
                    input_ref=ref.ref,
                    input_digest=ref.digest,
                    bound_host=req.host,
                )
                if refusal is None:
                    batch.append((admission, ref.digest, req))
                    continue
                put = self.artifacts.put_bytes(refusal.document(), REFUSAL_MEDIA_TYPE)
                document = dataclasses.replace(put, failed=True)
                crash_point("after_refusal_document")
                # The reader runs again at each catalog write: under this process's lock the
                # head cannot move, but a newer writer in another process can.
                self.ledger.check_receipt(receipt)
                try:
                    self.catalog.admit_refused(admission, document)
                except AdmissionConflict as e:
                    raise self._conflict(receipt, key, ref.digest, e) from e
                crash_point("after_admission")
        if not batch:
            return
        # Every other admission of the tick in one catalog transaction (one sync), each
        # decided by the core on its own, after the reader's check.
        self.ledger.check_receipt(receipt)
        done = self.catalog.admit_many([admission for admission, _, _ in batch])
        for (admission, digest, _), outcome in zip(batch, done, strict=True):
            if isinstance(outcome, AdmissionConflict):
                raise self._conflict(receipt, admission.key, digest, outcome) from outcome
            if isinstance(outcome, Exception):
                raise outcome
        with self._mutex:
            if len(self._admitted) + len(batch) > ADMITTED_MEMO:
                self._admitted.clear()
            for admission, _, req in batch:
                self._admitted[admission.key] = (receipt.run_id, req.input, req.host)
        crash_point("after_admission")

    @staticmethod
    def _conflict(
        receipt: CommittedTickReceipt, key: ActivityKey, digest: str, error: AdmissionConflict
    ) -> ProjectionConflict:
        return ProjectionConflict(
            f"{receipt} asks for {key} with input {digest}, which conflicts"
            f" with its admission: {error}"
        )
