"""Family registration: a pure projection, adapter shape, staging and completion evidence."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from journal_provider import DedupAdapter, Journal, make_family, projection_for, stage_task
from tether.activities import ActivityKey
from tether.runtime import (
    COMPLETION_COMPONENT,
    ActivityRequest,
    ArtifactStore,
    AttemptContext,
    Family,
    FamilyError,
    ProviderIOForbidden,
    StagedResult,
    completion_mismatch,
    evidence_entity,
    observation_for,
    verify_completion,
)
from tether.world import ComponentWrite, SqliteLedger, WorldSnapshot, canonical_json, digest_of


def _family(project: Any, tmp_path: Path) -> Family:
    return Family(
        name="f",
        kinds=("k",),
        project=project,
        adapter=DedupAdapter(Journal(tmp_path / "p.db")),
        stage=stage_task,
    )


def test_projection_must_not_reach_an_adapter_or_handle(tmp_path: Path) -> None:
    adapter = DedupAdapter(Journal(tmp_path / "p.db"))

    class Projector:
        def project(self, snapshot: WorldSnapshot) -> list[ActivityRequest]:
            return []

    def closes_over_adapter(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        assert adapter is not None
        return []

    handle = open(tmp_path / "f.txt", "w")
    try:

        def closes_over_file(snapshot: WorldSnapshot) -> list[ActivityRequest]:
            assert not handle.closed
            return []

        for bad in (Projector().project, closes_over_adapter, closes_over_file, len):
            with pytest.raises(FamilyError, match="pure"):
                _family(bad, tmp_path)
    finally:
        handle.close()
    _family(projection_for(("k",)), tmp_path)  # closure over plain data is fine

    @dataclasses.dataclass(frozen=True)
    class Config:
        component: str
        kinds: tuple[str, ...]

    config = Config("task.intent", ("k",))

    def configured(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        return [ActivityRequest("k", e, v) for e, v in snapshot.changed(config.component)]

    _family(configured, tmp_path)  # a frozen dataclass of plain data is plain data too


def test_registration_rejects_bad_kinds_and_adapters(tmp_path: Path) -> None:
    fam = make_family(tmp_path)
    with pytest.raises(FamilyError):
        Family("f", (), fam.project, fam.adapter, fam.stage)
    with pytest.raises(FamilyError):
        Family("f", "k", fam.project, fam.adapter, fam.stage)  # type: ignore[arg-type]
    with pytest.raises(FamilyError):
        Family("f", ("k",), fam.project, object(), fam.stage)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="kind"):
        Family("f", ("bad kind",), fam.project, fam.adapter, fam.stage)


def _snapshot(tmp_path: Path, writes: list[ComponentWrite]) -> WorldSnapshot:
    # SQLite only: a projection sees a snapshot, never the ledger behind it.
    ledger = SqliteLedger.open(tmp_path / "w.db")
    ledger.create_world("w")
    receipt = ledger.commit(ledger.acquire_writer("w"), ledger.head("w"), writes)
    return ledger.read_at(receipt)


def test_run_projection_validates_what_the_projection_returns(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, [ComponentWrite("t1", "task.intent", {"kind": "k", "n": 1})])
    good = _family(projection_for(("k",)), tmp_path)
    assert good.run_projection(snap) == [ActivityRequest("k", "t1", {"kind": "k", "n": 1})]
    assert good.run_projection(snap) == good.run_projection(snap)  # deterministic

    def foreign(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        return [ActivityRequest("other", "a", {})]

    def twice(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        return [ActivityRequest("k", "a", {}), ActivityRequest("k", "a", {})]

    def not_json(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        return [ActivityRequest("k", "a", {"x": float("inf")})]

    for bad in (foreign, twice, not_json):
        with pytest.raises(Exception):  # noqa: B017 - FamilyError or InvalidWrite, both typed
            _family(bad, tmp_path).run_projection(snap)


def test_provider_entry_points_refuse_to_run_inside_a_projection(tmp_path: Path) -> None:
    ctx = AttemptContext(
        key=ActivityKey(world_id="w", kind="k", activity_id="a"),
        operation_id="op",
        fence=1,
        attempt=1,
        may_execute=True,
        artifacts=ArtifactStore(tmp_path / "a"),
        renew=lambda: None,
    )
    leaked = [ctx]  # what a misbehaving family might smuggle in through a module global

    def sneaky(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        leaked[0].progress({"x": 1})
        return []

    # The closure holds a list (mutable), so registration already refuses it ...
    with pytest.raises(FamilyError):
        _family(sneaky, tmp_path)
    # ... and even bypassing registration, the projection guard stops the provider call.
    fam = _family(projection_for(("k",)), tmp_path)
    object.__setattr__(fam, "project", sneaky)
    with pytest.raises(ProviderIOForbidden):
        fam.run_projection(_snapshot(tmp_path, []))
    ctx.progress({"ok": True})  # outside a projection it works


def test_completion_evidence_binds_result_and_complete_fact_set(tmp_path: Path) -> None:
    # SQLite only: the evidence is computed from the staged result; the ledger only stores it.
    fam = make_family(tmp_path)
    store = ArtifactStore(tmp_path / "a")
    key = ActivityKey(world_id="w", kind="crash.effect", activity_id="t1")
    result = store.put_bytes(b'{"op":"o","value":2}', "application/json")
    obs = observation_for(fam, StagedResult(key, result, store.get(result)))
    assert obs.evidence.entity == evidence_entity("crash.effect", "t1")
    assert obs.evidence.value["result_digest"] == result.digest
    ledger = SqliteLedger.open(tmp_path / "w.db")
    ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    r1 = ledger.commit(writer, ledger.head("w"), [*obs.facts, obs.evidence])
    ledger.complete_post_commit(r1)
    assert verify_completion(ledger.read_at(r1), key, result)
    other = store.put_bytes(b'{"op":"o","value":3}', "application/json")
    assert not verify_completion(ledger.read_at(r1), key, other)  # different result
    other_key = ActivityKey(world_id="w", kind="crash.effect", activity_id="t2")
    assert not verify_completion(ledger.read_at(r1), other_key, result)
    # A later tick that merely still contains the evidence does not observe it again ...
    r2 = ledger.commit(writer, r1, [ComponentWrite(obs.facts[0].entity, "noise", 1)])
    ledger.complete_post_commit(r2)
    assert not verify_completion(ledger.read_at(r2), key, result)
    # ... and evidence whose facts are incomplete is not completion evidence.
    fact = obs.facts[0]
    r3 = ledger.commit(
        writer, r2, [ComponentWrite(fact.entity, fact.component, None), obs.evidence]
    )
    assert not verify_completion(ledger.read_at(r3), key, result)
    assert COMPLETION_COMPONENT == obs.evidence.component
    assert [
        completion_mismatch(ledger.read_at(r), k, res)
        for r, k, res in ((r1, key, result), (r1, key, other), (r2, key, result), (r3, key, result))
    ] == [None, "wrong_binding", "not_written_in_tick", "fact_missing"]


def test_the_fact_set_digest_is_the_core_s_and_keeps_its_format(tmp_path: Path) -> None:
    """The Rust core computes the fact-set digest; its format is the one evidence committed
    before the move used (sorted [entity, component, value] triples, canonical JSON, SHA-256),
    so evidence already in a world still verifies after an upgrade."""
    fam = make_family(tmp_path)
    store = ArtifactStore(tmp_path / "a")
    key = ActivityKey(world_id="w", kind="crash.effect", activity_id="t1")
    result = store.put_bytes(b'{"op":"o","value":2.5}', "application/json")
    obs = observation_for(fam, StagedResult(key, result, store.get(result)))
    triples = sorted([w.entity, w.component, w.value] for w in obs.facts)
    assert obs.evidence.value["facts_digest"] == digest_of(canonical_json(triples))
    assert obs.evidence.value["facts"] == sorted([w.entity, w.component] for w in obs.facts)
    # Evidence whose listed facts were tampered with (same keys, another digest) is refused.
    ledger = SqliteLedger.open(tmp_path / "w.db")
    ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    forged = dict(obs.evidence.value, facts_digest=digest_of(b"[]"))
    r1 = ledger.commit(
        writer,
        ledger.head("w"),
        [*obs.facts, ComponentWrite(obs.evidence.entity, obs.evidence.component, forged)],
    )
    assert completion_mismatch(ledger.read_at(r1), key, result) == "facts_digest_mismatch"


def test_completion_mismatch_codes_are_listable_stable_snake_case() -> None:
    import re

    from tether.runtime import COMPLETION_MISMATCH_CODES

    assert len(set(COMPLETION_MISMATCH_CODES)) == len(COMPLETION_MISMATCH_CODES) == 6
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", c) for c in COMPLETION_MISMATCH_CODES)
    assert {"not_written_in_tick", "wrong_binding", "fact_missing", "facts_digest_mismatch"} <= set(
        COMPLETION_MISMATCH_CODES
    )


# Module globals a misbehaving family might reach from its projection.
class _ModuleAdapter:
    """An adapter held in a module global (never called: registration must refuse first)."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        raise AssertionError("unreachable")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        raise AssertionError("unreachable")


_GLOBAL_ADAPTER = _ModuleAdapter()
_GLOBAL_TABLE = {"task.intent": "k"}  # a module-level constant is fine


def _reaches_global_adapter(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    _GLOBAL_ADAPTER.reconcile  # noqa: B018 - reaching it is the point
    return []


def _helper_reaching_adapter() -> object:
    return _GLOBAL_ADAPTER


def _reaches_adapter_through_a_helper(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    _helper_reaching_adapter()
    return []


def _uses_constants_only(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [ActivityRequest("k", e, v) for e, v in snapshot.changed(next(iter(_GLOBAL_TABLE)))]


def test_projection_must_not_reach_a_handle_through_module_globals(tmp_path: Path) -> None:
    for bad in (_reaches_global_adapter, _reaches_adapter_through_a_helper):
        with pytest.raises(FamilyError, match="_GLOBAL_ADAPTER"):
            _family(bad, tmp_path)

    helper = _helper_reaching_adapter

    def closes_over_a_reaching_function(snapshot: WorldSnapshot) -> list[ActivityRequest]:
        helper()
        return []

    with pytest.raises(FamilyError, match="closure captures a function"):
        _family(closes_over_a_reaching_function, tmp_path)
    _family(_uses_constants_only, tmp_path)  # constants, classes and modules stay usable
