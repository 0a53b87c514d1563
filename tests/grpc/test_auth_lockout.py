"""A client address locked out for its failed tokens gets no answer that tells a valid token
from a wrong one: a token verified (and cached) before the lockout is refused from that address
too, until the lockout ends (a `Daemon` in this process, a real grpcio client on loopback)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from _grpc_setup import IN_PROCESS_SERVE, bearer, in_process, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve.daemon import Daemon


def _code(control: object, token: str) -> grpc.StatusCode:
    request = pb.ListOperationsRequest(page_size=1)
    try:
        control.ListOperations(request, metadata=bearer(token), timeout=30)  # type: ignore[attr-defined]
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_a_locked_out_address_cannot_tell_a_valid_token_from_a_guess(served: Daemon) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        valid = bearer()[0][1].removeprefix("Bearer ")
        assert _code(control, valid) == grpc.StatusCode.OK  # verified once: cached
        codes = [_code(control, f"guess-{i}") for i in range(8)]
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes  # the address is locked out
        assert _code(control, "guess-again") == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _code(control, valid) == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Stop's failures count apart: the lockout of the other calls does not reach it.
        answer = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        assert answer.devices[0].device == "arm"
    finally:
        channel.close()


def test_an_ipv6_listener_is_printed_as_a_client_dials_it(tmp_path: Path) -> None:
    """`[serve] grpc = "[::1]:0"`: the address the daemon gives (its ready line, `tether
    status`) is bracketed, so a grpcio client dials it as printed."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    serve = IN_PROCESS_SERVE.replace('"127.0.0.1:0"', '"[::1]:0"')
    with in_process(tmp_path, serve) as running:
        assert running.grpc_url is not None and running.grpc_url.startswith("[::1]:")
        with grpc.insecure_channel(running.grpc_url) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_two_authorization_headers_are_refused_whichever_comes_first(served: Daemon) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        valid = bearer()[0]
        wrong = ("authorization", "Bearer not-the-token")
        for metadata in ((wrong, valid), (valid, wrong), (valid, valid)):
            with pytest.raises(grpc.RpcError) as info:
                control.ListOperations(pb.ListOperationsRequest(), metadata=metadata, timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "principal_ambiguous" in (info.value.details() or "")
    finally:
        channel.close()


def test_calls_bearing_one_new_token_at_once_verify_it_once(served: Daemon) -> None:
    """Every watch of a bridge resuming after a restart bears the same token, not cached yet:
    each call ran the whole verification (argon2 against each principal) after the other, so
    the last ones waited seconds and timed out. The daemon's own Authenticator, counted."""
    import threading

    assert served.grpc_url is not None and served.grpc is not None
    auth = served.grpc.servicer.auth
    real = auth._authenticator
    calls: list[str] = []

    class Counted:
        def authenticate(self, secret: str, **kwargs: object) -> object:
            calls.append(secret)
            return real.authenticate(secret, **kwargs)

    auth._authenticator = Counted()
    channels = [stub(served.grpc_url) for _ in range(6)]
    valid = bearer()[0][1].removeprefix("Bearer ")
    start = threading.Barrier(len(channels))
    codes: list[grpc.StatusCode] = []

    def call(control: object) -> None:
        start.wait()
        codes.append(_code(control, valid))

    threads = [threading.Thread(target=call, args=(c,)) for _, c in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for channel, _ in channels:
        channel.close()
    assert codes == [grpc.StatusCode.OK] * len(channels)
    assert calls == [valid]  # verified once, then answered from the cache
    # A wrong token is still verified (and counted as a failure) by each call bearing it.
    channel, control = stub(served.grpc_url)
    assert _code(control, "wrong-token") == grpc.StatusCode.UNAUTHENTICATED
    channel.close()
    assert calls == [valid, "wrong-token"]
