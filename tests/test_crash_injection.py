"""The one crash-injection mechanism: `TETHER_CRASH_AT` serves the runtime's points (counted
hits) and the providers' points (counted attempts); a provider child gets only its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tether._crash import CRASH_CHILD_ENV, CRASH_ENV, child_environment

_PROBE = """
import sys
from tether._crash import crash_point
from tether.adapters.dynamixel.move import CRASH_POINTS
from tether.families.sim.provider import CRASH_ENV as SIM_ENV
from tether.runtime import CRASH_POINTS as RUNTIME_POINTS
assert SIM_ENV == "TETHER_CRASH_AT"
for attempt in (1, 2, 3):
    crash_point("sim.result_durable", attempt=attempt)
    print("attempt", attempt, flush=True)
crash_point("after_reg_write")
print("after_reg_write", flush=True)
"""


def _probe(spec: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    env[CRASH_ENV] = spec
    return subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_provider_point_counts_attempts() -> None:
    first = _probe("sim.result_durable")
    assert first.returncode == -signal.SIGKILL and "attempt" not in first.stdout
    second = _probe("sim.result_durable@2")
    assert second.returncode == -signal.SIGKILL and second.stdout.count("attempt") == 1
    every = _probe("sim.result_durable@*")
    assert every.returncode == -signal.SIGKILL and "attempt" not in every.stdout


def test_an_adapter_point_uses_the_same_variable() -> None:
    killed = _probe("after_reg_write")
    assert killed.returncode == -signal.SIGKILL
    assert killed.stdout.count("attempt") == 3 and "after_reg_write" not in killed.stdout
    other = _probe("after_action")
    assert other.returncode == 0 and "after_reg_write" in other.stdout


def test_a_child_gets_only_its_own_points() -> None:
    base = {"PATH": "/bin", CRASH_ENV: "sim.child_started", "TETHER_CRASH_RANDOM": "1:0.5"}
    assert child_environment(base, "sim.") == {
        "PATH": "/bin",
        CRASH_ENV: "sim.child_started",
        CRASH_CHILD_ENV: "1",
    }
    assert child_environment({**base, CRASH_ENV: "after_effect"}, "sim.") == {"PATH": "/bin"}


_QUIET = """
import sys
from tether._crash import child_environment, crash_point
crash_point("after_claim")
if sys.argv[1:] == ["hand"]:
    child_environment({"TETHER_CRASH_AT": "sim.child_started"}, "sim.")
print("ran", flush=True)
"""


def test_a_point_never_reached_is_said_at_exit() -> None:
    """A crash test of a point the run never reaches (another adapter's, or one reached only
    in a process this one does not start) exited 0 with no word: taken for one that crashed
    and recovered."""

    def run(spec: str, *args: str, child: bool = False) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
        env[CRASH_ENV] = spec
        if child:
            env[CRASH_CHILD_ENV] = "1"
        return subprocess.run(
            [sys.executable, "-c", _QUIET, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    missed = run("during_effect")
    assert missed.returncode == 0 and missed.stdout == "ran\n"
    (line,) = missed.stderr.splitlines()
    assert line.startswith("tether: TETHER_CRASH_AT=during_effect was never reached"), line
    assert "no crash was injected" in line
    fired = run("after_claim")
    assert fired.returncode == -signal.SIGKILL and fired.stderr == ""
    handed = run("sim.child_started", "hand")  # a child's point: the child says nothing either
    assert handed.returncode == 0 and handed.stderr == "", handed.stderr
    in_child = run("sim.child_started", child=True)
    assert in_child.returncode == 0 and in_child.stderr == "", in_child.stderr
