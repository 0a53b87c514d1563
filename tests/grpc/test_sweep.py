"""A sweep of random Execute/kill/retry rounds against `tether serve` over gRPC (the emulator
underneath): every round's move ends succeeded (0 lost outcomes) and the emulator's journal
shows exactly one ACTION with its goal (0 duplicate motions). Each round's goal on joint `a`
is distinct, so the journal attributes every motion (an ACTION that changes the goal
register) to one round.

Round kinds (fixed seed): `duplicate` (the same Execute twice), `client_gone` (the client
cancels its call right after sending, then retries), `lost_reply` (the server SIGKILLed between
the commit and its reply: crash point `grpc.execute.after_commit`), `killed_mid_move` (the
server SIGKILLed while the arm moves, restarted, the Execute retried). Every sweep starts with
one round of each kind. The default run takes 25 rounds; TETHER_SLOW=1 runs 1,000."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from _dxl_setup import emulator_process
from _grpc_setup import SERVE, bearer, grpc_config, move, until_terminal
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.adapters.dynamixel import tables
from tether.testing._ports import free_port

KINDS = ("duplicate", "client_gone", "lost_reply", "killed_mid_move")
WEIGHTS = (0.4, 0.3, 0.15, 0.15)


class Serve:
    """One `tether serve` at a time on a fixed gRPC port."""

    def __init__(self, config: Path, port: int) -> None:
        self.config = config
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None
        self.channel: grpc.Channel | None = None
        self.control: Any = None

    def start(self, crash_at: str | None = None) -> None:
        env = dict(os.environ)
        env.pop("TETHER_CRASH_AT", None)
        if crash_at:
            env["TETHER_CRASH_AT"] = crash_at
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "serve", "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline())
        assert ready["grpc"] == self.address, ready
        self.channel = grpc.insecure_channel(self.address)
        self.control = rpc.RobotControlStub(self.channel)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.wait()

    def wait(self) -> None:
        assert self.proc is not None
        self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.channel is not None:
            self.channel.close()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.wait()


def goal(round_no: int, rounds: int) -> float:
    """Round n's goal on joint a: the sign alternates (every move is a real one, at least
    0.4 rad), the magnitude grows by more than a tick per round of one sign."""
    magnitude = 0.2 + 1.25 * (round_no // 2) / max(1, (rounds + 1) // 2)
    return round(magnitude if round_no % 2 == 0 else -magnitude, 4)


def sweep(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    port = free_port()
    kinds: dict[str, int] = dict.fromkeys(KINDS, 0)
    history: list[str] = []
    with emulator_process(tmp_path, speed_scale=20.0) as emu:
        config = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        serve = Serve(config, port)
        serve.start()
        try:
            for n in range(rounds):
                # Every kind once first (a short sweep meets each), then as the seed draws.
                kind = KINDS[n] if n < len(KINDS) else rng.choices(KINDS, WEIGHTS)[0]
                kinds[kind] += 1
                history.append(kind)
                request = move(f"sweep-{n}", {"a": goal(n, rounds), "b": 0.0})
                if kind == "duplicate":
                    serve.control.Execute(request, metadata=bearer(), timeout=30)
                elif kind == "client_gone":
                    future = serve.control.Execute.future(request, metadata=bearer())
                    time.sleep(rng.uniform(0.0, 0.02))
                    future.cancel()
                elif kind == "lost_reply":
                    serve.stop()
                    serve.start(crash_at="grpc.execute.after_commit")
                    with pytest.raises(grpc.RpcError):
                        serve.control.Execute(request, metadata=bearer(), timeout=30)
                    serve.wait()
                    serve.start()
                else:
                    serve.control.Execute(request, metadata=bearer(), timeout=30)
                    deadline = time.monotonic() + 30
                    while True:
                        op = serve.control.GetOperation(
                            pb.GetOperationRequest(operation_id=request.operation_id),
                            metadata=bearer(),
                        )
                        if op.state != pb.PENDING or time.monotonic() > deadline:
                            break
                        time.sleep(rng.uniform(0.0, 0.03))
                    serve.kill()
                    serve.start()
                retried = serve.control.Execute(request, metadata=bearer(), timeout=30)
                assert retried.id == request.operation_id
                try:
                    final = until_terminal(serve.control, request.operation_id)[-1]
                except grpc.RpcError:
                    final = serve.control.GetOperation(
                        pb.GetOperationRequest(operation_id=request.operation_id),
                        metadata=bearer(),
                    )
                assert final.state == pb.SUCCEEDED, (n, kind, final.evidence.document[:1500])
            # 0 lost outcomes: every round's operation is still there, succeeded.
            listed: list[pb.Operation] = []
            token = ""
            while True:
                page = serve.control.ListOperations(
                    pb.ListOperationsRequest(page_size=100, page_token=token), metadata=bearer()
                )
                listed += page.operations
                token = page.next_page_token
                if not token:
                    break
            assert sorted(o.id for o in listed) == sorted(f"sweep-{n}" for n in range(rounds))
            assert {o.state for o in listed} == {pb.SUCCEEDED}
        finally:
            serve.stop()
        journal = emu.journal()
    # 0 duplicate motions: each round's goal on joint a was applied by exactly one ACTION that
    # changed the goal register (a reconcile's neutralising REG_WRITE + ACTION re-applies the
    # present position, which is the previous round's goal: not a motion).
    motions: dict[str, int] = {}
    register = None
    for e in journal:
        if (
            e.get("id") != 1
            or not e.get("executed")
            or e.get("address") != tables.GOAL_POSITION.address
        ):
            continue
        if e["instruction"] == "action" and e["data"] != register:
            motions[e["data"]] = motions.get(e["data"], 0) + 1
        if e["instruction"] in ("write", "action"):
            register = e["data"]
    for n in range(rounds):
        data = tables.encode(tables.GOAL_POSITION, tables.radians_to_ticks(goal(n, rounds))).hex()
        assert motions.get(data, 0) == 1, (n, history, motions.get(data, 0))
    assert sum(kinds.values()) == rounds and all(kinds.values()), kinds


def test_a_sampled_sweep_of_25_rounds_has_no_duplicate_motion_and_no_lost_outcome(
    tmp_path: Path,
) -> None:
    sweep(tmp_path, 25, seed=13)


@pytest.mark.slow
def test_a_sweep_of_1000_rounds_has_no_duplicate_motion_and_no_lost_outcome(
    tmp_path: Path,
) -> None:
    sweep(tmp_path, 1000, seed=1013)
