"""The narrow ports the runtime's parts are built from: each names only the calls a part makes.

A `Catalog` and a `WorldLedger` satisfy every one of them, so the Host hands each part its real
catalog or ledger while the part's signature says exactly what it may touch. A second backend
implements the full catalog or ledger; these ports add no rule and no state.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from tether.activities import ActivityKey, ActivityRecord, Admission, ResultRef
from tether.errors import CatalogRejection
from tether.world import CommittedTickReceipt


class ReceiptReader(Protocol):
    """The ledger's fail-closed receipt reader (run again before every catalog write)."""

    def check_receipt(self, receipt: CommittedTickReceipt) -> None: ...


class WorldIndex(Protocol):
    """The ids of the worlds that exist (not destroyed)."""

    def worlds(self) -> list[str]: ...


class CloseStates(Protocol):
    """Whether a world is open, reserved for close or destroyed."""

    def close_state(self, world_id: str) -> tuple[str, bool]: ...


class AdmissionCatalog(Protocol):
    """What the projector does to the catalog: admit Activities (many in one transaction), or
    admit one its family refused with its failed refusal result (the core decides replays)."""

    def admit(self, admission: Admission) -> ActivityRecord: ...

    def admit_refused(self, admission: Admission, refusal: ResultRef) -> ActivityRecord: ...

    def admit_many(
        self, admissions: Sequence[Admission]
    ) -> list[ActivityRecord | CatalogRejection]: ...


class SettlementCatalog(Protocol):
    """What the settler does to the catalog: read a record, settle records against a receipt
    (many in one transaction)."""

    def get(self, key: ActivityKey) -> ActivityRecord | None: ...

    def settle(
        self, key: ActivityKey, receipt: CommittedTickReceipt, evidence_digest: str
    ) -> ActivityRecord: ...

    def settle_many(
        self, items: Sequence[tuple[ActivityKey, CommittedTickReceipt, str]]
    ) -> list[ActivityRecord | CatalogRejection]: ...


class ObservationCatalog(Protocol):
    """What the stager reads: one record, and every result still pending observation."""

    def get(self, key: ActivityKey) -> ActivityRecord | None: ...

    def iter_pending_observation(
        self, *, world_id: str | None = None, page_size: int
    ) -> Iterator[ActivityRecord]: ...


class UnsettledOracle(Protocol):
    """The catalog's world-scoped unsettled-work oracle (the fork/destroy gate)."""

    def has_unsettled(self, world_id: str) -> bool: ...
