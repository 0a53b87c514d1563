"""On a terminal the robot commands read as words in radians: a progress line, the outcome, a
one-line error on stderr, no JSON and no servo ticks; `--json` (or a pipe) gives the JSON."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from _dxl_setup import TARGETS, emulator_process, write_config
from tether import _exit

#: A servo-tick-sized integer (positions are 0..4095 ticks); times print as clock times.
TICKS = re.compile(r"(?<![\d.:-])\d{3,5}(?![\d.:%])")


def on_a_tty(*argv: str, answers: dict[str, bytes] | None = None) -> tuple[int, str]:
    """Run `tether ARGV` with stdin, stdout and stderr on one pty; its exit code and output.
    ``answers``: typed once each prompt (a key) shows (Ctrl-D is b"\\x04")."""
    leader, follower = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", *argv],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**env, "COLUMNS": "200"},
        close_fds=True,
        start_new_session=bool(answers),  # a prompt reads the pty, never this terminal
    )
    os.close(follower)
    chunks: list[bytes] = []
    left = dict(answers or {})
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
                seen = b"".join(chunks)
                for prompt in [p for p in left if p.encode() in seen]:
                    time.sleep(0.2)  # the prompt is up, its echo off
                    os.write(leader, left.pop(prompt))
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def ticks_in(text: str) -> list[str]:
    """Tick-like integers in `text`, leaving out ids, counts and the servo model number."""
    text = re.sub(r"model \d+", "model", text)
    return TICKS.findall(text)


def test_the_scan_finds_ticks() -> None:
    assert ticks_in("a at 2048 goal 2389") == ["2048", "2389"]
    assert ticks_in("model 1030 at +0.500 rad 100% 13:56:32.516 id 1") == []


def test_move_stop_and_operator_on_a_tty_read_in_radians(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as emu:
        config = str(write_config(tmp_path, emu.path))
        joints = [a for n, v in TARGETS.items() for a in ("--joint", f"{n}={v}")]
        code, out = on_a_tty(
            "move", "--config", config, "--robot", "arm", "--activity", "m1", *joints
        )
        assert code == _exit.OK, out
        assert "{" not in out and "Traceback" not in out
        assert "rad" in out and "[####################] 100%" in out
        last = out.strip().splitlines()[-1]
        assert last == "local/physical_ai.robot_move.absolute/m1: done (executed) after 1 attempt"
        assert ticks_in(out) == [], out
        # A limit: one line on the terminal in radians, the usage code.
        code, out = on_a_tty(
            "move", "--config", config, "--robot", "arm", "--activity", "m2", "--joint", "a=5"
        )
        assert code == _exit.USAGE
        assert out.strip().startswith("tether move: limit_violation: ") and "\n" not in out.strip()
        assert "rad" in out and ticks_in(out) == []
        # The same move through a pipe is JSON lines.
        piped = subprocess.run(
            [
                sys.executable,
                "-m",
                "tether",
                "move",
                "--config",
                config,
                "--robot",
                "arm",
                "--activity",
                "m1",
                *joints,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            piped.returncode == 0 and json.loads(piped.stdout.splitlines()[-1])["status"] == "done"
        )
        # Piped, a refusal is its JSON document and still its one line on stderr; a usage
        # error too (the pipe means JSON before the flags are read).
        for extra in (["--joint", "a=5"], ["--bogus"]):
            argv = ["move", "--config", config, "--robot", "arm", "--activity", "m3", *extra]
            refused = subprocess.run(
                [sys.executable, "-m", "tether", *argv],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert refused.returncode == _exit.USAGE, refused.stderr
            doc = json.loads(refused.stdout.splitlines()[-1])
            assert doc["status"] == "refused" and doc["message"], doc
            line = refused.stderr.strip()
            assert line.startswith(f"tether move: {doc['code']}: ") and "\n" not in line, line
        code, out = on_a_tty("stop", "--config", config)
        assert code == _exit.OK, out
        assert out.startswith("arm (safe_stop hold, via direct): stopped") and "{" not in out
        assert ticks_in(out) == [], out
        code, out = on_a_tty("operator", "--config", config, "list")
        assert (code, out.strip()) == (_exit.OK, "nothing awaits a decision")
        code, out = on_a_tty("operator", "--config", config, "show", "nope")
        assert code == _exit.FAILED
        assert out.strip() == (
            "tether operator: unknown_activity: no parked activity with operation id 'nope'"
        )


def test_ctrl_d_at_a_prompt_is_an_answer_not_a_traceback(tmp_path: Path) -> None:
    """Ctrl-D at the credential prompt or at the reboot's confirmation printed a traceback
    and exited 70 (a bug in Tether); Ctrl-C there was already handled. It is no credential
    (`empty_credential`, as an empty line piped in is) and a "no"."""
    code, out = on_a_tty("operator", "hash", "--name", "carol", answers={"credential": b"\x04"})
    piped = subprocess.run(
        [sys.executable, "-m", "tether", "operator", "hash", "--name", "carol"],
        input="\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "empty_credential" in piped.stderr, piped.stderr
    assert code == piped.returncode == _exit.USAGE, out
    assert "Traceback" not in out and "internal error" not in out
    assert "empty_credential" in out and "input ended" in out, out
    from tests._serve import add_serve, daemon

    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        with daemon(add_serve(config)):  # only `tether serve` verifies the credential
            code, out = on_a_tty(
                *("operator", "--config", str(config), "reboot", "arm"),
                answers={"Is the arm supported?": b"\x04", "credential": b"\x04"},
            )
    # The "no" is taken: refused at once, no credential asked for, nothing sent.
    assert "Traceback" not in out and "internal error" not in out, out
    assert "credential:" not in out.split("Is the arm supported?", 1)[1], out
    assert code == _exit.FAILED and "reboot_unconfirmed" in out, out
