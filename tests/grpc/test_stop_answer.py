"""A gRPC `Stop`'s answer, in a `Daemon` in this process (its gRPC server on loopback, a real
grpcio client, the emulated arm on a real pty): new work is held back (`StopFirst`) only for a
checked and authorised stop, never for a refused one; the answer says each robot is latched
without reading its record again, unless a resume landed in this daemon meanwhile."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from _grpc_setup import bearer, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.serve.daemon import Daemon


def test_only_an_authorised_stop_holds_new_work_back(
    served: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered: list[int] = []
    real = served.stop_first.stopping

    @contextlib.contextmanager
    def counted() -> Iterator[None]:
        entered.append(1)
        with real():
            yield

    monkeypatch.setattr(served.stop_first, "stopping", counted)
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        refused = [
            (pb.StopRequest(device="arm"), bearer("not-a-token")),
            (pb.StopRequest(device="arm"), ()),
            (pb.StopRequest(device="no-such-arm"), bearer()),
        ]
        for request, metadata in refused:
            with pytest.raises(grpc.RpcError):
                control.Stop(request, metadata=metadata, timeout=30)
        assert entered == []
        answer = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        assert answer.devices[0].latched and entered
    finally:
        channel.close()


def test_a_stop_answers_latched_from_its_own_latch_unless_a_resume_landed(
    served: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = served.devices
    assert devices is not None and served.grpc_url is not None
    reads: list[str] = []
    latched = devices.latched

    def counted(name: str) -> bool:
        reads.append(name)
        return latched(name)

    monkeypatch.setattr(devices, "latched", counted)
    channel, control = stub(served.grpc_url)
    try:
        answer = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        assert answer.devices[0].latched and reads == []
        # An operator resumes the arm while a stop is being answered: the answer reads it.
        stop_devices = served.stop_devices

        def then_resumed(request: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
            out = stop_devices(request, **kw)
            devices.resume("arm", operator="alice")
            return out

        monkeypatch.setattr(served, "stop_devices", then_resumed)
        answer = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        assert reads == ["arm"] and not answer.devices[0].latched
    finally:
        channel.close()
