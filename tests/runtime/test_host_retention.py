"""Retention through the real Host: a compacted Activity is never admitted, claimed, executed or
restaged again, whatever later projections ask for, and the lifecycle gate still holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hosttools import Clock, akey, drain, make_host
from journal_provider import KIND, Journal, intents
from tether.activities import ActivityKey, operation_id_for
from tether.runtime import ProjectionConflict
from tether.world import ComponentWrite


def test_a_later_projection_never_admits_a_pruned_key_again(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    with make_host(tmp_path, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", intents(2))
        assert drain(host) == 2
        host.observe_once()
        assert not host.catalog.has_unsettled("w")
        clock.now += 31 * 24 * 3600 * 1000
        assert host.catalog.compact_settled(30 * 24 * 3600 * 1000) == 2
        pruned = [host.get(akey(i)) for i in range(2)]
        assert all(r is not None and r.compacted for r in pruned)

        # The same intents written again: the projection asks for both keys, the core finds
        # them compacted with the same input digest, and nothing is admitted or run.
        host.commit_tick("w", intents(2))
        assert [host.get(akey(i)) for i in range(2)] == pruned
        assert drain(host) == 0
        assert host.observe_once() == []
        assert not host.catalog.has_unsettled("w")
        assert journal.effects() == {operation_id_for(akey(i)): 1 for i in range(2)}
        assert [m for _, m, _ in journal.calls()] == ["execute", "execute"]

        # A fork is allowed: nothing of the world is unsettled.
        host.fork_world("w", "w-fork")

        # Another input under a pruned key fails closed, and the record is unchanged.
        changed = {"kind": KIND, "n": 99, "pad": 0}
        with pytest.raises(ProjectionConflict):
            host.commit_tick("w", [ComponentWrite("task-0000", "task.intent", changed)])
        assert host.ledger.pending_post_commit("w") is not None
        assert [host.get(akey(i)) for i in range(2)] == pruned


def test_a_restarted_host_restages_and_claims_nothing_of_a_pruned_world(tmp_path: Path) -> None:
    clock = Clock()
    with make_host(tmp_path, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", intents(3))
        assert drain(host) == 3
        host.observe_once()
        host.commit_tick("w", intents(1, prefix="late"))  # admitted, never run
        assert host.catalog.compact_settled(0) == 3
    with make_host(tmp_path, clock=clock) as host:
        host.recover()
        assert host.restage() == 0
        assert drain(host) == 1  # only the unsettled one
        host.observe_once()
        for i in range(3):
            rec = host.get(akey(i))
            assert rec is not None and rec.compacted and rec.settlement is not None
        late = host.get(ActivityKey("w", KIND, "late-0000"))
        assert late is not None and late.settlement is not None and not late.compacted
