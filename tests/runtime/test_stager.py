"""`ObservationStager` alone, over the real catalog and artifacts of `tether.testing`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hosttools import make_env, take_payload
from journal_provider import (
    BLIND_KIND,
    KIND,
    BlindAdapter,
    Journal,
    intents,
    make_blind_family,
    make_family,
)
from tether.activities import ABANDONED_MEDIA_TYPE, ActivityKey, Decision, ResultRef
from tether.runtime import AttemptContext, ObservationStager, Settler, StagedResult
from tether.runtime._stager import SCAN_FROM
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite


def _key(i: int, kind: str = KIND) -> ActivityKey:
    return ActivityKey("w", kind, f"task-{i:04d}")


def _stager(env: ActivityEnvironment, *, page_size: int = 256) -> ObservationStager:
    return ObservationStager(
        env.families, env.catalog, env.artifacts, env.ledger, page_size=page_size
    )


def _completed(env: ActivityEnvironment, n: int, **kw: int) -> None:
    env.create_world("w")
    env.commit_tick("w", intents(n, **kw))
    assert env.drain() == n


def test_restage_pages_every_completed_result_to_exhaustion(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        _completed(env, 7)
        stager = _stager(env, page_size=2)
        assert stager.restage() == 7
        obs = stager.observations_for("w")
        assert [o.key for o in obs] == [_key(i) for i in range(7)]
        for o in obs:
            rec = env.get(o.key)
            assert rec is not None and o.result == rec.result
        assert stager.staged_worlds() == ["w"] and stager.observations_for("v") == []
        assert stager.restage() == 7 and len(stager.staged()) == 7  # idempotent


def test_a_missing_payload_leaves_only_that_result_pending(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        _completed(env, 3, pad=1000)  # above the inline bound: artifact files
        gone = env.get(_key(1))
        assert gone is not None and gone.result is not None
        hexdigest = gone.result.ref.rsplit("/", 1)[1]
        take_payload(env.data_dir, hexdigest)
        stager = _stager(env)
        assert stager.restage() == 2
        assert [o.key for o in stager.staged()] == [_key(0), _key(2)]
        assert _key(1) in [r.key for r in env.pending_observation()]


def test_a_family_whose_staging_raises_does_not_stall_the_others(tmp_path: Path) -> None:
    good = make_family(tmp_path)

    def broken(staged: StagedResult) -> list[ComponentWrite]:
        raise RuntimeError("a staging bug")

    bad = make_family(tmp_path, name="broken", kinds=("crash.broken",))
    bad = dataclasses.replace(bad, stage=broken)
    with make_env([good, bad], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(2) + intents(2, kind="crash.broken", prefix="b"))
        assert env.drain() == 4
        stager = _stager(env)
        assert stager.restage() == 2
        assert {o.key.kind for o in stager.staged()} == {KIND}
        assert len(env.pending_observation()) == 4  # nothing lost: the broken two wait


def test_an_observation_settled_meanwhile_is_dropped(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        _completed(env, 2)
        stager = _stager(env)
        assert stager.restage() == 2
        [receipt] = env.observe()  # the environment's own Host observes and settles both
        assert all(env.get(_key(i)).settlement.receipt == receipt for i in range(2))  # type: ignore[union-attr]
        assert stager.observations_for("w") == [] and stager.staged() == []


def test_many_staged_observations_are_checked_against_one_read_of_the_pending_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = SCAN_FROM + 4
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        _completed(env, n)
        stager = _stager(env)
        assert stager.restage() == n
        # Another stager's tick observes and settles the first four meanwhile.
        other = _stager(env)
        assert other.restage() == n
        first = [o for o in other.staged() if o.key in {_key(i) for i in range(4)}]
        r = env.commit_bare("w", [w for o in first for w in (*o.facts, o.evidence)])
        Settler(env.catalog, env.ledger).settle(env.snapshot("w", r))
        assert all(env.get(_key(i)).settlement is not None for i in range(4))  # type: ignore[union-attr]
        reads: list[ActivityKey] = []
        real = env.catalog.get

        def counted(key: ActivityKey) -> object:
            reads.append(key)
            return real(key)

        monkeypatch.setattr(env.catalog, "get", counted)
        live = stager.observations_for("w")
        assert reads == []  # one paged read of the world's pending set, no read per record
        assert sorted(o.key.activity_id for o in live) == [f"task-{i:04d}" for i in range(4, n)]
        assert len(stager.staged()) == n - 4  # the settled four were dropped


def test_committed_forgets_only_the_identical_observation(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        _completed(env, 1)
        stager = _stager(env)
        stager.restage()
        [old] = stager.staged()
        stager.restage()  # staged already from the same result: kept as it is
        assert stager.staged()[0] is old
        stager.committed([old])
        stager.restage()  # a newer staging of the same key (its tick's settlement pending)
        [new] = stager.staged()
        assert new is not old and new == old
        stager.committed([old])
        assert stager.staged() == [new]
        stager.committed([new])
        assert stager.staged() == []


class _DiesBlind(BlindAdapter):
    """Performs the blind effect, then dies before returning: only reconcile (Unknown) is left."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        super().execute(ctx, request)
        raise RuntimeError("died after the effect")


def test_an_abandoned_result_is_staged_with_an_empty_payload(tmp_path: Path) -> None:
    blind = make_blind_family(tmp_path)
    family = dataclasses.replace(blind, adapter=_DiesBlind(Journal(tmp_path / "provider.db")))
    with make_env([family], data_dir=tmp_path / "d") as env:
        env.create_world("w")
        env.commit_tick("w", intents(1, kind=BLIND_KIND))
        env.run_attempt()  # executes blind, then dies
        env.clock.advance(env.lease_ms)
        parked = env.run_attempt()  # reconcile: Unknown
        assert parked is not None and parked.awaiting_decision
        key = _key(0, BLIND_KIND)
        env.catalog.resolve(
            key, Decision.abandon(evidence_revision=parked.evidence_revision, operator="op")
        )
        rec = env.get(key)
        assert rec is not None and rec.result is not None and rec.result.failed
        assert rec.result.media_type == ABANDONED_MEDIA_TYPE
        stager = _stager(env)
        assert stager.restage() == 1
        [obs] = stager.staged()
        assert obs.result == rec.result
        assert obs.facts[0].value == {
            "failed": True,
            "media_type": ABANDONED_MEDIA_TYPE,
            "kind": BLIND_KIND,
        }
