"""The `physical_ai.sim_episode` adapter and Family: the provider behind the Tether runtime.

Provider identity and reconciliation (seed section 4, seeded simulation): the runtime's
operation id is the provider operation id; the first durable result for it is reused, never
recomputed; a started attempt without a result is Unknown while its episode process may live,
and ConfirmedAbsent, with the provider's proof stored as the retry guard, once every earlier
attempt is fenced off and its process is provably gone.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.activities import Evidence, ResultRef, RetryGuard
from tether.families.sim._episode import read_summary
from tether.families.sim.errors import AttemptExpired, RequestTooLarge, ResultCorrupt
from tether.families.sim.family import (
    EXPIRED_MEDIA_TYPE,
    INTENT,
    KIND,
    OBSERVATION,
    OPERATOR_DONE_MEDIA_TYPE,
    REFUSED_MEDIA_TYPE,
    admission_check,
    failed_summary,
    observation_write,
    pending,
    plan_with,
)
from tether.families.sim.provider import (
    DEFAULT_MEMORY_CAP_BYTES,
    ProvenAbsent,
    ResultFound,
    SimProvider,
)
from tether.runtime import (
    REFUSAL_MEDIA_TYPE,
    ActivityRequest,
    AttemptContext,
    ConfirmedAbsent,
    Family,
    FamilyError,
    Host,
    LeaseLost,
    Observation,
    ReconcileOutcome,
    Recovered,
    Refusal,
    StagedResult,
    Unknown,
    crash_point,
    refusal_of,
)
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

FAMILY = "physical_ai.sim"  # its kind: physical_ai.sim_episode
#: How long the runtime waits before reconciling an Unknown operation again.
UNKNOWN_RETRY_MS = 1000
#: Attempts whose episode process died without a result, after which absence no longer
#: authorises another run: the operation is left Unknown for an operator instead of looping.
MAX_FAILED_STARTS = 4
#: How long a reach parked for its operator (its episode process kept dying) waits before it
#: is reconciled again: nothing but the operator changes it.
OPERATOR_RETRY_MS = 60_000


class SimEpisodeAdapter:
    """Runs `physical_ai.sim_episode` operations on a `SimProvider` (thread-safe).

    `data_dir` is the Host's data directory: the provider's journal is its `operations/`.
    A request over `memory_cap_bytes` is refused at admission by the family (`sim_family`
    takes this cap by default), so no attempt ever gets one. This adapter's own check is the
    second line, for a request admitted under a larger cap: it ends as a recorded failure with
    its reason (the same refusal document), at its first attempt and before anything is bound
    or started, and is never retried.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        warm: bool = True,
        memory_cap_bytes: int = DEFAULT_MEMORY_CAP_BYTES,
    ) -> None:
        self.provider = SimProvider(data_dir, memory_cap_bytes=memory_cap_bytes)
        if warm:  # the worker's episode host imports MuJoCo now, not in the first attempt
            self.provider.warm()

    def close(self) -> None:
        """Stop the provider's episode host."""
        self.provider.close()

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        """Run (or reuse) the episodes of `ctx.operation_id`; the result is made durable."""
        try:
            self.provider.check_request(request)
        except RequestTooLarge as exc:
            refusal = Refusal(exc.code, exc.message, dict(exc.details))
            ref = ctx.artifacts.put_bytes(refusal.document(), REFUSAL_MEDIA_TYPE)
            return dataclasses.replace(ref, failed=True)

        def progress(done: int, total: int, error: float) -> None:
            crash_point("during_effect")
            if ctx.lost:  # the heartbeat thread saw the fence go: stop the episode process
                raise LeaseLost(f"attempt {ctx.attempt} of {ctx.key} lost its lease")
            ctx.progress(
                {
                    "state": "running",
                    "attempt": ctx.attempt,
                    "steps": done,
                    "total": total,
                    "error": error,
                }
            )

        # The episode process wrote the result file into the runtime's own artifact store: the
        # reference is handed on as is (made durable once; the worker re-checks it).
        try:
            outcome = self.provider.execute(
                ctx.operation_id, ctx.attempt, request, artifacts=ctx.artifacts, progress=progress
            )
        except AttemptExpired as exc:  # nothing started: a recorded failure, never retried
            doc = {
                "operation_id": ctx.operation_id,
                "outcome": "expired",
                "code": "expired",
                "error": str(exc),
                **{k: v for k, v in exc.proof.items() if k in ("not_after_ms", "decided_at_ms")},
            }
            ref = ctx.artifacts.put_bytes(canonical_json(doc), EXPIRED_MEDIA_TYPE)
            return dataclasses.replace(ref, failed=True)
        return outcome.result

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        """Conclude Recovered, ConfirmedAbsent or Unknown from the provider's files alone."""
        fact = self.provider.reconcile(ctx.operation_id, ctx.attempt, artifacts=ctx.artifacts)
        if isinstance(fact, ResultFound):
            return Recovered(fact.outcome.result)
        if isinstance(fact, ProvenAbsent):
            failed = len(fact.proof["children_gone"])
            if failed >= MAX_FAILED_STARTS:
                # The same document at each reconcile while nothing changed (the proof of
                # each reconciling attempt is its own, fenced attempts and all: in here it
                # made a new evidence revision each time, and an operator's decision on the
                # one read was refused as stale a second later).
                note = {
                    "operation_id": ctx.operation_id,
                    "reason": "episode_process_keeps_dying",
                    "detail": f"{failed} attempts started and died without a result",
                    "children_gone": fact.proof.get("children_gone"),
                    "provider_state": self.provider.state(ctx.operation_id),
                }
                evidence = ctx.artifacts.put_bytes(canonical_json(note), "application/json")
                return Unknown(
                    Evidence(ref=evidence.ref, digest=evidence.digest), OPERATOR_RETRY_MS
                )
            proof = ctx.artifacts.put_bytes(fact.data, "application/json")
            return ConfirmedAbsent(RetryGuard(ref=proof.ref, digest=proof.digest))
        evidence = ctx.artifacts.put_bytes(fact.data, "application/json")
        return Unknown(Evidence(ref=evidence.ref, digest=evidence.digest), UNKNOWN_RETRY_MS)


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    """Projection: one activity per committed reach intent without an observation."""
    return [ActivityRequest(KIND, entity, request) for entity, request in pending(snapshot)]


def stage(staged: StagedResult) -> list[ComponentWrite]:
    """Staging: the reach's observation is the result summary (the runtime checked the digest).

    A failed result (refused at admission, or abandoned by an operator) has no episodes: its
    observation is a failure summary with the refusal's reason and code, so the world still
    observes it and the planner moves on. So is a recorded
    result that is not a readable episode file (say, an operator recovered it with another
    file): the fact observed is that it failed, and why; raising would stall every observation.
    """
    refusal = _refusal(staged)
    if refusal is not None:
        summary = failed_summary(refusal.reason, refusal.code)
    elif staged.result.failed:
        code = "expired" if staged.result.media_type == EXPIRED_MEDIA_TYPE else None
        summary = failed_summary(_failure_reason(staged), code)
    elif staged.result.media_type == OPERATOR_DONE_MEDIA_TYPE:
        try:
            summary = dict(json.loads(staged.payload)["summary"])
        except (ValueError, KeyError, TypeError) as exc:
            summary = failed_summary(f"unreadable operator result: {exc}")
    else:
        try:
            summary = read_summary(staged.payload)
        except ResultCorrupt as exc:
            summary = failed_summary(f"unreadable result: {exc}")
    return [observation_write(staged.key.activity_id, staged.result.digest, summary)]


def _refusal(staged: StagedResult) -> Refusal | None:
    """The refusal of a request refused at admission (or by the adapter's second line)."""
    try:
        return refusal_of(staged)
    except FamilyError:
        return None  # not a readable refusal document: observed as failed, by its type


def _failure_reason(staged: StagedResult) -> str:
    """Why a failed result failed: the reason an expired reach or an older data dir's refused
    result recorded, else its type."""
    if staged.result.media_type == EXPIRED_MEDIA_TYPE:
        try:
            return str(json.loads(staged.payload)["error"])
        except (ValueError, KeyError, TypeError):
            pass
    if staged.result.media_type == REFUSED_MEDIA_TYPE:
        try:
            return str(json.loads(staged.payload)["reason"])
        except (ValueError, KeyError, TypeError):
            pass
    return staged.result.media_type


def planner(snapshot: WorldSnapshot, observations: Sequence[Observation]) -> list[ComponentWrite]:
    """The planner processor: next reach (or mission done) from the observations being committed."""
    fresh = {
        w.entity: w.value for obs in observations for w in obs.facts if w.component == OBSERVATION
    }
    return plan_with(snapshot, fresh)


def sim_family(adapter: SimEpisodeAdapter, *, memory_cap_bytes: int | None = None) -> Family:
    """The `physical_ai` family over `adapter`. Its admission check refuses a request past
    `memory_cap_bytes` (default: the adapter's provider's cap, so both lines agree) or one that
    does not validate: it is admitted already failed, never claimed."""
    cap = adapter.provider.memory_cap_bytes if memory_cap_bytes is None else memory_cap_bytes
    return Family(
        name=FAMILY,
        kinds=(KIND,),
        project=project,
        adapter=adapter,
        stage=stage,
        processors=(planner,),
        admission_check=admission_check(cap),
    )


def kick_planner(host: Host, world_id: str) -> None:
    """Commit an empty tick if no reach intent exists yet: the planner then commits the first.

    Processors run in every tick on the pre-tick state, so the tick that commits the mission
    cannot plan from it; the next tick does (also after a crash between the two).
    """
    if not any(True for _ in host.snapshot(world_id).with_component(INTENT)):
        host.commit_tick(world_id)


def worker_families(data_dir: Path) -> list[Family]:
    """`tether worker DATA --families tether.families.sim.adapter:worker_families`: the
    seeded MuJoCo reaches (`physical_ai.sim_episode`) over the worker's data dir (its
    provider journal and episode files); the episode host stops when the process exits."""
    import atexit

    adapter = SimEpisodeAdapter(Path(data_dir))
    atexit.register(adapter.close)
    return [sim_family(adapter)]
