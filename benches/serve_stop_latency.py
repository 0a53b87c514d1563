"""Benchmark: `tether stop` latency through `tether serve` with a move in flight vs idle.

A real daemon (`tether serve`, a subprocess) owns an emulated DYNAMIXEL bus (2 servos on a pty,
real-time shafts, in this process) and runs its workers, SQLite catalog and AG-UI stream. A
stop goes over the daemon's control socket exactly as `tether stop` sends it (`send_request`
to the port owner's socket). Timed two ways, interleaved in one run:

- idle: no Activity in flight (the robot latched by the previous stop);
- in flight: a move submitted through `tether.client`, stopped once it reports progress (its
  ACTION sent, the worker renewing its lease and reporting progress through the catalog).

Between rounds the operator resumes the robot through the daemon (credential verified there).
Prints p50/p99 of each and the ratio in-flight/idle. Target: p50 ratio <= 2 (the stop path
waits on no storage lock; at most one frame of the move's). Run: `make bench` or
`.venv/bin/python benches/serve_stop_latency.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _arm import arm_config
from tether.adapters.dynamixel.config import hash_credential
from tether.client import Client
from tether.devices.control import send_request
from tether.emulators.dynamixel import DynamixelEmulator

SECRET = "bench operator secret"
SERVE = '[serve]\nsse = "off"\nlease_ms = 5000\nsettle_timeout_s = 60\n'
KIND = "physical_ai.robot_move.absolute"


def timed_stop(socket_path: str) -> float:
    start = time.perf_counter()
    reports = send_request(socket_path, {"op": "stop", "robot": "arm"})
    elapsed = time.perf_counter() - start
    assert reports and reports[0]["robot"] == "arm", reports
    return elapsed


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="stops timed per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, DynamixelEmulator([1, 2]).start() as emu:
        path = Path(tmp) / "host.toml"
        path.write_text(
            arm_config(
                Path(tmp) / "state",
                emu.path,
                speed=0.5,
                principals=f'[operators.bench]\ncredential = "{hash_credential(SECRET)}"\n',
                serve=SERVE,
            )
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "tether", "serve", "--config", str(path), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert daemon.stdout is not None
            ready = json.loads(daemon.stdout.readline())
            sock = ready["socket"]
            client = Client(config=path)
            idle: list[float] = []
            loaded: list[float] = []
            timed_stop(sock)  # warm up
            for i in range(args.rounds):
                idle.append(timed_stop(sock))
                client.request({"op": "operator_resume", "robot": "arm", "credential": SECRET})
                target = 1.2 if i % 2 == 0 else -1.2
                view = client.submit("bench", f"move-{i}", KIND, {"robot": "arm", "targets": {
                    "a": target, "b": -target}})  # fmt: skip
                deadline = time.monotonic() + 30
                while not client.get(view["key"])["progress"]:
                    assert time.monotonic() < deadline, "the move never reported progress"
                    time.sleep(0.01)
                loaded.append(timed_stop(sock))
                for _ in client.watch(view["key"], timeout=30):
                    pass
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    print(f"tether stop latency through tether serve, {args.rounds} stops per case (ms)")
    print(f"{'case':<28} {'p50':>8} {'p99':>8} {'max':>8}")
    for name, values in (("idle (baseline)", idle), ("a move in flight", loaded)):
        print(f"{name:<28} {p(values, 0.5):8.2f} {p(values, 0.99):8.2f} {max(values) * 1000:8.2f}")
    print(
        f"ratio in-flight/idle: p50 {statistics.median(loaded) / statistics.median(idle):.2f}x, "
        f"p99 {p(loaded, 0.99) / p(idle, 0.99):.2f}x (target: p50 <= 2x)"
    )


if __name__ == "__main__":
    main()
