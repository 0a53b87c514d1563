"""The Activity runtime: families, adapters, workers, the artifact store and the Host.

A family names its kinds, a pure projection from a committed snapshot to requests, an
adapter that executes (under a bound provider operation id) or reconciles, and a pure
staging of a durable result into facts. The Host runs the rest, one part per job: the
`Projector`, the `Settler`, the `ObservationStager`, the `Ticker` (ticks and post-commit
work), the `Observer`, the `WorkerPool` and the `WorldLifecycle`; `tether.testing` builds
any of them alone over real storage in a temp dir with a fake clock.

>>> import tempfile
>>> from tether.runtime import ActivityRequest, ConfirmedAbsent, Family, Host
>>> from tether.activities import RetryGuard
>>> from tether.world import ComponentWrite, canonical_json, digest_of
>>> def project(snapshot):
...     return [ActivityRequest("demo.echo", e, v) for e, v in snapshot.changed("echo.intent")]
>>> def stage(staged):
...     return [ComponentWrite(staged.key.activity_id, "echo.observed", staged.json())]
>>> class Echo:
...     def execute(self, ctx, request):
...         ctx.progress({"phase": "echoing"})
...         return ctx.artifacts.put_bytes(canonical_json(request), "application/json")
...     def reconcile(self, ctx, request):  # no external effect: a rerun cannot duplicate one
...         proof = canonical_json({"op": ctx.operation_id, "effect": "none"})
...         return ConfirmedAbsent(RetryGuard("echo:no-effect", digest_of(proof)))
>>> family = Family("demo", ("demo.echo",), project, Echo(), stage)
>>> with tempfile.TemporaryDirectory() as data:
...     with Host(data, [family], workers=1, progress_listener=print) as host:
...         _ = host.create_world("w")
...         _ = host.commit_tick("w", [ComponentWrite("job-1", "echo.intent", {"say": "hi"})])
...         _ = host.start()
...         assert host.wait_settled("w", timeout_s=60)
...         host.snapshot("w").get("job-1", "echo.observed")  # doctest: +ELLIPSIS
ProgressEvent(key=ActivityKey(world_id='w', kind='demo.echo', activity_id='job-1'), ...)
{'say': 'hi'}
"""

from tether.runtime._artifacts import DEFAULT_INLINE_BOUND, ArtifactStore
from tether.runtime._crash import CRASH_POINTS, crash_point
from tether.runtime._errors import (
    ActivityRuntimeError,
    ArtifactCorrupt,
    ArtifactError,
    ArtifactMissing,
    FamilyError,
    HostClosed,
    LeaseLost,
    ProjectionConflict,
    ProviderIOForbidden,
    WorldOfAnotherHost,
    owned_by,
)
from tether.runtime._family import (
    COMPLETION_COMPONENT,
    COMPLETION_MISMATCH_CODES,
    REFUSAL_MEDIA_TYPE,
    ActivityRequest,
    Adapter,
    AdmissionCheck,
    AttemptContext,
    ConfirmedAbsent,
    EntityProjection,
    EntityView,
    Family,
    Observation,
    Processor,
    ProgressEvent,
    Projection,
    ReconcileOutcome,
    Recovered,
    Refusal,
    StagedResult,
    Stager,
    Unknown,
    completion_mismatch,
    evidence_entity,
    observation_for,
    refusal_of,
    unobserved_intent,
    unobserved_intents,
    verify_completion,
)
from tether.runtime._host import Host
from tether.runtime._lifecycle import WorldLifecycle
from tether.runtime._observer import Observer
from tether.runtime._pool import WorkerPool
from tether.runtime._projector import Projector
from tether.runtime._settler import Settler
from tether.runtime._stager import ObservationStager
from tether.runtime._ticker import Ticker
from tether.runtime._wakeup import (
    CLAIMABLE,
    DEFAULT_FALLBACK_S,
    MIN_FALLBACK_S,
    RESULT,
    SETTLED,
    Wakeup,
)
from tether.runtime._worker import Worker

__all__ = [
    "CLAIMABLE",
    "COMPLETION_COMPONENT",
    "COMPLETION_MISMATCH_CODES",
    "CRASH_POINTS",
    "DEFAULT_FALLBACK_S",
    "DEFAULT_INLINE_BOUND",
    "ActivityRequest",
    "ActivityRuntimeError",
    "Adapter",
    "AdmissionCheck",
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactMissing",
    "ArtifactStore",
    "AttemptContext",
    "ConfirmedAbsent",
    "EntityProjection",
    "EntityView",
    "Family",
    "FamilyError",
    "Host",
    "HostClosed",
    "LeaseLost",
    "MIN_FALLBACK_S",
    "Observation",
    "ObservationStager",
    "Observer",
    "Processor",
    "ProgressEvent",
    "Projection",
    "ProjectionConflict",
    "Projector",
    "ProviderIOForbidden",
    "REFUSAL_MEDIA_TYPE",
    "RESULT",
    "ReconcileOutcome",
    "Recovered",
    "Refusal",
    "SETTLED",
    "Settler",
    "StagedResult",
    "unobserved_intent",
    "unobserved_intents",
    "Stager",
    "Ticker",
    "Unknown",
    "Wakeup",
    "Worker",
    "WorldOfAnotherHost",
    "WorkerPool",
    "WorldLifecycle",
    "completion_mismatch",
    "crash_point",
    "evidence_entity",
    "observation_for",
    "owned_by",
    "refusal_of",
    "verify_completion",
]
