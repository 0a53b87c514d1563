"""Shared builders for catalog tests: a settable clock and small record builders."""

from __future__ import annotations

from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Claim,
    Now,
    Receipt,
    ResultRef,
    operation_id_for,
    settlement_evidence_digest,
)


class ManualClock:
    """A clock the test sets: the catalog's injectable `CatalogClock`, advanced explicitly. Its
    milliseconds are both the lease clock (on ``boot_id``) and the wall clock."""

    def __init__(self, now_ms: int = 1_000_000, boot_id: str = "boot-test") -> None:
        self.now_ms = now_ms
        self.boot_id = boot_id

    def __call__(self) -> int:
        return self.now_ms

    def now(self) -> Now:
        return Now(self.boot_id, self.now_ms, self.now_ms)

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def key(activity_id: str = "a1", *, world: str = "w1", kind: str = "sim.rollout") -> ActivityKey:
    return ActivityKey(world, kind, activity_id)


def receipt(
    tick: int, *, world: str = "w1", run: str = "run-1", token: str | None = None
) -> Receipt:
    return Receipt(world, run, tick, f"tok-{tick}" if token is None else token)


def admission(k: ActivityKey, *, tick: int = 3, input_digest: str = "sha256:in") -> Admission:
    return Admission(k, receipt(tick, world=k.world_id), f"input://{k.activity_id}", input_digest)


def result(name: str = "r1") -> ResultRef:
    return ResultRef(f"artifact://{name}", f"sha256:{name}", "application/json", 42)


def evidence_for(k: ActivityKey, res: ResultRef) -> str:
    return settlement_evidence_digest(k, res)


def bound_claim(
    catalog: Catalog, k: ActivityKey, *, owner: str = "w", lease_ms: int = 10_000
) -> Claim:
    """Admit ``k``, claim it to execute and bind its provider operation: the usual worker path."""
    catalog.admit(admission(k))
    c = catalog.claim(owner, lease_ms, kinds=[k.kind], world_id=k.world_id)
    assert c is not None and c.key == k and c.attempt.may_execute
    catalog.bind_provider_operation(k, c.fence, operation_id_for(k))
    return c


def reconciling(catalog: Catalog, clock: ManualClock, k: ActivityKey) -> tuple[Claim, Claim]:
    """``k``'s bound execute attempt expired and a reconcile-only attempt replaced it: returns
    (the expired attempt's claim, the reconcile claim)."""
    first = bound_claim(catalog, k, owner="w-old", lease_ms=1_000)
    clock.advance(1_000)
    c = catalog.claim("w-rec", 1_000, kinds=[k.kind], world_id=k.world_id)
    assert c is not None and c.key == k and not c.attempt.may_execute
    return first, c
