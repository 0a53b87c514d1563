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
- A family whose projection is an `EntityProjection` (one pure function per entity) is
  projected incrementally: after this projector projected tick T of a run (every request
  admitted), tick T+1 of that run is projected on the entities T+1 wrote only (its
  `changes`); every other entity holds what it held at T, so it asks for what it asked for
  at T, which the catalog admitted then (the core's answer to that replay is fixed: the stored
  record, unchanged). The admissions are those of the whole projection. Any other receipt
  (the first one, a restart, a replay of one receipt, a new run, a gap, or after a failed
  projection) runs the whole projection. Two entities asking for one key still fail
  (`FamilyError`), as in the whole projection.
- Whether a request is the admitted Activity is the catalog core's rule, decided inside
  `admit`: the identical admission (a replay) and the same input from a later tick of the
  source run (a projection may ask for every unobserved intent in every tick) are no-ops that
  keep the first source binding; any other difference fails closed (`ProjectionConflict`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.activities import ActivityKey, ActivityRecord, Admission
from tether.errors import AdmissionConflict
from tether.runtime._artifacts import ArtifactStore
from tether.runtime._crash import crash_point
from tether.runtime._errors import FamilyError, ProjectionConflict
from tether.runtime._family import REFUSAL_MEDIA_TYPE, ActivityRequest, EntityProjection, Family
from tether.runtime._ports import AdmissionCatalog, ReceiptReader
from tether.world import CommittedTickReceipt, JSONValue, WorldSnapshot, canonical_json

#: Admissions the projector remembers (then it forgets them all and asks the catalog again).
ADMITTED_MEMO = 65_536


@dataclass
class _Projected:
    """What one `EntityProjection` family asked for at one receipt (all of it admitted)."""

    receipt: CommittedTickReceipt
    #: Per entity asking for something, the keys (kind, activity id) of its requests.
    by_entity: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    #: The entity asking for each key.
    owners: dict[tuple[str, str], str] = field(default_factory=dict)


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
        # Per (world, family) of an `EntityProjection`: what it asked for at the last receipt
        # projected here with every admission done.
        self._projected: dict[tuple[str, str], _Projected] = {}
        self._mutex = threading.Lock()
        #: Entities run through an entity projection, and whole projections run (for tests).
        self.entities_projected = 0
        self.whole_projections = 0

    def _requests(
        self, fam: Family, snapshot: WorldSnapshot, done: list[tuple[tuple[str, str], _Projected]]
    ) -> list[ActivityRequest]:
        """What `fam` asks for at `snapshot` that the projector must take to the catalog: all
        of its projection, or (an `EntityProjection` right after the parent tick was
        projected here) the requests of the entities this tick wrote. The family's new
        state goes to `done`, kept once the whole tick's admissions succeeded."""
        if not isinstance(fam.project, EntityProjection):
            self.whole_projections += 1
            return fam.run_projection(snapshot)
        receipt = snapshot.receipt
        slot = (receipt.world_id, fam.name)
        with self._mutex:
            base = self._projected.pop(slot, None)  # back only once this tick succeeded
        parent = base.receipt if base is not None else None
        if (
            base is not None
            and parent is not None
            and parent.world_id == receipt.world_id
            and parent.run_id == receipt.run_id
            and parent.tick + 1 == receipt.tick
        ):
            entities = sorted({entity for entity, _ in snapshot.changes})
            state = _Projected(receipt, base.by_entity, base.owners)
        else:
            self.whole_projections += 1
            entities = snapshot.entities()
            state = _Projected(receipt)
        self.entities_projected += len(entities)
        fresh = fam.run_entity_projection(snapshot, entities)
        for entity in entities:  # first every changed entity's old keys go
            for key in state.by_entity.pop(entity, ()):
                del state.owners[key]
        out: list[ActivityRequest] = []
        for entity in entities:
            requests = fresh[entity]
            if not requests:
                continue
            keys = tuple((r.kind, r.activity_id) for r in requests)
            for key in keys:
                if state.owners.setdefault(key, entity) != entity:
                    raise FamilyError(f"family {fam.name!r} projected {key[1]!r} twice")
            state.by_entity[entity] = keys
            out.extend(requests)
        done.append((slot, state))
        return out

    def project(self, snapshot: WorldSnapshot) -> list[ActivityRecord]:
        """Admit every request the families' projections ask for at `snapshot`'s receipt;
        returns the catalog records this call admitted (as each admission left them; a request
        the projector did not take to the catalog again is not among them).

        Raises:
            ReceiptRejected: the receipt is not the world's exact committed head.
            ProjectionConflict: a request differs from what its key was admitted with.
        """
        receipt = snapshot.receipt
        batch: list[tuple[Admission, str, ActivityRequest]] = []  # this tick's admissions
        projected: list[tuple[tuple[str, str], _Projected]] = []
        admitted: list[ActivityRecord] = []
        for fam in self.families:
            for req in self._requests(fam, snapshot, projected):
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
                    admitted.append(self.catalog.admit_refused(admission, document))
                except AdmissionConflict as e:
                    raise self._conflict(receipt, key, ref.digest, e) from e
                crash_point("after_admission")
        if not batch:
            self._keep(projected)
            return admitted
        # Every other admission of the tick in one catalog transaction (one sync), each
        # decided by the core on its own, after the reader's check.
        self.ledger.check_receipt(receipt)
        done = self.catalog.admit_many([admission for admission, _, _ in batch])
        for (admission, digest, _), outcome in zip(batch, done, strict=True):
            if isinstance(outcome, AdmissionConflict):
                raise self._conflict(receipt, admission.key, digest, outcome) from outcome
            if isinstance(outcome, Exception):
                raise outcome
            admitted.append(outcome)
        with self._mutex:
            if len(self._admitted) + len(batch) > ADMITTED_MEMO:
                self._admitted.clear()
            for admission, _, req in batch:
                self._admitted[admission.key] = (receipt.run_id, req.input, req.host)
        crash_point("after_admission")
        self._keep(projected)
        return admitted

    def _keep(self, done: list[tuple[tuple[str, str], _Projected]]) -> None:
        """Keep what the entity projections asked for at a receipt whose admissions all
        succeeded (the next tick is projected on its changes only)."""
        with self._mutex:
            for slot, state in done:
                self._projected[slot] = state

    @staticmethod
    def _conflict(
        receipt: CommittedTickReceipt, key: ActivityKey, digest: str, error: AdmissionConflict
    ) -> ProjectionConflict:
        return ProjectionConflict(
            f"{receipt} asks for {key} with input {digest}, which conflicts"
            f" with its admission: {error}"
        )
