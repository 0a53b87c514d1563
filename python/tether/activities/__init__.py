"""The Activity catalog: durable, fenced coordination of work between committed ticks.

One lifecycle, on a catalog file with a fixed clock (times are integer milliseconds)::

    >>> import shutil, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> catalog = Catalog.open(f"sqlite://{directory}/catalog.db", clock=lambda: 1_000)
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
    >>> later = Receipt("world-1", "run-1", 42, "vis-42")
    >>> evidence = settlement_evidence_digest(key, result)
    >>> catalog.settle(key, later, evidence).settlement.receipt.tick
    42
    >>> catalog.has_unsettled("world-1")
    False
    >>> catalog.record_result(key, 0, result)
    Traceback (most recent call last):
    ...
    _core.StaleFence: stale_fence (fence): fence 0 is not the current fence 1
    >>> catalog.close(); shutil.rmtree(directory)
"""

from tether._core import ABANDONED_MEDIA_TYPE, catalog_rejection_codes
from tether.activities._catalog import (
    Catalog,
    Clock,
    operation_id_for,
    settlement_evidence_digest,
    wall_clock_ms,
)
from tether.activities._types import (
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
)

REJECTION_CODES: tuple[str, ...] = tuple(catalog_rejection_codes())

__all__ = [
    "ABANDONED_MEDIA_TYPE",
    "REJECTION_CODES",
    "ActivityKey",
    "ActivityRecord",
    "Admission",
    "Attempt",
    "Catalog",
    "Claim",
    "Clock",
    "Decision",
    "DecisionOutcome",
    "Evidence",
    "OperatorDecision",
    "Receipt",
    "RecordedEvidence",
    "RecordedGuard",
    "RecordedResult",
    "ResultRef",
    "RetryGuard",
    "Settlement",
    "operation_id_for",
    "settlement_evidence_digest",
    "wall_clock_ms",
]
