"""`Projector` alone, over the real catalog, ledger and artifacts of `tether.testing`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey
from tether.runtime import ProjectionConflict, Projector
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, ReceiptRejected, canonical_json


def _projector(env: ActivityEnvironment) -> Projector:
    return Projector(env.families, env.catalog, env.artifacts, env.ledger)


def _key(i: int) -> ActivityKey:
    return ActivityKey("w", KIND, f"task-{i:04d}")


def test_admits_each_request_from_the_exact_receipt_with_its_durable_input(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        r1 = env.commit_bare("w", intents(3))
        assert [env.get(_key(i)) for i in range(3)] == [None] * 3
        _projector(env).project(env.snapshot("w", r1))
        for i, write in enumerate(intents(3)):
            rec = env.get(_key(i))
            assert rec is not None and rec.source == r1 and rec.result is None
            data = env.artifacts.get_bytes(rec.input_ref, rec.input_digest)
            assert data == canonical_json(write.value)


def test_a_replay_for_the_same_receipt_changes_nothing(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        r1 = env.commit_bare("w", intents(2))
        projector = _projector(env)
        projector.project(env.snapshot("w", r1))
        before = [env.get(_key(i)) for i in range(2)]
        projector.project(env.snapshot("w", r1))
        assert [env.get(_key(i)) for i in range(2)] == before  # same versions too


def test_a_later_receipt_asking_again_is_that_activity_and_a_different_ask_fails_closed(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        projector = _projector(env)
        r1 = env.commit_bare("w", intents(1))
        projector.project(env.snapshot("w", r1))
        env.ledger.complete_post_commit(r1)
        admitted = env.get(_key(0))
        r2 = env.commit_bare("w", intents(1))  # the same intent, written again
        projector.project(env.snapshot("w", r2))
        assert env.get(_key(0)) == admitted  # its source binding stays r1
        env.ledger.complete_post_commit(r2)
        changed = ComponentWrite("task-0000", "task.intent", {"kind": KIND, "n": 99, "pad": 0})
        r3 = env.commit_bare("w", [changed])
        with pytest.raises(ProjectionConflict):
            projector.project(env.snapshot("w", r3))
        assert env.get(_key(0)) == admitted


def test_a_receipt_that_is_no_longer_the_head_admits_nothing(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        r1 = env.commit_bare("w", intents(2))
        env.ledger.complete_post_commit(r1)
        env.commit_bare("w", [])  # a later head
        with pytest.raises(ReceiptRejected) as err:
            _projector(env).project(env.snapshot("w", r1))
        assert err.value.code == "not_head"
        assert env.get(_key(0)) is None and env.get(_key(1)) is None


def test_admission_shares_the_catalog_with_other_threads_without_a_lock(tmp_path: Path) -> None:
    """The Host adds no lock around the catalog: admissions on one thread and claims on
    another go through the same `Catalog` object, and each Activity is claimed exactly once."""
    n = 40
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        r1 = env.commit_bare("w", intents(n))
        claimed: list[ActivityKey] = []
        errors: list[BaseException] = []
        done = threading.Event()

        def claim_all() -> None:
            try:
                while True:
                    finished = done.is_set()
                    claim = env.catalog.claim("other-thread", 60_000)
                    if claim is not None:
                        claimed.append(claim.record.key)
                    elif finished:
                        return
            except BaseException as e:  # surfaced below: a thread must not fail silently
                errors.append(e)

        t = threading.Thread(target=claim_all)
        t.start()
        try:
            _projector(env).project(env.snapshot("w", r1))
        finally:
            done.set()
            t.join()
        assert errors == []
        assert sorted(k.activity_id for k in claimed) == [_key(i).activity_id for i in range(n)]


def test_a_ticks_admissions_are_one_catalog_transaction(
    tmp_path: Path,
) -> None:
    """50 requests of one tick: one write transaction of the catalog (one sync), each
    admitted on its own by the core; the same requests at the next tick of the run change
    nothing (no write), and a changed one still fails closed."""
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "data") as env:
        env.create_world("w")
        store = env.catalog.store
        projector = _projector(env)
        r1 = env.commit_bare("w", intents(50))
        before = store.commits
        projector.project(env.snapshot("w", r1))
        assert store.commits == before + 1
        assert all(env.get(_key(i)) is not None for i in range(50))
        env.ledger.complete_post_commit(r1)
        r2 = env.commit_bare("w", [])
        projector.project(env.snapshot("w", r2))
        assert store.commits == before + 1
        env.ledger.complete_post_commit(r2)
        changed = ComponentWrite("task-0007", "task.intent", {"kind": KIND, "n": 99, "pad": 0})
        r3 = env.commit_bare("w", [changed])
        with pytest.raises(ProjectionConflict):
            projector.project(env.snapshot("w", r3))
        assert store.commits == before + 1
