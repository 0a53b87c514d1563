"""The Activity catalog: durable, fenced coordination of work between committed ticks.

Time: leases and reconciliation backoff run on a lease clock that wall-clock steps never move
(by default `SystemClock`: CLOCK_BOOTTIME with the boot id; a lease from another boot has
expired); record times (``*_at_ms``) are wall-clock. Leases are 1 ms to 7 days
(`MAX_LEASE_MS`), backoff 0 to 7 days (`MAX_RETRY_AFTER_MS`).

One lifecycle, on a catalog file with a fixed clock (times are integer milliseconds)::

    >>> import shutil, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> clock = FixedBootClock(lambda: 1_000)  # both clocks at 1000 ms, one boot
    >>> catalog = Catalog.open(f"sqlite://{directory}/catalog.db", clock=clock)
    >>> catalog.now()
    Now(boot_id='fixed', boot_ms=1000, wall_ms=1000)
    >>> MAX_LEASE_MS == 7 * 24 * 3600 * 1000
    True
    >>> key = ActivityKey("world-1", "sim.rollout", "episode-7")
    >>> source = Receipt("world-1", "run-1", 41, "vis-41")
    >>> catalog.admit(Admission(key, source, "artifact://in", "sha256:in")).claimable_from_ms
    1000
    >>> claim = catalog.claim("worker-a", 30_000)
    >>> claim.fence, claim.attempt.may_execute, claim.attempt.lease_expires_ms
    (1, True, 31000)
    >>> _ = catalog.bind_provider_operation(key, claim.fence, operation_id_for(key))
    >>> result = ResultRef("artifact://out", "sha256:out", "application/json", 123)
    >>> catalog.record_result(key, claim.fence, result).claimable_from_ms is None
    True
    >>> [r.key.activity_id for r in catalog.iter_pending_observation(world_id="world-1")]
    ['episode-7']
    >>> rec = catalog.get(key)
    >>> rec.pending_observation, rec.unsettled, rec.lease_boot_id
    (True, True, 'fixed')
    >>> later = Receipt("world-1", "run-1", 42, "vis-42")
    >>> evidence = settlement_evidence_digest(key, result)
    >>> catalog.settle(key, later, evidence).settlement.receipt.tick
    42
    >>> catalog.has_unsettled("world-1")
    False
    >>> catalog.claim_key(key, "worker-b", 30_000)
    Traceback (most recent call last):
    ...
    _core.NotClaimable: not_claimable: a result is recorded; the activity is never claimed again
    >>> catalog.record_result(key, 0, result)
    Traceback (most recent call last):
    ...
    _core.StaleFence: stale_fence (fence): fence 0 is not the current fence 1
    >>> catalog.compact_settled(0)  # retention: settled at least 0 ms ago; see compact_settled
    1
    >>> rec = catalog.admit(Admission(key, later, "inline:e30=", "sha256:in"))  # asked again
    >>> rec.compacted, rec.input_ref, rec.result, rec.settlement.receipt.tick
    (True, '', None, 42)
    >>> catalog.close(); shutil.rmtree(directory)
"""

from tether._core import (
    ABANDONED_MEDIA_TYPE,
    MAX_LEASE_MS,
    MAX_RETRY_AFTER_MS,
    catalog_rejection_codes,
)
from tether.activities._catalog import (
    Catalog,
    operation_id_for,
    settlement_evidence_digest,
)
from tether.activities._clock import (
    BOOT_ID_PATH,
    CatalogClock,
    ClockLike,
    FixedBootClock,
    Now,
    SystemClock,
    as_clock,
    read_boot_id,
    wall_clock_ms,
)
from tether.activities._types import (
    DECISION_WORDS,
    ActivityKey,
    ActivityRecord,
    Admission,
    Attempt,
    Claim,
    Decision,
    DecisionOutcome,
    Evidence,
    OperatorDecision,
    Receipt,
    RecordedEvidence,
    RecordedGuard,
    RecordedResult,
    ResultRef,
    RetryGuard,
    Settlement,
    WorkStep,
)

#: Every `CatalogRejection`'s `.code`: the core's, and `UnknownActivity`'s (a key the
#: catalog does not hold).
REJECTION_CODES: tuple[str, ...] = (*catalog_rejection_codes(), "unknown_activity")

__all__ = [
    "ABANDONED_MEDIA_TYPE",
    "BOOT_ID_PATH",
    "MAX_LEASE_MS",
    "MAX_RETRY_AFTER_MS",
    "REJECTION_CODES",
    "ActivityKey",
    "ActivityRecord",
    "Admission",
    "Attempt",
    "Catalog",
    "CatalogClock",
    "Claim",
    "ClockLike",
    "Decision",
    "DECISION_WORDS",
    "DecisionOutcome",
    "Evidence",
    "FixedBootClock",
    "Now",
    "OperatorDecision",
    "Receipt",
    "RecordedEvidence",
    "RecordedGuard",
    "RecordedResult",
    "ResultRef",
    "RetryGuard",
    "Settlement",
    "SystemClock",
    "WorkStep",
    "as_clock",
    "operation_id_for",
    "read_boot_id",
    "settlement_evidence_digest",
    "wall_clock_ms",
]
