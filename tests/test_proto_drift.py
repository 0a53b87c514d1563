"""The gRPC stubs in `tether._gen` are exactly what `python -m tether.protogen` produces from
`proto/`, and they carry the RobotControl contract the gRPC issue names."""

from __future__ import annotations

import filecmp
from pathlib import Path

from tether import protogen


def _tree(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}


def test_the_checked_in_stubs_are_the_generators_output(tmp_path: Path) -> None:
    protogen.generate(tmp_path / "_gen")
    fresh = _tree(tmp_path / "_gen")
    ours = {k: v for k, v in _tree(protogen.DEFAULT_OUT).items() if "__pycache__" not in k}
    assert sorted(ours) == sorted(fresh), "run `python -m tether.protogen` (files differ)"
    stale = [k for k in fresh if not filecmp.cmp(fresh[k], ours[k], shallow=False)]
    assert stale == [], f"stubs drifted from proto/: {stale}; run `python -m tether.protogen`"


def test_the_contract_is_tether_robot_v1_robot_control() -> None:
    from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
    from tether._gen.tether.robot.v1 import robot_control_pb2_grpc as rpc

    service = pb.DESCRIPTOR.services_by_name["RobotControl"]
    assert pb.DESCRIPTOR.package == "tether.robot.v1"
    assert {m.name for m in service.methods} >= {
        "Execute",
        "GetOperation",
        "ListOperations",
        "WatchOperation",
        "Cancel",
        "Reconcile",
        "Resolve",
        "Stop",
    }
    assert service.methods_by_name["WatchOperation"].server_streaming
    assert hasattr(rpc, "RobotControlStub") and hasattr(rpc, "RobotControlServicer")
    request = pb.ExecuteRequest(
        operation_id="op-1",
        device="arm",
        joint_move=pb.JointMove(kind=pb.JointMove.ABSOLUTE, targets_rad={"elbow": 0.5}),
        not_after_ms=1_800_000_000_000,
    )
    assert pb.ExecuteRequest.FromString(request.SerializeToString()) == request
    states = {v.name for v in pb.OperationState.DESCRIPTOR.values}
    assert {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"} <= states
    assert "UNKNOWN_AWAITING_OPERATOR" in states
