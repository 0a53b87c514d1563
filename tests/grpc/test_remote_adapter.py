"""The bridge side: a runtime `Host` in this process runs `physical_ai.remote_move`, whose
adapter drives a remote `tether serve` over gRPC on loopback (the emulator underneath). The
client operation id is the Activity's bound provider operation id; a remote killed mid-move is
reconciled through GetOperation after its restart, with one motion."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from _dxl_setup import GOALS, emulator_process, target_actions
from _grpc_setup import SERVE, bearer, daemon, grpc_config, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.activities import ActivityKey
from tether.adapters.grpc.remote import KIND_ABSOLUTE, RemoteHost, intent, remote_move_family
from tether.runtime import Host
from tether.testing._ports import free_port

from tests._secrets import PLANNER


def request(**extra: object) -> dict[str, object]:
    return {
        "kind": KIND_ABSOLUTE,
        "device": "arm",
        "targets": {"a": 0.5, "b": -0.3},
        "not_after_ms": int(time.time() * 1000) + 120_000,
        **extra,
    }


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[Host, int]]:
    port = free_port()
    remote = RemoteHost(f"127.0.0.1:{port}", PLANNER, timeout_s=5.0)
    family = remote_move_family(remote)
    host = Host(tmp_path / "bridge", [family], workers=1, lease_ms=1500)
    host.start()
    try:
        yield host, port
    finally:
        host.close()
        family.adapter.close()  # type: ignore[attr-defined]


@contextmanager
def _remote(tmp_path: Path, port: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The robot host the bridge targets: `tether serve` with gRPC on ``port`` and the
    emulated arm; (the emulator, the daemon's ready line)."""
    with emulator_process(tmp_path) as emu:
        config = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        with daemon(config) as (_, ready):
            yield emu, ready


def _record(host: Host, activity: str) -> object:
    return host.get(ActivityKey("bridge", KIND_ABSOLUTE, activity))


def test_a_remote_move_settles_with_the_remote_result_and_one_motion(
    tmp_path: Path, bridge: tuple[Host, int]
) -> None:
    host, port = bridge
    with _remote(tmp_path, port) as (emu, ready):
        host.create_world("bridge")
        host.commit_tick("bridge", [intent("m1", request())])
        assert host.wait_settled("bridge", 90)
        record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "m1"))
        assert record is not None and record.result is not None
        assert not record.result.failed
        doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
        assert doc["state"] == "succeeded" and doc["result"]["outcome"] == "completed"
        # The remote knows it under the bound provider operation id.
        channel, control = stub(ready["grpc"])
        remote = control.GetOperation(
            pb.GetOperationRequest(operation_id=record.operation_id), metadata=bearer()
        )
        assert remote.state == pb.SUCCEEDED and remote.result.digest == doc["remote_digest"]
        channel.close()
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_a_remote_refusal_is_a_recorded_failure_and_nothing_moves(
    tmp_path: Path, bridge: tuple[Host, int]
) -> None:
    host, port = bridge
    with emulator_process(tmp_path) as emu:
        config = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        with daemon(config):
            host.create_world("bridge")
            host.commit_tick("bridge", [intent("far", request(targets={"a": 3.0}))])
            assert host.wait_settled("bridge", 90)
            record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "far"))
            assert record is not None and record.result is not None and record.result.failed
            doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
            assert doc["code"] == "remote_invalid_argument"
        assert [e for e in emu.journal() if e["instruction"] == "action"] == []


def test_a_move_refused_by_a_latched_remote_robot_is_a_recorded_failure_never_run_later(
    tmp_path: Path, bridge: tuple[Host, int]
) -> None:
    # An operator's stop holds the remote arm: the remote refuses the new move, recording
    # nothing. The bridge records that refusal as the move's failure; it used to re-send the
    # Execute every second (a warning each time) and start the move by itself once an
    # operator resumed the arm there.
    host, port = bridge
    with _remote(tmp_path, port) as (emu, ready):
        channel, control = stub(ready["grpc"])
        control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        host.create_world("bridge")
        host.commit_tick("bridge", [intent("held", request())])
        assert host.wait_settled("bridge", 30), "the refused move never settled"
        record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "held"))
        assert record is not None and record.result is not None and record.result.failed
        doc = json.loads(host.artifacts.get_bytes(record.result.ref, record.result.digest))
        assert doc["code"] == "remote_robot_latched", doc
        assert "robot_latched" in doc["error"]
        # The robot host tells its own clients to send the identical request again; through
        # the bridge that returns this same failed Activity: a new one is what moves it.
        assert "identical request" not in doc["error"] and "new activity" in doc["error"], doc
        with pytest.raises(grpc.RpcError) as missing:  # nothing recorded on the remote
            control.GetOperation(
                pb.GetOperationRequest(operation_id=record.operation_id), metadata=bearer()
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        channel.close()
        assert target_actions(emu.journal(), GOALS) == {1: 0, 2: 0}


def test_the_remote_killed_mid_move_is_reconciled_after_its_restart_with_one_motion(
    tmp_path: Path, bridge: tuple[Host, int]
) -> None:
    host, port = bridge
    with emulator_process(tmp_path, speed_scale=2.0) as emu:
        config = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        with daemon(config) as (proc, ready):
            channel, control = stub(ready["grpc"])
            # The token verified once before the move (argon2id per principal, one check at a
            # time per address): the polls below then answer at once, while the move runs.
            control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(), timeout=30)
            host.create_world("bridge")
            host.commit_tick("bridge", [intent("cut", request())])
            deadline = time.monotonic() + 60
            while True:
                record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "cut"))
                op_id = record.operation_id if record is not None else None
                if op_id:
                    try:
                        op = control.GetOperation(
                            pb.GetOperationRequest(operation_id=op_id), metadata=bearer()
                        )
                        if op.state == pb.RUNNING and op.progress.fraction > 0:
                            break
                    except Exception:
                        pass
                assert time.monotonic() < deadline
                time.sleep(0.02)
            channel.close()
            proc.kill()
            proc.wait()
        time.sleep(2.0)  # the bridge's attempt fails over to reconciliation meanwhile
        with daemon(config):
            assert host.wait_settled("bridge", 120)
        record = host.get(ActivityKey("bridge", KIND_ABSOLUTE, "cut"))
        assert record is not None and record.result is not None and not record.result.failed
        assert record.operation_id == op_id  # never a new id
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


@pytest.mark.parametrize("limited", [False, True], ids=["refused", "rate-limited"])
def test_a_refused_credential_on_reconcile_awaits_an_operator_and_is_not_asked_every_second(
    tmp_path: Path, limited: bool
) -> None:
    """The remote did not answer our Execute (down, or refusing this address's credentials
    for a while), so the attempt reconciles; GetOperation then answers with our token
    refused (`UNAUTHENTICATED`, or `credential_rate_limited`): the outcome cannot be read and
    the move may exist there, so it awaits an operator as `remote_refused_principal` (or
    `remote_rate_limited`: the address is locked out, whoever's tokens failed), asked
    again only after `OPERATOR_RETRY_MS`, not every second (each a failed credential check
    on the robot host, keeping its limit on)."""
    from tether.adapters.grpc.remote import OPERATOR_RETRY_MS

    port = free_port()
    wrong = "not-the-planner-token-0000"
    remote = RemoteHost(f"127.0.0.1:{port}", wrong, timeout_s=2.0)
    family = remote_move_family(remote)
    host = Host(tmp_path / "bridge", [family], workers=1, lease_ms=1500)
    host.start()
    key = ActivityKey("bridge", KIND_ABSOLUTE, "wrong-token")

    def parked() -> bool:
        r = host.get(key)
        return r is not None and r.awaiting_decision

    try:
        with emulator_process(tmp_path) as emu:
            host.create_world("bridge")
            config = grpc_config(
                tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
            )
            if not limited:  # down at Execute: unreachable, then the remote comes up
                host.commit_tick("bridge", [intent("wrong-token", request())])
                _until(parked, "the Execute never failed over to reconciliation")
            with daemon(config) as (_, ready):
                if limited:  # the robot host refuses this address's credentials already
                    channel, control = stub(ready["grpc"])
                    bad = (("authorization", f"Bearer {wrong}"),)
                    for _ in range(8):
                        with pytest.raises(grpc.RpcError):
                            control.GetOperation(
                                pb.GetOperationRequest(operation_id="x"), metadata=bad
                            )
                    channel.close()
                    host.commit_tick("bridge", [intent("wrong-token", request())])

                def refused() -> bool:
                    r = host.get(key)
                    if r is None or r.evidence is None:
                        return False
                    evidence = r.evidence.evidence
                    doc = json.loads(host.artifacts.get_bytes(evidence.ref, evidence.digest))
                    return bool(doc["reason"] != "remote_unreachable")

                _until(refused, "never refused")
                record = host.get(key)
                assert record is not None and record.evidence is not None
                evidence = record.evidence.evidence
                doc = json.loads(host.artifacts.get_bytes(evidence.ref, evidence.digest))
                # Locked out, the host says nothing of whose token failed: not blamed on ours.
                want = "remote_rate_limited" if limited else "remote_refused_principal"
                assert doc["reason"] == want, doc
                said = "RESOURCE_EXHAUSTED: credential_rate_limited" if limited else "UNAUTH"
                assert said in doc["error"], doc
                assert record.result is None and record.awaiting_decision
                revision = record.evidence_revision
                time.sleep(3.0)  # unreachable would have been reconciled twice by now
                again = host.get(key)
                assert again is not None and again.evidence_revision == revision
            assert OPERATOR_RETRY_MS >= 30_000
            assert [e for e in emu.journal() if e["instruction"] == "action"] == []
    finally:
        host.close()
        family.adapter.close()  # type: ignore[attr-defined]


def _until(condition: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_host_back_after_an_outage_is_reached_within_the_reconnect_bound() -> None:
    """The bridge's channel to a robot host that was down for a while: once the host listens
    again, a call gets through within about `RECONNECT_MAX_MS` (grpcio's own backoff, grown
    over the outage, would wait up to two minutes before it tried again)."""
    from concurrent import futures

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from tether.adapters.grpc.remote import RECONNECT_MAX_MS

    port = free_port()
    channel = RemoteHost(f"127.0.0.1:{port}", "unused-token").channel()
    check = health_pb2_grpc.HealthStub(channel).Check
    try:
        down_until = time.monotonic() + 10.0  # the host is down: every try fails at once
        while time.monotonic() < down_until:
            with pytest.raises(grpc.RpcError):
                check(health_pb2.HealthCheckRequest(), timeout=1)
            time.sleep(0.2)
        server = grpc.server(futures.ThreadPoolExecutor(2))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        try:
            back = time.monotonic()
            while True:
                try:
                    check(health_pb2.HealthCheckRequest(), timeout=1)
                    break
                except grpc.RpcError:
                    assert time.monotonic() - back < 30, "never reached again"
                    time.sleep(0.1)
            # The bound, plus grpcio's jitter (20%) and a connect.
            assert time.monotonic() - back < RECONNECT_MAX_MS / 1000 * 1.2 + 1.0
        finally:
            server.stop(0)
    finally:
        channel.close()
