"""`tether host ...` (own the configured robots) and `tether stop` (safe-stop them all)."""

from __future__ import annotations

import argparse
import getpass
import json
import signal
import sys
import threading
from types import FrameType

from tether.adapters.dynamixel.config import hash_credential, load_config
from tether.adapters.dynamixel.host import RobotHost, stop_everything
from tether.errors import TetherError


def stop_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tether stop", description="Safe-stop every configured robot."
    )
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument("--robot", action="append", help="only this robot (repeatable)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except TetherError as exc:
        print(f"tether stop: {exc}", file=sys.stderr)
        return 2
    reports = stop_everything(config, args.robot)
    print(json.dumps(reports, indent=2))
    return 0 if all(r.get("ok") for r in reports) else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tether host")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("hash-credential", help="read a secret from stdin (or a prompt), print its hash")
    serve = sub.add_parser("serve", help="own the configured robots until SIGTERM/SIGINT")
    serve.add_argument("--config", required=True)
    serve.add_argument("--robot", action="append", help="only this robot (repeatable)")
    args = parser.parse_args(argv)
    if args.cmd == "hash-credential":
        secret = (
            sys.stdin.readline().rstrip("\n")
            if not sys.stdin.isatty()
            else getpass.getpass("credential: ")
        )
        try:
            print(hash_credential(secret))
        except TetherError as exc:
            print(f"tether host: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        config = load_config(args.config)
    except TetherError as exc:
        print(f"tether host: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    host = RobotHost(config)
    try:
        for name in args.robot or sorted(config.robots):
            identity = host.connect(name)
            print(json.dumps({"robot": name, "identity": identity.as_dict()}), flush=True)
        print(json.dumps({"socket": host.socket_path}), flush=True)
        done.wait()
    except TetherError as exc:
        print(f"tether host: {exc}", file=sys.stderr)
        return 1
    finally:
        for report in host.close():
            print(json.dumps({"safe_stop": report.as_dict()}), flush=True)
    return 0
