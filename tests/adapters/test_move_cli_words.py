"""`tether move`'s outcome in words on a terminal: each fact once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.dynamixel.worker import _say_text


def test_a_refused_move_names_its_code_once(capsys: pytest.CaptureFixture[str]) -> None:
    _say_text(
        {
            "key": "local/physical_ai.robot_move.relative/r1",
            "status": "failed",
            "outcome": "refused",
            "code": "limit_violation",
            "error": "limit_violation: joint a would reach +2.0 rad, outside [-1.5, +1.5] rad",
        }
    )
    out, said = capsys.readouterr()
    assert out == "", out  # a refusal: its line is on stderr, as every refusal's
    assert said.count("limit_violation") == 1, said
    assert said.startswith("local/physical_ai.robot_move.relative/r1: failed (refused): ")


def test_an_uncoded_error_still_names_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    _say_text({"key": "k", "status": "failed", "outcome": "failed", "code": "x", "error": "boom"})
    assert capsys.readouterr().out == "k: failed (failed): x: boom\n"


def test_status_counts_say_what_concluded_and_what_is_settled() -> None:
    from tether.serve.status import _counts_line

    line = _counts_line(
        {"pending": 1, "running": 2, "awaiting_decision": 0, "done": 0, "failed": 0, "settled": 6}
    )
    assert line == (
        "activities: pending 1, running 2, awaiting a decision 0; concluded, not yet settled:"
        " done 0, failed 0; settled 6"
    )


def test_a_move_concluded_earlier_says_it_was_not_run_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _say_text(
        {"key": "k", "status": "done", "conclusion": "executed", "attempts": 1, "earlier": True}
    )
    assert capsys.readouterr().out == (
        "k: done (executed) after 1 attempt (concluded earlier: not run again)\n"
    )


def test_operator_show_never_calls_an_unsent_target_staged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.operator.cli import _print

    doc = {
        "key": "local/physical_ai.robot_move.absolute/L1",
        "operation_id": "op",
        "revision": 1,
        "evidence_age_ms": 10,
        "device_state_age_ms": 10,
        "reason": "stopped_by_operator",
        "evidence": {"staged": {"shoulder": 0.0}, "sent": [], "read_back": {"joints": {}}},
    }
    _print(doc, False)
    said = capsys.readouterr().out
    assert "staged target" not in said
    assert "the move's target shoulder: +0.0000 rad (nothing of it was sent)" in said


def test_operator_show_says_where_the_arm_was_before_the_move_and_how_fast_it_went(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.operator.cli import _print

    pre = {
        "read_back": {"joints": {"shoulder": {"position_rad": -0.9081}}},
        "profile_speed_rad_s": 1.4914,
        "first_motion": True,
    }
    doc = {
        "key": "local/physical_ai.robot_move.absolute/L2",
        "operation_id": "op",
        "revision": 1,
        "evidence_age_ms": 10,
        "device_state_age_ms": 10,
        "reason": "device_state_lost_or_moved",
        "evidence": {
            "staged": {"shoulder": 0.2},
            "sent": [{"instruction": "reg_write", "id": 1, "t_ms": 0}],
            "read_back": {"joints": {}},
            "preimage": pre,
        },
    }
    _print(doc, False)
    said = capsys.readouterr().out
    assert "before the move shoulder: at -0.9081 rad" in said
    assert "the move's speed: 1.491 rad/s, a first motion" in said
    assert "the move's target shoulder: +0.2000 rad\n" in said


@pytest.mark.parametrize("recorded", [True, False])
def test_operator_show_of_a_move_whose_device_could_not_be_read_says_so(
    capsys: pytest.CaptureFixture[str], recorded: bool
) -> None:
    """`device_unreadable` evidence (`unreadable_evidence`: no read-back, and only whether the
    attempt recorded a pre-image) is shown in words, never a traceback (exit 70)."""
    from tether.operator.cli import _print

    doc = {
        "key": "local/physical_ai.robot_move.absolute/U1",
        "operation_id": "op",
        "revision": 1,
        "evidence_age_ms": 10,
        "device_state_age_ms": None,
        "reason": "device_unreadable",
        "evidence": {
            "operation_id": "op",
            "reason": "device_unreadable",
            "error": "open_failed: /dev/pts/9: No such file or directory",
            "command": {"robot": "arm", "targets": {"shoulder": 0.2}},
            "retry_class": "repeatable",
            "sent": [{"instruction": "reg_write", "id": 1, "t_ms": 0}],
            "preimage": recorded,
            "read_back": None,
            "hardware_errors": {},
        },
    }
    _print(doc, False)
    said = capsys.readouterr().out
    assert "device not read" in said and "error: open_failed: /dev/pts/9" in said
    assert f"a pre-image of the move was recorded: {'yes' if recorded else 'no'}" in said
    assert "sent reg_write id 1" in said


def test_a_move_waiting_for_its_robot_says_it_is_queued(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.adapters.dynamixel.worker import _ProgressLine

    line = _ProgressLine()
    line({"robot": "arm", "phase": "queued", "fraction": 0.0})
    said = capsys.readouterr().out
    assert "queued: robot arm is running another move" in said and "0%" not in said


def test_ctrl_c_before_the_daemon_answers_the_submit_is_a_pending_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the submit waits for tether serve's answer: the move may have been
    committed, so the outcome is `pending`/`interrupted` (exit 130) with its key and what to
    do, as after the submit; never a traceback with no outcome."""
    from _dxl_setup import write_config
    from tether import _exit
    from tether.adapters.dynamixel.config import load_config
    from tether.adapters.dynamixel.worker import _move_exit, submit_move
    from tether.client import Client
    from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest

    config_path = write_config(tmp_path, "/dev/null")  # no port is opened: the submit fails

    def interrupted(*_args: object, **_kw: object) -> dict[str, object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "submit", interrupted)
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": {"a": 0.1}})
    outcome = submit_move(load_config(config_path), request, world="w", activity="m1", timeout_s=5)
    assert (outcome["status"], outcome["reason"]) == ("pending", "interrupted")
    assert outcome["key"] == f"w/{KIND_ABSOLUTE}/m1" and "same command" in outcome["error"]
    assert _move_exit(outcome) == _exit.INTERRUPTED


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--activity", ""], "--activity ''"),
        (["--activity", "a b"], "--activity 'a b'"),
        (["--activity", "x1", "--world", "w3/y"], "a world id holds no '/'"),
        (["--activity", "x1", "--world", ""], "--world ''"),
    ],
)
def test_a_world_or_activity_no_key_can_name_is_a_usage_error(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    """Refused before anything is admitted (exit 2, code usage), never a failure with an
    internal message, and never a world whose `/` no key lookup could split."""
    import json
    import subprocess
    import sys

    from _dxl_setup import write_config
    from tether import _exit

    config_path = write_config(tmp_path, "/dev/null")
    command = [sys.executable, "-m", "tether", "move", "--config", str(config_path)]
    done = subprocess.run(
        [*command, "--robot", "arm", "--joint", "a=0.1", "--json", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == _exit.USAGE, (done.stdout, done.stderr)
    refusal = json.loads(done.stdout)
    assert refusal["code"] == "usage" and said in refusal["message"], refusal


def test_operator_show_of_an_unreadable_device_says_why_in_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A move parked because its device could not be read: its text view names the error
    (the cause) and says the device was not read, never `device read - ago`."""
    from tether.operator.cli import _print

    _print(
        {
            "key": "local/physical_ai.robot_move.absolute/s1",
            "operation_id": "op-1",
            "revision": 2,
            "evidence_age_ms": 1200,
            "device_state_age_ms": None,
            "reason": "device_unreadable",
            "evidence": {"error": "port_owned: path:/dev/pts/0 is owned by pid 19461"},
        },
        as_json=False,
    )
    said = capsys.readouterr().out
    assert "device not read" in said and "device read -" not in said, said
    assert "error: port_owned: path:/dev/pts/0 is owned by pid 19461" in said, said


@pytest.mark.parametrize(
    ("serve", "code"),
    [
        ("settle_timeout_s = -100", "bad_settle_timeout"),
        ("lease_ms = 0", "bad_lease"),
        ('workers = "2"', "wrong_type"),
    ],
)
def test_a_bad_serve_value_is_refused_by_move_as_serve_refuses_it(
    tmp_path: Path, serve: str, code: str
) -> None:
    """`tether move` reads `[serve]` (a daemon's lease and settle timeout bound how long it
    follows a move): a value `tether serve` and `tether status` refuse is exit 2 here too,
    before anything is submitted, never a move followed for a negative time and called
    "pending"."""
    import json

    from _dxl_setup import write_config
    from tether import _exit

    config_path = write_config(tmp_path, "/dev/null")
    config_path.write_text(config_path.read_text() + f"\n[serve]\n{serve}\n")
    done = _move_m1(config_path)
    assert done.returncode == _exit.USAGE, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["code"] == code, done.stdout
    assert not (tmp_path / "state" / "moves" / "catalog.db").exists()


def test_operator_resume_and_reboot_answer_in_words_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resume (the latch's own answer) and a reboot say what happened in a sentence, never
    a `key=value` dump of the daemon's answer."""
    from tether.devices.latch import StopLatch
    from tether.operator.cli import _print

    latch = StopLatch(tmp_path)
    latch.latch("arm", by="console Stop by operator alice")
    _print(latch.resume("arm", operator="bob"), False)
    said = capsys.readouterr().out
    assert said.startswith("arm: resumed by bob; it was stopped by console Stop by operator alice")
    assert " UTC. New moves run again." in said and "=" not in said, said
    reboot = {
        "robot": "arm",
        "rebooted_ids": [1, 2],
        "operator": "bob",
        "read_back": {
            "joints": {"shoulder": {"position_rad": 0.25, "torque_on": False}},
            "read_at_ms": 1,
        },
        "refreshed": [{"key": "local/k/m1", "revision": 3, "changes": ["rebooted"]}],
    }
    _print(reboot, False)
    said = capsys.readouterr().out
    assert said.splitlines() == [
        "arm: rebooted ids [1, 2] by bob",
        "  shoulder: at +0.2500 rad, torque off",
        "  local/k/m1: fresh evidence, revision 3",
    ], said


def test_fresh_evidence_of_an_unreadable_move_keeps_its_read_error_as_history(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A move parked `device_unreadable`, re-read once the device is back: the new revision
    holds the fresh read-back, and the open error is history (when it parked), never shown
    as the device's error beside a read-back of 0.8 s ago."""
    from typing import cast

    from tether.families.robot_move.operator import RobotMoveReview
    from tether.operator.cli import _print

    parked = {
        "operation_id": "op",
        "reason": "device_unreadable",
        "error": "open_failed: /dev/pts/9: No such file or directory",
        "sent": [],
        "preimage": True,
        "read_back": None,
        "hardware_errors": {},
    }
    joint = {"id": 1, "position_rad": 0.1, "goal_rad": 0.1, "velocity_rad_s": 0.0}
    joint |= {"moving": False, "torque_on": True, "staged_write": False, "hardware_errors": []}
    fresh = {"robot": "arm", "read_at_ms": 1, "joints": {"shoulder": joint}}
    review = RobotMoveReview(cast("Any", None), cast("Any", None))
    refreshed = review.refreshed(parked, fresh, ["re-read by alice"])
    assert "error" not in refreshed and refreshed["read_back"] == fresh
    assert refreshed["unreadable_when_parked"] == parked["error"]
    _print(
        {
            "key": "local/physical_ai.robot_move.absolute/U1",
            "operation_id": "op",
            "revision": 2,
            "evidence_age_ms": 10,
            "device_state_age_ms": 800,
            "reason": "device_unreadable",
            "evidence": refreshed,
        },
        False,
    )
    said = capsys.readouterr().out
    assert "\nerror:" not in said and "device read 0.8 s ago" in said, said
    assert "when it parked the device could not be read: open_failed: /dev/pts/9" in said
    assert "shoulder: at +0.1000 rad" in said


def test_a_move_whose_stores_cannot_be_written_names_the_disk_not_a_class(tmp_path: Path) -> None:
    """A file-size limit (a real RLIMIT_FSIZE) refuses the stores' first writes: exit 6, one
    line and a JSON code naming the disk's failure, never an error class's name."""
    import json
    import resource

    from _dxl_setup import write_config
    from tether import _exit

    config_path = write_config(tmp_path, "/dev/null")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_480, resource.RLIM_INFINITY))

    done = _move_m1(config_path, preexec_fn=limit)
    assert done.returncode == _exit.STORAGE_IO, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["code"] in ("storage_io_error", "file_too_large"), doc
    assert done.stderr.startswith(f"tether move: {doc['code']}: "), done.stderr


def _move_m1(config_path: Path, **run: Any) -> subprocess.CompletedProcess[str]:
    """`tether move --json` of activity m1 (joint a to 0.1 rad) on the robot arm of
    ``config_path``, in a process of its own (``run``: more `subprocess.run` arguments)."""
    return subprocess.run(
        [sys.executable, "-m", "tether", "move", "--config", str(config_path), "--robot",
         "arm", "--activity", "m1", "--joint", "a=0.1", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        **run,
    )  # fmt: skip


def test_another_move_under_a_used_activity_id_is_admission_conflict_without_a_daemon(
    tmp_path: Path,
) -> None:
    """Run by the command itself, another request under a used activity id was `bad_request`
    with a Python repr of the held one; through the daemon it is `admission_conflict` with
    JSON. Both now say `admission_conflict` (exit 1), and the robot is not moved again."""
    import json
    import subprocess
    import sys

    from _dxl_setup import emulator_process, write_config

    with emulator_process(tmp_path) as emu:
        config_path = write_config(tmp_path, emu.path)
        command = [sys.executable, "-m", "tether", "move", "--config", str(config_path)]
        command += ["--robot", "arm", "--activity", "a1", "--json"]
        first = subprocess.run(
            [*command, "--joint", "a=0.5"], capture_output=True, text=True, timeout=120
        )
        assert first.returncode == 0, (first.stdout, first.stderr)
        before = len(emu.journal())
        other = subprocess.run(
            [*command, "--joint", "a=0.1"], capture_output=True, text=True, timeout=120
        )
        assert other.returncode == 1, (other.stdout, other.stderr)
        refusal = json.loads(other.stdout)
        assert refusal["code"] == "admission_conflict", refusal
        held = refusal["message"].split("is another request: ", 1)[1]
        assert json.loads(held)["targets"] == {"a": 0.5}, refusal
        assert [e for e in emu.journal()[before:] if e["instruction"] == "action"] == []
