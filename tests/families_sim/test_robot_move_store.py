"""The robot-move records in the operations journal: one journal operation per move, guards as
proofs, results inline in the result pointer, and an old-layout store refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tether.errors import JournalError
from tether.families.robot_move.journal import MoveStore, StoreConflict
from tether.families.robot_move.request import KIND_ABSOLUTE, ConfirmedAbsent, MoveRequest
from tether.operations import Journal

REQUEST = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": {"a": 0.1}})


def test_a_move_is_one_journal_operation(tmp_path: Path) -> None:
    store = MoveStore(tmp_path)
    op = store.bind("robot_move:1", REQUEST)
    entry = Journal(tmp_path).get("robot_move:1")
    assert entry is not None and entry.device == "arm" and entry.request == REQUEST.as_dict()
    op.start_attempt(1, {"fence": 1})
    with pytest.raises(StoreConflict):
        op.start_attempt(2, {})  # no guard for attempt 2
    guard = op.record_absent(ConfirmedAbsent({"reason": "nothing_sent"}))
    assert guard["for_attempt"] == 2 and entry.proofs() == ["guard-2"]
    assert op.record_absent(ConfirmedAbsent({"reason": "other"})) == guard  # reused after a crash
    op.start_attempt(2, {})
    result = op.record_result({"outcome": "completed"})
    assert op.result() == result and op.status() == "done" and entry.state == "published"
    assert op.record_result({"outcome": "completed"}) == result
    with pytest.raises(StoreConflict):
        op.record_result({"outcome": "other"})
    op.record_failed({"outcome": "abandoned"})  # a published result stands
    assert op.failed() is None
    with pytest.raises(StoreConflict):
        store.bind("robot_move:1", MoveRequest.from_dict({**REQUEST.as_dict(), "robot": "b"}))


def test_the_fence_floor_is_set_once(tmp_path: Path) -> None:
    op = MoveStore(tmp_path).bind("robot_move:1", REQUEST)
    assert op.fence_floor() == 0
    assert op.raise_fence_floor(5) == 5
    assert op.raise_fence_floor(3) == 5


def test_a_store_of_the_old_layout_is_refused_with_what_to_do(tmp_path: Path) -> None:
    old = tmp_path / "robot_move_abc"
    old.mkdir()
    (old / "operation.json").write_text("{}")
    with pytest.raises(JournalError) as err:
        MoveStore(tmp_path).all()
    assert err.value.code == "old_layout"
    assert "move the directory aside" in err.value.message
    assert (old / "operation.json").read_text() == "{}"  # nothing touched


@pytest.mark.parametrize(
    ("bad", "code"),
    [("..", "bad_operation_id"), (".", "bad_operation_id"), ("../../etc", "unknown_activity")],
)
def test_operator_show_refuses_an_id_that_would_name_a_path(
    tmp_path: Path, bad: str, code: str
) -> None:
    """An operation id is validated before anything is looked up; a key-shaped id is only ever
    a catalog key (never a path)."""
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n[ports.bus]\nurl = "loop://"\n'
        '[robots.arm]\nport = "bus"\n[[robots.arm.joints]]\nname = "a"\nid = 1\n'
        "min = -1\nmax = 1\n"
    )
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "evidence-1.json").write_text(json.dumps({"secret": 1}))
    done = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "--config", str(config), "show", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "secret" not in done.stdout
    assert json.loads(done.stdout)["code"] == code
    assert "Traceback" not in done.stderr
