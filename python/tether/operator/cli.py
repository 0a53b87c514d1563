"""`tether operator list | show ID | resolve ID --decision ...`: every parked Activity of every
family, in one Host data directory's Activity catalog (the control record)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tether._dirs import usable_dir
from tether.activities import ActivityRecord, Catalog
from tether.errors import TetherError
from tether.operator.decisions import DECISIONS, DeviceReview, listing, resolve, show
from tether.runtime import ArtifactStore

CREDENTIAL_ENV = "TETHER_OPERATOR_CREDENTIAL"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tether operator",
        description="Review and decide Activities parked for an operator (every family).",
    )
    parser.add_argument(
        "--config", help="host configuration (TOML): the operator credential and the robots"
    )
    parser.add_argument(
        "--data-dir",
        help="the Host data directory (default: <state_dir>/moves of --config, where "
        "`tether move` runs)",
    )
    parser.add_argument(
        "--store", help="robot-move operations journal (default: <data-dir>/robot_move)"
    )
    parser.add_argument("--json", action="store_true", help="JSON output (default off a TTY)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="every Activity awaiting a decision")
    sh = sub.add_parser("show", help="the evidence document of one Activity, revision and age")
    sh.add_argument("id", help="world_id/kind/activity_id, or the provider operation id")
    res = sub.add_parser("resolve", help="decide on the current evidence revision")
    res.add_argument("id", help="world_id/kind/activity_id, or the provider operation id")
    res.add_argument("--decision", required=True, choices=DECISIONS)
    res.add_argument(
        "--revision", required=True, type=int, help="the evidence revision you reviewed"
    )
    res.add_argument("--operator", required=True, help="your name (recorded)")
    res.add_argument("--note", default="")
    res.add_argument(
        "--credential-stdin",
        action="store_true",
        help=f"read the credential from stdin (default: ${CREDENTIAL_ENV})",
    )
    args = parser.parse_args(argv)
    as_json = args.json or not sys.stdout.isatty()
    try:
        config = None
        if args.config:
            from tether.adapters.dynamixel.config import load_config

            config = load_config(args.config)
        if args.data_dir:
            data_dir = usable_dir(args.data_dir, what="--data-dir", create=False)
        elif config is not None:
            data_dir = usable_dir(config.state_dir / "moves", what="the moves data dir")
        else:
            raise _usage("give --data-dir or --config")
    except TetherError as exc:
        print(f"tether operator: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(data_dir).resolve()
    catalog = Catalog.open("sqlite:///" + str(data_dir / "catalog.db"))
    artifacts = ArtifactStore(data_dir / "artifacts")
    try:
        if args.cmd == "list":
            _print(listing(catalog, artifacts), as_json)
            return 0
        if args.cmd == "show":
            _print(show(catalog, artifacts, args.id), as_json)
            return 0
        review = _review(
            config, Path(args.store) if args.store else data_dir / "robot_move", data_dir
        )
        outcome = resolve(
            catalog,
            artifacts,
            args.id,
            decision=args.decision,
            revision=args.revision,
            operator=args.operator,
            credential=_credential(args),
            verify_credential=(
                config.verify_operator if config is not None else (lambda credential: False)
            ),
            note=args.note,
            review=review,
        )
    except TetherError as exc:
        return _rejected(exc)
    finally:
        catalog.close()
    _print(outcome, as_json)
    return 0


def _usage(message: str) -> TetherError:
    from tether._dirs import DataDirError

    return DataDirError("data_dir_missing", message)


def _review(config: Any, store_dir: Path, data_dir: Path | None = None) -> Any:
    """The device review of each family a parked Activity belongs to (robot moves: the host
    configuration's robots; sim reaches: the data directory's operations journal); None for a
    family without one."""
    robot_moves: Any = None
    if config is not None:
        from tether.families.robot_move.journal import MoveStore
        from tether.families.robot_move.operator import RobotMoveReview

        robot_moves = RobotMoveReview(config, MoveStore(store_dir))
    sims: list[Any] = []  # opened on the first sim reach (it imports the simulator)

    def review(record: ActivityRecord) -> DeviceReview | None:
        if record.key.kind == "physical_ai.sim_episode" and data_dir is not None:
            if not sims:
                from tether.families.sim.operator import SimReview

                sims.append(SimReview(data_dir))
            found: DeviceReview | None = sims[0].for_record(record)
            return found
        return None if robot_moves is None else robot_moves.for_record(record)

    return review


def _credential(args: argparse.Namespace) -> str | None:
    """The operator credential: one line of stdin, or the environment variable."""
    if args.credential_stdin:
        return sys.stdin.readline().rstrip("\n")
    return os.environ.get(CREDENTIAL_ENV)


def _rejected(exc: TetherError) -> int:
    """A refused decision: one JSON line with its stable code, exit status 1."""
    print(json.dumps({"status": "rejected", "code": getattr(exc, "code", None), "error": str(exc)}))
    return 1


def _age(ms: object) -> str:
    if not isinstance(ms, int):
        return "-"
    return f"{ms / 1000:.1f} s"


def _print(doc: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    if isinstance(doc, list):
        if not doc:
            print("nothing awaits a decision")
        for item in doc:
            print(
                f"{item['key']}  revision {item['revision']}  {item['reason'] or '-'}  "
                f"evidence {_age(item['evidence_age_ms'])} old"
            )
        return
    if "evidence" in doc:
        print(f"{doc['key']}  (operation {doc['operation_id']})")
        print(
            f"revision {doc['revision']}, evidence {_age(doc['evidence_age_ms'])} old, "
            f"device read {_age(doc['device_state_age_ms'])} ago"
        )
        print(f"reason: {doc['reason'] or '-'}")
        evidence = doc["evidence"] or {}
        joints = (evidence.get("read_back") or {}).get("joints") or {}
        for name, j in joints.items():
            errors = ", ".join(j.get("hardware_errors") or []) or "none"
            moving = "moving" if j["moving"] else "still"
            torque = "on" if j["torque_on"] else "off"
            staged = "yes" if j["staged_write"] else "no"
            print(
                f"  {name}: at {j['position_rad']:+.4f} rad, goal {j['goal_rad']:+.4f} rad, "
                f"{moving}, torque {torque}, staged {staged}, hardware errors {errors}"
            )
        for name, rad in (evidence.get("staged") or {}).items():
            print(f"  staged target {name}: {rad:+.4f} rad")
        for s in evidence.get("sent") or []:
            print(f"  sent {s.get('instruction')} id {s.get('id')} at {s.get('t_ms')} ms")
        return
    print(" ".join(f"{k}={v}" for k, v in doc.items()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
