"""Bytes that are no request, and the health service's List, on a `Daemon` in this process (its
gRPC server on loopback, a raw grpcio client, the emulated arm on a real pty).

- A request whose bytes do not parse as the call's message (garbage, a string field that is
  not UTF-8) is INVALID_ARGUMENT on every RobotControl call from a caller with a credential,
  and on the health service; a RobotControl caller without one, or with a wrong one, is told
  that first (UNAUTHENTICATED), as for a well-formed request. Nothing is recorded and no
  traceback is logged (grpcio's own answer is INTERNAL, logged at ERROR with one).
- grpc.health.v1's List names the server and every device with its status.
"""

from __future__ import annotations

import logging

import grpc
import pytest
from _grpc_setup import bearer, move, stub
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve.daemon import Daemon

#: An operation_id (field 1, length 2) whose bytes are not UTF-8.
NOT_UTF8 = b"\x0a\x02\xc3\x28"
GARBAGE = b"\xff\xff\xff"
UNARY = ("Execute", "GetOperation", "ListOperations", "Cancel", "Reconcile", "Resolve", "Stop")


def _raw(channel: grpc.Channel, path: str, stream: bool = False) -> object:
    make = channel.unary_stream if stream else channel.unary_unary
    return make(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def test_bytes_that_are_no_request_are_invalid_argument_and_log_no_traceback(
    served: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    caplog.set_level(logging.INFO)
    try:
        for name in (*UNARY, "WatchOperation"):
            call = _raw(channel, f"/tether.robot.v1.RobotControl/{name}", name == "WatchOperation")
            method = pb.DESCRIPTOR.services_by_name["RobotControl"].methods_by_name[name]
            first = method.input_type.fields_by_number[1]
            text = first.type == first.TYPE_STRING  # else NOT_UTF8 is an unknown field: valid
            for data in (GARBAGE, NOT_UTF8) if text else (GARBAGE,):
                for metadata, code in (
                    ((), grpc.StatusCode.UNAUTHENTICATED),
                    (bearer(), grpc.StatusCode.INVALID_ARGUMENT),
                ):
                    with pytest.raises(grpc.RpcError) as info:
                        answer = call(data, metadata=metadata, timeout=30)  # type: ignore[operator]
                        list(answer) if name == "WatchOperation" else None
                    err = info.value
                    assert err.code() == code, (name, err.details())
                    if code == grpc.StatusCode.INVALID_ARGUMENT:
                        assert "malformed request" in (err.details() or ""), err.details()
                    else:
                        assert (err.details() or "").startswith("principal_required: ")
        wrong = _raw(channel, "/tether.robot.v1.RobotControl/GetOperation")
        with pytest.raises(grpc.RpcError) as info:  # a wrong token: refused as such first
            wrong(GARBAGE, metadata=bearer("not-a-token-of-anyone"), timeout=30)  # type: ignore[operator]
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()
        check = _raw(channel, "/grpc.health.v1.Health/Check")
        with pytest.raises(grpc.RpcError) as info:
            check(NOT_UTF8, timeout=30)  # type: ignore[operator]
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # Nothing was recorded, and the server still serves a well-formed request.
        listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(), timeout=30)
        assert list(listed.operations) == []
        assert control.Execute(move("after"), metadata=bearer(), timeout=30).id == "after"
    finally:
        channel.close()
    logged = [r for r in caplog.records if r.name.startswith("grpc")]
    assert not [r for r in logged if r.levelno >= logging.ERROR or r.exc_info], [
        r.getMessage() for r in logged
    ]


def test_health_list_names_the_server_and_each_device(served: Daemon) -> None:
    assert served.grpc_url is not None
    with grpc.insecure_channel(served.grpc_url) as channel:
        listed = health_pb2_grpc.HealthStub(channel).List(
            health_pb2.HealthListRequest(), timeout=30
        )
    statuses = {name: answer.status for name, answer in listed.statuses.items()}
    serving = health_pb2.HealthCheckResponse.SERVING
    assert statuses[""] == serving
    assert statuses["tether.robot.v1.RobotControl"] == serving
    assert statuses["tether.robot.v1.RobotControl/arm"] == serving


def test_open_health_watches_hold_no_rpc_thread_so_a_stop_is_served(served: Daemon) -> None:
    """grpcio's health Watch waits without a pool thread: more open watches (no credential
    needed) than the server has RPC threads still leave a Stop its thread."""
    from tether.serve.grpc_server import THREADS

    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    health = health_pb2_grpc.HealthStub(channel)
    watches = [
        health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        for _ in range(THREADS + 10)
    ]
    try:
        for watch in watches:  # each one open on the server, its first answer read
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stopped = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=10)
        assert [d.device for d in stopped.devices] == ["arm"]
    finally:
        for watch in watches:
            watch.cancel()
        channel.close()


def test_an_operation_id_no_execute_could_take_is_invalid_and_a_planner_may_name_its_own(
    served: Daemon,
) -> None:
    """`a//b` or `a/b/c` (no principal is named so) was NOT_FOUND, not INVALID_ARGUMENT as
    every name no Execute could take is; and a planner asking for its own operation by the
    name operators see it under (`ci/m1`) got NOT_FOUND."""
    from _grpc_setup import move, stub

    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        made = control.Execute(move("m1", {"a": 0.1, "b": 0.1}), metadata=bearer(), timeout=30)
        for bad in ("ci//m1", "ci/m1/x", "/m1", " ci/m1"):
            with pytest.raises(grpc.RpcError) as info:
                control.GetOperation(pb.GetOperationRequest(operation_id=bad), metadata=bearer())
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (bad, info.value)
        own = control.GetOperation(pb.GetOperationRequest(operation_id="ci/m1"), metadata=bearer())
        assert (own.id, own.request_digest) == (made.id, made.request_digest)
        with pytest.raises(grpc.RpcError) as info:  # another principal's: not known to it
            control.GetOperation(pb.GetOperationRequest(operation_id="ops/m1"), metadata=bearer())
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()


def test_a_negative_not_after_is_said_as_sent_not_as_missing(served: Daemon) -> None:
    from _grpc_setup import move, stub

    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        for given, words in ((-5, "must be positive"), (0, "required")):
            request = move("n1", {"a": 0.1})
            request.not_after_ms = given
            with pytest.raises(grpc.RpcError) as info:
                control.Execute(request, metadata=bearer(), timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert info.value.details().startswith(f"not_after_ms: {words}"), info.value.details()
    finally:
        channel.close()
