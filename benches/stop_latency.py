"""Benchmark: `tether stop` latency through a host's control socket, with N idle clients vs none.

A real host (`RobotHost`) owns an emulated DYNAMIXEL bus (2 servos on a pty, in-process), and a
stop request goes over its control socket exactly as `tether stop` sends it (`send_request`):
the owner latches the robot, safe-stops it over the bus and answers. Timed two ways in one run:

- baseline: no other client connected;
- loaded: N clients connected and silent plus N that sent half a request and stall (the
  clients that, before the selector design, could hold a stop until the client timed out).

Prints p50/p99 of each and the ratio loaded/baseline. Target: p99 ratio <= 2 (the idle clients
cost a stop nothing but a few selector wake-ups). Run: `make bench` or
`.venv/bin/python benches/stop_latency.py [--idle N] [--stops S]`.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

from _arm import arm_config
from tether.adapters.dynamixel.config import load_config
from tether.adapters.dynamixel.host import RobotHost
from tether.devices.control import send_request
from tether.emulators.dynamixel import DynamixelEmulator

ROUNDS = 4


def stops(socket_path: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        reports = send_request(socket_path, {"op": "stop", "robot": "arm"})
        out.append(time.perf_counter() - start)
        assert reports and reports[0]["ok"], reports
    return out


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=30, help="idle and half-sent clients, each")
    parser.add_argument("--stops", type=int, default=200, help="stops timed per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, DynamixelEmulator([1, 2]).start() as emu:
        path = Path(tmp) / "host.toml"
        path.write_text(arm_config(Path(tmp) / "state", emu.path, safe_stop="torque_off"))
        with RobotHost(load_config(path)) as host:
            host.connect("arm")
            sock_path = host.socket_path
            stops(sock_path, args.stops)  # warm up (the first stops after a connect are slower)
            quiet: list[float] = []
            loaded: list[float] = []
            for _ in range(ROUNDS):  # interleaved, so drift on a shared machine hits both cases
                quiet += stops(sock_path, args.stops // ROUNDS)
                clients = []
                for i in range(2 * args.idle):
                    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    c.connect(sock_path)
                    if i % 2:
                        c.sendall(b'{"op": "state", "rob')
                    clients.append(c)
                try:
                    loaded += stops(sock_path, args.stops // ROUNDS)
                finally:
                    for c in clients:
                        c.close()
    print(f"stop latency over the control socket, {args.stops} stops per case (ms)")
    print(f"{'case':<34} {'p50':>8} {'p99':>8} {'max':>8}")
    for name, values in (
        ("no other client (baseline)", quiet),
        (f"{args.idle} idle + {args.idle} half-sent clients", loaded),
    ):
        print(f"{name:<34} {p(values, 0.5):8.2f} {p(values, 0.99):8.2f} {max(values) * 1000:8.2f}")
    print(
        f"ratio loaded/baseline: p50 {statistics.median(loaded) / statistics.median(quiet):.2f}x"
        f", p99 {p(loaded, 0.99) / p(quiet, 0.99):.2f}x (target: p99 <= 2x)"
    )


if __name__ == "__main__":
    main()
