"""Crash tests: the episode child dies with its worker, and a restart reconciles correctly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tether.families.sim import ProcessIdentity, ProvenAbsent, ResultFound, SimProvider
from tether.families.sim.provider import CRASH_ENV

WORKER = Path(__file__).with_name("_worker.py")


def _start_worker(root: Path, attempt: int, steps: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(root), "op", str(attempt), str(steps)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def _events_until(proc: subprocess.Popen[str], kind: str) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == kind:
            return dict(event)
    raise AssertionError(f"worker ended before a {kind!r} event")


def _wait_gone(child: ProcessIdentity) -> None:
    # A hang guard, not a timing assertion: the kernel delivers PDEATHSIG promptly.
    deadline = time.monotonic() + 60
    while child.observe()[0] is not False:
        assert time.monotonic() < deadline, "episode child outlived its worker"
        time.sleep(0.02)


def test_killing_the_worker_mid_episode_kills_its_child_and_allows_one_retry(
    tmp_path: Path,
) -> None:
    with _start_worker(tmp_path, 1, 200_000) as worker:
        child = ProcessIdentity.from_dict(
            {k: v for k, v in _events_until(worker, "child").items() if k != "event"}
        )
        _events_until(worker, "progress")
        assert child.observe()[0] is True
        worker.send_signal(signal.SIGKILL)
    _wait_gone(child)

    provider = SimProvider(tmp_path)
    assert provider.find_result("op") is None
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ProvenAbsent)
    assert fact.proof["children_gone"][0]["child"]["pid"] == child.pid

    with _start_worker(tmp_path, 2, 200_000) as retry:
        done = _events_until(retry, "done")
    assert retry.returncode == 0 and done["reused"] is False
    found = provider.find_result("op")
    assert found is not None and found.summary["attempt"] == 2


def test_worker_killed_after_the_result_is_durable_is_recovered_not_rerun(
    tmp_path: Path,
) -> None:
    with _start_worker(tmp_path, 1, 300, **{CRASH_ENV: "sim.result_durable"}) as worker:
        assert worker.stdout is not None
        worker.stdout.read()
    assert worker.returncode == -signal.SIGKILL
    provider = SimProvider(tmp_path)
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ResultFound) and fact.outcome.summary["attempt"] == 1
    with _start_worker(tmp_path, 2, 300) as again:
        assert _events_until(again, "done")["reused"] is True
    assert again.returncode == 0
    assert provider.entry("op").attempts() == [1]
