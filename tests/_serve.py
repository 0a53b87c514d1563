"""Shared helpers for tests that run `tether serve` as a subprocess over an emulated DYNAMIXEL
arm (tests/adapters/_dxl_setup.py): its configuration, the daemon until a block ends (or until
a crash point SIGKILLs it), an operator decision through it, and waiting on a view."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.client import Client

from tests.adapters._dxl_setup import CREDENTIAL, write_config

EFFECTFUL = ("write", "reg_write", "action", "sync_write", "reboot", "factory_reset")
SERVE = '\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\nsse = "127.0.0.1:0"\n'


def clean_env(crash_at: str | None = None) -> dict[str, str]:
    """This process's environment without crash injection, plus `crash_at` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    return env


def tether(*argv: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
    )


def serve_config(tmp: Path, url: str, *, extra: str = SERVE, policy: str = "hold") -> Path:
    """The emulator's host.toml (`write_config`) with a `[serve]` table."""
    path = write_config(tmp, url)
    text = path.read_text().replace('safe_stop = "hold"', f'safe_stop = "{policy}"')
    path.write_text(text + extra)
    return path


def add_serve(config: Path, extra: str = SERVE) -> Path:
    """Give an existing host.toml the `[serve]` table (once)."""
    text = config.read_text()
    if "[serve]" not in text:
        config.write_text(text + extra)
    return config


@contextmanager
def daemon(
    config: Path, *, crash_at: str | None = None
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`tether serve` until the block ends (then SIGTERM, unless it is already dead); its ready
    line. With `crash_at`, the daemon runs with `TETHER_CRASH_AT` set to it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(crash_at),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        yield proc, json.loads(line)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def killed(proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait for the daemon's crash point to SIGKILL it."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the crash point was never reached") from None
    assert code == -signal.SIGKILL, code


def operator(
    config: Path, *argv: str, credential: str | None = CREDENTIAL
) -> subprocess.CompletedProcess[str]:
    """`tether operator --config CONFIG --json ARGV`; a decision, resume or reboot gets the
    credential on stdin."""
    decides = bool(argv) and argv[0] in ("resolve", "resume", "reboot") and credential is not None
    return tether(
        "operator", "--config", str(config), "--json", *argv,
        *(["--credential-stdin"] if decides else []),
        stdin=f"{credential}\n" if decides else "",
    )  # fmt: skip


def effectful(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in journal if e["instruction"] in EFFECTFUL]


def watch_until(
    client: Client, key: str, states: tuple[str, ...], timeout: float
) -> dict[str, Any]:
    """The view once in one of `states`; "moving" is a running move that reported progress
    (its ACTION was sent)."""
    deadline = time.monotonic() + timeout
    while True:
        view = client.get(key)
        moving = view["state"] == "running" and view.get("progress") and "moving" in states
        if view["state"] in states or moving:
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.02)


def final(client: Client, key: str, timeout: float = 90) -> dict[str, Any]:
    """The Activity's view once it is final (settled, or parked for an operator)."""
    deadline = time.monotonic() + timeout
    while True:
        view = client.get(key)
        if view["final"]:
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


@contextmanager
def decider(config: Path, data_dir: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`tether serve` on the config's state dir and `data_dir` serving no robot-move family
    (only the sim's, and no worker: it claims nothing): it answers `tether operator`, verifying the
    credential against its own host.toml, while the test's own Host or worker runs the moves."""
    add_serve(
        config,
        f'\n[serve]\ndata_dir = "{data_dir}"\nworkers = 0\nsse = "off"\n'
        'families = ["tether.serve.families:sim_families"]\n',
    )
    with daemon(config) as running:
        yield running
