"""Benchmark: RobotControl over gRPC vs the same Activity pipeline in process, and Stop under load.

Device: the DYNAMIXEL emulator (2 servos on a real pty, its own process, shafts 20x faster
than real time), under a real `tether serve` daemon (SQLite catalog and world ledger, its
workers, the robot_move family).

Part 1, one process: a `Daemon` started in this process with `[serve] grpc` on loopback.
Moves alternate between two poses, interleaved:
- in process: `Daemon.submit` (the control socket's submit path) then the record is read
  until it holds a result (woken by the catalog's doorbell, as the gRPC watch is);
- gRPC: `Execute` then `WatchOperation` to its first terminal view, from a grpcio client.
Prints Execute-to-terminal p50/p99 and ops/s (sequential) of each and the ratio.
Target: gRPC p50 <= 1.5x in-process p50.

Part 2: `tether serve` as a subprocess. Stop p99 while another process holds 200 open
WatchOperation streams (on moves a stop parked: after the idle stops an operator resumes the
arm (`tether operator resume`; a latched arm takes no new move), the flood's process
executes the moves, slow ones on an emulator at real time, and a stop latches the arm again,
so every move parks for an operator and sends nothing more) and offers 500
Execute/s (unique ids, each already past its `not_after_ms`: committed, admitted, claimed and
recorded `expired` by the workers without a frame on the bus, so the flood loads the server,
the catalog and the world ledger, not the serial line the stop itself needs; at most
`in_flight(watches)` in flight: the daemon's group-commit bound, or fewer so the RPC threads
are never all taken), vs the idle Stop p99. The flood's process runs at the daemon's
serving priority (`tether._priority.DISPATCH_NICE`, where this process may raise it): its
clients stand for planners on other machines, and at an ordinary priority the daemon's raised
RPC threads would take the shared cores from it, so the daemon would see less than the
offered load. The achieved Execute rate (answered per second of the flood window) and the
flood world's tick count are printed.
Targets: achieved >= 95% of the offered rate with no failed Execute; loaded p99 <= 3x idle
p99. Each is printed PASS or FAIL, with the machine's load average.

Run: `.venv/bin/python benches/grpc_control.py [--rounds N] [--stops N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from _arm import arm_config
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether._priority import DISPATCH_NICE
from tether.devices.credentials import hash_secret
from tether.serve.daemon import SUBMIT_BATCH, Daemon
from tether.serve.grpc_server import STOP_RESERVE, THREADS, world_for
from tether.world import SqliteLedger

#: The states an operation ends in (a watch is followed to the first of them).
TERMINAL_STATES = frozenset({pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.EXPIRED})
#: The achieved Execute rate must reach this share of the offered rate (part 2).
RATE_SHARE = 0.95
#: The arm's speed in part 2 (rad/s): its watched moves never end before the stop parks them.
PARKED_SPEED = 0.1
TOKEN = "bench-planner-token-9d1c"
OPERATOR = "bench-operator-credential-41f7"
KIND = "physical_ai.robot_move.absolute"
META = (("authorization", f"Bearer {TOKEN}"),)


def _config(state: Path, url: str, *, speed: float = 2.0) -> str:
    planner = f'[planners.bench]\ntoken = "{hash_secret(TOKEN)}"\nrole = "planner"\n'
    planner += f'[operators.olga]\ncredential = "{hash_secret(OPERATOR)}"\nrole = "operator"\n'
    serve = '[serve]\nsse = "off"\nlease_ms = 5000\nsettle_timeout_s = 60\ngrpc = "127.0.0.1:0"\n'
    return arm_config(state, url, speed=speed, principals=planner, serve=serve)


FLOOD = """
import json, sys, threading, time
import grpc
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
address, token = sys.argv[1], sys.argv[2]
watches, rate, seconds = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
meta = (("authorization", "Bearer " + token),)
channel = grpc.insecure_channel(address)
control = rpc.RobotControlStub(channel)
far = int(time.time() * 1000) + 3_600_000
def request(i, not_after=None):
    # At least 0.5 rad from the start pose: at the arm's 0.1 rad/s no watched move ends
    # before the stop that parks them.
    targets = {"a": 0.5 + 0.1 * (i % 5), "b": 0.0}
    move = pb.JointMove(kind=pb.JointMove.ABSOLUTE, targets_rad=targets)
    return pb.ExecuteRequest(
        operation_id=f"flood-{i}", device="arm", not_after_ms=not_after or far, joint_move=move
    )
streams = []
for i in range(watches):
    control.Execute(request(i), metadata=meta)
    watch = pb.WatchOperationRequest(operation_id=f"flood-{i}")
    streams.append(control.WatchOperation(watch, metadata=meta))
parked = threading.Semaphore(0)
def drain(s):
    held = False
    try:
        for view in s:
            if not held and view.state not in (pb.PENDING, pb.RUNNING):
                held = True  # parked by the latch (or ended): it sends nothing more
                parked.release()
    except grpc.RpcError:
        pass
    if not held:
        parked.release()
for s in streams:
    threading.Thread(target=drain, args=(s,), daemon=True).start()
print("executed", flush=True)  # the bench stops the arm now: the moves park, latched
waited = time.monotonic()
for _ in streams:  # the watched moves' own attempts (a read-back each) end before the flood
    parked.acquire(timeout=120)
print("ready", round(time.monotonic() - waited, 2), flush=True)
sent = done = failed = 0
inflight = threading.Semaphore(int(sys.argv[6]))
def finished(f):
    global done, failed
    if f.exception() is None:
        done += 1
    else:
        failed += 1
    inflight.release()
start = time.monotonic()
i = watches
while time.monotonic() - start < seconds:
    due = start + (i - watches) / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    if not inflight.acquire(timeout=1.0):
        continue
    # Past its not_after: committed, then recorded expired without touching the bus.
    f = control.Execute.future(request(i, int(time.time() * 1000) - 1), metadata=meta)
    f.add_done_callback(finished)
    i += 1
    sent += 1
elapsed = time.monotonic() - start
answered, errors = done, failed  # by the end of the window
open_streams = sum(1 for s in streams if s.is_active())
print(json.dumps({"sent": sent, "answered": answered, "failed": errors, "seconds": elapsed,
                  "open_watches": open_streams}), flush=True)
"""


@contextmanager
def emulator(directory: Path, speed_scale: int = 20) -> Iterator[str]:
    """`tether emulate dynamixel` in its own process; the path of its pty link."""
    directory.mkdir(parents=True, exist_ok=True)
    link, control = directory / "emu.tty", directory / "emu.sock"
    argv = ["emulate", "dynamixel", "--ids", "1,2", "--control", str(control)]
    argv += ["--speed-scale", str(speed_scale), "--link", str(link)]
    with subprocess.Popen(
        [sys.executable, "-m", "tether", *argv], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip()
            deadline = time.monotonic() + 30
            while not control.exists():
                assert time.monotonic() < deadline, "the emulator never started"
                time.sleep(0.01)
            yield str(link)
        finally:
            proc.terminate()


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def pose(i: int) -> dict[str, float]:
    return {"a": 0.3, "b": -0.3} if i % 2 == 0 else {"a": -0.3, "b": 0.3}


def in_process(daemon: Daemon, i: int) -> float:
    from tether.runtime._wakeup import Wakeup
    from tether.storage import RESULT

    runtime = daemon.host()
    wakeup = Wakeup(threading.Event(), 1.0, doorbell=runtime.catalog.doorbell, topic=RESULT)
    not_after = int(time.time() * 1000) + 120_000
    body = {"robot": "arm", "targets": pose(i), "not_after_ms": not_after}
    start = time.perf_counter()
    key, _ = daemon.submit("bench-local", f"local-{i}", KIND, body)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"move {key} never reached a result"
        mark = wakeup.mark()
        record = runtime.get(key)
        if record is not None and record.result is not None:
            assert not record.result.failed, record
            return time.perf_counter() - start
        wakeup.wait(mark, delay_s=0.05)


def through_grpc(control: Any, i: int) -> float:
    request = pb.ExecuteRequest(
        operation_id=f"remote-{i}",
        device="arm",
        joint_move=pb.JointMove(kind=pb.JointMove.ABSOLUTE, targets_rad=pose(i)),
        not_after_ms=int(time.time() * 1000) + 120_000,
    )
    start = time.perf_counter()
    op = control.Execute(request, metadata=META, timeout=30)
    watch = pb.WatchOperationRequest(operation_id=op.id)
    views = control.WatchOperation(watch, metadata=META, timeout=60)
    for view in views:  # to its first terminal view (the stream goes on to its settlement)
        op = view
        if op.state in TERMINAL_STATES:
            views.cancel()
            break
    assert op.state == pb.SUCCEEDED, op
    return time.perf_counter() - start


def part1(tmp: Path, url: str, rounds: int) -> dict[str, Any]:
    path = tmp / "p1.toml"
    path.write_text(_config(tmp / "s1", url))
    daemon = Daemon.from_path(path).start()
    try:
        channel = grpc.insecure_channel(daemon.grpc_url)
        control = rpc.RobotControlStub(channel)
        local: list[float] = []
        remote: list[float] = []
        in_process(daemon, -2)
        through_grpc(control, -1)  # warm up (first motion, channel)
        for i in range(rounds):
            local.append(in_process(daemon, 2 * i))
            remote.append(through_grpc(control, 2 * i + 1))
        channel.close()
    finally:
        daemon.close()
    return {"in_process": local, "grpc": remote}


def in_flight(watches: int) -> int:
    """The flood's bound on Executes in flight: the daemon's group-commit batch, but within
    the RPC threads the watches leave to calls (`THREADS - STOP_RESERVE`, one per call in
    flight; the server answers one past them `server_busy`, keeping `STOP_RESERVE` threads for
    stops: a limit of the server, not of the submit path measured here)."""
    return max(1, min(SUBMIT_BATCH, THREADS - STOP_RESERVE - watches))


def timed_stop(control: Any) -> float:
    start = time.perf_counter()
    answer = control.Stop(pb.StopRequest(device="arm"), metadata=META, timeout=10)
    elapsed = time.perf_counter() - start
    assert answer.devices[0].device == "arm", answer
    return elapsed


def _serving_priority() -> None:
    """The flood's process at the daemon's serving priority (see the module docstring)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, DISPATCH_NICE)
    except OSError:
        pass


def part2(tmp: Path, url: str, stops: int, watches: int, rate: float) -> dict[str, Any]:
    path = tmp / "p2.toml"
    path.write_text(_config(tmp / "s2", url, speed=PARKED_SPEED))
    serve = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None
        ready = json.loads(serve.stdout.readline())
        channel = grpc.insecure_channel(ready["grpc"])
        control = rpc.RobotControlStub(channel)
        timed_stop(control)
        idle = []
        for _ in range(stops):
            idle.append(timed_stop(control))
            time.sleep(0.01)
        seconds = max(5.0, stops * 0.03 + 3.0)
        # A latched arm takes no new move (`robot_latched`): the operator resumes it, the
        # flood's process executes the moves to watch, then a stop latches the arm again.
        resumed = subprocess.run(
            [sys.executable, "-m", "tether", "operator", "--config", str(path), "resume", "arm",
             "--credential-stdin"],
            input=OPERATOR + "\n", capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        if resumed.returncode != 0:
            raise SystemExit(f"the arm could not be resumed: {resumed.stderr.strip()}")
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, ready["grpc"], TOKEN, str(watches), str(rate),
             str(seconds), str(in_flight(watches))],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_serving_priority,
        )  # fmt: skip
        assert flood.stdout is not None
        executed = flood.stdout.readline().split()
        if executed == ["executed"]:  # the moves to watch are in: latched, they all park
            control.Stop(pb.StopRequest(device="arm"), metadata=META, timeout=10)
        ready_line = flood.stdout.readline().split()
        if ready_line[:1] != ["ready"]:  # its traceback, if any, went to this stderr above
            flood.kill()
            raise SystemExit(
                f"the flood process never got ready (exit {flood.wait()}, said {ready_line}):"
                " its Executes or watches of the moves to hold failed"
            )
        time.sleep(1.0)
        loaded = []
        for _ in range(stops):
            loaded.append(timed_stop(control))
            time.sleep(0.01)
        summary = json.loads(flood.stdout.readline())
        summary["parked_s"] = float(ready_line[1])
        flood.wait(timeout=120)
        channel.close()
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    ledger = SqliteLedger.open(tmp / "s2" / "moves" / "world.db")
    try:  # the flood's world: how many ticks its intents took (group commit)
        summary["ticks"] = ledger.head(world_for("bench")).tick
    finally:
        ledger.close()
    return {"idle": idle, "loaded": loaded, "flood": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="moves timed per path (part 1)")
    parser.add_argument("--stops", type=int, default=200, help="stops timed per case (part 2)")
    parser.add_argument("--watches", type=int, default=200, help="open watch streams (part 2)")
    parser.add_argument("--rate", type=float, default=500.0, help="offered Execute/s (part 2)")
    parser.add_argument("--part", type=int, choices=(0, 1, 2), default=0, help="0: both")
    args = parser.parse_args()
    one: dict[str, Any] = {}
    two: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if args.part in (0, 1):
            with emulator(tmp / "e1") as url:
                one = part1(tmp, url, args.rounds)
        if args.part in (0, 2):
            with emulator(tmp / "e2", speed_scale=1) as url:
                two = part2(tmp, url, args.stops, args.watches, args.rate)
    if one:
        report_one(args, one)
    if two:
        report_two(args, two)


def report_one(args: Any, one: dict[str, Any]) -> None:
    print(f"Execute-to-terminal, {args.rounds} moves per path, emulated DYNAMIXEL arm (ms)")
    print(f"{'path':<14} {'p50':>8} {'p99':>8} {'ops/s':>8}")
    for label, values in (("in process", one["in_process"]), ("gRPC", one["grpc"])):
        rate = len(values) / sum(values)
        print(f"{label:<14} {p(values, 0.5):8.2f} {p(values, 0.99):8.2f} {rate:8.2f}")
    ratio = statistics.median(one["grpc"]) / statistics.median(one["in_process"])
    print(f"gRPC/in-process p50: {ratio:.2f}x (target <= 1.5x)")


def report_two(args: Any, two: dict[str, Any]) -> None:
    flood = two["flood"]
    achieved = flood["answered"] / flood["seconds"]
    print(
        f"\nStop latency, {args.stops} stops per case (ms); load: {args.watches} watch streams "
        f"(open at the end: {flood['open_watches']}) and {args.rate:.0f} Execute/s offered from "
        "another process"
    )
    print(
        f"the watched moves (held by the idle stops' latch) all parked {flood['parked_s']:.1f} s"
        " after their Executes, before the flood and the loaded stops began"
    )
    print(
        f"Execute flood: at most {in_flight(args.watches)} in flight, {flood['sent']} sent, "
        f"{flood['answered']} answered, {flood['failed']} "
        f"failed in {flood['seconds']:.1f} s: achieved {achieved:.0f} Execute/s; the world took "
        f"{flood['ticks']} ticks (group commit; observation ticks included)"
    )
    print(f"{'case':<14} {'p50':>8} {'p99':>8} {'max':>8}")
    for label, values in (("idle", two["idle"]), ("loaded", two["loaded"])):
        print(f"{label:<14} {p(values, 0.5):8.2f} {p(values, 0.99):8.2f} {max(values) * 1000:8.2f}")
    ratio = p(two["loaded"], 0.99) / p(two["idle"], 0.99)
    rate_ok = achieved >= RATE_SHARE * args.rate and flood["failed"] == 0
    stop_ok = ratio <= 3.0
    print(
        f"achieved rate: {achieved:.0f}/s of {args.rate:.0f}/s offered (target >= "
        f"{RATE_SHARE:.0%} of it, no failed Execute): {'PASS' if rate_ok else 'FAIL'}"
    )
    print(f"loaded/idle p99: {ratio:.2f}x (target <= 3x): {'PASS' if stop_ok else 'FAIL'}")
    one, five, fifteen = os.getloadavg()
    cpus = os.cpu_count()
    print(f"machine load average at the end: {one:.2f} {five:.2f} {fifteen:.2f} ({cpus} CPUs)")


if __name__ == "__main__":
    main()
