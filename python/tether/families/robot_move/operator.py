"""The robot-move family's side of an operator decision (`tether.operator.decisions`'s
`DeviceReview`): a fresh read-back in SI units, the adapter's comparison
(`decide.changed_since`), and the re-issue proof, taken through the process that owns the port,
or directly under the port's exclusive lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.activities import ActivityRecord
from tether.adapters.dynamixel import decide
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.driver import DxlBus
from tether.adapters.dynamixel.host import RobotHost, owner_socket, send_request
from tether.adapters.dynamixel.move import (
    RESOLUTION_RAD,
    DynamixelMoveAdapter,
    commanded_vs_present,
    read_joints,
    si_read_back,
)
from tether.devices.latch import StopLatch
from tether.errors import OperatorRejection
from tether.families.robot_move.journal import MoveStore, now_ms
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
        """A fresh read-back in SI units: through the owner of the port when one holds it (its
        `read_back` request, with Present Velocity; a plain `state` otherwise), else directly."""
        robot = self.config.robot(self._op(record).request.robot)
        socket_path = owner_socket(self.config, robot.port)
        if socket_path is None:
            with DxlBus.open_config(
                self.config.ports[robot.port], lock_dir=self.config.state_dir
            ) as bus:
                return si_read_back(robot, read_joints(bus, robot))
        try:
            fresh: dict[str, Any] = send_request(
                socket_path, {"op": "read_back", "robot": robot.name}
            )
            return fresh
        except Exception:
            state = send_request(socket_path, {"op": "state", "robot": robot.name})
            return si_read_back(robot, state)

    def changed_since(self, evidence: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
        robot = self.config.robot(str(fresh.get("robot")))
        return decide.changed_since(
            decide.ReadBack.from_si(evidence.get("read_back") or {}),
            decide.ReadBack.from_si(fresh),
            tolerance=robot.tolerance_rad,
            resolution=RESOLUTION_RAD,
        )

    def refreshed(
        self, evidence: dict[str, Any], fresh: dict[str, Any], changes: list[str]
    ) -> dict[str, Any]:
        errors = decide.hardware_errors(decide.ReadBack.from_si(fresh))
        out = {**evidence, "read_back": fresh, "hardware_errors": errors, "changes": changes}
        # What an operator reads the arm by (each joint's commanded, goal and present) and
        # when: of this read-back, never the one the earlier revision was made of.
        earlier = evidence.get("commanded_vs_present") or {}
        fallback = evidence.get("staged") or (evidence.get("command") or {}).get("targets") or {}
        commanded = {
            name: (earlier.get(name) or {}).get("commanded_rad", fallback.get(name))
            for name in (fresh.get("joints") or {})
        }
        out["commanded_vs_present"] = commanded_vs_present(commanded, fresh)
        read_at = fresh.get("read_at_ms")
        out["at_ms"] = read_at if isinstance(read_at, int) else now_ms()
        if "error" in out:  # the device read now: why it could not be read is history
            out["unreadable_when_parked"] = out.pop("error")
        return out

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
        now = decide.ReadBack.from_si(fresh)
        errors = decide.hardware_errors(now)
        if request.relative:
            raise OperatorRejection(
                "not_repeatable", "a relative move cannot be re-issued; mark it done or abandon it"
            )
        if errors:
            raise OperatorRejection(
                "hardware_error",
                f"a re-issue is refused while a joint reports a hardware error: {errors}",
            )
        if any(j.moving for j in now.joints.values()):
            raise OperatorRejection("device_not_idle", "the arm is moving; re-issue needs it idle")
        robot = self.config.robot(request.robot)
        if StopLatch(self.config.state_dir).latched(robot.name):
            # A re-issue would only be parked again by the latch: nothing may move until an
            # operator resumes the robot, and a decision recorded now would read as running.
            raise OperatorRejection(
                "robot_latched",
                f"robot {robot.name} is stopped (latched): resume it first (`tether operator"
                f" resume {robot.name}`), then re-issue; nothing was decided",
            )
        # The decision raises the fence by one; every attempt until then is under the floor.
        floor = record.fence + 1
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


def review_factory(
    config: HostConfig | None, data_dir: Path, *, artifacts: object = None
) -> RobotMoveReview | None:
    """`tether operator`'s review of robot moves in `data_dir` (its journal is
    `data_dir/robot_move`); None without a host configuration (no robots to read back). It
    reads no payload (`artifacts` is taken for the factories' common call)."""
    if config is None:
        return None
    return RobotMoveReview(config, MoveStore(data_dir / "robot_move"))
