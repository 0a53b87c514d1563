"""A bench-only family for `tether serve`: each Activity reports `reports` progress events and
completes with a small result (no external effect, so a rerun cannot duplicate one).

`[serve] families = ["_chatty:serve_families"]` with `benches/` on PYTHONPATH.
"""

from __future__ import annotations

from typing import Any

from tether.activities import ResultRef, RetryGuard
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    ConfirmedAbsent,
    Family,
    FamilyError,
    StagedResult,
)
from tether.world import ComponentWrite, WorldSnapshot, canonical_json, digest_of

KIND = "bench.chatty"
INTENT = "bench.chatty.intent"
OBSERVED = "bench.chatty.observed"


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [
        ActivityRequest(KIND, entity, value)
        for entity, value in snapshot.with_component(INTENT)
        if snapshot.get(entity, OBSERVED) is None
    ]


def stage(staged: StagedResult) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, OBSERVED, {"digest": staged.result.digest})]


class Chatty:
    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        reports = int(request["reports"])
        for step in range(1, reports + 1):
            ctx.progress(
                {"steps": step, "of": reports, "error_rad": round(0.5 / step, 6), "phase": "run"}
            )
        return ctx.artifacts.put_bytes(canonical_json({"reports": reports}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ConfirmedAbsent:
        proof = canonical_json({"op": ctx.operation_id, "effect": "none"})
        return ConfirmedAbsent(RetryGuard("chatty:no-effect", digest_of(proof)))


def submit(activity_id: str, kind: str, request: dict[str, Any]) -> ComponentWrite:
    if kind != KIND or not isinstance(request.get("reports"), int):
        raise FamilyError(f"a {KIND} request is {{'reports': N}}")
    return ComponentWrite(activity_id, INTENT, {"reports": request["reports"]})


def serve_families(ctx: Any) -> list[tuple[Family, Any]]:
    return [(Family("bench_chatty", (KIND,), project, Chatty(), stage), submit)]
