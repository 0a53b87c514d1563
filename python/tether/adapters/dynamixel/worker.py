"""One robot-move operation, run to a conclusion by a worker process.

Order (each step durable before the next):
1. Limits are checked (absolute moves) before anything is bound or sent.
2. The operation id is bound to its request (`operation.json`).
3. The host connects: identity lock on the port, PING/model/Status Return Level checks.
4. If an earlier attempt is in doubt (started, no result, no guard for the next attempt), the
   adapter reconciles: Recovered records the result; ConfirmedAbsent records the guard that
   allows exactly one next attempt; Unknown parks the operation with evidence for an operator.
5. A new attempt starts (create-if-absent marker) only under a guard, or as attempt 1, and
   runs with its first motion speed-limited. A failure in doubt is reconciled at once.
A parked operation is never executed by a worker; only an operator's decision moves it on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from tether._dirs import usable_dir
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.host import RobotHost
from tether.adapters.dynamixel.move import DynamixelMoveAdapter, check_request
from tether.errors import TetherError
from tether.operator.decisions import apply_decision
from tether.physical.robot_move import (
    KIND_ABSOLUTE,
    KIND_RELATIVE,
    Conclusion,
    MoveRequest,
    MoveRequestError,
    operation_id,
)
from tether.physical.robot_move_store import MoveStore, Operation, StoreConflict, now_ms

EXIT_DONE = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARKED = 3
EXIT_RETRY = 4


def _conclude(op: Operation, conclusion: Conclusion) -> dict[str, Any]:
    kind, doc = op.record_conclusion(conclusion)
    if kind == "recovered":
        return {"status": "done", "conclusion": "recovered"}
    if kind == "confirmed_absent":
        return {"status": "pending", "conclusion": kind, "next_attempt": doc["for_attempt"]}
    return {
        "status": "awaiting_decision",
        "conclusion": "unknown",
        "revision": doc["revision"],
        "reason": doc.get("reason"),
    }


def run_move(
    config: HostConfig,
    store: MoveStore,
    op_id: str,
    request: MoveRequest,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    settle_timeout_s: float = 30.0,
) -> dict[str, Any]:
    robot = config.robot(request.robot)
    check_request(robot, request)  # unknown joints and limit violations: before anything is sent
    op = store.bind(op_id, request)
    revisions = op.evidence_revisions()
    if revisions:
        apply_decision(op, revisions[-1])  # finish a decision interrupted by a crash
    if op.terminal:
        return {"status": op.status()}
    if op.parked:
        return {"status": "awaiting_decision", "revision": op.evidence_revisions()[-1]}
    with RobotHost(config) as host:
        host.connect(robot.name)
        adapter = DynamixelMoveAdapter(
            config, host, progress=progress, settle_timeout_s=settle_timeout_s
        )
        number = op.next_attempt()
        if number > 1 and op.guard(number) is None:
            outcome = _conclude(op, adapter.reconcile(op, request))
            if outcome["status"] != "pending":
                return outcome
        op.start_attempt(
            number,
            {
                "pid": os.getpid(),
                "started_at_ms": now_ms(),
                "port_key": host.buses[robot.port].identity.key,
            },
        )
        try:
            result = adapter.execute(op, number, request, first_motion=True)
        except TetherError as exc:
            # In doubt: the safe-stop already ran; decide from the device right away.
            outcome = _conclude(op, adapter.reconcile(op, request))
            return {**outcome, "error": f"{type(exc).__name__}: {exc}"}
        op.record_result(result)
        return {"status": "done", "conclusion": "executed", "attempt": number}


def parse_targets(items: list[str]) -> dict[str, float]:
    targets: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise MoveRequestError(f"--joint wants NAME=RADIANS, got {item!r}")
        try:
            targets[name] = float(value)
        except ValueError:
            raise MoveRequestError(f"--joint {item!r}: {value!r} is not a number") from None
    return targets


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tether move", description="Run one robot move to a conclusion."
    )
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument(
        "--store", help="operation store directory (default: <state_dir>/robot_move)"
    )
    parser.add_argument("--robot", required=True)
    parser.add_argument("--joint", action="append", default=[], help="NAME=RADIANS (repeatable)")
    parser.add_argument(
        "--relative", action="store_true", help="targets are deltas (non-repeatable)"
    )
    parser.add_argument("--world", default="local", help="world id (for the operation id)")
    parser.add_argument("--activity", required=True, help="activity id (for the operation id)")
    parser.add_argument("--settle-timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        kind = KIND_RELATIVE if args.relative else KIND_ABSOLUTE
        request = MoveRequest.from_dict(
            {"kind": kind, "robot": args.robot, "targets": parse_targets(args.joint)}
        )
        store_dir = args.store or config.state_dir / "robot_move"
        store = MoveStore(usable_dir(store_dir, what="the operation store"))
        op_id = operation_id(kind, args.world, args.activity)
    except (TetherError, MoveRequestError) as exc:
        refused = {"status": "refused", "code": getattr(exc, "code", None), "error": str(exc)}
        print(json.dumps(refused), flush=True)
        return EXIT_USAGE

    def progress(content: dict[str, Any]) -> None:
        print(json.dumps({"progress": content}), flush=True)

    try:
        outcome = run_move(
            config, store, op_id, request, progress=progress, settle_timeout_s=args.settle_timeout
        )
    except (TetherError, StoreConflict) as exc:
        code = getattr(exc, "code", None)
        print(
            json.dumps(
                {
                    "operation_id": op_id,
                    "status": "refused" if code == "limit_violation" else "error",
                    "code": code,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            ),
            flush=True,
        )
        return EXIT_USAGE if code == "limit_violation" else EXIT_ERROR
    print(json.dumps({"operation_id": op_id, **outcome}), flush=True)
    status = outcome["status"]
    return {"done": EXIT_DONE, "awaiting_decision": EXIT_PARKED, "pending": EXIT_RETRY}.get(
        status, EXIT_ERROR
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
