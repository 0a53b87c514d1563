"""`physical_ai.robot_move` moves past their `not_after_ms`: one never bound in the operations
journal is decided `expired` without a journal record (its inline result in the catalog is the
only one), after the store's clock floor is made durable at or past its `not_after_ms`; a move
the journal already holds (a cancel, an earlier attempt) is decided by the journal. Through the
runtime on the emulator (a real pty): not a byte is sent, not even to open the port."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import TARGETS
from tether.activities import ActivityKey, operation_id_for
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move import journal
from tether.families.robot_move.family import RobotMoveAdapter, intent
from tether.families.robot_move.journal import CLOCK_FLOOR, MoveStore
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest
from tether.runtime import Family, Host

from tests._hosts import HandClock as Clock
from tests._hosts import drain

KEY = ActivityKey("w", KIND_ABSOLUTE, "late-1")
OP = operation_id_for(KEY)


def late(not_after_ms: int | None = None) -> MoveRequest:
    at = int(time.time() * 1000) - 1 if not_after_ms is None else not_after_ms
    return MoveRequest.from_dict(
        {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS, "not_after_ms": at}
    )


def result_doc(host: Host, key: ActivityKey) -> dict[str, Any]:
    record = host.get(key)
    assert record is not None and record.result is not None and record.result.failed
    assert record.result.ref.startswith("inline:")  # small: carried in its reference
    doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
    assert isinstance(doc, dict)
    return doc


def test_an_expired_move_never_bound_is_decided_without_a_journal_record(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    request = late()
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("late-1", request)])
        assert drain(host) == 1
        doc = result_doc(host, KEY)
        assert (doc["outcome"], doc["code"]) == ("expired", "expired")
        assert doc["operation_id"] == OP
    assert emulator.journal == []  # not a byte: the port was never opened
    store = MoveStore(tmp_path / "data" / "robot_move")
    assert store.get(OP) is None and store.all() == []  # nothing bound, nothing journaled
    # The floor the decision stands on is durable, at or past the move's not_after_ms.
    floor = json.loads((store.root / CLOCK_FLOOR).read_bytes())["at_ms"]
    assert request.not_after_ms is not None and floor >= request.not_after_ms


def test_a_move_the_journal_holds_a_cancel_of_ends_cancelled_not_expired(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    request = late()
    adapter = family.adapter
    assert isinstance(adapter, RobotMoveAdapter)
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("late-1", request)])
        # The gRPC service's Cancel: binds the move in the journal with a `cancel` proof.
        answer = adapter._on_cancel(
            {"operation_id": OP, "request": {**request.as_dict(), "kind": KIND_ABSOLUTE}}
        )
        assert answer == {"started": False, "terminal": False, "running": False, "other": False}
        assert drain(host) == 1
        doc = result_doc(host, KEY)
        assert (doc["outcome"], doc["code"]) == ("cancelled", "cancelled")
    assert emulator.journal == []
    op = MoveStore(tmp_path / "data" / "robot_move").get(OP)
    assert op is not None and op.attempts() == [] and op.failed() is not None


def test_a_cancel_after_the_move_ended_on_the_device_says_it_is_terminal(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    request = late(int(time.time() * 1000) + 120_000)
    adapter = family.adapter
    assert isinstance(adapter, RobotMoveAdapter)
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("late-1", request)])
        assert drain(host) == 1  # moved, its result in the journal (and the catalog)
        answer = adapter._on_cancel(
            {"operation_id": OP, "request": {**request.as_dict(), "kind": KIND_ABSOLUTE}}
        )
        # Over, not "not started": the gRPC service answers ALREADY_TERMINAL, even while the
        # catalog has not recorded the result yet.
        assert answer == {"started": False, "terminal": True, "running": False, "other": False}
        record = host.get(KEY)
        assert record is not None and record.result is not None and not record.result.failed


def test_a_move_once_decided_expired_stays_expired_when_the_clock_steps_back(
    emulator: DynamixelEmulator,
    family: Family,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "data" / "robot_move"
    now = int(time.time() * 1000)
    request = late(now - 1)
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=Clock()) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("late-1", request)])
        assert drain(host) == 1
        assert result_doc(host, KEY)["code"] == "expired"
    # The wall clock steps back an hour: a fresh store (another process, a restart) still
    # decides by the floor, so a later or stale attempt of this move can never start it.
    monkeypatch.setattr(journal, "now_ms", lambda: now - 3_600_000)
    again = MoveStore(root)
    assert again.passed(now - 1) and not again.passed(now + 60_000)
    # Another process raised the floor meanwhile: a store that kept an older one reads it
    # again before it says a time has not passed.
    other = MoveStore(root)
    other.raise_clock_floor(now + 120_000)
    assert again.passed(now + 60_000)
    assert MoveStore(root).clock_floor_ms() >= now + 120_000


def test_a_raise_only_grows_the_floor_and_writes_only_when_it_must(tmp_path: Path) -> None:
    store = MoveStore(tmp_path / "moves")
    assert store.clock_floor_ms() == 0 and not (store.root / CLOCK_FLOOR).exists()
    first = store.raise_clock_floor(1_000)
    assert first >= 1_000  # it grows to the wall clock
    path = store.root / CLOCK_FLOOR
    written = path.stat().st_mtime_ns, path.read_bytes()
    assert store.raise_clock_floor(500) == first  # already past: nothing written
    assert (path.stat().st_mtime_ns, path.read_bytes()) == written
    later = first + 10_000_000
    assert store.raise_clock_floor(later) == later
    assert MoveStore(tmp_path / "moves").clock_floor_ms() == later


def test_a_reconcile_of_an_expired_move_never_bound_recovers_its_expired_result(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    clock = Clock()
    with Host(tmp_path / "data", [family], workers=0, observe=False, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", [intent("late-1", late())])
        # An execute attempt bound its operation id in the catalog, then died before its
        # adapter ran (or after it decided, before its result was recorded).
        claim = host.catalog.claim("dead-worker", 5_000)
        assert claim is not None and claim.record.key == KEY and claim.attempt.may_execute
        host.catalog.bind_provider_operation(KEY, claim.attempt.fence, OP)
        clock.now += 10_000  # its lease ran out: the next attempt may only reconcile
        assert drain(host) == 1
        record = host.get(KEY)
        assert record is not None and record.attempt_count == 2
        assert result_doc(host, KEY)["code"] == "expired"
    assert emulator.journal == []  # reconciled without reading the device
    assert MoveStore(tmp_path / "data" / "robot_move").get(OP) is None
