"""`tether operator list | show ID | resolve ID --decision ...`: review and decide parked moves."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tether._dirs import usable_dir
from tether.activities import Catalog
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.host import fresh_state
from tether.errors import TetherError
from tether.operator.decisions import (
    DECISIONS,
    parse_key,
    resolve,
    resolve_activity,
    runtime_listing,
    runtime_show,
    show,
    summary,
)
from tether.physical.robot_move_store import MoveStore
from tether.runtime import ArtifactStore

CREDENTIAL_ENV = "TETHER_OPERATOR_CREDENTIAL"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tether operator")
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument("--store", help="operation store (default: <state_dir>/robot_move)")
    parser.add_argument(
        "--data-dir",
        help="a runtime Host's data directory: moves parked in its Activity catalog "
        "(IDs are world_id/kind/activity_id)",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    lst = sub.add_parser("list", help="moves awaiting a decision (--all for every move)")
    lst.add_argument("--all", action="store_true")
    sh = sub.add_parser("show", help="the evidence document of one move")
    sh.add_argument("id")
    sh.add_argument("--revision", type=int)
    res = sub.add_parser("resolve", help="decide on the latest evidence revision")
    res.add_argument("id")
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
    try:
        config = load_config(args.config)
        store_dir = usable_dir(args.store or config.state_dir / "robot_move", what="the store")
        if args.data_dir:
            usable_dir(args.data_dir, what="--data-dir", create=False)
    except TetherError as exc:
        print(f"tether operator: {exc}", file=sys.stderr)
        return 2
    store = MoveStore(store_dir)
    if args.data_dir:
        return _runtime(args, config, store)
    if args.cmd == "list":
        ops = [summary(op) for op in store.all() if args.all or op.parked]
        print(json.dumps(ops, indent=2))
        return 0
    op = store.get(args.id)
    if op is None:
        print(f"tether operator: no operation {args.id}", file=sys.stderr)
        return 1
    if args.cmd == "show":
        print(json.dumps(show(op, args.revision), indent=2))
        return 0
    credential = _credential(args)
    try:
        outcome = resolve(
            config,
            store,
            args.id,
            decision=args.decision,
            revision=args.revision,
            operator=args.operator,
            credential=credential,
            note=args.note,
            read_state=lambda robot: fresh_state(config, robot),
        )
    except TetherError as exc:
        return _rejected(exc)
    print(json.dumps(outcome, indent=2))
    return 0


def _credential(args: argparse.Namespace) -> str | None:
    """The operator credential: one line of stdin, or the environment variable."""
    if args.credential_stdin:
        return sys.stdin.readline().rstrip("\n")
    return os.environ.get(CREDENTIAL_ENV)


def _rejected(exc: TetherError) -> int:
    """A refused decision: one JSON line with its stable code, exit status 1."""
    print(json.dumps({"status": "rejected", "code": getattr(exc, "code", None), "error": str(exc)}))
    return 1


def _runtime(args: argparse.Namespace, config: HostConfig, store: MoveStore) -> int:
    data_dir = Path(args.data_dir).resolve()
    catalog = Catalog.open("sqlite:///" + str(data_dir / "catalog.db"))
    artifacts = ArtifactStore(data_dir / "artifacts")
    try:
        if args.cmd == "list":
            print(json.dumps(runtime_listing(catalog, store), indent=2))
            return 0
        key = parse_key(args.id)
        if args.cmd == "show":
            print(json.dumps(runtime_show(catalog, artifacts, store, key), indent=2))
            return 0
        credential = _credential(args)
        outcome = resolve_activity(
            config,
            catalog,
            artifacts,
            store,
            key,
            decision=args.decision,
            revision=args.revision,
            operator=args.operator,
            credential=credential,
            note=args.note,
            read_state=lambda robot: fresh_state(config, robot),
        )
    except TetherError as exc:
        return _rejected(exc)
    finally:
        catalog.close()
    print(json.dumps(outcome, indent=2))
    return 0
