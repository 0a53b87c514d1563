"""`tether operator`: every parked Activity of every family in one Host data directory's Activity
catalog (the control record), and the operator's acts on robots.

    tether operator [--config host.toml] [--data-dir D] [--json] list
    tether operator ... show ID
    tether operator ... resolve ID --decision done|reissue|abandon|wait --revision N
    tether operator --config host.toml resume ROBOT
    tether operator --config host.toml reboot ROBOT [--joint J ...] [--arm-supported]
    tether operator hash --name NAME [--role operator|observer]

Decisions, resume and reboot need an operator credential: one line from stdin
(`--credential-stdin`), a 0600 file (`--credential-file`), or a prompt on a terminal; never
argv or the environment. The operator recorded is the one whose hash the credential matches.

While `tether serve` runs for the config's state dir (or holds `--data-dir`), every command
goes through its control socket: the daemon reads its catalog and devices, and verifies the
credential against its own host.toml. This process never verifies a credential: with no
daemon, list and show read the data dir (read-only), and resolve, resume and reboot say in one
line that `tether serve` must run (`daemon_not_running`, exit 7) and change nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

from tether import _exit
from tether._args import Parser, duration, error_line, want_json
from tether._coded import CodedError
from tether._dirs import DataDirError, check_private_dir, usable_dir
from tether.activities import ActivityRecord, Catalog
from tether.devices import credentials
from tether.devices.config import HostConfig, load_config
from tether.errors import TetherError
from tether.operator.decisions import DECISIONS, DeviceReview, listing, show
from tether.runtime import ArtifactStore
from tether.runtime._artifacts import shared_for
from tether.storage._urls import sqlite_file, sqlite_url

#: Each family's device review, by dotted path (loaded on first use: the operator imports no
#: family or protocol package): kind prefix -> (review class, its journal class, the journal's
#: directory in the data dir). The review is built as `Review(config, Journal(dir))`.
#: Each family's operator review factory, `factory(config, data_dir) -> review | None`.
REVIEWS: dict[str, str] = {
    "physical_ai.robot_move": "tether.families.robot_move.operator:review_factory",
    "physical_ai.sim_episode": "tether.families.sim.operator:review_factory",
}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(import_module(module), attr)


EXIT_OK = _exit.OK
EXIT_REFUSED = _exit.FAILED
EXIT_USAGE = _exit.USAGE
#: The commands only a running daemon does (it verifies the credential).
DAEMON_ONLY = ("resolve", "resume", "reboot")
#: The codes `tether operator` documents (a test checks them against `tether._exit`).
EXIT_CODES = (
    _exit.OK,
    _exit.FAILED,
    _exit.USAGE,
    _exit.STORE_UNUSABLE,
    _exit.STORAGE_IO,
    _exit.UNAVAILABLE,
)
_EPILOG = (
    "While `tether serve` runs for the config's state dir (or holds --data-dir), every "
    "command goes through it and the daemon verifies the credential against its own "
    "host.toml; with none, list and show read the data dir and resolve, resume and reboot "
    "are refused (nothing changes). exit codes: 0 done; 1 refused (a credential, the rate "
    "limit, a role, a stale revision, `reboot_unconfirmed`, no such Activity); 2 usage or "
    "configuration; 5 a store that cannot be used; 6 the disk refused a write; 7 no "
    "`tether serve` runs for resolve, resume or reboot (`daemon_not_running`), or it did not "
    "answer (see `tether --help`)."
)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tether operator",
        description="Review and decide Activities parked for an operator (every family); "
        "resume or reboot a robot; hash a credential.",
        epilog=_EPILOG,
    )

    def common(p: argparse.ArgumentParser, *, top: bool) -> None:
        # Given before or after the command (`tether operator list --json`): a command's copy
        # has no default of its own, so it never undoes the one given before the command.
        unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
        p.add_argument(
            "--config",
            help="host configuration (TOML): the operators and the robots (default: none)",
            **unset,
        )
        p.add_argument(
            "--data-dir",
            help="the Host data directory (default: <state_dir>/moves of --config, where "
            "`tether move` runs)",
            **unset,
        )
        p.add_argument(
            "--json",
            action="store_true",
            help="JSON output (default: on off a TTY, off on one)",
            **unset,
        )

    common(parser, top=True)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, epilog=_EPILOG)
        common(p, top=False)
        return p

    command("list", "every Activity awaiting a decision")
    sh = command("show", "the evidence document of one Activity, revision and age")
    sh.add_argument("id", help="world_id/kind/activity_id, or the provider operation id")

    def credential_flags(p: argparse.ArgumentParser) -> None:
        one = p.add_mutually_exclusive_group()  # one source of the credential, never two
        one.add_argument(
            "--credential-stdin",
            action="store_true",
            help="read the credential from one line of stdin (default: prompt on a TTY)",
        )
        one.add_argument(
            "--credential-file", help="read the credential from this 0600 file (default: none)"
        )

    res = command("resolve", "decide on the current evidence revision")
    res.add_argument("id", help="world_id/kind/activity_id, or the provider operation id")
    res.add_argument("--decision", required=True, choices=DECISIONS, help="the decision")
    res.add_argument(
        "--revision", required=True, type=int, help="the evidence revision you reviewed"
    )
    res.add_argument(
        "--operator",
        help="optional check: refused unless the credential is this operator's (default: none)",
    )
    res.add_argument("--note", default="", help="recorded with the decision (default: empty)")
    credential_flags(res)
    rsm = command("resume", "clear a robot's stop latch (recorded with your name)")
    rsm.add_argument("robot", help="the robot's name in host.toml")
    credential_flags(rsm)
    rbt = command("reboot", "REBOOT a robot's servos: torque drops; gives a fresh read")
    rbt.add_argument("robot", help="the robot's name in host.toml")
    rbt.add_argument(
        "--joint", action="append", default=[], help="only this joint (repeatable; default all)"
    )
    rbt.add_argument(
        "--arm-supported",
        action="store_true",
        help="confirm the arm is supported (torque drops); without it a TTY asks, else refused",
    )
    credential_flags(rbt)
    hsh = command(
        "hash",
        "hash a credential read from stdin or a prompt; prints its host.toml table (JSON only"
        " with --json, so its output appends to host.toml as it is)",
    )
    hsh.add_argument("--name", required=True, help="the operator's name")
    hsh.add_argument(
        "--role", default="operator", choices=credentials.ROLES, help="the role (default: operator)"
    )
    return parser


def main(argv: list[str]) -> int:
    # Off a terminal it prints JSON: a usage error is then a document on stdout too. But for
    # `hash`, whose stdout is appended to host.toml (`>> host.toml`): its refusal is only its
    # line on stderr, unless --json asks (a JSON line appended made the file no TOML at all).
    hashing = next((a for a in argv if not a.startswith("-")), None) == "hash"
    want_json("--json" in argv or (not hashing and not sys.stdout.isatty()))
    args = _parser().parse_args(argv)
    as_json = args.json or (args.cmd != "hash" and not sys.stdout.isatty())
    want_json(as_json)  # its refusals are JSON documents too
    try:
        if args.cmd == "hash":
            return _hash(args, args.json)
        config = load_config(args.config) if args.config else None
        if config is not None:
            # Refused as every command but a stop refuses it (a symlink, another uid's, one
            # others may write to), also where no daemon runs and the catalog is read here.
            check_private_dir(config.state_dir, what="host.state_dir", missing_ok=True)
        client = _daemon(args, config)
        if client is not None:
            return _through_daemon(args, client, as_json)
        if args.cmd in DAEMON_ONLY:
            return _no_daemon(args, config)
        data_dir = _data_dir(args, config)
        url = _catalog_url(args, config)
        file = sqlite_file(url) if url is not None else str(data_dir / "catalog.db")
        if file is not None and not os.path.exists(file):
            # Nothing ran on this host yet (or on the SQLite file a URL names): read-only, so
            # nothing is made to say so.
            if args.cmd == "list":
                _print([], as_json)
                return EXIT_OK
            from tether.operations import check_operation_id
            from tether.operator.decisions import parse_key
            from tether.operator.errors import OperatorRejection

            try:  # the id is checked as a lookup checks it, before anything is said of it
                if args.id.count("/") >= 2:
                    parse_key(args.id)
                else:
                    check_operation_id(args.id)
            except TetherError as exc:  # a bad key or operation id, as `show` refuses it
                return _rejected(exc, as_json)
            return _rejected(
                OperatorRejection(
                    "unknown_activity",
                    f"no activity {args.id}: there is no catalog at {file} (nothing ran on it yet)",
                ),
                as_json,
            )
        catalog = Catalog.open(url or sqlite_url((data_dir / "catalog.db").absolute()))
    except TetherError as exc:
        error_line("tether operator", exc)
        return _exit.for_error(exc, default=EXIT_USAGE)
    # A PostgreSQL catalog's payloads are in its shared table (written by any host).
    artifacts = ArtifactStore(data_dir / "artifacts", shared=shared_for(url))
    try:
        if args.cmd == "list":
            _print(listing(catalog, artifacts), as_json)
        else:
            _print(show(catalog, artifacts, args.id), as_json)
    except TetherError as exc:
        return _rejected(exc, as_json)
    finally:
        catalog.close()
        if artifacts.shared is not None:
            artifacts.shared.close()
    return EXIT_OK


def _catalog_url(args: argparse.Namespace, config: HostConfig[Any] | None) -> str | None:
    """The catalog `list` and `show` read with no daemon: the host configuration's `[serve]
    catalog` (a PostgreSQL catalog shared with other hosts), else (None) the data dir's
    `catalog.db`, as the daemon would open it. `--data-dir` names a data dir's own."""
    if args.data_dir or config is None:
        return None
    from tether.serve.config import catalog_url_for

    return catalog_url_for(config)


def _no_daemon(args: argparse.Namespace, config: HostConfig[Any] | None) -> int:
    """A decision, resume or reboot with no `tether serve` running: one line naming where one
    must run (exit 7), after the usage checks; nothing is read, verified or written."""
    from tether.client import DaemonNotRunning

    if args.cmd in ("resume", "reboot"):
        if config is None:
            raise _usage(f"{args.cmd} needs --config")
        config.robot(args.robot)  # an unknown robot is a usage error
    if config is not None:
        where = f"state dir {config.state_dir}"
    elif args.data_dir:
        where = f"data dir {args.data_dir}"
    else:
        raise _usage("give --config (or --data-dir)")
    exc = DaemonNotRunning(
        "daemon_not_running",
        f"`tether operator {args.cmd}` needs `tether serve` running for the {where}: "
        "only the daemon verifies a credential; nothing was changed",
        details={"where": where},
    )
    error_line("tether operator", exc)
    return _exit.UNAVAILABLE


def _daemon(args: argparse.Namespace, config: HostConfig[Any] | None) -> Any:
    """The client of the `tether serve` running for the config's state dir (or holding
    `--data-dir`), or None when none runs."""
    from tether.client import Client, daemon_record

    if config is not None and daemon_record(config.state_dir) is not None:
        return Client(config.state_dir)
    if args.data_dir:
        from tether.serve.locks import running

        record = running(Path(args.data_dir) / "serve.lock")
        if record is not None and isinstance(record.get("state_dir"), str):
            return Client(record["state_dir"])
    return None


#: The commands that change something: what each changes.
_CHANGES = {"resolve": "the decision", "resume": "the resume", "reboot": "the reboot"}


def _through_daemon(args: argparse.Namespace, client: Any, as_json: bool) -> int:
    """Every operator command through the running daemon: it reads the catalog and the
    devices it owns, and verifies the credential (read here from stdin, a 0600 file or a
    prompt) against its own host.toml. This process verifies nothing."""
    from tether.client import ClientError

    try:
        if args.cmd == "list":
            _print(client.request({"op": "operator_list"}), as_json)
            return EXIT_OK
        if args.cmd == "show":
            _print(client.request({"op": "operator_show", "id": args.id}), as_json)
            return EXIT_OK
        supported = _confirm_supported(args) if args.cmd == "reboot" else True
        if not supported and sys.stdin.isatty() and not args.credential_stdin:
            # Answered no at the prompt: no credential is asked for, nothing is sent.
            raise CodedError(
                "reboot_unconfirmed",
                f"the arm of {args.robot} was not confirmed supported: nothing was sent"
                " (--arm-supported confirms it)",
            )
        request: dict[str, Any] = {"credential": _secret(args)}
        if args.cmd == "resolve":
            request.update(
                op="operator_resolve",
                id=args.id,
                decision=args.decision,
                revision=args.revision,
                operator=args.operator,
                note=args.note,
            )
        elif args.cmd == "resume":
            request.update(op="operator_resume", robot=args.robot)
        else:
            request.update(
                op="operator_reboot",
                robot=args.robot,
                joints=args.joint,
                arm_supported=supported,
            )
        _print(client.request(request, timeout=120.0), as_json)
        return EXIT_OK
    except ClientError as exc:
        if exc.code == "owner_no_answer" and exc.details.get("sent") and args.cmd in _CHANGES:
            # Sent, and no answer came back: the daemon may have done it or not.
            check = f"tether operator show {args.id}" if args.cmd == "resolve" else "tether status"
            exc = ClientError(
                exc.code,
                f"{exc.message}: {_CHANGES[args.cmd]} was sent and may or may not have been"
                f" recorded; check with `{check}` once the daemon answers",
                details=exc.details,
            )
        if exc.code in ("daemon_not_running", "owner_no_answer", "owner_untrusted"):
            error_line("tether operator", exc)
            return _exit.UNAVAILABLE
        if exc.code in _exit.ERROR_CODES and _exit.ERROR_CODES[exc.code] == _exit.USAGE:
            error_line("tether operator", exc)
            return EXIT_USAGE
        return _rejected(exc, as_json)
    except TetherError as exc:
        return _rejected(exc, as_json)


def _data_dir(args: argparse.Namespace, config: HostConfig[Any] | None) -> Path:
    if args.data_dir:
        given = Path(args.data_dir)
        if given.is_dir() and not given.is_symlink() and not (given / "catalog.db").is_file():
            # None of Tether's (a data dir's catalog is made when it first runs): refused
            # before the data dir's check would tighten the mode of a mistyped one.
            raise DataDirError(
                "not_a_data_dir",
                f"--data-dir {given} is not a Tether data directory: it holds no catalog.db"
                " (give the data dir of `tether serve` or of a Host, or --config)",
                details={"path": str(given), "what": "--data-dir"},
            )
        return Path(usable_dir(args.data_dir, what="--data-dir", create=False)).resolve()
    if config is not None:
        from tether.serve.config import data_dir_for

        given = Path(data_dir_for(config))
        if not given.exists():  # nothing ran on this host yet: read, never made, here
            return given.resolve()
        return Path(usable_dir(given, what="the moves data dir", create=False)).resolve()
    raise _usage("give --data-dir or --config")


def _secret(args: argparse.Namespace) -> str:
    """The credential from its one source: refused as missing (`empty_credential`, nothing
    sent) when none was given and there is no terminal to ask on."""
    if args.credential_file:
        return credentials.read_secret(file=args.credential_file)
    if args.credential_stdin or sys.stdin.isatty():
        return credentials.read_secret()
    raise credentials.CredentialError(
        "empty_credential",
        "no credential was given: there is no terminal to ask on; pass --credential-stdin"
        " (one line on stdin) or --credential-file FILE (mode 0600)",
    )


def _hash(args: argparse.Namespace, as_json: bool) -> int:
    from tether.devices.config import check_name

    check_name("principal", args.name)  # before the secret is asked for
    secret = credentials.read_secret(prompt=f"credential for {args.name}: ")
    credentials.check_new_secret(secret, args.role)
    hashed = credentials.hash_secret(secret)
    if as_json:
        print(json.dumps({"name": args.name, "role": args.role, "credential": hashed}))
    else:
        print(credentials.principal_table(args.name, args.role, hashed))
    return EXIT_OK


def _confirm_supported(args: argparse.Namespace) -> bool:
    if args.arm_supported:
        return True
    if not sys.stdin.isatty() or args.credential_stdin:
        return False
    try:
        answer = input(f"A reboot drops torque on {args.robot}. Is the arm supported? [y/N] ")
    except EOFError:  # Ctrl-D: no answer is a no
        print()
        return False
    return answer.strip().lower() in ("y", "yes")


def _usage(message: str) -> TetherError:
    return DataDirError("data_dir_missing", message)


def review_for(config: HostConfig[Any] | None, data_dir: Path, artifacts: Any = None) -> Any:
    """The device review of each family a parked Activity belongs to, built on first use by
    the family's own factory (`REVIEWS`, dotted paths: this module imports no family and no
    protocol); None for a family without one, or whose review needs a host configuration
    that was not given. `artifacts`: the store the Host writes payloads to (a daemon's: on a
    shared catalog, its PostgreSQL table), else the data dir's."""
    loaded: dict[str, Any] = {}

    def review(record: ActivityRecord) -> DeviceReview | None:
        family = next((f for f in REVIEWS if record.key.kind.startswith(f)), None)
        if family is None:
            return None
        if family not in loaded:
            loaded[family] = _load(REVIEWS[family])(config, data_dir, artifacts=artifacts)
        if loaded[family] is None:
            return None
        found: DeviceReview | None = loaded[family].for_record(record)
        return found

    return review


def _rejected(exc: TetherError, as_json: bool = True) -> int:
    """A refused request: one JSON line with its stable code, exit status 1 (or the code of a
    store that cannot be used, of a write the disk refused, or of a server that cannot be
    reached, as every command says them)."""
    want_json(as_json)
    error_line("tether operator", exc)
    code = _exit.for_error(exc)
    kept = (_exit.STORE_UNUSABLE, _exit.STORAGE_IO, _exit.UNAVAILABLE)
    return code if code in kept else EXIT_REFUSED


def _age(ms: object) -> str:
    return duration(ms)


def _when(ms: object) -> str:
    """A wall-clock time in ms as UTC, to the millisecond."""
    if not isinstance(ms, int):
        return "-"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


def _print(doc: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    if isinstance(doc, list):
        if not doc:
            print("nothing awaits a decision")
        for item in doc:
            host = f"  host {item['host']}" if item.get("host") else ""
            print(
                f"{item['key']}  revision {item['revision']}  {item['reason'] or '-'}  "
                f"evidence {_age(item['evidence_age_ms'])} old{host}"
            )
        return
    if "evidence" in doc:
        print(f"{doc['key']}  (operation {doc['operation_id']})")
        read = doc["device_state_age_ms"]
        print(
            f"revision {doc['revision']}, evidence {_age(doc['evidence_age_ms'])} old, "
            + (f"device read {_age(read)} ago" if isinstance(read, int) else "device not read")
        )
        print(f"reason: {doc['reason'] or '-'}")
        if not doc.get("awaiting_decision") and doc.get("state"):
            print(f"NOT parked now: {doc['state']} (the evidence below is the last it had)")
        made = doc.get("decision")
        if isinstance(made, dict):
            note = f": {made['note']!r}" if made.get("note") else ""
            print(
                f"decided: {made.get('decision')} by {made.get('operator')} on revision"
                f" {made.get('revision')} at {_when(made.get('decided_at_ms'))}{note}"
            )
        evidence = doc["evidence"] or {}
        if evidence.get("changes"):  # why this revision was recorded (a re-read, a reboot)
            print(f"recorded with this revision: {'; '.join(map(str, evidence['changes']))}")
        if evidence.get("error"):  # why the device could not be read (device_unreadable)
            print(f"error: {evidence['error']}")
        elif evidence.get("unreadable_when_parked"):  # read since (the fresh read-back below)
            why = evidence["unreadable_when_parked"]
            print(f"when it parked the device could not be read: {why}")
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
        sent = evidence.get("sent") or []
        never = "" if sent else " (nothing of it was sent)"
        pre = evidence.get("preimage")
        if isinstance(pre, bool):  # the device was not read: whether the attempt recorded one
            print(f"  a pre-image of the move was recorded: {'yes' if pre else 'no'}")
        pre = pre if isinstance(pre, dict) else {}
        before = (pre.get("read_back") or {}).get("joints") or {}
        for name, j in before.items():  # where the arm was when this attempt began
            print(f"  before the move {name}: at {j['position_rad']:+.4f} rad")
        if isinstance(pre.get("profile_speed_rad_s"), int | float):
            first = ", a first motion" if pre.get("first_motion") else ""
            print(f"  the move's speed: {pre['profile_speed_rad_s']:.3f} rad/s{first}")
        for name, rad in (evidence.get("staged") or {}).items():
            # The move's commanded goal (the evidence's `staged`), written or not.
            print(f"  the move's target {name}: {rad:+.4f} rad{never}")
        for s in sent:
            print(f"  sent {s.get('instruction')} id {s.get('id')} at {_when(s.get('t_ms'))}")
        return
    if "decision" in doc and "status" in doc and "key" in doc:  # `resolve`
        if doc["decision"] == "wait":
            print(
                f"{doc['key']}: wait: nothing recorded; it stays parked on revision"
                f" {doc.get('revision')}"
            )
        else:
            print(
                f"{doc['key']}: {doc['decision']} recorded by {doc.get('operator')} on revision"
                f" {doc.get('revision')} ({doc['status']})"
            )
        if doc.get("note"):
            print(f"  note: {doc['note']!r}")
        return
    if doc.get("not_latched"):  # `resume` of a robot no stop holds
        last = doc.get("last_resumed_by")
        since = (
            f" (last resumed by {last} at {_when(doc.get('last_resumed_at_ms'))})" if last else ""
        )
        print(f"{doc.get('robot')}: not latched: nothing to resume{since}")
        return
    if "resumed_by" in doc:  # `resume`: the latch cleared
        by = doc.get("stopped_by") or "-"
        print(
            f"{doc.get('robot')}: resumed by {doc['resumed_by']}; it was stopped by {by}"
            f" at {_when(doc.get('stopped_at_ms'))}. New moves run again."
        )
        return
    if "rebooted_ids" in doc:  # `reboot`: what each joint reads now
        print(f"{doc.get('robot')}: rebooted ids {doc['rebooted_ids']} by {doc.get('operator')}")
        joints = (doc.get("read_back") or {}).get("joints") or {}
        for name, j in joints.items():
            if isinstance(j, dict) and isinstance(j.get("position_rad"), int | float):
                torque = "on" if j.get("torque_on") else "off"
                print(f"  {name}: at {j['position_rad']:+.4f} rad, torque {torque}")
        for item in doc.get("refreshed") or []:
            if isinstance(item, dict):
                print(f"  {item.get('key')}: fresh evidence, revision {item.get('revision')}")
        return
    print(" ".join(f"{k}={v}" for k, v in doc.items()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
