"""`EntityProjection`: the required projector runs a per-entity projection on what each tick
wrote, with the admissions of the whole projection (over the real catalog and ledger)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, DedupAdapter, Journal, stage_task
from tether.activities import ActivityKey
from tether.runtime import (
    ActivityRequest,
    EntityProjection,
    EntityView,
    Family,
    FamilyError,
    ProjectionConflict,
)
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, WorldSnapshot

INTENT, DONE, NOISE = "task.intent", "task.done", "task.noise"


def ask(view: EntityView) -> list[ActivityRequest]:
    """One request per intent not yet done (pure: the entity only)."""
    if view.get(DONE) is not None:
        return []
    value = view.get(INTENT)
    if not isinstance(value, dict) or value.get("kind") != KIND:
        return []
    return [ActivityRequest(KIND, str(value.get("id", view.entity)), value)]


PER_ENTITY = EntityProjection(ask)


def whole(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    """The same projection as a plain function: the projector runs all of it every tick."""
    return PER_ENTITY(snapshot)


def _family(data_dir: Path, project: object) -> Family:
    data_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(data_dir / "provider.db")
    return Family("tasks", (KIND,), project, DedupAdapter(journal), stage_task)  # type: ignore[arg-type]


def _records(env: ActivityEnvironment, ids: set[str]) -> dict[str, tuple[int, str, int]]:
    out = {}
    for activity in sorted(ids):
        rec = env.get(ActivityKey("w", KIND, activity))
        if rec is not None:
            out[activity] = (rec.source.tick, rec.input_digest, rec.version)
    return out


def _random_tick(rng: random.Random, state: dict[str, str], n: int) -> list[ComponentWrite]:
    """New intents, done marks, deletes, identical rewrites and noise on random entities."""
    writes: dict[tuple[str, str], ComponentWrite] = {}

    def put(w: ComponentWrite) -> None:
        writes[(w.entity, w.component)] = w

    for _ in range(rng.randint(0, 4)):
        entity = f"e-{n}-{len(writes)}"
        state[entity] = "pending"
        put(ComponentWrite(entity, INTENT, {"kind": KIND, "n": n}))
    entities = sorted(state)
    for entity in rng.sample(entities, min(len(entities), rng.randint(0, 3))):
        if (entity, INTENT) in writes:
            continue
        move = rng.choice(("done", "noise", "rewrite", "drop_noise", "delete"))
        if move == "done" and state[entity] == "pending":
            state[entity] = "done"
            put(ComponentWrite(entity, DONE, True))
        elif move == "noise":
            put(ComponentWrite(entity, NOISE, rng.randint(0, 9)))
        elif move == "drop_noise":
            put(ComponentWrite(entity, NOISE, None))
        elif move == "rewrite" and state[entity] == "pending":
            put(ComponentWrite(entity, INTENT, {"kind": KIND, "n": int(entity.split("-")[1])}))
        elif move == "delete" and state[entity] == "done":
            put(ComponentWrite(entity, INTENT, None))
            put(ComponentWrite(entity, DONE, None))
            del state[entity]
    return list(writes.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_tick_admits_what_the_whole_projection_admits(tmp_path: Path, seed: int) -> None:
    """60 random ticks in two Hosts, one projecting per entity, one the whole world: after
    every tick the catalogs hold the same records (source tick, input, version), while the
    per-entity one ran the projection on what each tick wrote only."""
    rng = random.Random(seed)
    state: dict[str, str] = {}
    with (
        make_env([_family(tmp_path / "a", PER_ENTITY)], data_dir=tmp_path / "a") as inc,
        make_env([_family(tmp_path / "b", whole)], data_dir=tmp_path / "b") as full,
    ):
        inc.create_world("w")
        full.create_world("w")
        seen: set[str] = set()
        written = 0
        for n in range(60):
            writes = _random_tick(rng, state, n)
            seen |= {w.entity for w in writes}
            written += len({w.entity for w in writes})
            inc.commit_tick("w", writes)
            full.commit_tick("w", writes)
            assert _records(inc, seen) == _records(full, seen), f"tick {n}"
        projector = inc.host.ticker.projector
        assert _records(inc, seen)  # something was admitted
        # The genesis tick is projected whole; after it only what each tick wrote.
        assert projector.whole_projections == 1
        assert projector.entities_projected == written


def test_after_a_failed_projection_or_a_gap_the_whole_world_is_projected(tmp_path: Path) -> None:
    """A receipt that is not the next tick of the last one projected here (a gap), or one
    projected after a failure, is projected whole: what an entity asked for is never taken
    from a tick whose admissions did not all land."""
    with make_env([_family(tmp_path, PER_ENTITY)], data_dir=tmp_path) as env:
        env.create_world("w")
        projector = env.host.ticker.projector
        env.commit_tick("w", [ComponentWrite("a", INTENT, {"kind": KIND})])
        assert projector.whole_projections == 1
        # Two ticks committed without their post-commit work being run here: the next
        # projected receipt is two ticks past the last one projected.
        r1 = env.commit_bare("w", [ComponentWrite("b", INTENT, {"kind": KIND})])
        env.host.ticker.post_commit(r1)
        assert projector.whole_projections == 1  # r1 is the next tick
        env.ledger.complete_post_commit(r1)
        r2 = env.commit_bare("w", [ComponentWrite("c", INTENT, {"kind": KIND})])
        env.ledger.complete_post_commit(r2)  # its projection skipped (as if lost)
        env.commit_tick("w", [ComponentWrite("d", INTENT, {"kind": KIND})])
        assert projector.whole_projections == 2
        assert env.get(ActivityKey("w", KIND, "c")) is not None  # the gap's intent admitted
        # A failed projection (a conflicting ask: the tick's work stays owed) keeps nothing:
        # the retry of the same receipt, the next tick of the last one kept otherwise, is
        # projected whole.
        with pytest.raises(ProjectionConflict):
            env.commit_tick("w", [ComponentWrite("a", INTENT, {"kind": KIND, "x": 1})])
        assert projector.whole_projections == 2  # tried on the tick's changes
        with pytest.raises(ProjectionConflict):
            env.host.ticker.finish_post_commit("w")
        assert projector.whole_projections == 3


def test_two_entities_asking_for_one_key_fail_as_in_the_whole_projection(tmp_path: Path) -> None:
    """An entity written later asking for a key an unchanged entity asks for fails closed
    (`FamilyError`), as the whole projection's duplicate check does."""
    with make_env([_family(tmp_path, PER_ENTITY)], data_dir=tmp_path) as env:
        env.create_world("w")
        env.commit_tick("w", [ComponentWrite("a", INTENT, {"kind": KIND, "id": "same"})])
        with pytest.raises(FamilyError, match="twice"):
            env.commit_tick("w", [ComponentWrite("b", INTENT, {"kind": KIND, "id": "same"})])
        with pytest.raises(FamilyError, match="twice"):  # the whole projection agrees
            env.families[0].run_projection(env.snapshot("w"))


def test_an_entity_projection_is_checked_for_purity_like_a_projection(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")

    def leaky(view: EntityView) -> list[ActivityRequest]:
        journal.lookup(view.entity)
        return []

    with pytest.raises(FamilyError, match="pure"):
        Family("tasks", (KIND,), EntityProjection(leaky), DedupAdapter(journal), stage_task)
