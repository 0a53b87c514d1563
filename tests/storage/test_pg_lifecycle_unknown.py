"""A lost COMMIT of a world lifecycle call on PostgreSQL is resolved by re-reading, not raised.

The loopback proxy (`pgproxy.CommitCutter`) drops the call's COMMIT (the server rolls back) or
only its reply (the server committed). Either way the caller gets the call's outcome, exactly
once: a lifecycle call that landed is found by what only it could have written and is not
repeated; one that did not land is decided and committed once more. Only a call lost again on
its retry is `LedgerCommitUnknown`, and it changed nothing.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tether.errors import LedgerCommitUnknown, StaleWriter
from tether.runtime import Host
from tether.world import ComponentWrite, Writer, open_ledger
from tether.world._postgres import PostgresLedger

from tests.activities.support import ManualClock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from journal_provider import intents, make_family
from pgproxy import CommitCutter

MODES = [("drop_commit", False), ("drop_reply", True)]


@pytest.fixture
def cutter(pg_url: str) -> Iterator[CommitCutter]:
    proxy = CommitCutter(pg_url)
    yield proxy
    proxy.close()


@pytest.fixture
def ledger(cutter: CommitCutter) -> Iterator[PostgresLedger]:
    impl = open_ledger(cutter.url)
    assert isinstance(impl, PostgresLedger)
    yield impl
    impl.close()


def _count(pg_url: str, sql: str, *args: object) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()  # type: ignore[call-overload]
    assert row is not None
    return int(row[0])


def _reread(caplog: pytest.LogCaptureFixture, what: str, landed: bool) -> bool:
    """Whether the ledger logged that it re-read a lost COMMIT of ``what`` and what it found:
    proof the cut hit the lifecycle COMMIT itself, not a read's."""
    found = "re-read: landed" if landed else "re-read: not landed"
    return any(r.message.startswith(f"{what}: ") and found in r.message for r in caplog.records)


def _world(ledger: PostgresLedger, world: str = "w") -> Any:
    genesis = ledger.create_world(world)
    writer = ledger.acquire_writer(world)
    r1 = ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)])
    ledger.complete_post_commit(r1)
    return writer, r1


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_world_creation_returns_the_one_world_it_made(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    pg_url: str,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    cutter.arm(mode)
    receipt = ledger.create_world("w")
    assert cutter.cuts == 1 and _reread(caplog, "world creation", landed)
    assert ledger.head("w") == receipt and ledger.worlds() == ["w"]
    # Exactly one genesis: the landed creation was not repeated, the lost one was redone once.
    assert _count(pg_url, "SELECT count(*) FROM ticks WHERE world_id = 'w'") == 1
    assert _count(pg_url, "SELECT count(*) FROM visibility WHERE world_id = 'w'") == 1
    ledger.check_receipt(receipt)


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_fork_returns_the_fork_with_the_source_state(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    pg_url: str,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    _, head = _world(ledger)
    cutter.arm(mode, skip=2)  # the receipt check's and the snapshot read's COMMITs pass
    fork = ledger.fork(head, "f")
    assert cutter.cuts == 1 and _reread(caplog, "fork", landed)
    assert ledger.head("f") == fork and fork.tick == 0
    assert ledger.read_at(fork).get("e", "c") == 1
    assert _count(pg_url, "SELECT count(*) FROM ticks WHERE world_id = 'f'") == 1
    assert _count(pg_url, "SELECT count(*) FROM components WHERE world_id = 'f'") == 1


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_new_run_returns_the_one_run_it_began(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    pg_url: str,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    writer, old = _world(ledger)
    cutter.arm(mode)
    run = ledger.start_run(writer)
    assert cutter.cuts == 1 and _reread(caplog, "new run", landed)
    assert ledger.head("w") == run and run.tick == 0 and run.run_id != old.run_id
    runs = "SELECT count(DISTINCT run_id) FROM ticks WHERE world_id = 'w'"
    assert _count(pg_url, runs) == 2  # the first run and exactly one new one
    assert ledger.commit(writer, run, [ComponentWrite("e", "c", 2)]).tick == 1


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_writer_acquisition_is_acquired_again_and_fences_the_lost_one(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    old, head = _world(ledger)
    cutter.arm(mode)
    writer = ledger.acquire_writer("w")
    assert cutter.cuts == 1
    assert any("acquiring again" in r.message for r in caplog.records)
    # A lost acquisition that landed took epoch +1; the one acquired again is newer still.
    assert writer.epoch == old.epoch + (2 if landed else 1)
    # The earlier writer is fenced, and so is the lost acquisition where it landed (one that
    # did not land never held its epoch: the acquisition again took that number).
    for fenced in {old.epoch, writer.epoch - 1}:
        with pytest.raises(StaleWriter):
            ledger.commit(Writer("w", fenced), head, [])
    assert ledger.commit(writer, head, [ComponentWrite("e", "c", 2)]).tick == 2


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_post_commit_mark_is_found_or_made_once(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    writer, head = _world(ledger)
    r2 = ledger.commit(writer, head, [ComponentWrite("e", "c", 2)])
    assert ledger.pending_post_commit("w") == r2
    cutter.arm(mode, skip=1)  # the receipt check's COMMIT passes
    ledger.complete_post_commit(r2)
    assert cutter.cuts == 1 and _reread(caplog, "post-commit mark", landed)
    assert ledger.pending_post_commit("w") is None


@pytest.mark.parametrize("sticky", [False, True])
@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_close_reservation_and_rollback_end_in_the_state_asked_for(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    mode: str,
    landed: bool,
    sticky: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    _world(ledger)
    cutter.arm(mode)
    ledger.reserve_close("w", sticky=sticky)
    assert cutter.cuts == 1 and _reread(caplog, "close reservation", landed)
    assert ledger.close_state("w") == ("closing", sticky)
    caplog.clear()
    cutter.arm(mode)
    ledger.rollback_close("w")
    assert cutter.cuts == 2
    # A sticky reservation stays: the rollback writes the state unchanged, and finds it so.
    assert _reread(caplog, "close rollback", landed or sticky)
    assert ledger.close_state("w") == (("closing", True) if sticky else ("open", False))


@pytest.mark.parametrize(("mode", "landed"), MODES)
def test_a_lost_destroy_is_found_or_made_once(
    ledger: PostgresLedger,
    cutter: CommitCutter,
    pg_url: str,
    mode: str,
    landed: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "tether.world.postgres")
    _, head = _world(ledger)
    ledger.reserve_close("w", sticky=False)
    cutter.arm(mode)
    ledger.destroy("w", head)  # a landed destroy is not refused as "no such world"
    assert cutter.cuts == 1 and _reread(caplog, "destroy", landed)
    assert ledger.worlds() == [] and ledger.close_state("w") == ("destroyed", False)
    assert _count(pg_url, "SELECT count(*) FROM ticks WHERE world_id = 'w'") == 0


def test_a_call_lost_on_its_retry_too_is_unknown_and_changed_nothing(
    ledger: PostgresLedger, cutter: CommitCutter, pg_url: str
) -> None:
    cutter.arm("drop_commit", times=2)
    with pytest.raises(LedgerCommitUnknown, match="lost 2 times"):
        ledger.create_world("w")
    assert cutter.cuts == 2 and ledger.worlds() == []
    assert _count(pg_url, "SELECT count(*) FROM ticks WHERE world_id = 'w'") == 0
    assert ledger.create_world("w") == ledger.head("w")  # nothing half-made is in the way
    cutter.arm("drop_commit", times=2)
    with pytest.raises(LedgerCommitUnknown, match="lost 2 times"):
        ledger.acquire_writer("w")


def test_a_failed_reread_leaves_the_outcome_unknown(
    ledger: PostgresLedger, cutter: CommitCutter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.errors import WorldError

    def unreachable(receipt: object) -> bool:
        raise WorldError("world read failed at the server: connection refused")

    monkeypatch.setattr(ledger, "_genesis_stored", unreachable)
    cutter.arm("drop_reply")
    with pytest.raises(LedgerCommitUnknown, match="the re-read of the world creation failed"):
        ledger.create_world("w")


def _host(tmp_path: Path, pg_url: str, cutter: CommitCutter) -> Host:
    return Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=0,
        observe=False,
        clock=ManualClock(),
        catalog_url=pg_url,
        world_url=cutter.url,
    )


@pytest.mark.parametrize("mode", ["drop_commit", "drop_reply"])
def test_every_lost_ledger_commit_of_a_host_lifecycle_is_resolved(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, mode: str
) -> None:
    """The k-th ledger COMMIT of create, tick, fork and destroy through a Host is cut (a
    sample of k by default, every k with TETHER_SLOW=1): each call still returns its outcome
    and the worlds end exactly as an uncut run leaves them."""
    from tests.storage.test_pg_commit_unknown import _sweep

    with _host(tmp_path, pg_url, cutter) as host:

        def step(n: int, arm: Callable[[], None]) -> None:
            arm()
            created = host.create_world(f"w{n}")
            assert host.head(f"w{n}") == created
            tick = host.commit_tick(f"w{n}", [ComponentWrite("e", "c", n)])
            fork = host.fork_world(f"w{n}", f"f{n}")
            assert host.ledger.read_at(fork).get("e", "c") == n
            host.destroy_world(f"w{n}")
            assert f"w{n}" not in host.ledger.worlds() and f"f{n}" in host.ledger.worlds()
            assert host.head(f"f{n}") == fork and tick.tick == 1
            host.commit_tick(f"f{n}", intents(1, prefix=f"f{n}"))  # the fork's writer works
            for world, ticks in ((f"w{n}", 0), (f"f{n}", 2)):
                sql = "SELECT count(*) FROM ticks WHERE world_id = %s"
                assert _count(pg_url, sql, world) == ticks

        commits = _sweep(cutter, mode, step)
        assert commits >= 6
