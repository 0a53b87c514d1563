"""RobotControl over gRPC on loopback: `tether serve` (a subprocess) with `[serve] grpc` over the
DYNAMIXEL emulator (its own process, a real pty), real grpcio clients. The emulator's journal
is the independent record of every frame sent."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from _dxl_setup import GOALS, EmulatorProcess, emulator_process, target_actions
from _grpc_setup import (
    SERVE,
    abandon,
    bearer,
    daemon,
    execute_killed,
    grpc_config,
    move,
    moving,
    parked_mid_move,
    status_code,
    stub,
    tether,
    until_terminal,
    wait_for,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.families.robot_move.family import CRASH_POINTS as MOVE_POINTS
from tether.serve.grpc_server import CRASH_POINTS

from tests._secrets import OBSERVER, OPERATOR, PLANNER


def effectful(emu: EmulatorProcess) -> list[dict[str, object]]:
    """Motion the emulator saw: ACTIONs and staged goals (the daemon's start and its safe stop
    on exit write torque and hold frames, which are not motion)."""
    return [e for e in emu.journal() if e["instruction"] in ("action", "reg_write")]


def test_a_duplicate_execute_executes_once_and_another_request_under_the_id_is_already_exists(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel, control = stub(ready["grpc"])
        request = move("job-1")
        first = control.Execute(request, metadata=bearer(), timeout=30)
        second = control.Execute(request, metadata=bearer(), timeout=30)
        assert first.id == second.id == "job-1"
        assert first.request_digest == second.request_digest != ""
        assert first.device == "arm" and not first.non_repeatable
        assert (first.state, first.progress.phase) == (pb.PENDING, "pending")
        other = move("job-1", {"a": 0.2, "b": -0.3})
        other.not_after_ms = request.not_after_ms
        with pytest.raises(grpc.RpcError) as conflict:
            control.Execute(other, metadata=bearer(), timeout=30)
        assert conflict.value.code() == grpc.StatusCode.ALREADY_EXISTS
        relative = move("job-1", relative=True, not_after_ms=request.not_after_ms)
        assert (
            status_code(lambda: control.Execute(relative, metadata=bearer(), timeout=30))
            == grpc.StatusCode.ALREADY_EXISTS
        )
        views = until_terminal(control, "job-1")
        revisions = [v.revision for v in views]
        assert revisions == sorted(revisions)
        final = views[-1]
        assert final.state == pb.SUCCEEDED, final
        assert final.result.digest.startswith("sha256:") and b"completed" in final.result.document
        # The stream ended on the record's last change (its settlement), not before it.
        time.sleep(0.5)
        read = control.GetOperation(pb.GetOperationRequest(operation_id="job-1"), metadata=bearer())
        assert (read.revision, read.updated_ms) == (final.revision, final.updated_ms)
        # Once more after the end: the same operation, nothing sent.
        again = control.Execute(request, metadata=bearer(), timeout=30)
        assert again.state == pb.SUCCEEDED and again.request_digest == first.request_digest
        listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
        assert [o.id for o in listed.operations] == ["job-1"]
        none = control.ListOperations(
            pb.ListOperationsRequest(states=[pb.FAILED]), metadata=bearer()
        )
        assert list(none.operations) == []
        # An id of the longest length the contract names (256) is an id like any other.
        longest = "L" * 256
        control.Execute(move(longest, {"a": 0.2, "b": -0.2}), metadata=bearer(), timeout=30)
        assert until_terminal(control, longest)[-1].state == pb.SUCCEEDED
        # An operator (and an observer) lists every principal's operations, each named as Get
        # and Resolve take it, paged in that order; a planner's token is no token of theirs.
        for secret in (OPERATOR, OBSERVER):
            everyone = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(secret))
            assert [o.id for o in everyone.operations] == [f"ci/{longest}", "ci/job-1"]
            first_page = control.ListOperations(
                pb.ListOperationsRequest(page_size=1), metadata=bearer(secret)
            )
            assert [o.id for o in first_page.operations] == [f"ci/{longest}"]
            second = control.ListOperations(
                pb.ListOperationsRequest(page_size=1, page_token=first_page.next_page_token),
                metadata=bearer(secret),
            )
            assert [o.id for o in second.operations] == ["ci/job-1"]
            assert second.operations[0].state == pb.SUCCEEDED
            assert second.next_page_token == ""
            read = control.GetOperation(
                pb.GetOperationRequest(operation_id=second.operations[0].id),
                metadata=bearer(secret),
            )
            assert read.state == pb.SUCCEEDED
            assert (
                status_code(
                    lambda secret=secret: control.ListOperations(
                        pb.ListOperationsRequest(page_token="job-1"), metadata=bearer(secret)
                    )
                )
                == grpc.StatusCode.INVALID_ARGUMENT
            )
        assert (
            status_code(
                lambda: control.ListOperations(
                    pb.ListOperationsRequest(page_token="ci/job-1"), metadata=bearer()
                )
            )
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        channel.close()
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_missing_and_wrong_credentials_and_roles_are_refused(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel, control = stub(ready["grpc"])
        request = move("auth-1")
        assert status_code(lambda: control.Execute(request)) == grpc.StatusCode.UNAUTHENTICATED
        wrong = (("authorization", "Bearer not-the-token-of-anyone"),)
        assert (
            status_code(lambda: control.Execute(request, metadata=wrong))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        observer = bearer(OBSERVER)
        assert (
            status_code(lambda: control.Execute(request, metadata=observer))
            == grpc.StatusCode.PERMISSION_DENIED
        )
        assert (
            status_code(lambda: control.Stop(pb.StopRequest(), metadata=observer))
            == grpc.StatusCode.PERMISSION_DENIED
        )
        # The operator, who answers for the robots, may stop them (and only that of the work).
        stopped = control.Stop(pb.StopRequest(), metadata=bearer(OPERATOR), timeout=10)
        assert [(d.device, d.latched) for d in stopped.devices] == [("arm", True)]
        # A planner token never approves: Resolve needs an operator.
        resolve = pb.ResolveRequest(operation_id="auth-1", decision=pb.ResolveRequest.ABANDON)
        assert (
            status_code(lambda: control.Resolve(resolve, metadata=bearer(PLANNER)))
            == grpc.StatusCode.PERMISSION_DENIED
        )
        # An operator is not a planner: it may not execute.
        assert (
            status_code(lambda: control.Execute(request, metadata=bearer(OPERATOR)))
            == grpc.StatusCode.PERMISSION_DENIED
        )
        assert (
            status_code(lambda: control.GetOperation(pb.GetOperationRequest(operation_id="auth-1")))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        channel.close()
    assert effectful(emu) == []


def test_bad_requests_are_invalid_argument_with_the_field_path_and_nothing_is_recorded(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel, control = stub(ready["grpc"])
        cases = {
            "operation_id": move(""),
            "device": move("bad-1", device="ghost"),
            'joint_move.targets_rad["a"]': move("bad-2", {"a": 3.0, "b": 0.0}),
            'joint_move.targets_rad["zz"]': move("bad-3", {"zz": 0.1}),
            "not_after_ms": pb.ExecuteRequest(
                operation_id="bad-4",
                device="arm",
                joint_move=pb.JointMove(kind=pb.JointMove.ABSOLUTE, targets_rad={"a": 0.1}),
            ),
        }
        for field, request in cases.items():
            with pytest.raises(grpc.RpcError) as info:
                control.Execute(request, metadata=bearer(), timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert info.value.details().startswith(field + ":"), info.value.details()
        # A relative move by more than its joint's whole range (3 rad) leaves the limits from
        # any position: it can never run, so it is refused as an absolute one past them is.
        with pytest.raises(grpc.RpcError) as info:
            control.Execute(move("bad-rel", {"a": 3.5}, relative=True), metadata=bearer())
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details().startswith('joint_move.targets_rad["a"]:'), info.value.details()
        assert "from any position" in info.value.details()
        # Client values a refusal repeats are cut short: a long one never turns the status into
        # the client's own RESOURCE_EXHAUSTED (its metadata limit), the field path first.
        for field, request in {
            "device": move("bad-5", device="d" * 20_000),
            'joint_move.targets_rad["': move("bad-6", {"q" * 9_000: 0.1}),
            'joint_move.targets_rad["w': move("bad-7", {"w" * 300_000: 0.1}),
            "operation_id": move("o" * 257),
            # A name's control characters are escaped, never sent raw in the field's path.
            'joint_move.targets_rad["a\\n\\u001b[0m': move("bad-8", {"a\n\x1b[0m": 0.1}),
        }.items():
            with pytest.raises(grpc.RpcError) as info:
                control.Execute(request, metadata=bearer(), timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert info.value.details().startswith(field), info.value.details()[:80]
            assert len(info.value.details()) <= 1024
        huge = move("big", {"a": 0.1})
        huge.joint_move.targets_rad.update({f"j{i:07d}" + "x" * 64: 0.0 for i in range(20_000)})
        assert (
            status_code(lambda: control.Execute(huge, metadata=bearer(), timeout=30))
            == grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
        assert list(listed.operations) == []
        assert (
            status_code(
                lambda: control.GetOperation(
                    pb.GetOperationRequest(operation_id="bad-2"), metadata=bearer()
                )
            )
            == grpc.StatusCode.NOT_FOUND
        )
        # An id no Execute could ever have taken is a bad argument on every call that names
        # one, not an unknown operation.
        for bad in ("日本", " bad-2", "a" * 300, "/bad-2", "x/y z"):
            for call in (
                lambda bad=bad: control.GetOperation(
                    pb.GetOperationRequest(operation_id=bad), metadata=bearer()
                ),
                lambda bad=bad: control.Cancel(
                    pb.CancelRequest(operation_id=bad), metadata=bearer()
                ),
                lambda bad=bad: control.Reconcile(
                    pb.ReconcileRequest(operation_id=bad), metadata=bearer()
                ),
                lambda bad=bad: list(
                    control.WatchOperation(
                        pb.WatchOperationRequest(operation_id=bad), metadata=bearer()
                    )
                ),
            ):
                assert status_code(call) == grpc.StatusCode.INVALID_ARGUMENT, bad
        channel.close()
    assert effectful(emu) == []


def test_past_not_after_it_ends_expired_and_never_starts(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel, control = stub(ready["grpc"])
        late = move("late-1", not_after_ms=int(time.time() * 1000) - 1)
        committed = control.Execute(late, metadata=bearer(), timeout=30)
        assert committed.state in (pb.PENDING, pb.RUNNING, pb.EXPIRED)
        views = until_terminal(control, "late-1")
        final = views[-1]
        assert final.state == pb.EXPIRED and final.error.code == "expired", final
        # It never started: no view before its end says it runs.
        ended = [v.state for v in views].index(pb.EXPIRED)
        assert {v.state for v in views[:ended]} <= {pb.PENDING}, views
        channel.close()
    assert effectful(emu) == []


#: Every point where `tether serve` is SIGKILLed around an Execute: its own two (before the
#: commit; after it, before the reply: a lost response) and the robot move's (journal bound,
#: no attempt started).
KILL_POINTS = (*CRASH_POINTS, *MOVE_POINTS)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_server_killed_around_an_execute_is_retried_to_one_motion(
    tmp_path: Path, emu: EmulatorProcess, point: str
) -> None:
    config = grpc_config(tmp_path, emu.path)
    request = move("lost-1")
    if execute_killed(config, point, request) is None:
        assert point in MOVE_POINTS  # answered: the kill comes with the attempt
    with daemon(config) as (_, ready):
        channel, control = stub(ready["grpc"])
        retried = control.Execute(request, metadata=bearer(), timeout=30)
        assert retried.id == "lost-1"
        final = until_terminal(control, "lost-1")[-1]
        assert final.state == pb.SUCCEEDED, final
        channel.close()
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


CLIENT_KILLED = """
import os, sys, time
sys.path[:0] = sys.argv[3:]
from _grpc_setup import bearer, move, stub
channel, control = stub(sys.argv[1])
future = control.Execute.future(move("sent-1", not_after_ms=int(sys.argv[2])), metadata=bearer())
time.sleep(0.05)
os._exit(0)  # gone before reading the answer
"""


def test_a_client_killed_after_sending_retries_to_the_same_operation_and_one_motion(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    script = tmp_path / "killed.py"
    script.write_text(CLIENT_KILLED)
    not_after = int(time.time() * 1000) + 120_000
    here = Path(__file__).resolve().parent
    with daemon(config) as (_, ready):
        done = subprocess.run(
            [
                sys.executable, str(script), ready["grpc"], str(not_after),
                str(here), str(here.parent / "adapters"), str(here.parents[1]),
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        channel, control = stub(ready["grpc"])
        retried = control.Execute(
            move("sent-1", not_after_ms=not_after), metadata=bearer(), timeout=30
        )
        assert retried.id == "sent-1"
        final = until_terminal(control, "sent-1")[-1]
        assert final.state == pb.SUCCEEDED, final
        channel.close()
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_a_watch_across_a_server_restart_resumes_from_its_revision(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=2.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (proc, ready):
            channel, control = stub(ready["grpc"])
            control.Execute(move("watched"), metadata=bearer(), timeout=30)
            seen: list[pb.Operation] = []
            stream = control.WatchOperation(
                pb.WatchOperationRequest(operation_id="watched"), metadata=bearer(), timeout=60
            )
            for op in stream:
                seen.append(op)
                if op.state == pb.RUNNING and op.progress.fraction > 0:
                    break
            stream.cancel()
            proc.kill()
            proc.wait()
            channel.close()
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            rest = until_terminal(control, "watched", from_revision=seen[-1].revision)
            channel.close()
        assert rest, "the resumed watch sent nothing"
        revisions = [o.revision for o in seen + rest]
        assert revisions == sorted(revisions) and rest[0].revision > seen[-1].revision
        assert rest[-1].state == pb.SUCCEEDED, rest[-1]
        assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_stop_is_answered_mid_execute_latches_and_health_flips_when_the_port_goes(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            health = health_pb2_grpc.HealthStub(channel)
            service = "tether.robot.v1.RobotControl/arm"
            check = health_pb2.HealthCheckRequest(service=service)
            assert health.Check(check).status == health_pb2.HealthCheckResponse.SERVING
            assert (
                health.Check(health_pb2.HealthCheckRequest(service="")).status
                == health_pb2.HealthCheckResponse.SERVING
            )
            moving(control, "long", {"a": 1.4, "b": -1.4})
            start = time.monotonic()
            stopped = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=5)
            elapsed = time.monotonic() - start
            (device,) = stopped.devices
            assert (device.device, device.ok, device.latched) == ("arm", True, True)
            assert [j.state for j in device.joints] == ["held", "held"]
            assert elapsed < 5.0
            again = control.Stop(pb.StopRequest(), metadata=bearer(), timeout=5)
            assert [d.latched for d in again.devices] == [True]
            stopped_at = len(emu.journal())
            parked = wait_for(control, "long", lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
            assert parked.evidence.reason == "stopped_by_operator"
            assert {r.joint for r in parked.evidence.read_back} == {"a", "b"}
            assert [e for e in emu.journal()[stopped_at:] if e["instruction"] == "action"] == []
            # A note out of bounds is the request's own bad argument, and decides nothing.
            for note in ("n" * 5000, "a\x00b"):
                bad_note = pb.ResolveRequest(
                    operation_id="long",
                    decision=pb.ResolveRequest.ABANDON,
                    evidence_revision=parked.evidence.revision,
                    note=note,
                )
                with pytest.raises(grpc.RpcError) as info:
                    control.Resolve(bad_note, metadata=bearer(OPERATOR), timeout=30)
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert info.value.details().startswith("note: "), info.value.details()
            assert (
                control.GetOperation(
                    pb.GetOperationRequest(operation_id="long"), metadata=bearer()
                ).state
                == pb.UNKNOWN_AWAITING_OPERATOR
            )
            # A decision naming another evidence revision is refused, its code said once.
            stale = pb.ResolveRequest(
                operation_id="long",
                decision=pb.ResolveRequest.ABANDON,
                evidence_revision=parked.evidence.revision + 7,
            )
            with pytest.raises(grpc.RpcError) as info:
                control.Resolve(stale, metadata=bearer(OPERATOR), timeout=30)
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = info.value.details()
            assert details.startswith("stale_revision: ") and details.count("stale_revision") == 1
            # The operator abandons it over gRPC, naming the evidence revision.
            decided = abandon(control, "long", parked.evidence.revision)
            assert decided.id == "ci/long"  # as an operator names it, and lists it
            with pytest.raises(grpc.RpcError) as info:  # single use
                control.Resolve(stale, metadata=bearer(OPERATOR), timeout=30)
            assert info.value.details().count("not_parked") == 1, info.value.details()
            final = until_terminal(control, "long")[-1]
            assert final.state == pb.FAILED, final
            assert final.error.code == "abandoned", final.error  # not a bare "failed"
            assert final.error.message.startswith("abandoned by operator olga"), final.error
            emu.unplug()
            deadline = time.monotonic() + 10
            while health.Check(check).status == health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline, "health never flipped"
                time.sleep(0.05)
            # A new move of the unplugged arm is refused, recording nothing (no move waits to
            # be parked for an operator with nothing sent); a retry of one accepted before is
            # still answered with its operation.
            with pytest.raises(grpc.RpcError) as info:
                control.Execute(move("after", {"a": 0.1, "b": 0.1}), metadata=bearer(), timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
            assert info.value.details().startswith("device_unavailable: robot arm is not"), (
                info.value.details()
            )
            listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
            assert [o.id for o in listed.operations] == ["long"]
            retry = move("long", {"a": 1.4, "b": -1.4}, not_after_ms=final.not_after_ms)
            again = control.Execute(retry, metadata=bearer(), timeout=30)
            assert (again.id, again.state) == ("long", pb.FAILED), again
            # A Stop of the unreachable arm says so: its joints unknown, and why.
            (lost,) = control.Stop(pb.StopRequest(device="arm"), metadata=bearer()).devices
            assert not lost.ok and [j.state for j in lost.joints] == ["unknown", "unknown"]
            assert lost.error.code == "device_unreachable" and lost.error.message, lost
            channel.close()


def test_a_robot_that_is_not_connected_takes_no_new_move_unless_another_runs_it(
    tmp_path: Path,
) -> None:
    """A robot whose port never opened: a new move is `UNAVAILABLE` (`device_unavailable`,
    nothing recorded) where this daemon's workers would run it; one already past its
    `not_after_ms` is recorded and ends `EXPIRED`; a daemon with `workers = 0` (a `tether
    worker` may drive the robot, on the same catalog) records it, to wait."""
    gone = str(tmp_path / "no-such-adapter")
    for workers, fresh in ((None, grpc.StatusCode.UNAVAILABLE), (0, None)):
        serve = SERVE if workers is None else SERVE + f"workers = {workers}\n"
        (tmp_path / f"w{workers}").mkdir()
        config = grpc_config(tmp_path / f"w{workers}", gone, serve=serve)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            request = move("fresh", {"a": 0.1, "b": 0.1})
            if fresh is None:
                op = control.Execute(request, metadata=bearer(), timeout=30)
                assert op.state == pb.PENDING, op
            else:
                with pytest.raises(grpc.RpcError) as info:
                    control.Execute(request, metadata=bearer(), timeout=30)
                assert info.value.code() == fresh
                assert "device_unavailable: robot arm is not connected" in info.value.details()
                past = move("late", {"a": 0.1, "b": 0.1}, not_after_ms=1)
                control.Execute(past, metadata=bearer(), timeout=30)
                assert until_terminal(control, "late")[-1].state == pb.EXPIRED
                listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
                assert [o.id for o in listed.operations] == ["late"]
            channel.close()


def test_a_replugged_adapter_is_reconnected_and_its_robot_served_again(tmp_path: Path) -> None:
    """A port whose adapter went away is closed and opened anew once its device node is back
    (a USB adapter replugged; here a new emulator on the same link): health is not serving
    while it is gone and serving again after, and the next move runs on the new port,
    instead of every move and stop failing on the dead one until a restart."""
    with emulator_process(tmp_path) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service="tether.robot.v1.RobotControl/arm")
            serving_now = health_pb2.HealthCheckResponse.SERVING

            def health_becomes(serving: bool) -> None:
                deadline = time.monotonic() + 20
                while (health.Check(check).status == serving_now) != serving:
                    assert time.monotonic() < deadline, f"health never became {serving}"
                    time.sleep(0.05)

            control.Execute(move("before", {"a": 0.3, "b": 0.3}), metadata=bearer(), timeout=30)
            assert until_terminal(control, "before")[-1].state == pb.SUCCEEDED
            emu.unplug()
            Path(emu.control).unlink(missing_ok=True)
            health_becomes(False)
            with emulator_process(tmp_path) as again:  # the same link, a new pty behind it
                health_becomes(True)
                control.Execute(move("after", {"a": -0.3, "b": 0.2}), metadata=bearer(), timeout=30)
                final = until_terminal(control, "after")[-1]
                assert final.state == pb.SUCCEEDED, final
                sent = [e for e in again.journal() if e["instruction"] == "action"]
                assert sent, "the move never reached the new port"
                (stopped,) = control.Stop(pb.StopRequest(device="arm"), metadata=bearer()).devices
                assert stopped.ok and not stopped.error.code, stopped
            channel.close()


def test_cancel_before_the_start_never_moves_and_after_the_end_changes_nothing(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path, speed_scale=2.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "first", {"a": 1.0, "b": -1.0})
            # One move per robot at a time: "second" waits for the arm, not yet started.
            control.Execute(move("second", {"a": 0.2, "b": 0.2}), metadata=bearer(), timeout=30)
            waiting = wait_for(control, "second", lambda o: o.progress.phase == "queued")
            assert waiting.state == pb.PENDING and waiting.attempt == 1, waiting  # claimed
            cancelled = control.Cancel(pb.CancelRequest(operation_id="second"), metadata=bearer())
            assert cancelled.outcome == pb.CancelResponse.CANCELLED_BEFORE_START
            assert until_terminal(control, "first")[-1].state == pb.SUCCEEDED
            final = until_terminal(control, "second")[-1]
            assert final.state == pb.CANCELLED, final
            assert final.error.code == "cancelled" and "nothing was sent" in final.error.message
            assert final.progress.phase == "cancelled", final.progress  # not its "queued"
            late = control.Cancel(pb.CancelRequest(operation_id="first"), metadata=bearer())
            assert late.outcome == pb.CancelResponse.ALREADY_TERMINAL
            assert late.operation.state == pb.SUCCEEDED
            channel.close()
        from tether.adapters.dynamixel import tables

        second = {1: tables.radians_to_ticks(0.2), 2: tables.radians_to_ticks(0.2)}
        assert target_actions(emu.journal(), second) == {1: 0, 2: 0}


def test_a_move_cancelled_before_its_start_is_cancelled_at_once_not_after_the_moves_ahead(
    tmp_path: Path,
) -> None:
    """CANCELLED_BEFORE_START came with the operation still PENDING, and it stayed PENDING
    (then `queued`) until every move ahead of it on the robot had run: a client waiting for
    its terminal state waited for unrelated moves."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "first", {"a": 1.4, "b": -1.4})
            for name in ("second", "third"):
                control.Execute(move(name, {"a": 0.0, "b": 0.0}), metadata=bearer(), timeout=30)
            wait_for(control, "second", lambda o: o.progress.phase == "queued")
            for name in ("third", "second"):  # one no worker holds yet, one waiting for the arm
                answer = control.Cancel(pb.CancelRequest(operation_id=name), metadata=bearer())
                assert answer.outcome == pb.CancelResponse.CANCELLED_BEFORE_START, answer
                done = wait_for(control, name, lambda o: o.state != pb.PENDING, timeout=5)
                assert (done.state, done.error.code) == (pb.CANCELLED, "cancelled"), done
            running = control.GetOperation(
                pb.GetOperationRequest(operation_id="first"), metadata=bearer()
            )
            assert running.state == pb.RUNNING, running  # cancelled while the first still ran
            assert until_terminal(control, "first")[-1].state == pb.SUCCEEDED
            channel.close()


def test_cancel_of_a_running_move_stops_it_and_names_the_planners_cancel(tmp_path: Path) -> None:
    """Cancel mid-motion answers STOPPED_WHILE_RUNNING: the arm is held and latched as by a
    Stop, and the move awaits an operator with the reason `cancelled_by_planner` (no operator
    stopped it), which `tether status` also names for the latch."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "cut", {"a": 1.4, "b": -1.4})
            answer = control.Cancel(pb.CancelRequest(operation_id="cut"), metadata=bearer())
            assert answer.outcome == pb.CancelResponse.STOPPED_WHILE_RUNNING, answer
            stopped_at = len(emu.journal())
            parked = wait_for(control, "cut", lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
            assert parked.evidence.reason == "cancelled_by_planner", parked.evidence
            assert [e for e in emu.journal()[stopped_at:] if e["instruction"] == "action"] == []
            shown = tether("status", "--config", str(config))
            assert shown.returncode == 0, shown.stderr
            assert "LATCHED (a planner cancelled its running move; tether operator resume)" in (
                shown.stdout
            ), shown.stdout
            channel.close()


def test_a_reissue_after_a_planners_cancel_says_the_move_ran_before_it(tmp_path: Path) -> None:
    """A cancelled move is never run again, a reissue of it included; its message says what
    the cancel cut (frames were sent before it), never "nothing was sent"."""
    from tests._serve import operator

    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "cut", {"a": 1.4, "b": -1.4})
            control.Cancel(pb.CancelRequest(operation_id="cut"), metadata=bearer())
            parked = wait_for(control, "cut", lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
            assert operator(config, "resume", "arm", credential=OPERATOR).returncode == 0
            sent = len([e for e in emu.journal() if e["instruction"] == "action"])
            control.Resolve(
                pb.ResolveRequest(
                    operation_id="ci/cut",
                    decision=pb.ResolveRequest.REISSUE,
                    evidence_revision=parked.evidence.revision,
                ),
                metadata=bearer(OPERATOR),
                timeout=30,
            )
            ended = wait_for(control, "cut", lambda o: o.state == pb.CANCELLED)
            assert "nothing was sent" not in ended.error.message, ended.error
            assert "cancelled while it ran" in ended.error.message, ended.error
            assert len([e for e in emu.journal() if e["instruction"] == "action"]) == sent
            channel.close()


def _killed_mid_move(config: Path, op_id: str) -> None:
    """`tether serve` SIGKILLed while move `op_id` drives the arm (its servos go on)."""
    with daemon(config) as (proc, ready):
        channel, control = stub(ready["grpc"])
        moving(control, op_id, {"a": 1.4, "b": -1.4})
        proc.kill()
        proc.wait()
        channel.close()


def test_cancel_of_a_move_a_killed_server_started_stops_no_other_move(tmp_path: Path) -> None:
    """A move started by a server that was SIGKILLed runs no more: its Cancel is NOT_RUNNING and
    stops nothing, while the robot moves for another operation, which ends as it would (no
    latch, no `cancelled_by_planner` on it)."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        _killed_mid_move(config, "cut-short")
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "other", {"a": -1.4, "b": 1.4})
            answer = control.Cancel(pb.CancelRequest(operation_id="cut-short"), metadata=bearer())
            # Not running, or already concluded by the restart's reconcile (its servos reached
            # the goals meanwhile, on a slow machine): either way nothing is stopped.
            assert answer.outcome in (
                pb.CancelResponse.NOT_RUNNING,
                pb.CancelResponse.ALREADY_TERMINAL,
            ), answer
            final = until_terminal(control, "other")[-1]
            assert final.state == pb.SUCCEEDED, final
            shown = tether("status", "--config", str(config))
            assert "LATCHED" not in shown.stdout, shown.stdout
            channel.close()


def test_cancel_of_a_move_a_killed_server_left_driving_stops_the_robot(tmp_path: Path) -> None:
    """A server killed mid-move leaves the servos driving to its goals: after the restart, with
    no other move running, the move's Cancel stops and latches the robot."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        _killed_mid_move(config, "left-driving")
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            answer = control.Cancel(
                pb.CancelRequest(operation_id="left-driving"), metadata=bearer()
            )
            assert answer.outcome == pb.CancelResponse.STOPPED_WHILE_RUNNING, answer
            shown = tether("status", "--config", str(config))
            assert "LATCHED" in shown.stdout, shown.stdout
            channel.close()


def test_a_parked_and_a_decided_operation_say_what_they_are_not_what_they_did(
    tmp_path: Path,
) -> None:
    """A move stopped mid-motion is parked: its phase is its state, not the `running` of its
    last progress. An operator's DONE on it succeeds with the fraction the motion reached (the
    result says `operator_done`), never a 1.0 the arm did not move."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            parked = parked_mid_move(control, "cut")
            assert parked.progress.phase == "unknown_awaiting_operator", parked.progress
            reached = parked.progress.fraction
            assert 0.0 < reached < 1.0, parked.progress
            done = control.Resolve(
                pb.ResolveRequest(
                    operation_id="ci/cut",
                    decision=pb.ResolveRequest.DONE,
                    evidence_revision=parked.evidence.revision,
                ),
                metadata=bearer(OPERATOR),
                timeout=30,
            )
            final = wait_for(control, "cut", lambda o: o.state == pb.SUCCEEDED)
            assert b"operator_done" in final.result.document, (done, final)
            assert final.progress.phase == "succeeded"
            assert final.progress.fraction == pytest.approx(reached), final.progress
            channel.close()


@contextmanager
def _parked_then_restarted(
    tmp_path: Path, speed_scale: float
) -> Iterator[tuple[Path, rpc.RobotControlStub, float]]:
    """A move parked mid-motion by a Stop, then the daemon started again (no live progress of
    it in the new process: its evidence says how far it got): the config, a stub to the new
    daemon, and the fraction it was parked at."""
    with emulator_process(tmp_path, speed_scale=speed_scale) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            parked = parked_mid_move(control, "cut")
            reached = parked.progress.fraction
            assert 0.0 < reached < 1.0, parked.progress
            channel.close()
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            try:
                yield config, control, reached
            finally:
                channel.close()


def test_a_parked_operation_keeps_the_fraction_its_motion_reached_across_a_restart(
    tmp_path: Path,
) -> None:
    """The fraction of a parked move is what its motion reached, after a daemon restart too (no
    progress of it in the new process: read off its evidence), never 0."""
    with _parked_then_restarted(tmp_path, 1.0) as (_, control, reached):
        read = control.GetOperation(pb.GetOperationRequest(operation_id="cut"), metadata=bearer())
        assert read.state == pb.UNKNOWN_AWAITING_OPERATOR, read
        assert read.progress.fraction == pytest.approx(reached, abs=0.1), (reached, read)
        assert read.progress.fraction > 0.0


def test_a_parked_operations_fraction_stays_what_its_motion_reached_when_another_moves(
    tmp_path: Path,
) -> None:
    """A parked move's fraction followed the robot: another operation drove the arm, a
    Reconcile refreshed the parked one's evidence from the new read-back (a new revision), and
    its fraction became that other motion's distance."""
    from tests._serve import operator

    with _parked_then_restarted(tmp_path, 2.0) as (config, control, reached):
        assert reached < 0.9
        assert operator(config, "resume", "arm", credential=OPERATOR).returncode == 0
        control.Execute(move("other", {"a": 1.3, "b": -1.3}), metadata=bearer(), timeout=30)
        until_terminal(control, "other")
        read = control.Reconcile(pb.ReconcileRequest(operation_id="cut"), metadata=bearer())
        assert read.evidence.revision > 1, read.evidence
        assert read.progress.fraction == pytest.approx(reached, abs=0.02), (reached, read)


def test_the_fraction_reached_is_read_off_a_moves_evidence() -> None:
    from tether.serve.grpc_server import reached_fraction

    def joints(**rad: float) -> dict[str, object]:
        return {"joints": {n: {"position_rad": v} for n, v in rad.items()}}

    evidence = {
        "staged": {"a": 1.0, "b": -1.0},
        "preimage": {"read_back": joints(a=0.0, b=0.0)},
        "read_back": joints(a=0.5, b=-0.25),
    }
    assert reached_fraction(evidence) == pytest.approx(1 - 1.25 / 2.0)
    assert reached_fraction({**evidence, "read_back": joints(a=1.0, b=-1.0)}) == 1.0
    # Refreshed after another operation moved the robot: how far this one got stays.
    later = {
        **evidence,
        "reached_read_back": evidence["read_back"],
        "read_back": joints(a=1.0, b=-1.0),
    }
    assert reached_fraction(later) == pytest.approx(1 - 1.25 / 2.0)
    assert reached_fraction({**evidence, "preimage": None}) is None  # nothing to measure from
    assert reached_fraction({**evidence, "staged": {}}) is None
    assert reached_fraction({**evidence, "read_back": joints(a=0.5)}) is None  # b unread
    assert reached_fraction("not a document") is None


def test_cancel_of_an_operation_awaiting_an_operator_stops_nothing_and_names_resolve(
    tmp_path: Path,
) -> None:
    """A move parked for an operator (its robot latched by a Stop) is not running: its Cancel
    is FAILED_PRECONDITION naming Resolve, not STOPPED_WHILE_RUNNING. Nothing is sent to the
    arm, no cancel is recorded in its journal operation, the record does not move, and the
    operator still decides it."""
    from tether.activities import ActivityKey, operation_id_for
    from tether.families.robot_move.journal import MoveStore
    from tether.serve.grpc_server import world_for

    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            parked = parked_mid_move(control, "parked")
            frames = len(emu.journal())
            with pytest.raises(grpc.RpcError) as refused:
                control.Cancel(pb.CancelRequest(operation_id="parked"), metadata=bearer())
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = refused.value.details()
            assert details.startswith("awaiting_operator:") and "Resolve" in details, details
            assert len(emu.journal()) == frames  # no stop (nor any other frame) was sent
            after = control.GetOperation(
                pb.GetOperationRequest(operation_id="parked"), metadata=bearer()
            )
            assert after.state == pb.UNKNOWN_AWAITING_OPERATOR
            assert after.revision == parked.revision
            key = ActivityKey(world_for("ci"), "physical_ai.robot_move.absolute", "parked")
            (root,) = tmp_path.rglob("robot_move")
            journaled = MoveStore(root).get(operation_id_for(key))
            assert journaled is not None and journaled.entry.proof("cancel") is None
            decided = abandon(control, "parked", after.evidence.revision)
            assert decided.id == "ci/parked"
            assert until_terminal(control, "parked")[-1].state == pb.FAILED
            channel.close()


def test_a_health_watch_hears_a_change_only(tmp_path: Path, emu: EmulatorProcess) -> None:
    """grpcio's health Watch sends every status set: the server sets a device's status only
    when it changes, so an unchanged device is one SERVING, not one per health poll."""
    from tether.serve.grpc_server import HEALTH_POLL_S

    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel = grpc.insecure_channel(ready["grpc"])
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="tether.robot.v1.RobotControl/arm"),
            timeout=HEALTH_POLL_S * 8,
        )
        heard = []
        with pytest.raises(grpc.RpcError) as ended:
            for answer in watch:
                heard.append(answer.status)
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert heard == [health_pb2.HealthCheckResponse.SERVING], heard
        channel.close()


def test_reflection_lists_the_services_and_health_names_the_server(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    config = grpc_config(tmp_path, emu.path)
    with daemon(config) as (_, ready):
        channel = grpc.insecure_channel(ready["grpc"])
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = reflect.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        names = {s.name for a in answers for s in a.list_services_response.service}
        assert {"tether.robot.v1.RobotControl", "grpc.health.v1.Health"} <= names
        health = health_pb2_grpc.HealthStub(channel)
        server = health_pb2.HealthCheckRequest(service="tether.robot.v1.RobotControl")
        assert health.Check(server).status == health_pb2.HealthCheckResponse.SERVING
        channel.close()


def test_tls_serves_an_authenticated_planner_and_a_plain_client_gets_nothing(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    from _listeners import make_cert

    cert = make_cert(tmp_path / "tls")
    config = grpc_config(tmp_path, emu.path)
    text = config.read_text().replace(
        "[ports.bus]", f'[tls]\ncert = "{cert.cert}"\nkey = "{cert.key}"\n[ports.bus]', 1
    )
    config.write_text(text)
    with daemon(config) as (_, ready):
        port = ready["grpc"].rsplit(":", 1)[1]
        creds = grpc.ssl_channel_credentials(root_certificates=cert.cert.read_bytes())
        channel = grpc.secure_channel(f"localhost:{port}", creds)

        control = rpc.RobotControlStub(channel)
        listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(), timeout=10)
        assert list(listed.operations) == []
        plain, plain_control = stub(f"127.0.0.1:{port}")
        assert (
            status_code(
                lambda: plain_control.ListOperations(
                    pb.ListOperationsRequest(), metadata=bearer(), timeout=5
                )
            )
            == grpc.StatusCode.UNAVAILABLE
        )
        plain.close()
        channel.close()


def test_a_grpc_address_off_loopback_without_tls_and_a_bad_one_are_usage_errors(
    tmp_path: Path,
) -> None:
    for value, code in (("0.0.0.0:0", "insecure_listener"), ("127.0.0.1", "bad_grpc")):
        config = grpc_config(tmp_path, "/dev/null-unused", serve=f'\n[serve]\ngrpc = "{value}"\n')
        done = subprocess.run(
            [sys.executable, "-m", "tether", "serve", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (value, done.stderr)
        assert code in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_reconcile_of_a_parked_move_with_its_port_gone_is_unavailable(tmp_path: Path) -> None:
    """A parked move's Reconcile reads the device back: with the port gone it was an UNKNOWN
    status and a traceback in the server's log (a missing bus), not the read-back's refusal."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "cut", {"a": 1.4, "b": -1.4})
            control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=5)
            wait_for(control, "cut", lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
            emu.unplug()
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service="tether.robot.v1.RobotControl/arm")
            deadline = time.monotonic() + 10
            while health.Check(check).status == health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline, "health never flipped"
                time.sleep(0.05)
            # The lost port is closed once the device watch sees it (within a second or two):
            # until then the read fails on the dead port, from then on there is no bus at all.
            deadline = time.monotonic() + 10
            while True:
                with pytest.raises(grpc.RpcError) as info:
                    control.Reconcile(
                        pb.ReconcileRequest(operation_id="cut"), metadata=bearer(), timeout=30
                    )
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
                details = info.value.details()
                assert details.startswith("device read-back failed: port_lost: "), details
                if "is not connected" in details:
                    break
                assert time.monotonic() < deadline, f"the lost port was never closed: {details}"
                time.sleep(0.2)
            parked = control.GetOperation(
                pb.GetOperationRequest(operation_id="cut"), metadata=bearer()
            )
            assert parked.state == pb.UNKNOWN_AWAITING_OPERATOR  # nothing was decided
            # An operator's DONE needs a fresh read-back too: the same answer, retryable (it
            # was FAILED_PRECONDITION, as if the decision itself were wrong).
            done = pb.ResolveRequest(
                operation_id="cut",
                decision=pb.ResolveRequest.DONE,
                evidence_revision=parked.evidence.revision,
            )
            with pytest.raises(grpc.RpcError) as info:
                control.Resolve(done, metadata=bearer(OPERATOR), timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
            again = control.GetOperation(
                pb.GetOperationRequest(operation_id="cut"), metadata=bearer()
            )
            assert again.state == pb.UNKNOWN_AWAITING_OPERATOR  # nothing was decided
            channel.close()


def test_a_cancel_whose_stop_reaches_no_device_says_so(tmp_path: Path) -> None:
    """A running move's Cancel stops its robot: with the adapter gone it answered
    STOPPED_WHILE_RUNNING ("the device was stopped") although the stop reached nothing."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "far", {"a": 1.4, "b": -1.4})
            emu.unplug()
            with pytest.raises(grpc.RpcError) as info:
                control.Cancel(pb.CancelRequest(operation_id="far"), metadata=bearer())
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
            details = info.value.details()
            assert details.startswith("device_unreachable: far is cancelled"), details
            # Parked for an operator (it cannot be read back), never run again by itself.
            parked = wait_for(control, "far", lambda o: o.state != pb.RUNNING)
            assert parked.state == pb.UNKNOWN_AWAITING_OPERATOR, parked
            channel.close()


def test_a_queued_move_cancelled_before_start_ends_cancelled_with_its_device_gone(
    tmp_path: Path,
) -> None:
    """CANCELLED_BEFORE_START says "it had not started and never will": a queued move whose
    attempt then failed to open the lost port was reconciled from the device, parked for an
    operator (`device_unreadable`), and an operator's DONE made it SUCCEEDED."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            moving(control, "first", {"a": 1.4, "b": -1.4})
            control.Execute(move("queued", {"a": 0.0, "b": 0.0}), metadata=bearer(), timeout=30)
            emu.unplug()
            time.sleep(1.0)
            answer = control.Cancel(pb.CancelRequest(operation_id="queued"), metadata=bearer())
            assert answer.outcome == pb.CancelResponse.CANCELLED_BEFORE_START, answer
            final = wait_for(control, "queued", lambda o: o.state != pb.PENDING)
            assert (final.state, final.error.code) == (pb.CANCELLED, "cancelled"), final
            channel.close()


def test_a_new_move_of_a_latched_robot_is_refused_and_recorded_nowhere(tmp_path: Path) -> None:
    """An operator's stop holds the robot: a new move was accepted, reported RUNNING with
    nothing sent, then parked for an operator (`robot_latched`), which the planner could not
    cancel. It is refused now, as a robot not connected is, and recorded nowhere."""
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            before = move("before", {"a": 0.2, "b": 0.1})
            control.Execute(before, metadata=bearer(), timeout=30)
            wait_for(control, "before", lambda o: o.state == pb.SUCCEEDED)
            control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=10)
            with pytest.raises(grpc.RpcError) as info:
                control.Execute(move("after", {"a": 0.3, "b": 0.1}), metadata=bearer(), timeout=30)
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value
            details = info.value.details()
            # The planner's own Stop, named as such: it said "stopped by an operator".
            assert details.startswith(
                "robot_latched: robot arm was stopped (gRPC Stop by planner "
            ), details
            assert "tether operator resume arm" in details, details
            listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
            assert [o.id for o in listed.operations] == ["before"]
            # A retry of a move accepted before stays a read of it.
            again = control.Execute(before, metadata=bearer(), timeout=30)
            assert (again.id, again.state) == ("before", pb.SUCCEEDED)
            # Already past its not_after_ms, a move is recorded and ends expired at once.
            past = move("late", {"a": 0.3, "b": 0.1}, not_after_ms=int(time.time() * 1000) - 1)
            control.Execute(past, metadata=bearer(), timeout=30)
            assert wait_for(control, "late", lambda o: o.state != pb.PENDING).state == pb.EXPIRED
            actions = [e for e in effectful(emu) if e["instruction"] == "action"]
            # The first move's, one a joint: nothing of the others ran.
            assert sorted(e["id"] for e in actions) == [1, 2], actions
            channel.close()
