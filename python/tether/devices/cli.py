"""`tether host serve` (own the configured robots) and `tether stop` (safe-stop and latch them)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from tether import _exit
from tether._args import Parser, error_fields, error_line, refuse, want_json
from tether._config import HostConfigError
from tether._dirs import tolerating, usable_dir
from tether.devices.config import (
    HostConfig,
    check_config_file,
    load_config,
    state_dir_of_file,
)
from tether.devices.control import daemon_socket, send_request
from tether.devices.host import DeviceHost, stop_everything
from tether.devices.ports import port_owners
from tether.errors import TetherError

#: `tether stop` exit codes (`tether._exit`, the README's exit-code table).
EXIT_STOPPED = _exit.OK  # every joint of every robot is in its policy's state (held / limp)
EXIT_NOT_STOPPED = _exit.FAILED  # a joint is not (limp under `hold`, moving, unknown) or a
# robot could not be reached
EXIT_USAGE = _exit.USAGE  # bad arguments, an invalid configuration, an unknown robot: nothing sent
#: The codes each command here documents (a test checks them against `tether._exit`).
STOP_EXIT_CODES = (_exit.OK, _exit.FAILED, _exit.USAGE)
HOST_EXIT_CODES = (_exit.OK, _exit.FAILED, _exit.USAGE, _exit.UNAVAILABLE)

_STOP_EPILOG = """\
Each joint is reported as read back from the device after the stop: held (torque on,
holding where it stands), limp (torque off), moving (torque on but driving elsewhere) or
unknown (unreadable), with any hardware error named. Positions are in radians.
A stop is latched: a move in progress sends nothing more, and nothing moves on the robot until
an operator runs `tether operator resume ROBOT`.

exit codes: 0 every joint is in its policy's state; 1 some joint is not, or a robot could not
be reached; 2 usage or configuration error (nothing was sent). A configuration error while
`tether serve` runs on the file's state dir (or, with none, while a `tether move`, `tether host
serve` or `tether worker` owns a port there) is a warning: every robot is stopped through that
process, with the configuration it loaded. See `tether --help`."""


def _joint_line(joint: dict[str, Any], width: int) -> str:
    parts = [f"  {joint['joint']:<{width}}  id {joint['id']:<3}  {joint['state']:<7}"]
    if joint.get("torque") is not None:
        parts.append("torque on " if joint["torque"] else "torque off")
    if joint.get("present_rad") is not None:
        parts.append(f"at {joint['present_rad']:+.4f} rad  goal {joint['goal_rad']:+.4f} rad")
    if joint.get("hardware_error"):
        parts.append("hardware error: " + ", ".join(joint["hardware_error"]))
    if joint.get("error"):
        parts.append(str(joint["error"]))
    return "  ".join(parts)


def render_stop(reports: list[dict[str, Any]]) -> str:
    """`tether stop` for a person: one line per robot, then one per joint."""
    lines: list[str] = []
    for report in reports:
        via = f", via {report['via']}" if report.get("via") else ""
        reached = bool(report.get("joints"))
        verdict = (
            "stopped"
            if report.get("ok")
            else "NOT in the state its policy asks"
            if reached
            else "NOT STOPPED: not confirmed, no joint was read back"
        )
        lines.append(f"{report['robot']} (safe_stop {report['policy']}{via}): {verdict}")
        if report.get("error"):
            lines.append(f"  {report['error']}")
        if report.get("latch_error"):
            lines.append(f"  {report['latch_error']}")
        if not reached and not report.get("ok"):
            if report.get("latched"):
                lines.append(
                    f"  latched: no move of Tether's runs on it until `tether operator resume"
                    f" {report['robot']}`"
                )
            lines.append("  if it may be moving, stop it with its hardware emergency stop")
        joints = report.get("joints", [])
        width = max((len(str(j["joint"])) for j in joints), default=0)
        lines += [_joint_line(j, width) for j in joints]
    return "\n".join(lines)


def _identity_line(robot: str, identity: dict[str, Any]) -> str:
    """A connected robot's identity for a person."""
    servos = ", ".join(
        f"id {s.get('id')} model {s.get('model')} firmware {s.get('firmware')}"
        for s in identity.get("servos") or []
        if isinstance(s, dict)
    )
    where = identity.get("port_key") or "-"
    return f"{robot}: connected on {where}" + (f" ({servos})" if servos else "")


#: How a state dir may be kept for `tether stop` to go on (with a warning) rather than refuse:
#: one's own dir others may write to (a daemon of one's own may run on it, and an owner's
#: socket is still trusted only by its uids), or one reached through a symlink (the dir it
#: points to is checked as one's own: `tether._dirs.tolerating`). A dir another user owns is
#: the attack of a pre-created state dir: refused, also through a symlink.
_TOLERATED = ("insecure_directory", "symlinked_directory")


def _stop_through_daemon(
    path: Path, robots: list[str] | None
) -> tuple[list[dict[str, Any]], str] | None:
    """`tether stop` with a host file the configuration refused: the reports of a stop through
    the processes that own robots of its state dir, and what they are; or None (nothing sent)
    when none can be found for certain: the file is unreadable, its `[host]` table is itself
    wrong, or nothing holds that state dir. The `tether serve` of the state dir when one runs;
    else each process that owns a port there now (`tether move`, `tether host serve`,
    `tether worker`: the owner its port's lock names). The robots named, else every robot each
    serves (its own configuration's, not the refused file's)."""
    from tether.client import daemon_record

    state_dir = state_dir_of_file(path)
    if state_dir is None:
        return None
    record = daemon_record(state_dir)  # a daemon holds the state dir's lock: not a stale socket
    if record is not None:
        sockets = [str(daemon_socket(state_dir))]
        theirs = "the running daemon of this state dir, with the configuration it loaded"
        theirs += f" ({record.get('config') or 'its own host file'})"
    else:
        owners = [o for o in port_owners(state_dir) if isinstance(o.get("socket"), str)]
        sockets = list(dict.fromkeys(str(o["socket"]) for o in owners))
        if not sockets:
            return None
        pids = ", ".join(str(o.get("pid")) for o in owners)
        one = len(sockets) == 1
        who = "the process that owns" if one else "the processes that own"
        theirs = f"{who} its ports now (pid {pids}), with the configuration"
        theirs += " it loaded" if one else " each loaded"
    # Every owner is asked at once: one that hangs (stopped with Ctrl-Z, say) delays no
    # other's stop by its timeout.
    asked = [_Owner(s, robots, identify=bool(robots) and record is None) for s in sockets]
    for owner in asked:
        owner.start()
    for owner in asked:
        owner.join()
    reports = [r for owner in asked for r in owner.reports]
    served = {n for owner in asked for n in owner.served}
    for name in robots or []:  # no process that owns a port has it: nothing was sent to it
        if record is None and name not in served:
            reports.append(
                _unconfirmed(name, "not_owned: no running process owns it: nothing sent")
            )
    return reports, theirs


def _unconfirmed(robot: str | None, error: str, via: str | None = None) -> dict[str, Any]:
    """The report of a robot (None: every robot of an owner) no joint of which was read back:
    never ok, with why."""
    report = {"robot": robot or "*", "policy": "unknown", "ok": False, "joints": []}
    return {**report, "error": error, "via": via}


class _Owner(threading.Thread):
    """One owner of a port asked to stop (`_stop_through_daemon`): the robots named that it
    has (``identify``: asked first, briefly), else every robot it serves."""

    #: How long an owner has to say which robots it has (s): a stop waits no longer on it.
    IDENTIFY_S = 2.0

    def __init__(self, socket_path: str, robots: list[str] | None, *, identify: bool) -> None:
        super().__init__(daemon=True)
        self.socket_path = socket_path
        self.robots = robots
        self.identify = identify
        self.reports: list[dict[str, Any]] = []
        self.served: set[str] = set()

    def run(self) -> None:
        names: list[str | None] = list(self.robots) if self.robots else [None]  # None: every
        if self.identify and self.robots:
            try:
                has = send_request(self.socket_path, {"op": "identity"}, timeout=self.IDENTIFY_S)
            except TetherError:
                has = {}
            names = [n for n in self.robots if n in has]
        elif self.robots:
            self.served = set(self.robots)  # the daemon: it has every robot of its own
        self.served |= {n for n in names if n is not None}
        for name in names:
            try:
                asked = {"op": "stop"} if name is None else {"op": "stop", "robot": name}
                got = [{**r, "via": "owner"} for r in send_request(self.socket_path, asked)]
                if not got:  # an owner with no robot connected stopped nothing: never "ok"
                    said = f"no_robot: its owner ({self.socket_path}) has no robot connected:"
                    got = [_unconfirmed(name, said + " nothing was stopped", via="owner")]
                self.reports += got
            except Exception as exc:  # said in its report: a thread's error is never lost
                code, message, _ = error_fields(exc)
                self.reports.append(_unconfirmed(name, f"{code}: {message}"))


def stop_main(argv: list[str]) -> int:
    parser = Parser(
        prog="tether stop",
        description="Safe-stop every configured robot (through its owning host when one runs).",
        epilog=_STOP_EPILOG,
    )
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument(
        "--robot", action="append", help="only this robot (repeatable; default: every robot)"
    )
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args(argv)
    # A robot named twice is stopped once (a stop is never refused for how it was asked).
    robots = list(dict.fromkeys(args.robot)) if args.robot else None
    try:
        try:
            # A file others may change is said, and the robots are stopped all the same.
            config: HostConfig[Any] = load_config(args.config, insecure_ok=True)
            try:
                check_config_file(Path(args.config))
            except HostConfigError as insecure:
                code, message, _ = error_fields(insecure)
                print(f"tether stop: warning: {code}: {message}; stopping anyway", file=sys.stderr)
        except HostConfigError as exc:
            # A mistake in the file must not keep a running daemon from stopping its robots:
            # it stops them with the configuration it loaded. Without one, nothing is sent.
            stopped = _stop_through_daemon(Path(args.config), robots)
            if stopped is None:
                raise
            fallback, theirs = stopped
            code, message, _ = error_fields(exc)
            print(
                f"tether stop: warning: {code}: {message}; stopping through {theirs}",
                file=sys.stderr,
            )
            print(json.dumps(fallback, indent=2) if args.json else render_stop(fallback))
            every = bool(fallback) and all(r.get("ok") for r in fallback)
            return EXIT_STOPPED if every else EXIT_NOT_STOPPED
        try:
            usable_dir(config.state_dir, what="host.state_dir")  # owners and locks live there
        except TetherError as exc:
            # A stop is not refused for a state dir of one's own others may write to, or
            # reached through a symlink (a daemon may run on it): said first, then the stop
            # goes, through its owner or directly, its latch written there (an owner's socket
            # is still trusted only by its owner's and peer's uid; a latch that cannot be
            # written latches in memory, and its report says so). Anything else is refused.
            code, message, _ = error_fields(exc)
            if code not in _TOLERATED:
                raise
            print(f"tether stop: warning: {code}: {message}; stopping anyway", file=sys.stderr)
        if not config.robots:  # said, never an empty success: nothing here can be stopped
            refuse(
                "tether stop",
                "no_robot",
                f"{args.config} configures no robot: nothing was stopped (a robot of another"
                " host, driven through its gRPC service, is stopped on that host: its"
                " `tether stop`, or RobotControl.Stop)",
                error="HostConfigError",
            )
            return EXIT_USAGE
        with tolerating(*_TOLERATED):  # the host's own checks of the dir, too
            reports = stop_everything(config, robots)
        _warn_serve(args.config, config)  # after the stop: nothing in [serve] delays it
    except TetherError as exc:
        error_line("tether stop", exc)
        return _exit.for_error(exc, default=EXIT_USAGE)
    print(json.dumps(reports, indent=2) if args.json else render_stop(reports))
    return EXIT_STOPPED if all(r.get("ok") for r in reports) else EXIT_NOT_STOPPED


def _warn_serve(path: str, config: HostConfig[Any]) -> None:
    """A mistake in the file's `[serve]`, which a stop does not use, is said (as one in a
    robot's table is) once the stop went: the daemon this file starts would refuse it. Never
    raises: whatever reading it fails with is only this warning."""
    from tether.serve.config import load_serve

    try:
        load_serve(path, state_dir=config.state_dir, robots=len(config.robots))
    except Exception as exc:
        code, message, _ = error_fields(exc)
        print(
            f"tether stop: warning: {code}: {message}; a stop does not use [serve], so it went"
            " (`tether serve` refuses this file)",
            file=sys.stderr,
        )


def main(argv: list[str]) -> int:
    parser = Parser(
        prog="tether host",
        description="Own the configured robots (exclusive, locked) until SIGTERM or SIGINT; "
        "safe-stop them on the way out. Prints one JSON line per robot connected, then the "
        "control socket.",
        epilog="exit codes: 0 stopped on a signal; 1 a device error at connect; 2 usage or "
        "configuration; 7 a port is owned by another process (see `tether --help`).",
    )
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="own the configured robots until SIGTERM/SIGINT", epilog=parser.epilog
    )
    serve.add_argument("--config", required=True, help="host configuration (TOML)")
    serve.add_argument(
        "--robot", action="append", help="only this robot (repeatable; default: every robot)"
    )
    serve.add_argument(
        "--json",
        action="store_true",
        help="JSON lines on stdout (default: on off a TTY; on a TTY, lines in words)",
    )
    want_json("--json" in argv or not sys.stdout.isatty())  # a usage error's document too
    args = parser.parse_args(argv)
    as_json = args.json or not sys.stdout.isatty()
    want_json(as_json)  # its refusals are JSON documents too
    try:
        config: HostConfig[Any] = load_config(args.config)
        usable_dir(config.state_dir, what="host.state_dir")
    except TetherError as exc:
        error_line("tether host", exc)
        return _exit.for_error(exc, default=_exit.USAGE)
    host = DeviceHost(config)
    try:
        for name in args.robot or sorted(config.robots):
            identity = host.connect(name)
            if as_json:
                print(json.dumps({"robot": name, "identity": identity.as_dict()}), flush=True)
            else:
                print(_identity_line(name, identity.as_dict()), flush=True)
        if as_json:
            print(json.dumps({"socket": host.socket_path}), flush=True)
        else:
            print(f"control socket {host.socket_path}; serving until SIGTERM or Ctrl-C", flush=True)
        host.serve_until_signal()
    except TetherError as exc:
        error_line("tether host", exc)
        return _exit.for_error(exc)
    finally:
        for report in host.close():
            if as_json:
                print(json.dumps({"safe_stop": report.as_dict()}), flush=True)
            else:
                print("safe stop: " + render_stop([report.as_dict()]), flush=True)
    return _exit.OK
