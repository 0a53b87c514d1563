"""RobotControl at its limits, on loopback: `tether serve` (a subprocess) over the DYNAMIXEL
emulator (its own process, a real pty) and real grpcio clients. A stop is answered while every
other RPC thread is taken; a watch over a cut link ends; a client guessing tokens locks out its
own address only; a revision the server never sent is refused; a store that fails is
UNAVAILABLE, never a verdict on the request."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest
from _dxl_setup import EmulatorProcess, emulator_process, target_actions
from _freeze_proxy import FreezeProxy
from _grpc_setup import (
    abandon,
    bearer,
    daemon,
    grpc_config,
    move,
    parked_mid_move,
    serving,
    stub,
    wait_for,
)
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc
from tether.activities import ActivityKey, operation_id_for
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.driver import DxlBus
from tether.adapters.grpc.remote import KIND_RELATIVE, RemoteHost, RemoteMoveAdapter
from tether.devices.credentials import RATE_LIMIT, hash_secret
from tether.runtime import ArtifactStore, AttemptContext, Recovered
from tether.serve.grpc_server import STOP_RESERVE, THREADS

from tests._secrets import OBSERVER, OPERATOR, PLANNER
from tests._serve import operator


def _error(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


#: Not terminal: a watch of an operation in one of these stays open.
OPEN = {pb.PENDING, pb.RUNNING, pb.UNKNOWN_AWAITING_OPERATOR}


def _parked_move(control: rpc.RobotControlStub, op_id: str) -> pb.Operation:
    """A move that never ends by itself: a Stop cuts it mid-motion and latches the robot, so
    it waits for an operator; its watch stays open. (A latched robot takes no new move.)"""
    return parked_mid_move(control, op_id)


def test_stop_is_answered_while_watches_and_calls_hold_every_other_thread(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (_, _ready, control):
        _parked_move(control, "parked")
        request = pb.WatchOperationRequest(operation_id="parked")
        streams = [
            control.WatchOperation(request, metadata=bearer())
            for _ in range(THREADS - STOP_RESERVE)
        ]
        first = [next(s) for s in streams]  # each holds its thread now
        assert {v.state for v in first} <= OPEN
        # One more call of any kind but Stop or Heartbeat is refused at once...
        busy = _error(
            lambda: control.GetOperation(
                pb.GetOperationRequest(operation_id="parked"), metadata=bearer(), timeout=10
            )
        )
        assert busy.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "server_busy" in (busy.details() or "")
        # ...while a stop and a heartbeat find a thread, and in time.
        start = time.monotonic()
        stopped = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=5)
        assert stopped.devices[0].device == "arm" and stopped.devices[0].latched
        assert time.monotonic() - start < 5
        control.Heartbeat(
            pb.HeartbeatRequest(session_id="s", ttl_ms=1000), metadata=bearer(), timeout=5
        )
        for s in streams[:10]:  # ten watches end: ten calls may run again
            s.cancel()
        deadline = time.monotonic() + 10
        while True:
            try:
                got = control.GetOperation(
                    pb.GetOperationRequest(operation_id="parked"), metadata=bearer(), timeout=10
                )
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert time.monotonic() < deadline, "the cancelled watches never gave back"
                time.sleep(0.05)
        assert got.state in OPEN
        for s in streams:
            s.cancel()


def test_a_watch_over_a_cut_link_ends_unavailable(tmp_path: Path, emu: EmulatorProcess) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (_, ready, control):
        _parked_move(control, "cut")
        proxy = FreezeProxy(ready["grpc"])
        # The bridge's channel (its keepalive), with pings as often as the server accepts.
        remote = RemoteHost(proxy.address, PLANNER, keepalive_s=5.0, keepalive_timeout_s=2.0)
        bridge = remote.channel()
        watch = rpc.RobotControlStub(bridge).WatchOperation(
            pb.WatchOperationRequest(operation_id="cut"), metadata=bearer()
        )
        assert next(watch).state in OPEN
        time.sleep(6.0)  # a ping answered on a quiet watch: no `too_many_pings`
        assert watch.is_active()
        proxy.freeze()
        ended: list[grpc.StatusCode] = []

        def drain() -> None:
            try:
                for _ in watch:
                    pass
            except grpc.RpcError as exc:
                ended.append(exc.code())

        start = time.monotonic()
        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        thread.join(30)
        assert ended == [grpc.StatusCode.UNAVAILABLE], "the watch never noticed the cut link"
        assert time.monotonic() - start < 15
        bridge.close()
        proxy.close()


def test_wrong_tokens_over_grpc_lock_out_that_address_not_the_local_operator(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (proc, _ready, control):
        for i in range(RATE_LIMIT + 1):
            guess = (("authorization", f"Bearer guess-{i}"),)
            with pytest.raises(grpc.RpcError):
                control.GetOperation(pb.GetOperationRequest(operation_id="x"), metadata=guess)
        limited = _error(
            lambda: control.GetOperation(
                pb.GetOperationRequest(operation_id="x"), metadata=(("authorization", "Bearer g"),)
            )
        )
        assert limited.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (limited.details() or "").startswith("credential_rate_limited: 5 failed")
        # Every client on this host shares its address: a planner's own credential, never seen
        # before, still stops the arm, since Stop's failures are counted apart ...
        stopped = control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=30)
        assert [d.device for d in stopped.devices] == ["arm"] and stopped.devices[0].latched
        # ... and as strictly: guesses at Stop are refused, then locked out in their turn.
        codes = []
        for i in range(RATE_LIMIT + 1):
            guess = (("authorization", f"Bearer stop-guess-{i}"),)
            codes.append(_error(lambda g=guess: control.Stop(pb.StopRequest(), metadata=g)).code())
        assert codes[:RATE_LIMIT] == [grpc.StatusCode.UNAUTHENTICATED] * RATE_LIMIT
        assert codes[-1] == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The operator at the host's own console is not locked out by a network client.
        resumed = operator(config, "resume", "arm", credential=OPERATOR)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        # The latch named who stopped the arm: the planner, through the Stop RPC.
        assert "gRPC Stop by planner ci" in resumed.stdout, resumed.stdout
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    # The daemon's log says each refused credential and each lockout, with its source and
    # call, once (a locked-out source's further calls add nothing), and never a secret.
    said = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{")]
    refused = [r for r in said if r["msg"] == "grpc credential refused"]
    codes = [(r["code"], r["call"]) for r in refused]
    assert codes.count(("credential_refused", "GetOperation")) == RATE_LIMIT, codes
    assert codes.count(("credential_rate_limited", "GetOperation")) == 1, codes
    assert codes.count(("credential_refused", "Stop")) == RATE_LIMIT, codes
    assert codes.count(("credential_rate_limited", "Stop")) == 1, codes
    assert len(codes) == 2 * RATE_LIMIT + 2, codes
    assert all(r["source"].startswith("net:") for r in refused), refused
    assert "guess-" not in err and "Bearer g" not in err


def test_a_revision_past_the_operation_is_out_of_range(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (_, _ready, control):
        op = control.Execute(move("rev", {"a": 0.1, "b": 0.1}), metadata=bearer(), timeout=30)
        final = wait_for(control, "rev", lambda o: o.state == pb.SUCCEEDED)
        # Far past it: settling the operation still moves its revision a little.
        past = pb.WatchOperationRequest(operation_id="rev", from_revision=final.revision + 10**6)
        refused = _error(lambda: list(control.WatchOperation(past, metadata=bearer(), timeout=10)))
        assert refused.code() == grpc.StatusCode.OUT_OF_RANGE
        assert "from_revision" in (refused.details() or "")
        # Its own revisions resume as before: the first view past the one given.
        older = pb.WatchOperationRequest(operation_id="rev", from_revision=op.revision)
        views = list(control.WatchOperation(older, metadata=bearer(), timeout=10))
        assert views and views[-1].state == pb.SUCCEEDED


def test_a_store_lost_mid_execute_is_unavailable_and_the_identical_retry_moves_once(
    tmp_path: Path, emu: EmulatorProcess, pg_url: str
) -> None:
    server = urlsplit(pg_url)
    target = f"{server.hostname}:{server.port or 5432}"
    proxy = FreezeProxy(target)  # the world ledger's connections only
    world = urlunsplit(server._replace(netloc=proxy.address))
    config = grpc_config(tmp_path, emu.path)
    try:
        with daemon(config, args=["--catalog", pg_url, "--world", world]) as (_, ready):
            channel, control = stub(ready["grpc"])
            first = control.Execute(move("warm", {"a": 0.1, "b": 0.1}), metadata=bearer())
            assert wait_for(control, first.id, lambda o: o.state == pb.SUCCEEDED)
            # The world ledger's server goes away: the intent's tick cannot be committed, nor
            # its outcome read. Nothing can be said of the request itself.
            proxy.down()
            request = move("lost", {"a": 0.3, "b": -0.2})
            lost = _error(lambda: control.Execute(request, metadata=bearer(), timeout=60))
            assert lost.code() == grpc.StatusCode.UNAVAILABLE, lost.details()
            assert "server_storage" in (lost.details() or "")
            # It is back: the client retries the identical request until it is answered.
            proxy.up()
            deadline = time.monotonic() + 30
            while True:
                try:
                    again = control.Execute(request, metadata=bearer(), timeout=30)
                    break
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc.details()
                    assert time.monotonic() < deadline, exc.details()
                    time.sleep(0.2)
            assert again.id == "lost"
            assert wait_for(control, "lost", lambda o: o.state == pb.SUCCEEDED)
            channel.close()
    finally:
        proxy.close()
    goal = {1: tables.radians_to_ticks(0.3), 2: tables.radians_to_ticks(-0.2)}
    assert target_actions(emu.journal(), goal) == {1: 1, 2: 1}


def test_list_operations_pages_in_id_order_and_filters(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (_, _ready, control):
        past = int(time.time() * 1000) - 1  # expired at once: recorded, never moved
        ids = ["op-c", "op-a", "op-e", "op-b", "op-d"]
        for op_id in ids:
            control.Execute(move(op_id, not_after_ms=past), metadata=bearer(), timeout=30)
        for op_id in ids:
            wait_for(control, op_id, lambda o: o.state == pb.EXPIRED)
        pages: list[list[str]] = []
        token = ""
        while True:
            page = control.ListOperations(
                pb.ListOperationsRequest(page_size=2, page_token=token), metadata=bearer()
            )
            pages.append([op.id for op in page.operations])
            token = page.next_page_token
            if not token:
                break
        assert pages == [["op-a", "op-b"], ["op-c", "op-d"], ["op-e"]]
        none = control.ListOperations(
            pb.ListOperationsRequest(states=[pb.SUCCEEDED]), metadata=bearer()
        )
        assert list(none.operations) == []
        expired = control.ListOperations(
            pb.ListOperationsRequest(states=[pb.EXPIRED], device="arm"), metadata=bearer()
        )
        assert sorted(op.id for op in expired.operations) == sorted(ids)
        bad = _error(
            lambda: control.ListOperations(
                pb.ListOperationsRequest(page_token="../x"), metadata=bearer()
            )
        )
        assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (bad.details() or "").startswith("page_token")
        # A filter that can match nothing is a mistake named, never an empty page.
        for field, request in {
            "states": pb.ListOperationsRequest(states=[pb.OPERATION_STATE_UNSPECIFIED]),
            "states: 99": pb.ListOperationsRequest(states=[99]),
            "device: unknown device 'nope' (served: arm)": pb.ListOperationsRequest(device="nope"),
        }.items():
            refused = _error(lambda r=request: control.ListOperations(r, metadata=bearer()))
            assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert (refused.details() or "").startswith(field), refused.details()
        # An observer may read and list (every principal's), not reconcile: the refusal names
        # the call.
        denied = _error(
            lambda: control.Reconcile(
                pb.ReconcileRequest(operation_id="op-00"), metadata=bearer(OBSERVER)
            )
        )
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "Reconcile needs planner" in (denied.details() or ""), denied.details()


def test_a_planners_reconcile_refreshes_its_own_operation_only(tmp_path: Path) -> None:
    second = "planner-token-5b2e-limits-second"
    with emulator_process(tmp_path, speed_scale=1.0) as emu:
        config = grpc_config(tmp_path, emu.path)
        principal = f'[planners.cj]\ntoken = "{hash_secret(second)}"\nrole = "planner"\n'
        config.write_text(config.read_text().replace("[ports.bus]", principal + "[ports.bus]", 1))
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            mine = parked_mid_move(control, "mine", PLANNER)
            resumed = operator(config, "resume", "arm", credential=OPERATOR)
            assert resumed.returncode == 0, resumed.stdout + resumed.stderr
            theirs = parked_mid_move(control, "theirs", second)
            read = control.Reconcile(pb.ReconcileRequest(operation_id="mine"), metadata=bearer())
            assert read.evidence.revision > mine.evidence.revision  # the arm moved since
            # Read back again with nothing changed: the same revision, so a planner polling
            # Reconcile never makes the revision an operator is deciding on stale.
            for _ in range(2):
                again = control.Reconcile(
                    pb.ReconcileRequest(operation_id="mine"), metadata=bearer()
                )
                assert again.evidence.revision == read.evidence.revision
            now = control.GetOperation(
                pb.GetOperationRequest(operation_id="theirs"), metadata=bearer(second)
            )
            # The other principal's operation keeps the revision its operator decides on.
            assert now.evidence.revision == theirs.evidence.revision
            # The operator (and an observer) read it over gRPC, as Resolve names it; a planner
            # reads its own operations only.
            read = pb.GetOperationRequest(operation_id="cj/theirs")
            seen = control.GetOperation(read, metadata=bearer(OPERATOR))
            assert seen.evidence.revision == theirs.evidence.revision
            # Named as a host-wide role lists it (two principals' ids may be the same).
            assert control.GetOperation(read, metadata=bearer(OBSERVER)).id == "cj/theirs"
            listed = control.ListOperations(pb.ListOperationsRequest(), metadata=bearer(OPERATOR))
            assert "cj/theirs" in [o.id for o in listed.operations]
            other = _error(lambda: control.GetOperation(read, metadata=bearer()))
            assert other.code() == grpc.StatusCode.NOT_FOUND
            decided = abandon(control, "cj/theirs", seen.evidence.revision)
            assert decided.id == "cj/theirs"
            channel.close()


def test_a_watch_the_server_stops_under_ends_unavailable_not_ok(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (proc, _ready, control):
        _parked_move(control, "open")
        watch = control.WatchOperation(
            pb.WatchOperationRequest(operation_id="open"), metadata=bearer()
        )
        assert next(watch).state in OPEN
        proc.send_signal(signal.SIGTERM)
        ended = _error(lambda: list(watch))
        assert ended.code() == grpc.StatusCode.UNAVAILABLE, ended.details()
        assert "from_revision" in (ended.details() or "")


def test_a_stop_answers_each_joints_read_back_position_and_hardware_errors(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    b_ticks = tables.CENTER_TICK + 400
    with DxlBus.open(emu.path, timeout_ms=400, lock_dir=None) as bus:  # before the daemon owns it
        for dxl_id, ticks in ((1, tables.CENTER_TICK), (2, b_ticks)):
            emu.request(op="set_present", id=dxl_id, ticks=ticks)
            bus.write_field(dxl_id, tables.GOAL_POSITION, ticks)
            bus.write_field(dxl_id, tables.TORQUE_ENABLE, 1)
    emu.request(op="fault", kind="alert", id=2, value=0x20)  # overload: it drops torque
    with serving(config) as (_, _ready, control):
        (device,) = control.Stop(
            pb.StopRequest(device="arm"), metadata=bearer(), timeout=10
        ).devices
        a, b = device.joints
        assert (a.joint, a.state, a.position_rad, list(a.hardware_errors)) == ("a", "held", 0.0, [])
        assert (b.joint, b.state, list(b.hardware_errors)) == ("b", "limp", ["overload"])
        assert b.position_rad == pytest.approx(tables.ticks_to_radians(b_ticks), abs=1e-3)
        assert not device.ok and device.latched


def test_a_robot_named_sim_is_stopped_by_that_name(tmp_path: Path, emu: EmulatorProcess) -> None:
    config = grpc_config(tmp_path, emu.path)
    config.write_text(config.read_text().replace("robots.arm", "robots.sim"))
    with serving(config) as (_, _ready, control):
        stopped = control.Stop(pb.StopRequest(device="sim"), metadata=bearer(), timeout=10)
        (device,) = stopped.devices
        # Stopped and latched (its servos were never powered: limp, as they are).
        assert (device.device, device.latched) == ("sim", True)
        assert [(j.joint, j.state) for j in device.joints] == [("a", "limp"), ("b", "limp")]


def test_the_bridges_reconcile_never_takes_another_requests_operation_for_its_own(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    config = grpc_config(tmp_path, emu.path)
    key = ActivityKey("bridge-world", KIND_RELATIVE, "m-1")
    op_id = operation_id_for(key)
    with serving(config) as (_, ready, control):
        # Another bridge (same token) already ran its own move under this operation id.
        control.Execute(move(op_id, {"a": 0.1, "b": 0.1}), metadata=bearer(), timeout=30)
        wait_for(control, op_id, lambda o: o.state == pb.SUCCEEDED)
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        artifacts = ArtifactStore(tmp_path / "bridge-artifacts")
        ctx = AttemptContext(
            key=key,
            operation_id=op_id,
            fence=2,
            attempt=2,
            may_execute=False,
            artifacts=artifacts,
            renew=lambda: None,
        )
        mine = {
            "kind": KIND_RELATIVE,
            "device": "arm",
            "targets": {"a": -0.3},
            "not_after_ms": int(time.time() * 1000) + 60_000,
        }
        out = adapter.reconcile(ctx, mine)  # this request's Execute reply was lost
        assert isinstance(out, Recovered), out
        assert out.result.failed
        doc = json.loads(artifacts.get_bytes(out.result.ref, out.result.digest))
        assert (doc["outcome"], doc["code"]) == ("refused", "remote_conflict"), doc
        adapter.close()


def test_a_list_page_holds_at_most_its_bytes_and_the_rest_follows(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Views with their evidence documents can outgrow a message: a page stops at
    `LIST_PAGE_BYTES` of views (at least one), whatever `page_size` allows, and the next page
    goes on from it, so every operation is listed once."""
    import tether.serve.grpc_server as server

    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        ids = [f"big-{i}" for i in range(6)]
        for op_id in ids:
            control.Execute(move(op_id), metadata=bearer(), timeout=30)
        one = control.ListOperations(pb.ListOperationsRequest(page_size=1), metadata=bearer())
        size = one.operations[0].ByteSize()
        monkeypatch.setattr(server, "LIST_PAGE_BYTES", 2 * size + size // 2)
        pages: list[list[str]] = []
        token = ""
        while True:
            page = control.ListOperations(
                pb.ListOperationsRequest(page_size=500, page_token=token), metadata=bearer()
            )
            assert sum(o.ByteSize() for o in page.operations) <= server.LIST_PAGE_BYTES
            pages.append([o.id for o in page.operations])
            token = page.next_page_token
            if not token:
                break
        assert [len(p) for p in pages] == [2, 2, 2], pages
        assert [i for p in pages for i in p] == sorted(ids)
    finally:
        channel.close()
