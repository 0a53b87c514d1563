"""A metadata value that is not UTF-8 (a bearer token with one stray byte, or junk from a
client with no credential) is refused, and never logged in full: grpcio logged each one as
an ERROR with the value and a traceback (a daemon in this process, a bare HTTP/2 client)."""

from __future__ import annotations

import logging

import pytest
from _grpc_setup import PLANNER
from _raw_h2 import unary
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve.daemon import Daemon

GET = "/tether.robot.v1.RobotControl/GetOperation"


def test_an_undecodable_token_is_refused_and_never_logged(
    served: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    assert served.grpc_url is not None
    message = pb.GetOperationRequest(operation_id="m1").SerializeToString()
    with caplog.at_level(logging.DEBUG):
        answers = [
            unary(
                served.grpc_url,
                GET,
                message,
                [(b"authorization", f"Bearer {PLANNER}".encode() + b"\xe9")],
            ),
            *(unary(served.grpc_url, GET, message, [(b"x-junk", b"\xff" * 200)]) for _ in range(5)),
        ]
    for answer in answers:
        assert b"grpc-status" in answer  # answered (refused), not left hanging
        assert b"grpc-status: 0" not in answer
    text = "\n".join(
        f"{r.getMessage()} {r.exc_text or ''} {r.exc_info or ''}" for r in caplog.records
    )
    assert PLANNER not in text
    assert "\\xff" not in text and "Traceback" not in text
    noisy = [r for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(noisy) == 1 and noisy[0].levelno == logging.WARNING  # once, not per call
