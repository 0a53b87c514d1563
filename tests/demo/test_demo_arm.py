"""`tether demo` with its emulated DYNAMIXEL arm: the reaches and the arm's moves run through an
in-process `tether serve` daemon; one power loss right after a move's ACTION parks it, and the
operator path decides it (unattended with `--operator auto-*`, or asked on a real pty). The
emulator's journal of frames (`arm-journal.jsonl`) is the independent record of every ACTION."""

from __future__ import annotations

import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tether import _exit
from tether.activities import ActivityKey, Catalog
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.move import CRASH_POINTS as MOVE_CRASH_POINTS
from tether.adapters.dynamixel.move import PROOF_CRASH_POINTS
from tether.apps.demo.arm import ARM_WORLD, JOINTS, MOVE_KIND, TARGETS
from tether.operator.decisions import RESOLVE_CRASH_POINTS

from tests._secrets import OPERATOR, RECORDER
from tests.demo._support import demo_argv
from tests.sampling import sampled

REACHES = ["--targets", "1", "--episodes", "1", "--steps", "100", "--port", "0"]
MOVES = ["move-0000", "move-0001", "move-0002"]


def _demo(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.run(
        demo_argv(data, *REACHES, *extra, arm=True),
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def journal(data: Path) -> list[dict[str, Any]]:
    path = data / "arm-journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def actions_per_move(entries: list[dict[str, Any]]) -> dict[str, int]:
    """ACTIONs the emulator applied with each move's goals (the most over its joints)."""
    out = {}
    for i, target in enumerate(TARGETS[: len(MOVES)]):
        counts = []
        for name, rad in target.items():
            data = tables.encode(tables.GOAL_POSITION, tables.radians_to_ticks(rad)).hex()
            counts.append(
                sum(
                    1
                    for e in entries
                    if e["instruction"] == "action"
                    and e["executed"]
                    and e["id"] == JOINTS[name]
                    and e["address"] == tables.GOAL_POSITION.address
                    and e["data"] == data
                )
            )
        out[MOVES[i]] = max(counts)
    return out


def record(data: Path, activity: str) -> Any:
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    try:
        return catalog.get(ActivityKey(ARM_WORLD, MOVE_KIND, activity))
    finally:
        catalog.close()


def test_auto_reissue_parks_the_power_lost_move_reissues_it_once_and_reports_it(
    tmp_path: Path,
) -> None:
    done = _demo(tmp_path, "--operator", "auto-reissue", "--json")
    assert done.returncode == _exit.OK, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["parked"]) == ("done", [])
    assert report["operator"] == {"mode": "auto-reissue", "name": "demo-auto-reissue"}
    assert report["arm"]["emulated"] is True
    assert report["arm"]["power_loss"] == {"move": "move-0001", "injected": True}
    moves = {m["activity"]: m for m in report["moves"]}
    assert list(moves) == MOVES
    assert [m["state"] for m in moves.values()] == ["done", "done", "done"]
    assert [m["outcome"] for m in moves.values()] == ["completed"] * 3
    lost = moves["move-0001"]
    assert lost["parked_reason"] == "device_state_lost_or_moved"
    decision = lost["decision"]
    assert (decision["decision"], decision["operator"], decision["mode"]) == (
        "reissue",
        "demo-auto-reissue",
        "auto-reissue",
    )
    assert isinstance(decision["revision"], int) and decision["revision"] >= 1
    assert moves["move-0000"]["decision"] is None and moves["move-0002"]["decision"] is None
    # The emulator's own journal: one power loss, one ACTION per move, two for the re-issued.
    entries = journal(tmp_path)
    assert [e["instruction"] for e in entries].count("power_cycle") == 1
    assert actions_per_move(entries) == {"move-0000": 1, "move-0001": 2, "move-0002": 1}
    assert {m: moves[m]["actions"] for m in MOVES} == actions_per_move(entries)
    # The catalog recorded the decision: the operator the credential belongs to, its revision.
    rec = record(tmp_path, "move-0001")
    assert rec.decision is not None and rec.decision.operator == "demo-auto-reissue"
    assert (
        rec.decision.outcome == "absent" and rec.decision.evidence_revision == decision["revision"]
    )
    assert rec.retry_guard is not None  # the adapter's proof, referenced by the decision
    # The generated host.toml holds only the hash, private to the user.
    host = tmp_path / "host.toml"
    assert stat.S_IMODE(host.stat().st_mode) == 0o600
    assert "$argon2id$" in host.read_text()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    # The reaches ran beside the arm, through the same daemon.
    assert [a["activity"] for a in report["activities"]] == ["reach-0000"]
    # The same command again resumes: nothing is sent to the arm's moves again.
    again = _demo(tmp_path, "--operator", "auto-reissue", "--json")
    assert again.returncode == _exit.OK, again.stdout + again.stderr
    second = json.loads(again.stdout)
    assert second["arm"]["power_loss"]["injected"] is False
    assert [m["state"] for m in second["moves"]] == ["done", "done", "done"]
    later = journal(tmp_path)
    assert actions_per_move(later) == {"move-0000": 1, "move-0001": 2, "move-0002": 1}
    assert [e["instruction"] for e in later].count("power_cycle") == 1


def test_auto_abandon_records_the_abandoned_move_and_the_others_run(tmp_path: Path) -> None:
    done = _demo(tmp_path, "--operator", "auto-abandon")
    assert done.returncode == _exit.OK, done.stdout + done.stderr
    assert "abandon by demo-auto-abandon on revision" in done.stdout
    assert "move-0001: abandon by operator demo-auto-abandon" in done.stdout
    entries = journal(tmp_path)
    assert actions_per_move(entries) == {"move-0000": 1, "move-0001": 1, "move-0002": 1}
    rec = record(tmp_path, "move-0001")
    assert rec.decision is not None and rec.decision.outcome == "abandon"
    assert rec.decision.operator == "demo-auto-abandon"
    assert rec.settlement is not None and rec.result is not None and rec.result.failed
    assert record(tmp_path, "move-0002").settlement is not None


def test_auto_operator_is_refused_for_a_port_the_demo_did_not_create(tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{tmp_path / "state"}"\n'
        '[ports.bus]\nurl = "/dev/ttyUSB0"\n'
        '[robots.arm]\nport = "bus"\n'
        '[[robots.arm.joints]]\nname = "a"\nid = 1\nmin = -1.0\nmax = 1.0\n'
    )
    for mode in ("auto-reissue", "auto-abandon"):
        done = _demo(tmp_path / "data", "--config", str(config), "--operator", mode)
        assert done.returncode == _exit.USAGE, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tether demo: operator_refused:")
        assert "bus" in lines[0] and "real hardware" in lines[0]
        # Refused before it serves or writes anything: no stream URL, no data directory.
        assert done.stdout == "" and not (tmp_path / "data").exists(), done.stdout


def test_without_a_terminal_and_without_operator_the_demo_refuses_to_start(
    tmp_path: Path,
) -> None:
    done = _demo(tmp_path / "data")
    assert done.returncode == _exit.USAGE, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("tether demo: operator_required:") and "--operator" in line
    # Refused before it serves or writes anything: no stream URL, no data directory.
    assert done.stdout == "", done.stdout
    assert not (tmp_path / "data").exists()


class Terminal:
    """The demo on a real pty (its stdin, stdout and stderr), in a session of its own."""

    def __init__(self, argv: list[str]) -> None:
        master, slave = os.openpty()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
        env["COLUMNS"] = "160"
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env
        )
        os.close(slave)
        self.master = master
        self.text = ""
        self.pos = 0  # just after the last match: output read beyond it is matched next

    def expect(self, needle: str, timeout: float = 120.0) -> str:
        """Everything read until `needle` appears (after what was matched before)."""
        start = self.pos
        deadline = time.monotonic() + timeout
        while needle not in self.text[start:]:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} never came; got: {self.text[start:][-2000:]}"
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    assert needle in self.text[start:], (
                        f"{needle!r}: ended with {self.text[-2000:]}"
                    )
                self.text += chunk.decode("utf-8", "replace")
        at = self.text.index(needle, start) + len(needle)
        self.pos = at
        return self.text[start:at]

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                self.text += chunk.decode("utf-8", "replace")
                if chunk:
                    continue
            if self.proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                self.proc.send_signal(signal.SIGKILL)
                raise AssertionError(f"the demo did not end: {self.text[-2000:]}")
        os.close(self.master)
        RECORDER.record("tether demo on a pty", self.text)  # the suite's secret scan reads it
        return self.proc.wait()


def to_the_decision_prompt(term: Terminal) -> str:
    """Choose the demo operator's passphrase, then wait for the parked move's prompt; what
    was shown until it."""
    term.expect("choose a passphrase for demo operator ")
    term.send(OPERATOR)
    term.expect("the same passphrase again:")
    term.send(OPERATOR)
    return term.expect("decision [reissue/abandon/wait]:")


def test_on_a_terminal_the_operator_chooses_a_passphrase_reviews_and_decides(
    tmp_path: Path,
) -> None:
    term = Terminal(demo_argv(tmp_path, *REACHES, arm=True))
    try:
        shown = to_the_decision_prompt(term)
        # The evidence: per joint commanded vs present in radians, what was sent, errors, age.
        assert "parked: demo-arm/physical_ai.robot_move.absolute/move-0001" in shown
        assert "reason device_state_lost_or_moved, evidence revision 1" in shown
        assert "commanded rad" in shown and "present rad" in shown
        assert "shoulder" in shown and "-0.5001" in shown  # the commanded target, radians
        assert "torque: elbow off, shoulder off" in shown  # the power loss
        # The targets, never "staged:" (read as a REG_WRITE still pending on the servos).
        assert "the move's targets: elbow +0.6995 rad" in shown and "staged:" not in shown
        assert "sent: " in shown and "action" in shown and "hardware errors: none" in shown
        assert "tick" not in shown
        term.send("reissue")
        term.expect("credential of operator ")
        term.send("not the passphrase at all")  # the daemon verifies: refused, asked again
        term.expect("refused by the daemon: credential_refused")
        term.expect("decision [reissue/abandon/wait]:")
        term.send("reissue")
        term.expect("credential of operator ")
        term.send(OPERATOR)
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == _exit.OK, term.text[-3000:]
    rec = record(tmp_path, "move-0001")
    assert rec.decision is not None and rec.decision.outcome == "absent"
    name = rec.decision.operator
    assert f"reissue by {name} on revision 1" in term.text  # the summary names the operator
    assert OPERATOR not in term.text
    assert OPERATOR not in (tmp_path / "host.toml").read_text()
    assert actions_per_move(journal(tmp_path)) == {"move-0000": 1, "move-0001": 2, "move-0002": 1}


def test_the_demo_prints_the_console_and_its_parked_move_is_resolved_from_the_page(
    tmp_path: Path,
) -> None:
    """With the arm, the demo prints the operator console's URL; while it asks on the terminal,
    the parked move is decided through the console (logged in with the same passphrase), and
    the prompt sees it and goes on."""
    import re

    import httpx

    term = Terminal(demo_argv(tmp_path, *REACHES, arm=True))
    try:
        started = to_the_decision_prompt(term)
        found = re.search(r"operator console: (http://127\.0\.0\.1:\d+/)", term.text)
        assert found, started[-2000:]
        with httpx.Client(base_url=found.group(1), timeout=60) as http:
            answer = http.post("/api/login", json={"credential": OPERATOR})
            assert answer.status_code == 200, answer.text
            csrf = answer.json()["csrf"]
            key = "demo-arm/physical_ai.robot_move.absolute/move-0001"
            body = {"key": key, "decision": "reissue", "revision": 1}
            made = http.post("/api/resolve", json=body, headers={"X-CSRF-Token": csrf})
            assert made.status_code == 200, made.text
        term.expect("decided elsewhere (the operator console")
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == _exit.OK, term.text[-3000:]
    rec = record(tmp_path, "move-0001")
    assert rec.decision is not None and rec.decision.outcome == "absent"
    assert f"reissue by {rec.decision.operator} on revision 1" in term.text
    assert actions_per_move(journal(tmp_path)) == {"move-0000": 1, "move-0001": 2, "move-0002": 1}


def test_kill_9_mid_move_is_a_power_loss_and_the_same_command_resumes_it(tmp_path: Path) -> None:
    """The emulated arm dies with the demo: the move in flight parks on the next run, the
    operator re-issues it on the adapter's proof; every other move sends one ACTION."""
    argv = demo_argv(tmp_path, *REACHES, "--operator", "auto-reissue", arm=True)
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    ) as demo:
        assert demo.stdout is not None
        for line in demo.stdout:
            if line.startswith("move-0000") and "moving" in line and " 0/100" not in line:
                break
        else:
            raise AssertionError("the demo ended before move-0000 moved")
        demo.send_signal(signal.SIGKILL)
        demo.stdout.read()
    assert actions_per_move(journal(tmp_path))["move-0000"] == 1
    assert record(tmp_path, "move-0000").settlement is None
    resumed = _demo(tmp_path, "--operator", "auto-reissue", "--json")
    assert resumed.returncode == _exit.OK, resumed.stdout + resumed.stderr
    moves = {m["activity"]: m for m in json.loads(resumed.stdout)["moves"]}
    assert moves["move-0000"]["decision"]["decision"] == "reissue"
    assert [m["state"] for m in moves.values()] == ["done", "done", "done"]
    expected = {"move-0000": 2, "move-0001": 2, "move-0002": 1}  # each re-issued once
    assert actions_per_move(journal(tmp_path)) == expected
    assert {m: moves[m]["actions"] for m in MOVES} == expected


#: Every crash point of a move and of a resolve the demo's daemon reaches, by name.
ARM_POINTS = (*MOVE_CRASH_POINTS, *RESOLVE_CRASH_POINTS, *PROOF_CRASH_POINTS)
#: The default run kills the demo at one of them (a different one each run,
#: `tests/sampling.py`); TETHER_SLOW=1 at every one.
SAMPLED_ARM = sampled("demo arm crash", ARM_POINTS, 1)


def _killed_then_resumed(data: Path, point: str) -> None:
    """SIGKILLed at `point` (or run to its end when the run never reaches it), then the same
    command: every move done, and the emulator's journal shows at most one ACTION per move
    unless an operator re-issued it (the catalog's decision says so)."""
    env = {**os.environ, "TETHER_CRASH_AT": point}
    first = subprocess.run(
        demo_argv(data, *REACHES, "--operator", "auto-reissue", arm=True),
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert first.returncode in (0, -signal.SIGKILL), first.stdout + first.stderr
    resumed = _demo(data, "--operator", "auto-reissue", "--json")
    assert resumed.returncode == _exit.OK, resumed.stdout + resumed.stderr
    report = json.loads(resumed.stdout)
    assert [m["state"] for m in report["moves"]] == ["done", "done", "done"]
    counts = actions_per_move(journal(data))
    for move in MOVES:
        rec = record(data, move)
        reissued = rec.decision is not None and rec.decision.outcome == "absent"
        assert 1 <= counts[move] <= 1 + int(reissued), (point, move, counts, rec.decision)
    assert record(data, "move-0001").decision is not None  # the power loss parked it


def test_every_arm_crash_point_is_listed() -> None:
    assert set(ARM_POINTS) == {
        "after_preimage", "after_reg_write", "after_action", "after_readback",
        "resolve.after_read", "resolve.after_evidence_document", "resolve.after_proof",
        "resolve.after_document", "resolve.after_decision",
        "proof.after_fence_floor", "proof.after_neutralise",
    }  # fmt: skip
    assert set(SAMPLED_ARM) <= set(ARM_POINTS)


@pytest.mark.parametrize("point", SAMPLED_ARM)
def test_sampled_arm_crash_points_resume_with_at_most_one_action_per_move(
    tmp_path: Path, point: str
) -> None:
    _killed_then_resumed(tmp_path, point)


@pytest.mark.slow
@pytest.mark.parametrize("point", ARM_POINTS)
def test_every_arm_crash_point_resumes_with_at_most_one_action_per_move(
    tmp_path: Path, point: str
) -> None:
    _killed_then_resumed(tmp_path, point)


@pytest.mark.parametrize("arm", [False, True], ids=["reaches", "arm"])
def test_a_second_demo_on_the_same_data_dir_is_refused_naming_the_first(
    tmp_path: Path, arm: bool
) -> None:
    """Refused before it writes or starts anything: the first demo's host.toml (which its
    `tether stop --config` reads to find the arm) is left as it is, no second arm is
    started, and no stream is advertised."""
    long = ["--targets", "2", "--episodes", "1", "--steps", "400000", "--port", "0"]
    if arm:
        long += ["--operator", "auto-reissue"]
    with subprocess.Popen(
        demo_argv(tmp_path, *long, arm=arm),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as first:
        try:
            assert first.stdout is not None
            for line in first.stdout:
                if line.startswith("reach-0000") and "running" in line:
                    break
            generated = (tmp_path / "host.toml").read_bytes() if arm else b""
            second = subprocess.run(
                demo_argv(tmp_path, *long, arm=arm),
                capture_output=True,
                text=True,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            if arm:
                assert (tmp_path / "host.toml").read_bytes() == generated
        finally:
            first.kill()
            first.wait()
            assert first.stdout is not None
            first.stdout.read()
    assert second.returncode == _exit.UNAVAILABLE, second.stdout + second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert "daemon_running" in line and f"pid {first.pid}" in line
    assert "AG-UI stream" not in second.stdout + second.stderr


def test_a_demo_starting_on_the_same_data_dir_holds_it_before_writing_host_toml(
    tmp_path: Path,
) -> None:
    """Two demos started at the same instant both found no daemon running, and the one whose
    daemon lost the lock had already rewritten the other's host.toml (its arm's pty, its
    operator's hash). A demo now holds the data dir's own lock from before it writes: here
    held by this test, as by a demo that has not started its daemon yet."""
    from tether.serve.locks import InstanceLock

    lock = InstanceLock(tmp_path / "demo.lock", "data dir")
    lock.acquire({"program": "tether demo"})
    (tmp_path / "host.toml").write_text("# the first demo's\n")
    try:
        second = subprocess.run(
            demo_argv(tmp_path, "--operator", "auto-reissue", "--port", "0", arm=True),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    finally:
        lock.release()
    assert second.returncode == _exit.UNAVAILABLE, second.stdout + second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert "daemon_running" in line and f"pid {os.getpid()}" in line
    assert (tmp_path / "host.toml").read_text() == "# the first demo's\n"
    assert not (tmp_path / "arm-journal.jsonl").exists()  # no arm started
    assert "AG-UI stream" not in second.stdout + second.stderr


def test_ctrl_c_at_the_decision_prompt_ends_the_demo_without_waiting_out_the_prompt(
    tmp_path: Path,
) -> None:
    """Ctrl-C while the demo asks for a decision: the prompt lets go at once (nothing
    decided) and the demo ends interrupted (exit 130). The prompt kept reading the terminal,
    so the demo sat silent for the close's 15 s bound on the planner before it ended."""
    term = Terminal(demo_argv(tmp_path, *REACHES, arm=True))
    try:
        to_the_decision_prompt(term)
        started = time.monotonic()
        term.proc.send_signal(signal.SIGINT)  # what the terminal's Ctrl-C sends
        code = term.finish(timeout=60)
        took = time.monotonic() - started
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == _exit.INTERRUPTED, term.text[-3000:]
    assert "interrupted" in term.text[-2000:], term.text[-2000:]
    assert took < 10, f"the demo took {took:.1f} s to end after Ctrl-C"
    rec = record(tmp_path, "move-0001")
    assert rec.awaiting_decision and rec.decision is None  # nothing was decided


def test_wait_leaves_the_move_parked_exit_3_and_the_same_command_resumes_it(
    tmp_path: Path,
) -> None:
    term = Terminal(demo_argv(tmp_path, *REACHES, arm=True))
    try:
        to_the_decision_prompt(term)
        term.send("wait")
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == _exit.PARKED, term.text[-3000:]
    assert "to decide it, run the same demo command again" in term.text, term.text[-3000:]
    # The footer said "the operator decided" of a move left parked.
    assert (
        "power loss: the arm lost power right after the ACTION of move-0001; it awaits the"
        " operator's decision" in term.text
    ), term.text[-3000:]
    rec = record(tmp_path, "move-0001")
    assert rec.awaiting_decision and rec.decision is None  # `wait` records nothing
    assert record(tmp_path, "move-0002") is None  # not submitted while the arm is in doubt
    assert actions_per_move(journal(tmp_path)) == {"move-0000": 1, "move-0001": 1, "move-0002": 0}
    resumed = _demo(tmp_path, "--operator", "auto-reissue", "--json")
    assert resumed.returncode == _exit.OK, resumed.stdout + resumed.stderr
    moves = json.loads(resumed.stdout)["moves"]
    assert [m["state"] for m in moves] == ["done", "done", "done"]
    assert moves[1]["decision"]["operator"] == "demo-auto-reissue"
    assert actions_per_move(journal(tmp_path)) == {"move-0000": 1, "move-0001": 2, "move-0002": 1}


def test_with_config_the_moves_run_on_its_robot_and_the_operator_is_asked(tmp_path: Path) -> None:
    """`--config`: the moves run on the configured robot's port (here an emulator in a process
    of its own, which the demo cannot tell from hardware: no power loss is injected, and the
    operator is the config's own); each move sends one ACTION."""
    from tether.devices.credentials import hash_secret

    control, link = tmp_path / "emu.sock", tmp_path / "emu.tty"
    frames = tmp_path / "emu-journal.jsonl"
    argv = ["emulate", "dynamixel", "--ids", "1,2", "--control", str(control)]
    argv += ["--journal", str(frames), "--speed-scale", "20", "--link", str(link)]
    with subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], stdout=subprocess.PIPE, text=True
    ) as emulator:
        try:
            assert emulator.stdout is not None and emulator.stdout.readline().strip()
            config = tmp_path / "host.toml"
            config.write_text(
                f'[host]\nstate_dir = "{tmp_path / "state"}"\n'
                f'[operators.alice]\ncredential = "{hash_secret(OPERATOR)}"\n'
                f'[ports.bus]\nurl = "{link}"\ntimeout_ms = 400\n'
                '[robots.arm]\nport = "bus"\nspeed = 2.0\nfirst_motion_speed = 0.5\n'
                '[[robots.arm.joints]]\nname = "a"\nid = 1\nmin = -1.5\nmax = 1.5\n'
                '[[robots.arm.joints]]\nname = "b"\nid = 2\nmin = -1.5\nmax = 1.5\n'
                # A daemon's shared stores: the demo says it does not use them.
                '[serve]\ncatalog = "postgresql://db.invalid/x"\n'
                'world = "postgresql://db.invalid/x"\n'
            )
            term = Terminal(
                demo_argv(tmp_path / "data", *REACHES, "--config", str(config), arm=True)
            )
            try:
                code = term.finish(timeout=180)
            finally:
                if term.proc.poll() is None:
                    term.proc.kill()
        finally:
            emulator.terminate()
    assert code == _exit.OK, term.text[-3000:]
    assert "power loss: none" in term.text and "choose a passphrase" not in term.text
    assert "[serve] catalog and world of" in term.text and "not used" in term.text
    entries = [json.loads(line) for line in frames.read_text().splitlines() if line]
    for rad in (0.6, -0.6, 0.3):
        data = tables.encode(tables.GOAL_POSITION, tables.radians_to_ticks(rad)).hex()
        applied = [
            e["id"]
            for e in entries
            if e["instruction"] == "action" and e["executed"] and e["data"] == data
        ]
        assert sorted(applied) == [1, 2], (rad, applied)


def _stream_url(demo: subprocess.Popen[str], until: str) -> str:
    """The AG-UI stream's URL a running demo printed, read from its output up to the first
    line starting with ``until``."""
    assert demo.stdout is not None
    url = ""
    for line in demo.stdout:
        if line.startswith("AG-UI stream (SSE): "):
            url = line.split(": ", 1)[1].strip()
        if line.startswith(until):
            break
    return url


def test_the_demos_stream_shows_the_arm_moves_too(tmp_path: Path) -> None:
    """The run's AG-UI stream carries an activity message per arm move (its state, the
    parked move's reason and the operator's re-issue included), as it does for the reaches."""
    import http.client
    from urllib.parse import urlsplit

    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    argv = demo_argv(tmp_path / "data", *REACHES, "--operator", "auto-reissue", arm=True)
    argv += ["--linger", "60"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env
    ) as demo:
        try:
            url = _stream_url(demo, "mission: ")
            parts = urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            conn.request("GET", parts.path)
            body = conn.getresponse().read()  # the finished run: its final messages
            conn.close()
        finally:
            demo.send_signal(signal.SIGTERM)
            demo.wait(timeout=60)
    events = [json.loads(x[len(b"data: ") :]) for x in body.splitlines() if x.startswith(b"data: ")]
    (snapshot,) = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    moves = {
        m["id"].rsplit("/", 1)[1]: m["content"]
        for m in snapshot["messages"]
        if m.get("activityType") == MOVE_KIND
    }
    assert sorted(moves) == ["move-0000", "move-0001", "move-0002"], sorted(moves)
    assert all(c["state"] == "done" for c in moves.values()), moves
    assert moves["move-0001"]["attempt"] > 1  # parked by the power loss, then re-issued


def test_tether_status_beside_a_demo_names_the_demos_stream(tmp_path: Path) -> None:
    """The demo serves its AG-UI stream itself (its daemon's `[serve] sse` is off), and
    `tether status` on its host.toml said "AG-UI stream off" while it served one."""
    data = tmp_path / "data"
    argv = demo_argv(data, "--targets", "1", "--episodes", "1", "--steps", "400000", "--port",
                     "0", "--operator", "auto-reissue", "--power-loss", "-1", arm=True)  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    ) as demo:
        try:
            url = _stream_url(demo, "arm: ")  # its daemon has started
            config = ["--config", str(data / "host.toml")]
            as_json = subprocess.run(
                [sys.executable, "-m", "tether", "status", *config, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            words = subprocess.run(
                [sys.executable, "-m", "tether", "status", *config],
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            demo.send_signal(signal.SIGTERM)
            demo.wait(timeout=60)
    assert url.startswith("http://127.0.0.1:"), url
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["daemon"]["sse"] == url
    assert f"AG-UI stream {url}," in words.stdout, words.stdout


def test_an_unattended_run_whose_arm_was_stopped_says_how_to_resume_it(tmp_path: Path) -> None:
    """`tether stop` latches the arm of an `--operator auto-*` run: the run ends parked (exit
    3), and since its credential was never shown, it says to resume through a run that asks
    (a passphrase its operator chooses), never to give `resume` a credential nobody has."""
    data = tmp_path / "data"
    argv = demo_argv(data, "--targets", "1", "--episodes", "1", "--steps", "20000", "--port",
                     "0", "--operator", "auto-reissue", "--power-loss", "-1", arm=True)  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    ) as demo:
        try:
            assert demo.stdout is not None
            lines = []
            for line in demo.stdout:
                lines.append(line)
                if "move-0000" in line:
                    break
            stop = subprocess.run(
                [sys.executable, "-m", "tether", "stop", "--config", str(data / "host.toml")],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert stop.returncode == 0, stop.stdout + stop.stderr
            rest, _ = demo.communicate(timeout=120)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    said = "".join(lines) + rest
    assert demo.returncode == _exit.PARKED, said
    assert "this unattended run's credential was never shown: run the demo with --operator ask" in (
        said
    )
    assert f"tether operator --config {data / 'host.toml'} resume arm" in said
