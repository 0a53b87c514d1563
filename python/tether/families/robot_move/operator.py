"""The robot-move family's side of an operator decision (`tether.operator.decisions`'s
`DeviceReview`): a fresh read-back, the adapter's comparison, and the re-issue proof, taken
through the process that owns the port, or directly under the port's exclusive lock."""

from __future__ import annotations

from typing import Any

from tether.activities import ActivityRecord
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.host import RobotHost, fresh_state, owner_socket, send_request
from tether.adapters.dynamixel.move import DynamixelMoveAdapter, changed_since, si_read_back
from tether.errors import OperatorRejection
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import GUARD_MEDIA_TYPE, KINDS, RESULT_MEDIA_TYPE


class RobotMoveReview:
    """Reads, compares and proves for parked robot moves of one host configuration."""

    result_media_type = RESULT_MEDIA_TYPE
    guard_media_type = GUARD_MEDIA_TYPE

    def __init__(self, config: HostConfig, store: MoveStore) -> None:
        self.config = config
        self.store = store

    def for_record(self, record: ActivityRecord) -> RobotMoveReview | None:
        return self if record.key.kind in KINDS else None

    def _op(self, record: ActivityRecord) -> Any:
        op = self.store.get(record.operation_id or "") if record.operation_id else None
        if op is None:
            raise OperatorRejection(
                "unknown_activity", f"no journal operation for {record.operation_id}"
            )
        return op

    def read(self, record: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
        return fresh_state(self.config, self._op(record).request.robot)

    def changed_since(self, evidence: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
        robot = self.config.robot(str(fresh.get("robot")))
        return changed_since(evidence.get("device_state") or {}, fresh, robot.tolerance_ticks)

    def refreshed(
        self, evidence: dict[str, Any], fresh: dict[str, Any], changes: list[str]
    ) -> dict[str, Any]:
        robot = self.config.robot(str(fresh.get("robot")))
        return {
            **evidence,
            "device_state": fresh,
            "read_back": si_read_back(robot, fresh),
            "changes": changes,
        }

    def done_result(
        self, record: ActivityRecord, fresh: dict[str, Any], verdict: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "operation_id": record.operation_id,
            "outcome": "operator_done",
            "verdict": verdict,
            "read_back": fresh,
        }

    def prove(
        self, record: ActivityRecord, evidence: dict[str, Any], fresh: dict[str, Any]
    ) -> dict[str, Any]:
        op = self._op(record)
        request = op.request
        # What the fresh read-back already refuses is refused before the port is opened (the
        # proof checks again on its own read-back).
        errors = {
            dxl_id: tables.hardware_errors(int(j.get("hardware_error_status", 0)))
            for dxl_id, j in (fresh.get("joints") or {}).items()
            if j.get("hardware_error_status")
        }
        if request.relative:
            raise OperatorRejection(
                "not_repeatable", "a relative move cannot be re-issued; mark it done or abandon it"
            )
        if errors:
            raise OperatorRejection(
                "hardware_error",
                f"a re-issue is refused while a joint reports a hardware error: {errors}",
            )
        if any(j.get("moving") for j in (fresh.get("joints") or {}).values()):
            raise OperatorRejection("device_not_idle", "the arm is moving; re-issue needs it idle")
        # The decision raises the fence by one; every attempt until then is under the floor.
        floor = record.fence + 1
        robot = self.config.robot(request.robot)
        socket_path = owner_socket(self.config, robot.port)
        if socket_path is not None:
            proof: dict[str, Any] = send_request(
                socket_path,
                {"op": "prove_reissue", "operation_id": op.id, "fence_floor": floor},
                timeout=30.0,
            )
            return proof
        with RobotHost(self.config) as host:
            host.connect(robot.name)
            return DynamixelMoveAdapter(self.config, host).prove_reissue(op, request, floor)
