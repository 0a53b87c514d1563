"""`tether worker` runs the sim reaches with their own factory: `tether.families.sim.adapter:
worker_families`, over its data dir. A reach admitted by a Host on that data dir is claimed,
run (a seeded MuJoCo episode in its child process) and recorded by the worker process, then
settled by the Host's observation; tether serve's factory given to it is a one-line refusal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tether.activities import ActivityKey
from tether.families.sim.adapter import SimEpisodeAdapter, sim_family
from tether.families.sim.family import KIND, submit_intent
from tether.runtime import Host

BODY = {"seed": 3, "target": [0.2, 0.1], "episodes": 1, "steps": 200}


def worker(data: Path, factory: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", str(data), "--families", factory],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_serves_factory_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    proc = worker(data, "tether.serve.families:sim_families")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("tether worker: bad_families: ") and "Traceback" not in err
    assert "tether.families.sim.adapter:worker_families" in line


def test_a_worker_process_runs_a_reach_the_host_admitted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    adapter = SimEpisodeAdapter(data)
    host = Host(data, [sim_family(adapter)], workers=0, observe=False)
    proc = None
    try:
        host.create_world("w")
        host.commit_tick("w", [submit_intent()("reach-1", KIND, BODY)])
        key = ActivityKey("w", KIND, "reach-1")
        assert host.get(key) is not None  # admitted, for the worker to claim
        proc = worker(data, "tether.families.sim.adapter:worker_families")
        deadline = time.monotonic() + 120
        while (record := host.get(key)) is None or record.result is None:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, record
            time.sleep(0.2)
        assert not record.result.failed, record
        [_] = host.observe_once()
        settled = host.get(key)
        assert settled is not None and settled.settlement is not None
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            # It said what it works on as it started: its workers, host, catalog, families.
            ready = f"tether worker ready: 1 worker(s) for host {socket.gethostname()!r} on"
            catalog = f"catalog sqlite://{data / 'catalog.db'}"
            assert f"{ready} {catalog}, families physical_ai.sim" in err
        host.close()
        adapter.close()
