"""The simulated arm over gRPC: `tether serve` (a subprocess) serving the sim family
(`tether.serve.families:sim_families`, real MuJoCo in its episode processes) with `[serve]
grpc`, real grpcio clients on loopback. The sim's operations journal (`<data_dir>/operations`)
is the independent record of every episode attempt that started."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from _dxl_setup import GOALS, emulator_process, target_actions
from _grpc_setup import PRINCIPALS, SERVE, bearer, daemon, grpc_config, stub, until_terminal
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.activities import ActivityKey
from tether.adapters.grpc.remote import (
    KIND_ABSOLUTE,
    KIND_SIM_REACH,
    RemoteHost,
    intent,
    remote_move_family,
)
from tether.families.sim import decode_result
from tether.families.sim.family import REFERENCE_MEDIA_TYPE
from tether.runtime import ArtifactStore, Host
from tether.serve.grpc_server import CRASH_POINTS, SIM_REFERENCE_MEDIA_TYPE
from tether.testing._ports import free_port

from tests._secrets import PLANNER
from tests.sampling import sampled

#: Small reaches: a few hundred MuJoCo steps each.
STEPS = 300


def sim_config(directory: Path, *, grpc_address: str = "127.0.0.1:0") -> Path:
    """A host that serves only the simulated arm (no robot, no port)."""
    path = directory / "host.toml"
    path.write_text(
        f'[host]\nstate_dir = "{directory / "state"}"\n'
        + PRINCIPALS
        + f'\n[serve]\nlease_ms = 1500\nsse = "off"\ngrpc = "{grpc_address}"\n'
        'families = ["tether.serve.families:sim_families"]\n'
    )
    return path


def reach(
    op_id: str,
    *,
    seed: int = 7,
    target: tuple[float, float] = (0.2, 0.1),
    episodes: int = 2,
    steps: int = STEPS,
    not_after_ms: int | None = None,
    device: str = "sim",
) -> pb.ExecuteRequest:
    return pb.ExecuteRequest(
        operation_id=op_id,
        device=device,
        sim_reach=pb.SimReach(
            seed=seed, target_x=target[0], target_y=target[1], episodes=episodes, steps=steps
        ),
        not_after_ms=not_after_ms or int(time.time() * 1000) + 120_000,
    )


class Served:
    """One running sim host: its address and data dir."""

    def __init__(self, address: str, data_dir: Path) -> None:
        self.address = address
        self.data_dir = data_dir
        self.channel, self.control = stub(address)

    def execute(self, request: pb.ExecuteRequest) -> pb.Operation:
        op: pb.Operation = self.control.Execute(request, metadata=bearer(), timeout=30)
        return op

    def final(self, op_id: str) -> pb.Operation:
        views = until_terminal(self.control, op_id)
        revisions = [v.revision for v in views]
        assert revisions == sorted(revisions), revisions
        return views[-1]

    def episodes_started(self, seed: int) -> list[Path]:
        """Start markers of every journal operation bound to a request with `seed`."""
        markers: list[Path] = []
        for bound in (self.data_dir / "operations").rglob("bound.json"):
            doc = json.loads(bound.read_text())
            if (doc.get("request") or {}).get("seed") == seed:
                markers += sorted(bound.parent.glob("attempt-*.start"))
        return markers

    def bound(self, seed: int) -> list[Path]:
        return [
            b.parent
            for b in (self.data_dir / "operations").rglob("bound.json")
            if (json.loads(b.read_text()).get("request") or {}).get("seed") == seed
        ]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("sim-host")
    with daemon(sim_config(directory)) as (_, ready):
        served = Served(ready["grpc"], directory / "state" / "moves")
        try:
            yield served
        finally:
            served.channel.close()


def reference(op: pb.Operation) -> dict[str, Any]:
    """The result reference document, checked against the digest the server reported."""
    assert op.result.media_type == SIM_REFERENCE_MEDIA_TYPE == REFERENCE_MEDIA_TYPE
    assert op.result.digest == "sha256:" + hashlib.sha256(op.result.document).hexdigest()
    doc: dict[str, Any] = json.loads(op.result.document)
    return doc


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_a_sim_reach_runs_to_succeeded_with_its_result_reference(sim: Served) -> None:
    committed = sim.execute(reach("reach-1", seed=11))
    assert committed.id == "reach-1" and committed.device == "sim"
    assert committed.state in (pb.PENDING, pb.RUNNING, pb.SUCCEEDED)
    assert committed.request_digest.startswith("sha256:") and not committed.non_repeatable
    final = sim.final("reach-1")
    assert final.state == pb.SUCCEEDED, final
    assert final.attempt == 1 and final.request_digest == committed.request_digest
    doc = reference(final)
    summary = doc["summary"]
    assert summary["seed"] == 11 and summary["episodes"] == 2
    assert summary["steps_per_episode"] == STEPS and summary["target"] == [0.2, 0.1]
    # The reference names the episode result file itself: it verifies against its summary.
    store = ArtifactStore(sim.data_dir / "artifacts")
    run = decode_result(store.get_bytes(doc["result"]["ref"], doc["result"]["digest"]))
    assert run.summary["trajectory_digest"] == summary["trajectory_digest"]
    assert run.arrays["qpos"].shape == (2, STEPS, 2)
    listed = sim.control.ListOperations(pb.ListOperationsRequest(device="sim"), metadata=bearer())
    assert "reach-1" in [o.id for o in listed.operations]
    health = health_pb2_grpc.HealthStub(sim.channel)
    check = health.Check(health_pb2.HealthCheckRequest(service="tether.robot.v1.RobotControl/sim"))
    assert check.status == health_pb2.HealthCheckResponse.SERVING


def test_bad_sim_fields_are_invalid_argument_with_the_field_path_and_nothing_is_recorded(
    sim: Served,
) -> None:
    no_deadline = reach("bad-sim-7", seed=907)
    no_deadline.ClearField("not_after_ms")
    session = reach("bad-sim-8", seed=908)
    session.session_id = "s-1"
    joint = pb.ExecuteRequest(
        operation_id="bad-sim-9",
        device="sim",
        joint_move=pb.JointMove(kind=pb.JointMove.ABSOLUTE, targets_rad={"a": 0.1}),
        not_after_ms=int(time.time() * 1000) + 60_000,
    )
    cases = {
        "bad-sim-1": ("sim_reach.seed", reach("bad-sim-1", seed=2**63)),
        "bad-sim-2": ("sim_reach.episodes", reach("bad-sim-2", seed=902, episodes=0)),
        "bad-sim-3": ("sim_reach.episodes", reach("bad-sim-3", seed=903, episodes=1001)),
        "bad-sim-4": ("sim_reach.steps", reach("bad-sim-4", seed=904, steps=0)),
        "bad-sim-5": ("sim_reach.target_x", reach("bad-sim-5", seed=905, target=(math.nan, 0.1))),
        "bad-sim-6": (
            "sim_reach.target_x/target_y",
            reach("bad-sim-6", seed=906, target=(1.0, 1.0)),
        ),
        "bad-sim-7": ("not_after_ms", no_deadline),
        "bad-sim-8": ("session_id", session),
        "bad-sim-9": ("command", joint),
        "bad-sim-10": ("device", reach("bad-sim-10", seed=910, device="ghost")),
    }
    for op_id, (field, request) in cases.items():
        code, details = _code(lambda r=request: sim.execute(r))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, details)
        assert details.startswith(field + ":"), (field, details)
        code, _ = _code(
            lambda i=op_id: sim.control.GetOperation(
                pb.GetOperationRequest(operation_id=i), metadata=bearer()
            )
        )
        assert code == grpc.StatusCode.NOT_FOUND, op_id
    listed = sim.control.ListOperations(pb.ListOperationsRequest(), metadata=bearer())
    assert not [o.id for o in listed.operations if o.id.startswith("bad-sim-")]
    for seed in (902, 903, 904, 905, 906, 907, 908, 910):
        assert sim.bound(seed) == [], seed


def test_a_duplicate_sim_execute_runs_once_and_another_request_under_the_id_is_already_exists(
    sim: Served,
) -> None:
    request = reach("dup-1", seed=21)
    first = sim.execute(request)
    second = sim.execute(request)
    assert first.id == second.id == "dup-1" and first.request_digest == second.request_digest
    other = reach("dup-1", seed=22, not_after_ms=request.not_after_ms)
    code, _ = _code(lambda: sim.execute(other))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    final = sim.final("dup-1")
    assert final.state == pb.SUCCEEDED and final.attempt == 1, final
    again = sim.execute(request)  # after the end: the same operation, nothing runs
    assert again.state == pb.SUCCEEDED and again.result.digest == final.result.digest
    assert len(sim.bound(21)) == 1
    assert len(sim.episodes_started(21)) == 1
    assert sim.bound(22) == []


def test_past_not_after_a_sim_reach_ends_expired_and_never_starts(sim: Served) -> None:
    late = reach("late-sim", seed=31, not_after_ms=int(time.time() * 1000) - 1)
    sim.execute(late)
    final = sim.final("late-sim")
    assert final.state == pb.EXPIRED and final.error.code == "expired", final
    assert "not_after_ms" in final.error.message
    assert json.loads(final.result.document)["outcome"] == "expired"
    # Decided in the sim's own journal, in place of its start marker.
    (entry,) = sim.bound(31)
    assert sorted(p.name for p in entry.glob("attempt-*.start")) == []
    assert (entry / "proof-expired.json").exists()


def test_the_same_seed_and_request_give_the_same_trajectory_under_two_ids(sim: Served) -> None:
    now = int(time.time() * 1000)
    sim.execute(reach("det-a", seed=41, target=(0.15, 0.2), not_after_ms=now + 100_000))
    sim.execute(reach("det-b", seed=41, target=(0.15, 0.2), not_after_ms=now + 200_000))
    sim.execute(reach("det-c", seed=42, target=(0.15, 0.2), not_after_ms=now + 100_000))
    a, b, c = (reference(sim.final(i))["summary"] for i in ("det-a", "det-b", "det-c"))
    assert a["trajectory_digest"] == b["trajectory_digest"]
    assert a["final_errors"] == b["final_errors"]
    assert c["trajectory_digest"] != a["trajectory_digest"]  # another seed, another trajectory
    assert len(sim.bound(41)) == 2  # two operations, each run once
    assert len(sim.episodes_started(41)) == 2


def test_a_committed_sim_reach_is_not_cancelled_and_runs_to_its_end(sim: Served) -> None:
    sim.execute(reach("long-sim", seed=81, episodes=1, steps=100_000))
    code, details = _code(
        lambda: sim.control.Cancel(pb.CancelRequest(operation_id="long-sim"), metadata=bearer())
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    views = until_terminal(sim.control, "long-sim")
    assert views[-1].state == pb.SUCCEEDED, views[-1]
    fractions = [v.progress.fraction for v in views if v.state == pb.RUNNING]
    assert fractions == sorted(fractions) and all(0.0 <= f <= 1.0 for f in fractions)
    assert any(f > 0 for f in fractions), fractions  # progress from the episode steps
    # Ended, its progress says so (not the "running" of its last event while it ran).
    assert (views[-1].progress.phase, views[-1].progress.fraction) == ("succeeded", 1.0)
    assert len(sim.episodes_started(81)) == 1


def test_stop_on_the_simulated_arm_is_failed_precondition_and_its_reach_runs_on(
    sim: Served,
) -> None:
    sim.execute(reach("stop-sim", seed=83, episodes=1, steps=20_000))
    code, details = _code(
        lambda: sim.control.Stop(pb.StopRequest(device="sim"), metadata=bearer(), timeout=5)
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert details.startswith("device:") and "nothing to stop" in details, details
    code, details = _code(
        lambda: sim.control.Stop(pb.StopRequest(device="ghost"), metadata=bearer(), timeout=5)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("device:"), details
    views = until_terminal(sim.control, "stop-sim")
    assert views[-1].state == pb.SUCCEEDED, views[-1]
    assert len(sim.episodes_started(83)) == 1


def test_a_reach_past_the_memory_cap_is_a_recorded_failure(sim: Served) -> None:
    sim.execute(reach("huge-sim", seed=51, episodes=1000, steps=10_000_000))
    final = sim.final("huge-sim")
    assert final.state == pb.FAILED and final.error.code == "request_too_large", final
    assert "cap" in final.error.message
    assert sim.bound(51) == []  # refused at admission: never bound, never started
    done = sim.control.Cancel(pb.CancelRequest(operation_id="huge-sim"), metadata=bearer())
    assert done.outcome == pb.CancelResponse.ALREADY_TERMINAL


def test_a_bridge_drives_a_remote_arm_and_a_remote_seeded_simulation_the_same_way(
    tmp_path: Path,
) -> None:
    """One robot host serving the emulated arm and the simulated arm; a bridge Host's remote
    family sends a joint move and a sim reach through the same adapter, and both settle."""
    port = free_port()
    remote = RemoteHost(f"127.0.0.1:{port}", PLANNER, timeout_s=5.0)
    family = remote_move_family(remote)
    host = Host(tmp_path / "bridge", [family], workers=2, lease_ms=1500)
    families = (
        'families = ["tether.families.robot_move.family:serve_families", '
        '"tether.serve.families:sim_families"]\n'
    )
    serve = SERVE.replace("127.0.0.1:0", f"127.0.0.1:{port}") + families
    not_after = int(time.time() * 1000) + 120_000
    move = {
        "kind": KIND_ABSOLUTE,
        "device": "arm",
        "targets": {"a": 0.5, "b": -0.3},
        "not_after_ms": not_after,
    }
    fields = {"seed": 61, "target_x": 0.1, "target_y": 0.2, "episodes": 1, "steps": STEPS}
    sim_reach = {"kind": KIND_SIM_REACH, "device": "sim", "not_after_ms": not_after}
    far = {**sim_reach, "sim_reach": {**fields, "target_x": 2.0}}
    sim_reach["sim_reach"] = fields
    host.start()
    try:
        with emulator_process(tmp_path) as emu:
            with daemon(grpc_config(tmp_path, emu.path, serve=serve)) as (_, ready):
                channel, control = stub(ready["grpc"])
                health = health_pb2_grpc.HealthStub(channel)
                for device in ("arm", "sim"):
                    name = f"tether.robot.v1.RobotControl/{device}"
                    answer = health.Check(health_pb2.HealthCheckRequest(service=name))
                    assert answer.status == health_pb2.HealthCheckResponse.SERVING, device
                # One id names one operation across the arm and the simulated arm.
                control.Execute(reach("shared-id", seed=62), metadata=bearer(), timeout=30)
                code, _ = _code(
                    lambda: control.Execute(
                        pb.ExecuteRequest(
                            operation_id="shared-id",
                            device="arm",
                            joint_move=pb.JointMove(
                                kind=pb.JointMove.ABSOLUTE, targets_rad={"a": 0.1}
                            ),
                            not_after_ms=not_after,
                        ),
                        metadata=bearer(),
                        timeout=30,
                    )
                )
                assert code == grpc.StatusCode.ALREADY_EXISTS
                host.create_world("bridge")
                host.commit_tick(
                    "bridge",
                    [intent("m1", move), intent("s1", sim_reach), intent("s-far", far)],
                )
                assert host.wait_settled("bridge", 120)
                docs = {}
                for activity, kind in (
                    ("m1", KIND_ABSOLUTE),
                    ("s1", KIND_SIM_REACH),
                    ("s-far", KIND_SIM_REACH),
                ):
                    record = host.get(ActivityKey("bridge", kind, activity))
                    assert record is not None and record.result is not None, activity
                    docs[activity] = (
                        record,
                        json.loads(
                            host.artifacts.get_bytes(record.result.ref, record.result.digest)
                        ),
                    )
                record, doc = docs["s1"]
                assert not record.result.failed and doc["state"] == "succeeded"
                summary = doc["result"]["summary"]
                assert summary["seed"] == 61 and summary["trajectory_digest"].startswith("sha256:")
                remote_op = control.GetOperation(
                    pb.GetOperationRequest(operation_id=record.operation_id), metadata=bearer()
                )
                assert remote_op.device == "sim" and remote_op.state == pb.SUCCEEDED
                assert remote_op.result.digest == doc["remote_digest"]
                record, doc = docs["m1"]
                assert not record.result.failed and doc["result"]["outcome"] == "completed"
                record, doc = docs["s-far"]  # refused by the remote: a recorded failure
                assert record.result.failed and doc["code"] == "remote_invalid_argument"
                assert "sim_reach.target_x/target_y" in doc["error"]
                channel.close()
            assert target_actions(emu.journal(), GOALS) == {1: 1, 2: 1}
    finally:
        host.close()
        family.adapter.close()  # type: ignore[attr-defined]


#: Where `tether serve` is SIGKILLed around a sim Execute: its own two points (before the
#: commit; after it, before the reply: a lost response) and the sim provider's two in the
#: daemon (the episode process's result staged, then published, before it is recorded).
SIM_KILL_POINTS = (*CRASH_POINTS, "sim.result_staged", "sim.result_durable")
#: The default run kills at two of them (a different two each run, `tests/sampling.py`);
#: TETHER_SLOW=1 at all four.
SIM_SAMPLED = sampled("sim reach kill", SIM_KILL_POINTS, 2)


@pytest.mark.parametrize(
    "point",
    [pytest.param(p, marks=() if p in SIM_SAMPLED else pytest.mark.slow) for p in SIM_KILL_POINTS],
)
def test_a_sim_host_killed_around_an_execute_is_retried_to_one_run(
    tmp_path: Path, point: str
) -> None:
    config = sim_config(tmp_path)
    data_dir = tmp_path / "state" / "moves"
    request = reach("cut-1", seed=71)
    with daemon(config, crash_at=point) as (proc, ready):
        channel, control = stub(ready["grpc"])
        try:
            control.Execute(request, metadata=bearer(), timeout=30)
            assert point.startswith("sim.")  # answered: the kill comes with the attempt
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.wait(timeout=60) == -9
        channel.close()
    with daemon(config) as (_, ready):
        served = Served(ready["grpc"], data_dir)
        retried = served.execute(request)
        assert retried.id == "cut-1"
        final = served.final("cut-1")
        assert final.state == pb.SUCCEEDED, final
        assert reference(final)["summary"]["seed"] == 71
        assert len(served.bound(71)) == 1
        assert len(served.episodes_started(71)) == 1  # the episodes ran once
        served.channel.close()
