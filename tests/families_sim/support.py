"""Helpers the sim provider's process tests share: a worker process (`_worker.py`) and its
JSON-lines events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tether.families.sim import ProcessIdentity

WORKER = Path(__file__).with_name("_worker.py")


def start_worker(root: Path, attempt: int, steps: int, **env: str) -> subprocess.Popen[str]:
    """`_worker.py ROOT op ATTEMPT STEPS` with `env` added to this process's environment."""
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(root), "op", str(attempt), str(steps)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def events_until(proc: subprocess.Popen[str], kind: str) -> dict[str, Any]:
    """Read the worker's events until one of `kind`; fail if it ends first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == kind:
            return dict(event)
    raise AssertionError(f"worker ended before a {kind!r} event")


def wait_gone(child: ProcessIdentity) -> None:
    """Wait until `child` is provably gone. A hang guard, not a timing assertion: the kernel
    delivers PDEATHSIG promptly and an episode process exits right after its last event."""
    deadline = time.monotonic() + 60
    while child.observe()[0] is not False:
        assert time.monotonic() < deadline, "episode process outlived its worker"
        time.sleep(0.02)
