"""A client address locked out for its failed tokens gets no answer that tells a valid token
from a wrong one: a token verified (and cached) before the lockout is refused from that address
too, until the lockout ends (a `Daemon` in this process, a real grpcio client on loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from _grpc_setup import bearer, in_process, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve.daemon import Daemon

SERVE = '\n[serve]\nworkers = 0\nsse = "off"\ngrpc = "127.0.0.1:0"\n'


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    with in_process(tmp_path, SERVE) as running:
        yield running


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
