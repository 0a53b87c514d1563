"""RobotControl session heartbeats on loopback: `tether serve` (a subprocess) over the DYNAMIXEL
emulator (its own process, a real pty), real grpcio clients. The emulator's journal and its
control table are the independent record of what the arm did."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from _dxl_setup import GOALS, emulator_process, settled, target_actions
from _grpc_setup import (
    actions,
    bearer,
    daemon,
    grpc_config,
    move,
    moving,
    stub,
    tether,
    until_terminal,
    wait_for,
)
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.adapters.dynamixel import tables
from tether.devices.credentials import hash_secret

#: A second planner (principal "cj"): sessions are per principal.
OTHER = "planner-token-9e1c4b7a-second-kite"


def two_planners(tmp_path: Path, url: str) -> Path:
    config = grpc_config(tmp_path, url)
    second = f'[planners.cj]\ntoken = "{hash_secret(OTHER)}"\nrole = "planner"\n'
    config.write_text(config.read_text().replace("[ports.bus]", second + "[ports.bus]", 1))
    return config


def tether_status(config: Path, *args: str) -> str:
    done = tether("status", "--config", str(config), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def under(request: pb.ExecuteRequest, session: str) -> pb.ExecuteRequest:
    request.session_id = session
    return request


def heartbeat(control: rpc.RobotControlStub, session: str, ttl_ms: int, secret: str = "") -> int:
    meta = bearer(secret) if secret else bearer()
    answer = control.Heartbeat(
        pb.HeartbeatRequest(session_id=session, ttl_ms=ttl_ms), metadata=meta, timeout=10
    )
    return int(answer.expires_ms)


@contextmanager
def beating(control: rpc.RobotControlStub, session: str, ttl_ms: int) -> Iterator[None]:
    """Heartbeats every ttl/5 until the block ends (then they stop: the session lapses)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(ttl_ms / 5000):
            heartbeat(control, session, ttl_ms)

    heartbeat(control, session, ttl_ms)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def queued_behind_busy(
    control: rpc.RobotControlStub, session: str, ttl_ms: int
) -> pb.ExecuteRequest:
    """The arm busy with a move under no session ("busy", one move per robot at a time), and
    "queued" committed under `session` (heartbeated for `ttl_ms`), waiting for the arm."""
    moving(control, "busy", {"a": 1.4, "b": -1.4})
    heartbeat(control, session, ttl_ms)
    queued = under(move("queued", {"a": 0.2, "b": 0.2}), session)
    control.Execute(queued, metadata=bearer(), timeout=30)
    return queued


def _error(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def test_heartbeat_extends_a_session_of_its_principal_only_and_bad_fields_are_refused(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path) as emu:
        config = two_planners(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            bad = {
                "ttl_ms": pb.HeartbeatRequest(session_id="s1", ttl_ms=99),
                "session_id": pb.HeartbeatRequest(session_id="", ttl_ms=1000),
            }
            for field, request in bad.items():
                err = _error(lambda r=request: control.Heartbeat(r, metadata=bearer(), timeout=10))
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, field
                assert err.details().startswith(field + ":"), err.details()
            too_long = pb.HeartbeatRequest(session_id="s1", ttl_ms=60_001)
            err = _error(lambda: control.Heartbeat(too_long, metadata=bearer(), timeout=10))
            assert err.details().startswith("ttl_ms:"), err.details()
            assert (
                _error(lambda: control.Heartbeat(too_long, timeout=10)).code()
                == grpc.StatusCode.UNAUTHENTICATED
            )
            # Under a session nobody heartbeats: refused, nothing recorded.
            err = _error(
                lambda: control.Execute(under(move("u-1"), "nobody"), metadata=bearer(), timeout=30)
            )
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.details().startswith("session_id:"), err.details()
            bad_id = under(move("u-2"), "-not an id")
            err = _error(lambda: control.Execute(bad_id, metadata=bearer(), timeout=30))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.details().startswith("session_id:"), err.details()
            # The server's clock: each heartbeat moves the expiry to its now + ttl.
            first = heartbeat(control, "s1", 1500)
            assert abs(first - (time.time() * 1000 + 1500)) < 1000
            later = heartbeat(control, "s1", 5000)
            assert later >= first + 3500
            short = heartbeat(control, "s1", 1500)
            assert short < later  # the ttl of this heartbeat decides, not the longest one
            # Extended past the first expiry by heartbeats: still live.
            while time.time() * 1000 < short + 500:
                heartbeat(control, "s1", 1500)
                time.sleep(0.25)
            # Principal cj has no session "s1": A's session is not B's.
            err = _error(
                lambda: control.Execute(
                    under(move("b-1"), "s1"), metadata=bearer(OTHER), timeout=30
                )
            )
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
            assert err.details().startswith("session_id:"), err.details()
            theirs = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(OTHER))
            assert list(theirs.operations) == []
            # The principal's own session, kept alive: the move runs to its end.
            with beating(control, "s1", 1500):
                request = under(move("a-1"), "s1")
                committed = control.Execute(request, metadata=bearer(), timeout=30)
                assert committed.id == "a-1"
                final = until_terminal(control, "a-1")[-1]
            assert final.state == pb.SUCCEEDED, final
            # The session id is part of the request: the same id without it is another one.
            plain = move("a-1", not_after_ms=request.not_after_ms)
            assert (
                _error(lambda: control.Execute(plain, metadata=bearer(), timeout=30)).code()
                == grpc.StatusCode.ALREADY_EXISTS
            )
            # After the lapse, a retry of the identical request is still the same operation.
            time.sleep(1.6)
            again = control.Execute(request, metadata=bearer(), timeout=30)
            assert again.state == pb.SUCCEEDED and again.request_digest == committed.request_digest
            assert [o.id for o in control.ListOperations(
                pb.ListOperationsRequest(), metadata=bearer()
            ).operations] == ["a-1"]  # fmt: skip
            # cj's own "s1" is another session: it may use it.
            heartbeat(control, "s1", 10_000, OTHER)
            theirs_op = control.Execute(
                under(move("b-2"), "s1"), metadata=bearer(OTHER), timeout=30
            )
            assert theirs_op.id == "b-2"
            watched = control.WatchOperation(
                pb.WatchOperationRequest(operation_id="b-2"), metadata=bearer(OTHER), timeout=60
            )
            assert list(watched)[-1].state == pb.SUCCEEDED
            channel.close()
        assert target_actions(emu.journal(), GOALS) == {1: 2, 2: 2}


def test_the_heartbeat_lapses_mid_motion_and_the_arm_stops(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = two_planners(tmp_path, emu.path)
        target = {1: tables.radians_to_ticks(1.4), 2: tables.radians_to_ticks(-1.4)}
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            with beating(control, "planner-1", 400):
                control.Execute(
                    under(move("long", {"a": 1.4, "b": -1.4}), "planner-1"),
                    metadata=bearer(),
                    timeout=30,
                )
                wait_for(
                    control, "long", lambda o: o.state == pb.RUNNING and o.progress.fraction > 0
                )
            # The planner went away mid-motion: no heartbeat from here on.
            ended = wait_for(
                control,
                "long",
                lambda o: o.state in (pb.UNKNOWN_AWAITING_OPERATOR, pb.FAILED, pb.SUCCEEDED),
            )
            assert ended.state != pb.SUCCEEDED, ended
            time.sleep(1.0)  # long enough for a move that was not stopped to go on
            final = control.GetOperation(
                pb.GetOperationRequest(operation_id="long"), metadata=bearer()
            )
            assert final.state in (pb.UNKNOWN_AWAITING_OPERATOR, pb.FAILED), final
            # Reconciled as after a Stop, naming the lapse: no operator pressed stop.
            if final.state == pb.UNKNOWN_AWAITING_OPERATOR:
                assert final.evidence.reason == "stopped_on_session_lapse", final.evidence
            else:
                assert final.error.code == "stopped_on_session_lapse", final.error
            channel.close()
            # The daemon's status says who latched the arm, in words and in JSON.
            words = tether_status(config)
            assert "LATCHED (a move's session heartbeat lapsed; tether operator resume)" in (
                words
            ), words
            (arm,) = json.loads(tether_status(config, "--json"))["devices"]
            assert arm["latched"] and arm["stop_reason"] == "stopped_on_session_lapse", arm
            # The emulator's own record: the hold (Goal Position = where it stood) after the
            # ACTION, and each servo settled short of its target.
            journal = emu.journal()
            action = max(e["seq"] for e in journal if e["instruction"] == "action")
            holds = [
                e
                for e in journal
                if e["seq"] > action
                and e["instruction"] == "write"
                and e["address"] == tables.GOAL_POSITION.address
            ]
            assert {e["id"] for e in holds} == {1, 2}, holds
            for dxl_id, goal in target.items():
                state = settled(lambda i=dxl_id: emu.request(op="snapshot", id=i))
                assert state["goal_position"] != goal, state
                assert abs(state["present_position"] - goal) > 100, state  # ~0.15 rad short


def test_a_move_of_a_lapsed_session_never_starts(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = two_planners(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            # The arm is busy with a move under no session; one move per robot at a time.
            queued = queued_behind_busy(control, "brief", 100)
            # "brief" lapses while "queued" waits for the arm; "busy" is no move of it.
            assert until_terminal(control, "busy")[-1].state == pb.SUCCEEDED
            final = until_terminal(control, "queued")[-1]
            assert final.state == pb.FAILED and final.error.code == "session_lapsed", final
            assert final.attempt <= 1
            # Another request under its id, while the session is lapsed: the id is taken,
            # whatever the session says.
            other = under(move("queued", {"a": -0.2, "b": -0.2}), "brief")
            refused = _error(lambda: control.Execute(other, metadata=bearer(), timeout=30))
            assert refused.code() == grpc.StatusCode.ALREADY_EXISTS, refused.details()
            # A heartbeat of the same id now is a new session: the old move stays failed.
            heartbeat(control, "brief", 5000)
            again = control.Execute(queued, metadata=bearer(), timeout=30)
            assert again.state == pb.FAILED and again.error.code == "session_lapsed"
            channel.close()
        second = {1: tables.radians_to_ticks(0.2), 2: tables.radians_to_ticks(0.2)}
        journal = emu.journal()
        busy = {1: tables.radians_to_ticks(1.4), 2: tables.radians_to_ticks(-1.4)}
        assert target_actions(journal, second) == {1: 0, 2: 0}
        # One broadcast ACTION (journaled once per servo): busy's; none for "queued".
        assert target_actions(journal, busy) == {1: 1, 2: 1}
        assert actions(journal) == 2


def test_another_request_under_a_waiting_moves_id_does_not_bind_it_to_a_new_session(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = two_planners(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            queued_behind_busy(control, "brief", 100)
            time.sleep(0.3)  # "brief" lapses while "queued" waits for the arm
            heartbeat(control, "brief", 20_000)  # a new session under the same id
            other = under(move("queued", {"a": -0.2, "b": -0.2}), "brief")
            refused = _error(lambda: control.Execute(other, metadata=bearer(), timeout=30))
            assert refused.code() == grpc.StatusCode.ALREADY_EXISTS
            # The refused request bound nothing: the waiting move is still the lapsed
            # session's, and never starts.
            assert until_terminal(control, "busy")[-1].state == pb.SUCCEEDED
            final = until_terminal(control, "queued")[-1]
            assert final.state == pb.FAILED and final.error.code == "session_lapsed", final
            channel.close()
        journal = emu.journal()
        for pose in ({"a": 0.2, "b": 0.2}, {"a": -0.2, "b": -0.2}):
            goal = {1: tables.radians_to_ticks(pose["a"]), 2: tables.radians_to_ticks(pose["b"])}
            assert target_actions(journal, goal) == {1: 0, 2: 0}
        assert actions(journal) == 2  # busy's broadcast ACTION only


def test_a_daemon_restart_forgets_sessions_so_a_pending_move_of_one_never_starts(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = two_planners(tmp_path, emu.path)
        with daemon(config) as (proc, ready):
            channel, control = stub(ready["grpc"])
            queued_behind_busy(control, "kept", 60_000)  # it would not lapse for a minute
            channel.close()
            proc.kill()
            proc.wait()
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            heartbeat(control, "kept", 60_000)  # the same id after the restart: a new session
            final = until_terminal(control, "queued")[-1]
            assert final.state == pb.FAILED and final.error.code == "session_lapsed", final
            channel.close()
        second = {1: tables.radians_to_ticks(0.2), 2: tables.radians_to_ticks(0.2)}
        assert target_actions(emu.journal(), second) == {1: 0, 2: 0}
