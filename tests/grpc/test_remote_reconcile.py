"""The bridge's reconcile against a real `tether serve` on loopback (the DYNAMIXEL emulator
underneath, its own process): the identical Execute proves an operation the remote holds is
this request's (the remote's digest check), and creates nothing; an operation the remote never
received is ConfirmedAbsent, never started by a reconcile, and the next execute attempt retries
it with the identical request. A bridge shutting down never waits for a remote operation."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from _dxl_setup import GOALS, EmulatorProcess, emulator_process, target_actions
from _grpc_setup import (
    SERVE,
    bearer,
    daemon,
    grpc_config,
    move,
    reconcile_context,
    serving,
    stub,
    wait_for,
)
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.activities import ActivityKey, operation_id_for
from tether.adapters.grpc.remote import (
    KIND_ABSOLUTE,
    RemoteHost,
    RemoteMoveAdapter,
    intent,
    remote_move_family,
)
from tether.runtime import ConfirmedAbsent, Host, ProgressEvent, Recovered
from tether.testing._ports import free_port

from tests._secrets import PLANNER


def _request(targets: dict[str, float], not_after_ms: int) -> dict[str, Any]:
    return {
        "kind": KIND_ABSOLUTE,
        "device": "arm",
        "targets": targets,
        "not_after_ms": not_after_ms,
    }


def _error(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def _reconciled(
    tmp_path: Path, address: str, key: ActivityKey, request: dict[str, Any]
) -> tuple[Any, Any]:
    """One reconcile of `request` by a fresh bridge adapter: its context and its outcome."""
    adapter = RemoteMoveAdapter(RemoteHost(address, PLANNER))
    try:
        ctx = reconcile_context(tmp_path, key)
        return ctx, adapter.reconcile(ctx, request)
    finally:
        adapter.close()


def _doc(ctx: Any, out: Recovered) -> dict[str, Any]:
    return json.loads(ctx.artifacts.get_bytes(out.result.ref, out.result.digest))  # type: ignore[no-any-return]


def test_another_request_with_the_same_device_and_deadline_is_never_taken_for_ours(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """Same device, same kind, same `not_after_ms`, other targets: the remote's digest check
    refuses ours, so the other request's success is not recorded as this Activity's."""
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "twin")
    op_id = operation_id_for(key)
    not_after = int(time.time() * 1000) + 120_000
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        # Another bridge (same token) ran its own move under this operation id.
        control.Execute(
            move(op_id, {"a": 0.2, "b": 0.1}, not_after_ms=not_after), metadata=bearer(), timeout=30
        )
        wait_for(control, op_id, lambda o: o.state == pb.SUCCEEDED)
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        try:
            ctx = reconcile_context(tmp_path, key)
            out = adapter.reconcile(ctx, _request({"a": 0.5, "b": -0.3}, not_after))
        finally:
            adapter.close()
    assert isinstance(out, Recovered), out
    assert out.result.failed
    doc = _doc(ctx, out)
    assert (doc["outcome"], doc["code"]) == ("refused", "remote_conflict"), doc
    assert not any(target_actions(emu.journal(), GOALS).values())  # ours never ran


def test_a_reconcile_never_starts_an_operation_the_remote_never_received(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """NOT_FOUND: ConfirmedAbsent, and nothing sent that could start a motion (an operator
    may be deciding the Activity meanwhile, and a reconcile holds no execute fence); the next
    execute attempt re-sends the identical request, and the move runs once."""
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "lost-request")
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) + 120_000)
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        try:
            ctx = reconcile_context(tmp_path, key)
            out = adapter.reconcile(ctx, request)  # its Execute never reached the remote
            absent = _error(
                lambda: control.GetOperation(
                    pb.GetOperationRequest(operation_id=operation_id_for(key)), metadata=bearer()
                )
            )
            assert absent.code() == grpc.StatusCode.NOT_FOUND  # reconcile created nothing
            assert [e for e in emu.journal() if e["instruction"] == "action"] == []
            done = adapter.execute(reconcile_context(tmp_path, key), request)  # the retry
            again = adapter.reconcile(reconcile_context(tmp_path, key), request)  # no rerun
        finally:
            adapter.close()
    assert isinstance(out, ConfirmedAbsent), out
    guard = json.loads(ctx.artifacts.get_bytes(out.guard.ref, out.guard.digest))
    assert guard["reason"] == "remote_not_found"
    assert not done.failed
    assert isinstance(again, Recovered) and not again.result.failed, again
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_an_unknown_operation_past_its_deadline_is_recorded_expired_by_its_retry(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "too-late")
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) - 1)
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        try:
            out = adapter.reconcile(reconcile_context(tmp_path, key), request)
            ctx = reconcile_context(tmp_path, key)
            done = adapter.execute(ctx, request)  # the retry: the remote answers expired
        finally:
            adapter.close()
        remote = control.GetOperation(
            pb.GetOperationRequest(operation_id=operation_id_for(key)), metadata=bearer()
        )
    assert isinstance(out, ConfirmedAbsent), out
    assert remote.state == pb.EXPIRED
    assert done.failed
    doc = json.loads(ctx.artifacts.get_bytes(done.ref, done.digest))
    assert doc["state"] == "expired", doc
    assert [e for e in emu.journal() if e["instruction"] == "action"] == []


def test_an_operation_that_ran_is_recovered_after_the_remote_narrowed_its_limits(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """The identical Execute is refused once the remote's limits exclude the target: the
    operation it holds (device, deadline and kind ours) is still read back as what it was."""
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "narrowed")
    op_id = operation_id_for(key)
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) + 120_000)
    config = grpc_config(tmp_path, emu.path)
    with serving(config) as (_, _ready, control):
        control.Execute(
            move(op_id, request["targets"], not_after_ms=request["not_after_ms"]),
            metadata=bearer(),
            timeout=30,
        )
        wait_for(control, op_id, lambda o: o.state == pb.SUCCEEDED)
    text = config.read_text()
    assert "max = 1.5" in text
    config.write_text(text.replace("max = 1.5", "max = 0.4", 1))  # joint a's limit
    with serving(config) as (_, ready, _control):
        ctx, out = _reconciled(tmp_path, ready["grpc"], key, request)
    assert isinstance(out, Recovered) and not out.result.failed, out
    assert _doc(ctx, out)["state"] == "succeeded"
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_a_bridge_shutting_down_does_not_wait_for_a_running_remote_move(
    tmp_path: Path,
) -> None:
    port = free_port()
    family = remote_move_family(RemoteHost(f"127.0.0.1:{port}", PLANNER, timeout_s=5.0))
    host = Host(tmp_path / "bridge", [family], workers=1, lease_ms=1500)
    with emulator_process(tmp_path, speed_scale=0.05) as emu:  # a move of minutes
        config = grpc_config(
            tmp_path, emu.path, serve=SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}")
        )
        with daemon(config) as (_, ready):
            host.start()
            try:
                host.create_world("bridge")
                host.commit_tick("bridge", [intent("slow", _request({"a": 1.2}, 2**62))])
                key = ActivityKey("bridge", KIND_ABSOLUTE, "slow")
                channel, control = stub(ready["grpc"])
                deadline = time.monotonic() + 60
                while True:  # running there, watched by the bridge's attempt
                    record = host.get(key)
                    if record is not None and record.operation_id:
                        try:
                            op = control.GetOperation(
                                pb.GetOperationRequest(operation_id=record.operation_id),
                                metadata=bearer(),
                            )
                            if op.state == pb.RUNNING:
                                break
                        except Exception:
                            pass
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                channel.close()
            finally:
                start = time.monotonic()
                host.close()
                took = time.monotonic() - start
                family.adapter.close()  # type: ignore[attr-defined]
    assert took < 5.0, f"host.close() took {took:.1f} s"


def test_a_remote_record_compacted_by_retention_is_reconciled_as_what_it_was(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """The remote's retention compacted the operation's record (its input and result documents
    dropped): the bridge's reconcile records its success, flagged `remote_compacted`, never a
    failure naming another request."""
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "old")
    op_id = operation_id_for(key)
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) + 120_000)
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        control.Execute(
            move(op_id, request["targets"], not_after_ms=request["not_after_ms"]),
            metadata=bearer(),
            timeout=30,
        )
        wait_for(control, op_id, lambda o: o.state == pb.SUCCEEDED)
        deadline = time.monotonic() + 30
        while True:  # settled (observed by a later tick), then compacted
            pruned = subprocess.run(
                [sys.executable, "-m", "tether", "db", "prune", "--data-dir",
                 str(tmp_path / "state" / "moves"), "--older-than", "1ms", "--json"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert pruned.returncode == 0, pruned.stderr
            if json.loads(pruned.stdout)["compacted"] == 1:
                break
            assert time.monotonic() < deadline, pruned.stdout
            time.sleep(0.2)
        ctx, out = _reconciled(tmp_path, ready["grpc"], key, request)
    assert isinstance(out, Recovered) and not out.result.failed, out
    doc = _doc(ctx, out)
    assert (doc["state"], doc.get("remote_compacted")) == ("succeeded", True), doc
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}


def test_a_reconcile_shows_the_end_it_read_not_the_view_an_earlier_attempt_last_saw(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """A move that ended while no attempt watched it (the bridge's watch was cut mid-move):
    the reconcile that reads its end reports that view as the attempt's progress, so the live
    stream, which keeps the last progress as an Activity settles, never shows it running."""
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "ended-unwatched")
    op_id = operation_id_for(key)
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) + 120_000)
    events: list[ProgressEvent] = []
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        control.Execute(
            move(op_id, request["targets"], not_after_ms=request["not_after_ms"]),
            metadata=bearer(),
            timeout=30,
        )
        ended = wait_for(control, op_id, lambda o: o.state == pb.SUCCEEDED)
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        try:
            out = adapter.reconcile(reconcile_context(tmp_path, key, emit=events.append), request)
        finally:
            adapter.close()
    assert isinstance(out, Recovered) and not out.result.failed, out
    assert events, "the reconcile reported no progress"
    last = events[-1].content
    assert last["remote_state"] == "succeeded", last
    assert last["remote_revision"] >= ended.revision, last
    assert last["fraction"] == ended.progress.fraction == 1.0, last


def test_a_result_that_does_not_match_its_digest_is_a_coded_error_that_awaits_an_operator(
    tmp_path: Path,
) -> None:
    """Nothing is recorded from bytes that do not hash to the reported digest; the error is a
    coded one (a log line, not a traceback), and reconcile parks it for an operator instead
    of asking the remote again every second."""
    from tether._coded import CodedError
    from tether.adapters.grpc.remote import OPERATOR_RETRY_MS, RemoteResultMismatch
    from tether.runtime import Unknown

    adapter = RemoteMoveAdapter(RemoteHost("127.0.0.1:9", PLANNER))  # never dialled
    try:
        ctx = reconcile_context(tmp_path, ActivityKey("bridge-world", KIND_ABSOLUTE, "bent"))
        op = pb.Operation(id=ctx.operation_id, state=pb.SUCCEEDED)
        op.result.document = b'{"outcome":"completed"}'
        op.result.digest = "sha256:" + "0" * 64
        with pytest.raises(RemoteResultMismatch) as info:
            adapter._result(ctx, op)
        assert isinstance(info.value, CodedError)
        assert info.value.code == "remote_result_mismatch"
        out = adapter._mismatch(ctx, info.value)
    finally:
        adapter.close()
    assert isinstance(out, Unknown) and out.retry_after_ms == OPERATOR_RETRY_MS
    doc = json.loads(ctx.artifacts.get_bytes(out.evidence.ref, out.evidence.digest))
    assert doc["reason"] == "remote_result_mismatch"


def test_an_operation_the_remote_operator_abandoned_is_recorded_as_that_failure(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """An operator's abandon on the robot host is a result no bytes carry (its digest names the
    decision): the bridge records the failure it is (`abandoned`, the remote's digest kept),
    instead of asking again for bytes that never come."""
    from _grpc_setup import abandon

    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "dropped")
    op_id = operation_id_for(key)
    request = _request({"a": 1.4, "b": -1.4}, int(time.time() * 1000) + 120_000)
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        control.Execute(  # the bridge's own request: its reconcile proves it by its digest
            move(op_id, request["targets"], not_after_ms=request["not_after_ms"]),
            metadata=bearer(),
            timeout=30,
        )
        wait_for(control, op_id, lambda o: o.state == pb.RUNNING and o.progress.fraction > 0)
        control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=10)
        parked = wait_for(control, op_id, lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
        ended = abandon(control, op_id, parked.evidence.revision)
        assert ended.state == pb.FAILED and ended.error.code == "abandoned", ended
        ctx, out = _reconciled(tmp_path, ready["grpc"], key, request)
    assert isinstance(out, Recovered) and out.result.failed, out
    doc = _doc(ctx, out)
    assert (doc["code"], doc.get("remote_abandoned")) == ("abandoned", True), doc
    assert doc["remote_digest"] == ended.result.digest and doc["result"] is None


def test_a_move_the_remote_operator_holds_is_asked_about_again_within_seconds(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """A move parked for the robot host's operator was reconciled again only after a minute,
    so that operator's decision reached the planner up to a minute late. It is asked about
    every few seconds, with the same evidence while nothing changed there (its revision on the
    planner host does not rise under an operator reading it)."""
    from tether.adapters.grpc.remote import REMOTE_DECISION_RETRY_MS
    from tether.runtime import Unknown

    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "held-there")
    op_id = operation_id_for(key)
    request = _request({"a": 1.4, "b": -1.4}, int(time.time() * 1000) + 120_000)
    with serving(grpc_config(tmp_path, emu.path)) as (_, ready, control):
        control.Execute(
            move(op_id, request["targets"], not_after_ms=request["not_after_ms"]),
            metadata=bearer(),
            timeout=30,
        )
        wait_for(control, op_id, lambda o: o.state == pb.RUNNING and o.progress.fraction > 0)
        control.Stop(pb.StopRequest(device="arm"), metadata=bearer(), timeout=10)
        wait_for(control, op_id, lambda o: o.state == pb.UNKNOWN_AWAITING_OPERATOR)
        outs = [_reconciled(tmp_path / str(n), ready["grpc"], key, request)[1] for n in (1, 2)]
    assert all(isinstance(out, Unknown) for out in outs), outs
    assert [out.retry_after_ms for out in outs] == [REMOTE_DECISION_RETRY_MS] * 2
    assert REMOTE_DECISION_RETRY_MS <= 10_000
    assert outs[0].evidence == outs[1].evidence  # the same document: no new revision


def test_a_move_a_remote_operator_settled_done_is_recorded_as_that_not_completed(
    tmp_path: Path,
) -> None:
    """A move a stop cut short and the robot host's operator then settled DONE ends SUCCEEDED
    there with the outcome `operator_done`; the bridge recorded `completed`, as if it had run
    to its goals by itself."""
    import hashlib

    adapter = RemoteMoveAdapter(RemoteHost("127.0.0.1:9", PLANNER))  # never dialled
    try:
        results = {}
        for said in ("operator_done", "completed"):
            ctx = reconcile_context(
                tmp_path / said, ActivityKey("bridge-world", KIND_ABSOLUTE, said)
            )
            op = pb.Operation(id=ctx.operation_id, state=pb.SUCCEEDED)
            op.result.document = json.dumps({"outcome": said}).encode()
            op.result.digest = "sha256:" + hashlib.sha256(op.result.document).hexdigest()
            ref = adapter._result(ctx, op)
            results[said] = json.loads(ctx.artifacts.get_bytes(ref.ref, ref.digest))["outcome"]
    finally:
        adapter.close()
    assert results == {"operator_done": "operator_done", "completed": "completed"}


def test_a_move_sent_under_a_renamed_principal_is_never_sent_again_under_the_new_one(
    tmp_path: Path, emu: EmulatorProcess
) -> None:
    """The robot host keeps operations per principal. A bridge whose planner was renamed (a
    new name and token) reconciled a move it had sent under the old one: NOT_FOUND under the
    new principal was taken as absent, and the next attempt ran the move a second time."""
    from tether.devices.credentials import hash_secret
    from tether.runtime import Unknown

    renamed = "planner-token-renamed-2f6c1a9e-quartz-harbor"
    config = grpc_config(tmp_path, emu.path)
    text = config.read_text().replace(
        "[ports.bus]",
        f'[planners.ci2]\ntoken = "{hash_secret(renamed)}"\nrole = "planner"\n[ports.bus]',
        1,
    )
    config.write_text(text)
    history = tmp_path / "remote-credentials.json"
    key = ActivityKey("bridge-world", KIND_ABSOLUTE, "renamed")
    request = _request({"a": 0.5, "b": -0.3}, int(time.time() * 1000) + 120_000)
    with serving(config) as (_, ready, _control):
        first = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER), credentials=history)
        try:
            done = first.execute(reconcile_context(tmp_path, key), request)  # it ran
        finally:
            first.close()
        assert not done.failed
        second = RemoteMoveAdapter(RemoteHost(ready["grpc"], renamed), credentials=history)
        try:
            ctx = reconcile_context(tmp_path, key)
            out = second.reconcile(ctx, request)
        finally:
            second.close()
    assert isinstance(out, Unknown), out  # an operator decides; nothing re-sent
    evidence = json.loads(ctx.artifacts.get_bytes(out.evidence.ref, out.evidence.digest))
    assert evidence["reason"] == "remote_principal_changed", evidence
    assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}  # ran once
    assert renamed not in history.read_text() and PLANNER not in history.read_text()


def test_an_abandon_on_the_bridge_cancels_the_move_there_or_is_refused(tmp_path: Path) -> None:
    """An operator's abandon on the planner host was never sent to the robot host, which ran
    the move on (a host back from an outage finished it) while the planner said `abandoned`.
    The bridge cancels it there first, and refuses the abandon while it may still run there
    or its robot host's operator holds it."""
    from types import SimpleNamespace

    from tether._coded import CodedError

    def record(name: str) -> Any:
        key = ActivityKey("bw", KIND_ABSOLUTE, name)
        return SimpleNamespace(operation_id=operation_id_for(key))

    running, queued = record("running"), record("queued")
    with (
        emulator_process(tmp_path, speed_scale=1.0) as emu,  # real time: it is still running
        serving(grpc_config(tmp_path, emu.path)) as (_, ready, control),
    ):
        adapter = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER))
        try:
            control.Execute(move(running.operation_id, {"a": 1.4, "b": -1.4}), metadata=bearer())
            wait_for(control, running.operation_id, lambda o: o.state == pb.RUNNING)
            control.Execute(move(queued.operation_id, {"a": 0.0, "b": 0.0}), metadata=bearer())
            adapter.before_abandon(queued)  # cancelled before its start: the abandon may go on
            assert wait_for(
                control, queued.operation_id, lambda o: o.state != pb.PENDING
            ).state == (pb.CANCELLED)
            adapter.before_abandon(running)  # stopped there (parked for its operator)
            parked = wait_for(control, running.operation_id, lambda o: o.state != pb.RUNNING)
            assert parked.state == pb.UNKNOWN_AWAITING_OPERATOR, parked
            with pytest.raises(CodedError) as held:  # its robot host's operator decides it
                adapter.before_abandon(running)
            assert held.value.code == "remote_awaits_operator"
            with pytest.raises(CodedError) as ended:  # it ended there: its reconcile says how
                adapter.before_abandon(queued)
            assert ended.value.code == "remote_ended"
            adapter.before_abandon(record("never-sent"))  # NOT_FOUND: nothing to cancel
        finally:
            adapter.close()
    dead = RemoteMoveAdapter(RemoteHost(ready["grpc"], PLANNER, timeout_s=2.0))
    try:
        with pytest.raises(CodedError) as gone:  # the robot host is down: it may still run
            dead.before_abandon(running)
    finally:
        dead.close()
    assert gone.value.code == "remote_unreachable"
