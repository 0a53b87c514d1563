"""`Settler` alone, over the real catalog and ledger of `tether.testing`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey
from tether.runtime import Observation, Settler
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, ReceiptRejected


def _key(i: int) -> ActivityKey:
    return ActivityKey("w", KIND, f"task-{i:04d}")


def _observed(env: ActivityEnvironment, n: int) -> list[Observation]:
    """n Activities with recorded results, their observations staged (nothing committed)."""
    env.create_world("w")
    env.commit_tick("w", intents(n))
    assert env.drain() == n
    assert env.restage() == n
    return env.host.stager.observations_for("w")


def _writes(obs: list[Observation]) -> list[ComponentWrite]:
    return [w for o in obs for w in (*o.facts, o.evidence)]


def test_settles_exactly_what_this_tick_committed_complete_evidence_for(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        obs = _observed(env, 2)
        r2 = env.commit_bare("w", _writes(obs[:1]))
        Settler(env.catalog, env.ledger).settle(env.snapshot("w", r2))
        first, second = env.get(_key(0)), env.get(_key(1))
        assert first is not None and first.settlement is not None
        assert first.settlement.receipt == r2
        assert second is not None and second.result is not None and second.settlement is None


def test_the_records_of_its_own_ticks_observations_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        obs = _observed(env, 2)
        r2 = env.commit_bare("w", _writes(obs))
        real = env.catalog.get
        reads: list[ActivityKey] = []

        def counted(key: ActivityKey) -> object:
            reads.append(key)
            return real(key)

        monkeypatch.setattr(env.catalog, "get", counted)
        # The tick's own observation of task 0 was read pending under the world lock by
        # whoever committed it: given, it is not read again; task 1's evidence is.
        Settler(env.catalog, env.ledger).settle(env.snapshot("w", r2), {obs[0].key: obs[0].result})
        assert reads == [_key(1)]
        monkeypatch.undo()
        assert all(env.get(_key(i)).settlement.receipt == r2 for i in range(2))  # type: ignore[union-attr]


def test_a_repeat_is_a_no_op(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        obs = _observed(env, 1)
        r2 = env.commit_bare("w", _writes(obs))
        settler = Settler(env.catalog, env.ledger)
        settler.settle(env.snapshot("w", r2))
        once = env.get(_key(0))
        settler.settle(env.snapshot("w", r2))
        assert env.get(_key(0)) == once and once is not None and once.settlement is not None


def test_incomplete_evidence_settles_nothing(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        [obs] = _observed(env, 1)
        r2 = env.commit_bare("w", [obs.evidence])  # the evidence without its facts
        Settler(env.catalog, env.ledger).settle(env.snapshot("w", r2))
        rec = env.get(_key(0))
        assert rec is not None and rec.result is not None and rec.settlement is None


def test_evidence_of_an_earlier_tick_is_not_settled_by_a_later_one(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        obs = _observed(env, 1)
        r2 = env.commit_bare("w", _writes(obs))
        env.ledger.complete_post_commit(r2)  # its settlement was "lost"
        r3 = env.commit_bare("w", [ComponentWrite("x", "y", 1)])
        Settler(env.catalog, env.ledger).settle(env.snapshot("w", r3))
        rec = env.get(_key(0))
        assert rec is not None and rec.settlement is None  # only r2 could settle it


def test_a_receipt_that_is_no_longer_the_head_settles_nothing(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        obs = _observed(env, 1)
        r2 = env.commit_bare("w", _writes(obs))
        env.ledger.complete_post_commit(r2)
        env.commit_bare("w", [])
        with pytest.raises(ReceiptRejected) as err:
            Settler(env.catalog, env.ledger).settle(env.snapshot("w", r2))
        assert err.value.code == "not_head"
        rec = env.get(_key(0))
        assert rec is not None and rec.settlement is None
