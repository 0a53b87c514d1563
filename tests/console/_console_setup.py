"""Shared setup of the console tests: a daemon with the console on, a move parked by an injected
power loss, and an HTTP client of the console (httpx) that keeps the session cookie."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _dxl_setup import CREDENTIAL, EmulatorProcess, emulator_process
from test_serve_daemon import daemon, serve_config
from tether.client import Client

KIND = "physical_ai.robot_move.absolute"
TARGETS = {"a": 1.0, "b": -1.0}
EFFECTFUL = ("write", "reg_write", "action", "sync_write", "reboot", "factory_reset")


def console_serve(*, max_age_s: float = 300.0, extra: str = "") -> str:
    return (
        '\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\nsse = "127.0.0.1:0"\n'
        f'console = "127.0.0.1:0"\nconsole_max_evidence_age_s = {max_age_s}\n{extra}'
    )


@dataclass
class Host:
    """An emulator, a daemon with the console on, and the daemon's ready line."""

    tmp: Path
    emu: EmulatorProcess
    config: Path
    proc: subprocess.Popen[str]
    ready: dict[str, Any]
    client: Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = Client(config=self.config)

    @property
    def url(self) -> str:
        return str(self.ready["console"])

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)

    def effectful(self) -> list[dict[str, Any]]:
        return [e for e in self.emu.journal() if e["instruction"] in EFFECTFUL]

    def actions(self) -> int:
        return len([e for e in self.emu.journal() if e["instruction"] == "action"])

    def view(self, key: str) -> dict[str, Any]:
        return self.client.get(key)

    def wait(self, key: str, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
        """The view once in one of `states` ("moving": running, with progress)."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.client.get(key)
            moving = view["state"] == "running" and view.get("progress") and "moving" in states
            if view["state"] in states or moving:
                return view
            assert time.monotonic() < deadline, view
            time.sleep(0.02)

    def submit(self, activity: str, targets: dict[str, float] | None = None) -> str:
        view = self.client.submit(
            "local", activity, KIND, {"robot": "arm", "targets": targets or TARGETS}
        )
        return str(view["key"])

    def park(self, activity: str = "m1") -> str:
        """A move parked for an operator: a power loss while its shafts move."""
        key = self.submit(activity)
        self.wait(key, ("moving",))
        self.emu.request(op="power_cycle")
        parked = self.wait(key, ("awaiting_decision",))
        assert parked["reason"] == "device_state_lost_or_moved", parked
        return key


@contextmanager
def console_host(
    tmp: Path, *, speed_scale: float = 1.0, max_age_s: float = 300.0, extra: str = ""
) -> Iterator[Host]:
    tmp.mkdir(parents=True, exist_ok=True)
    with emulator_process(tmp, speed_scale=speed_scale) as emu:
        config = serve_config(tmp, emu.path, extra=console_serve(max_age_s=max_age_s, extra=extra))
        with daemon(config) as (proc, ready):
            assert ready["console"].startswith("http://127.0.0.1:"), ready
            yield Host(tmp, emu, config, proc, ready)


def login(http: httpx.Client, credential: str = CREDENTIAL) -> str:
    """Log in; the session's CSRF token."""
    answer = http.post("/api/login", json={"credential": credential})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["csrf"])


def tether(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)
