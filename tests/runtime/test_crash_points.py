"""Crash injection points: no-ops unless selected by the environment, SIGKILL when selected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tether.runtime import CRASH_POINTS, crash_point

_PROBE = """
from tether.runtime import crash_point
for _ in range(3):
    crash_point("after_bind")
    print("survived", flush=True)
"""


def _probe(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )


def test_points_are_no_ops_without_the_environment() -> None:
    assert "TETHER_CRASH_AT" not in os.environ
    for name in CRASH_POINTS:
        crash_point(name)  # the test process is still alive
    assert _probe({}).stdout.count("survived") == 3


def test_selected_point_kills_on_the_nth_hit() -> None:
    first = _probe({"TETHER_CRASH_AT": "after_bind"})
    assert first.returncode == -signal.SIGKILL and first.stdout.count("survived") == 0
    third = _probe({"TETHER_CRASH_AT": "after_bind@3"})
    assert third.returncode == -signal.SIGKILL and third.stdout.count("survived") == 2
    other = _probe({"TETHER_CRASH_AT": "after_effect"})
    assert other.returncode == 0 and other.stdout.count("survived") == 3
    certain = _probe({"TETHER_CRASH_RANDOM": "1:1.0"})
    assert certain.returncode == -signal.SIGKILL
