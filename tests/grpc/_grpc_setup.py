"""`tether serve` with `[serve] grpc` over an emulated DYNAMIXEL arm (a real pty), and real
grpcio clients on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from _dxl_setup import write_config
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.activities import ActivityKey, operation_id_for
from tether.devices.credentials import hash_secret
from tether.runtime import ArtifactStore, AttemptContext, ProgressEvent

from tests._secrets import OBSERVER, OPERATOR, PLANNER

PLANNER_HASH = hash_secret(PLANNER)
OPERATOR_HASH = hash_secret(OPERATOR)
OBSERVER_HASH = hash_secret(OBSERVER)
SERVE = '\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\nsse = "off"\ngrpc = "127.0.0.1:0"\n'
PRINCIPALS = f"""
[planners.ci]
token = "{PLANNER_HASH}"
role = "planner"
[operators.olga]
credential = "{OPERATOR_HASH}"
role = "operator"
[operators.watcher]
credential = "{OBSERVER_HASH}"
role = "observer"
"""


def grpc_config(tmp: Path, url: str, *, serve: str = SERVE) -> Path:
    path = write_config(tmp, url)
    text = path.read_text()
    text = text.replace("[ports.bus]", PRINCIPALS + "[ports.bus]", 1)
    path.write_text(text + serve)
    return path


@contextmanager
def daemon(
    config: Path, *, crash_at: str | None = None, args: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`tether serve` (with `args`) until the block ends (then SIGTERM); its ready line."""
    env = dict(os.environ)
    env.pop("TETHER_CRASH_AT", None)
    if crash_at:
        env["TETHER_CRASH_AT"] = crash_at
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        ready = json.loads(line)
        assert ready.get("grpc"), ready
        yield proc, ready
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


def tether(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m tether ARGV` to its end (60 s at most), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv], capture_output=True, text=True, timeout=60
    )


def with_tls(config: Path, table: str) -> Path:
    """`config` (`grpc_config`'s) with the `[tls]` table's `table` lines."""
    text = config.read_text().replace("[ports.bus]", f"[tls]\n{table}[ports.bus]", 1)
    config.write_text(text)
    return config


def execute_killed(config: Path, point: str, request: pb.ExecuteRequest) -> grpc.RpcError | None:
    """`tether serve` run with crash point `point` and sent `request` until the point SIGKILLs
    it; the Execute's error (UNAVAILABLE) or None (answered: the kill came after)."""
    with daemon(config, crash_at=point) as (proc, ready):
        channel, control = stub(ready["grpc"])
        error = None
        try:
            control.Execute(request, metadata=bearer(), timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            error = exc
        assert proc.wait(timeout=60) == -9
        channel.close()
    return error


@contextmanager
def serving(
    config: Path, **kw: Any
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any], rpc.RobotControlStub]]:
    """`daemon(config, **kw)` and a stub on its gRPC address (its channel closed at the end)."""
    with daemon(config, **kw) as (proc, ready):
        channel, control = stub(ready["grpc"])
        try:
            yield proc, ready, control
        finally:
            channel.close()


#: A daemon's `[serve]` for a test of one in this process: gRPC on loopback, no workers.
IN_PROCESS_SERVE = '\n[serve]\nworkers = 0\nsse = "off"\ngrpc = "127.0.0.1:0"\n'


@contextmanager
def in_process(tmp: Path, serve: str) -> Iterator[Any]:
    """A `Daemon` started in this process (`serve`, its `[serve]` table) over the DYNAMIXEL
    emulator in a process of its own; closed at the end."""
    from _dxl_setup import emulator_process
    from tether.serve.daemon import Daemon

    with emulator_process(tmp) as emu:
        running = Daemon.from_path(grpc_config(tmp, emu.path, serve=serve)).start()
        try:
            yield running
        finally:
            running.close()


def stub(address: str) -> tuple[grpc.Channel, rpc.RobotControlStub]:
    channel = grpc.insecure_channel(address)
    return channel, rpc.RobotControlStub(channel)


def status_code(call: object) -> grpc.StatusCode:
    """The status code a call (a no-argument callable) fails with."""
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[no-any-return]


def bearer(secret: str = PLANNER) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


def move(
    op_id: str,
    targets: dict[str, float] | None = None,
    *,
    relative: bool = False,
    not_after_ms: int | None = None,
    device: str = "arm",
) -> pb.ExecuteRequest:
    kind = pb.JointMove.RELATIVE if relative else pb.JointMove.ABSOLUTE
    return pb.ExecuteRequest(
        operation_id=op_id,
        device=device,
        joint_move=pb.JointMove(kind=kind, targets_rad=targets or {"a": 0.5, "b": -0.3}),
        not_after_ms=not_after_ms or int(time.time() * 1000) + 120_000,
    )


def until_terminal(
    control: rpc.RobotControlStub, op_id: str, *, from_revision: int = 0, timeout: float = 90
) -> list[pb.Operation]:
    """Every view WatchOperation sends until it ends."""
    return list(
        control.WatchOperation(
            pb.WatchOperationRequest(operation_id=op_id, from_revision=from_revision),
            metadata=bearer(),
            timeout=timeout,
        )
    )


def wait_for(
    control: rpc.RobotControlStub,
    op_id: str,
    check: Any,
    timeout: float = 60,
    *,
    secret: str = PLANNER,
) -> pb.Operation:
    deadline = time.monotonic() + timeout
    while True:
        read = pb.GetOperationRequest(operation_id=op_id)
        op = control.GetOperation(read, metadata=bearer(secret))
        if check(op):
            return op
        assert time.monotonic() < deadline, op
        time.sleep(0.02)


def moving(
    control: rpc.RobotControlStub,
    op_id: str,
    targets: dict[str, float],
    *,
    secret: str = PLANNER,
) -> pb.Operation:
    """Execute a move and wait until it is running and reported progress (its ACTION sent)."""
    control.Execute(move(op_id, targets), metadata=bearer(secret), timeout=30)
    return wait_for(
        control, op_id, lambda o: o.state == pb.RUNNING and o.progress.fraction > 0, secret=secret
    )


def parked_mid_move(
    control: rpc.RobotControlStub, op_id: str, secret: str = PLANNER
) -> pb.Operation:
    """A move stopped mid-motion: parked for an operator (its evidence: the stop)."""
    moving(control, op_id, {"a": 1.4, "b": -1.4}, secret=secret)
    control.Stop(pb.StopRequest(device="arm"), metadata=bearer(secret), timeout=10)
    return wait_for(
        control, op_id, lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR, secret=secret
    )


def abandon(control: rpc.RobotControlStub, target: str, revision: int) -> pb.Operation:
    """The operator abandons a parked operation over gRPC, naming its evidence revision."""
    return control.Resolve(  # type: ignore[no-any-return]
        pb.ResolveRequest(
            operation_id=target, decision=pb.ResolveRequest.ABANDON, evidence_revision=revision
        ),
        metadata=bearer(OPERATOR),
        timeout=30,
    )


def actions(journal: list[dict[str, Any]]) -> int:
    """ACTION frames the emulator executed (each move sends one per bus)."""
    return len([e for e in journal if e["instruction"] == "action" and e["executed"]])


def reconcile_context(
    tmp_path: Path,
    key: ActivityKey,
    stopping: threading.Event | None = None,
    emit: Callable[[ProgressEvent], None] | None = None,
) -> AttemptContext:
    """A bridge attempt's context that may only reconcile (fence and attempt 2), its artifacts
    in `tmp_path`; its progress reports go to ``emit``."""
    return AttemptContext(
        key=key,
        operation_id=operation_id_for(key),
        fence=2,
        attempt=2,
        may_execute=False,
        artifacts=ArtifactStore(tmp_path / "bridge-artifacts"),
        renew=lambda: None,
        emit=emit,
        stopping=stopping,
    )
