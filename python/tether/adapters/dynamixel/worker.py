"""`tether move`: one robot move, run to a conclusion as an Activity.

While `tether serve` runs for the config's state dir (its lock is held), the move is submitted
through the daemon (`tether.client`: idempotent per activity id, another request under it is
`admission_conflict`), which owns the port and runs it; this command shows its progress until
it settles, is parked (exit 3) or the deadline passes (exit 4), with the same output. With no
daemon it runs standalone, as follows (safe: it takes the port exclusively).

The move is an Activity of the `physical_ai.robot_move` family in the Host data directory
(`[serve] data_dir`, else `<state_dir>/moves`; world `--world`, activity `--activity`). The
Activity catalog holds its control record (attempts, fences, evidence revisions, decisions)
and the operations journal (`robot_move` in that directory) its provider facts; nothing else
keeps either. A run:
1. checks the request (joints, an absolute move's limits) before anything is bound or sent;
2. commits the move's intent in a tick of the world, unless the world already holds it (another
   request under the same activity id is refused);
3. works the Activity with one in-process worker until it has a result, awaits an operator's
   decision (exit 3) or the deadline passes (exit 4). A move refused from the fresh read-back
   before any byte (a relative move past a limit) ends as a failed result (exit 2), never
   retried. An attempt of a killed run is waited out
   (its lease) and then reconciled: Recovered, ConfirmedAbsent (one fresh attempt), or Unknown;
4. commits the observation of a result, so the Activity settles.
A parked move is never executed by a run; only an operator's decision (`tether operator`)
moves it on. Output is JSON lines in SI units (radians): progress, then the outcome. After a
completed move the port is released without a stop (the arm holds its goal, torque on);
otherwise the robot's stop policy applies on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tether import _exit
from tether._args import (
    Parser,
    debug,
    error_line,
    refuse,
    sigterm_interrupts,
    stdout_line,
    want_json,
)
from tether._dirs import usable_dir
from tether.activities import MAX_LEASE_MS, ActivityKey, ActivityRecord
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.move import check_request
from tether.devices.config import config_digest
from tether.errors import PortBusy, TetherError, TransportError
from tether.families.robot_move.request import (
    KIND_ABSOLUTE,
    KIND_RELATIVE,
    MoveConflict,
    MoveRequest,
    MoveRequestError,
)
from tether.storage._urls import redact

log = logging.getLogger("tether.move")

#: A port that could not be opened at all: a new move on it is refused before it is recorded.
PORT_UNOPENED = frozenset({"open_failed", "adapter_not_found", "adapter_ambiguous", "port_lost"})

EXIT_DONE = _exit.OK
EXIT_ERROR = _exit.FAILED
EXIT_USAGE = _exit.USAGE
EXIT_PARKED = _exit.PARKED
EXIT_RETRY = _exit.TIMEOUT
#: The codes `tether move` documents (a test checks them against `tether._exit`).
EXIT_CODES = (
    _exit.OK,
    _exit.FAILED,
    _exit.USAGE,
    _exit.PARKED,
    _exit.TIMEOUT,
    _exit.STORE_UNUSABLE,
    _exit.STORAGE_IO,
    _exit.UNAVAILABLE,
)

_CONCLUSIONS = {"completed": "executed", "recovered": "recovered", "operator_done": "operator_done"}
#: What a move whose record retention compacted (`tether db prune`) says of its result.
_COMPACTED = "it failed; retention compacted its record, so its result is no longer kept"


def data_dir_of(config: HostConfig) -> Path:
    """The Host data directory `tether move`, `tether operator` and `tether serve` share:
    `[serve] data_dir`, else `<state_dir>/moves`."""
    from tether.serve.config import data_dir_for

    return data_dir_for(config)


def outcome_of_view(view: dict[str, Any]) -> dict[str, Any]:
    """The daemon's view of a move (`tether.client`) as the outcome document a standalone run
    prints (the same keys, plus `via`)."""
    out: dict[str, Any] = {
        "operation_id": view.get("operation_id"),
        "key": view.get("key"),
        "attempts": view.get("attempts"),
        "via": "daemon",
    }
    result = view.get("result") or {}
    state = view.get("state")
    if view.get("compacted"):  # retention dropped its result: only how it ended is kept
        out["compacted"] = True
        result = {"outcome": "compacted", "code": "record_compacted", "error": _COMPACTED}
    if state == "done":
        outcome = result.get("outcome")
        if outcome == "compacted":
            return {**out, "status": "done", "conclusion": "compacted record: result not kept"}
        return {**out, "status": "done", "conclusion": _CONCLUSIONS.get(str(outcome), outcome)}
    if state == "failed":
        return {
            **out,
            "status": "failed",
            "outcome": result.get("outcome"),
            "code": result.get("code"),
            "error": result.get("error"),
        }
    if state == "awaiting_decision":
        return {
            **out,
            "status": "awaiting_decision",
            "conclusion": "unknown",
            "revision": view.get("revision"),
            "reason": view.get("reason"),
        }
    return {**out, "status": "pending"}


def submit_move(
    config: HostConfig,
    request: MoveRequest,
    *,
    world: str | None,
    activity: str,
    timeout_s: float,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`tether move` while `tether serve` runs: submit the move through the daemon (which
    owns the port and runs it; `world` None: the daemon's default world) and follow it until
    it settles, is parked or the deadline passes; the outcome document."""
    from tether.client import Client, ClientError

    client = Client(config.state_dir)
    body = {"robot": request.robot, "targets": dict(request.targets)}
    key = f"{request.kind}/{activity}"
    unanswered = {
        "key": f"{world}/{key}" if world else f"{key} (in tether serve's default world)",
        "via": "daemon",
        "status": "pending",
    }
    try:
        view = client.submit(world, activity, request.kind, body)
    except KeyboardInterrupt:
        # Interrupted before the daemon answered: it may have committed the move or not.
        # The same command again submits the identical request, which is never run twice.
        return {
            **unanswered,
            "reason": "interrupted",
            "error": "interrupted before tether serve answered the submit: it may have"
            " committed the move; run the same command again to follow it (the identical"
            " request is never run twice)",
        }
    except ClientError as exc:
        if exc.code != "owner_no_answer" or not exc.details.get("sent"):
            raise  # refused, or nothing reached the daemon: it cannot run the move
        # Sent, and not answered in time (its stores may be stalled): the daemon may still
        # commit it and run the move, so this is no refusal.
        return {
            **unanswered,
            "reason": "unanswered",
            "error": f"tether serve did not answer the submit ({exc.message}); its stores may"
            " be stalled: it may still commit and run the move; run the same command again"
            " to follow it (the identical request is never run twice)",
        }
    if view.get("created") is False and view.get("final"):
        # Concluded before this command: shown as it ended, never its old progress again
        # (the arm may have moved since), and said so.
        return {**outcome_of_view(view), "earlier": True}
    shown = 0
    last = view
    try:
        for last in client.watch(str(view["key"]), timeout=timeout_s):
            seq = last.get("seq") or 0
            if last.get("progress") is not None and seq > shown:
                shown = seq
                if progress is None:
                    stdout_line(json.dumps({"progress": last["progress"]}))
                else:
                    progress(last["progress"])
    except KeyboardInterrupt:
        # Only this client stops following it: the move is the daemon's, and goes on.
        return _detached(
            last,
            "interrupted",
            "this command stopped following it; the move goes on in tether serve (follow it"
            " with the same command; stop the robot with `tether stop`)",
        )
    except ClientError as exc:
        if exc.code == "host_closed":
            # The daemon answered while it shut down (SIGTERM): it safe-stopped its robots on
            # the way out, and goes on with nothing. Not "it goes on with the move".
            return _detached(
                last,
                "daemon_lost",
                "tether serve shut down while the move was in progress (it applied the"
                " robot's stop policy on the way out): the move did not run to its end here;"
                " the daemon reconciles it when it runs again, and the same command then"
                " shows it",
            )
        if exc.code != "owner_no_answer":
            # The daemon answered, and could not read the move back (its catalog's server
            # down, say): it runs, and goes on with the move; only this reading failed.
            return _detached(
                last,
                "daemon_failed",
                f"tether serve could not read the move back ({exc.code}: {exc.message}): it"
                " goes on with the move; the same command follows it again once the daemon's"
                " stores answer (stop the robot with `tether stop`)",
            )
        # Submitted, then the daemon stopped answering (killed, or shutting down): whether
        # the move ran is not known here. The daemon reconciles it when it runs again.
        return _detached(
            last,
            "daemon_lost",
            f"tether serve stopped answering while the move was in progress ({exc.message}):"
            " its outcome is not known here; the daemon reconciles it when it runs again, and"
            " the same command then shows it",
        )
    return outcome_of_view(last)


def _detached(view: dict[str, Any], reason: str, error: str) -> dict[str, Any]:
    """The outcome of a move this client stopped following before it concluded (`reason`:
    `interrupted`, `daemon_lost` or `daemon_failed`): its key, and what is left to do."""
    out = outcome_of_view(view)
    if out.get("status") in ("done", "failed", "awaiting_decision"):
        return out  # concluded in the last view read: that is its outcome
    return {**out, "status": "pending", "reason": reason, "error": error}


def _doc(host: Any, ref: str, digest: str) -> dict[str, Any]:
    try:
        doc = json.loads(host.artifacts.get_bytes(ref, digest))
    except (TetherError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _outcome(host: Any, record: ActivityRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operation_id": record.operation_id,
        "key": f"{record.key.world_id}/{record.key.kind}/{record.key.activity_id}",
        "attempts": record.attempt_count,
    }
    if record.result is not None:
        doc = _doc(host, record.result.ref, record.result.digest)
        if record.result.failed:
            return {
                **out,
                "status": "failed",
                "outcome": doc.get("outcome"),
                "code": doc.get("code"),
                "error": doc.get("error"),
            }
        return {
            **out,
            "status": "done",
            "conclusion": _CONCLUSIONS.get(str(doc.get("outcome")), doc.get("outcome")),
        }
    if record.awaiting_decision:
        evidence = (
            _doc(host, record.evidence.evidence.ref, record.evidence.evidence.digest)
            if record.evidence
            else {}
        )
        return {
            **out,
            "status": "awaiting_decision",
            "conclusion": "unknown",
            "revision": record.evidence_revision,
            "reason": evidence.get("reason"),
        }
    return {**out, "status": "pending"}


def run_move(
    config: HostConfig,
    request: MoveRequest,
    *,
    world: str,
    activity: str,
    lease_ms: int = 5_000,
    settle_timeout_s: float = 30.0,
    timeout_s: float | None = None,
    store: Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run one move to a conclusion (see the module docstring); the outcome document."""
    from tether.families.robot_move.family import (
        INTENT,
        RobotMoveAdapter,
        intent,
        robot_move_family,
    )
    from tether.runtime import Host
    from tether.world import WorldNotFound

    check_request(config.robot(request.robot), request)  # before anything is bound or sent
    from tether.serve.config import host_name_for

    data = usable_dir(data_dir_of(config), what="the moves data dir")
    # Bound to this host as `tether serve` on the data dir binds its moves: a move parked
    # here is then decided through the daemon (one intent never admitted under two hosts).
    host_name = host_name_for(config)
    family = robot_move_family(
        config, store or data / "robot_move", settle_timeout_s=settle_timeout_s, host_name=host_name
    )

    def listener(event: Any) -> None:
        if progress is None:
            stdout_line(json.dumps({"progress": event.content}))
        else:
            progress(event.content)

    key = ActivityKey(world, request.kind, activity)
    deadline = time.monotonic() + (
        timeout_s if timeout_s is not None else 2 * lease_ms / 1000 + 3 * settle_timeout_s + 30
    )
    normal_end = False
    with (
        Host(
            data,
            [family],
            workers=0,
            observe=False,
            lease_ms=lease_ms,
            progress_listener=listener,
            host_name=host_name,
        ) as host,
        contextlib.ExitStack() as stack,  # closed first: the worker before its Host
    ):
        try:
            held_record = host.get(key)
            if held_record is None or not (
                held_record.result is not None or held_record.awaiting_decision
            ):
                # A move to run or reconcile on a port another process owns (another host's
                # daemon, say): refused now, before anything is recorded, rather than a move
                # no attempt can run or read, parked for an operator. So is a new move on a
                # port that does not open (unplugged, a wrong path): nothing would be sent,
                # and parking it made an operator decide a move that never was. A robot that
                # does not answer on an open port is the move's own to meet. (A concluded or
                # parked move touches no port: it is shown as it stands.)
                try:
                    cast("RobotMoveAdapter", family.adapter).connect(request.robot)
                except PortBusy:
                    raise
                except TransportError as exc:
                    unopened = getattr(exc, "code", "") in PORT_UNOPENED
                    if held_record is None and unopened:
                        raise
            try:
                host.head(world)
            except WorldNotFound:
                host.create_world(world)
            held = host.snapshot(world).get(activity, INTENT)
            if held is None:
                host.commit_tick(world, [intent(activity, request)])
            elif held != request.as_dict():
                raise MoveConflict(
                    f"activity {activity} of world {world} is another request:"
                    f" {json.dumps(held, sort_keys=True)}"
                )
            before = host.get(key)  # concluded by an earlier run: shown, never run again
            earlier = before is not None and before.result is not None
            # Moves of this file's robots admitted before this one and never concluded (an
            # earlier `tether move` that gave up waiting, exit 4) are run by this worker too,
            # first: said before any of them moves the arm, never found out afterwards. A
            # move of a robot another host file names (one state dir shared by two files) is
            # left to a process of that file: this one would conclude it unknown.
            robots: dict[str, object] = {}

            def others() -> list[ActivityKey]:
                found = [
                    r.key
                    for r in host.catalog.iter_claimable(world_id=world)
                    if r.key != key and r.result is None and not r.awaiting_decision
                ]
                unknown = [k.activity_id for k in found if k.activity_id not in robots]
                if unknown:
                    view = host.snapshot(world)
                    for activity_id in unknown:
                        held = view.get(activity_id, INTENT)
                        robots[activity_id] = held.get("robot") if isinstance(held, dict) else None
                return [k for k in found if robots[k.activity_id] in config.robots]

            pending = [k.activity_id for k in others()]
            if pending:
                shown = ", ".join(pending[:10]) + (
                    f" and {len(pending) - 10} more" if len(pending) > 10 else ""
                )
                log.warning(
                    "%d earlier move(s) of world %s, admitted and never concluded, run first,"
                    " as they were admitted: %s",
                    len(pending),
                    world,
                    shown,
                )
            worker = host.new_worker(f"tether-move-{activity}")
            stack.callback(worker.close)  # its own catalog connection (the caller owns it)
            while True:
                record = host.get(key)
                if record is None:  # pragma: no cover - the commit above admitted it
                    raise MoveRequestError(f"activity {activity} was not admitted")
                if record.result is not None:
                    if record.settlement is None:
                        host.observe_once()
                    break
                if record.awaiting_decision:
                    break
                progressed = False
                for other in others():
                    if other.activity_id not in pending:
                        # One whose earlier run's lease lapsed only meanwhile: said first.
                        pending.append(other.activity_id)
                        log.warning(
                            "runs move %s of world %s too: admitted earlier and never"
                            " concluded (its last attempt's lease lapsed while this move ran)",
                            other.activity_id,
                            world,
                        )
                    progressed = worker.run_key(other) or progressed
                progressed = worker.run_key(key) or progressed
                if not progressed:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
            outcome = _outcome(host, host.get(key) or record)
            normal_end = outcome["status"] == "done" or outcome.get("outcome") == "refused"
            return {**outcome, "earlier": True} if earlier else outcome
        finally:
            # A completed move, or one refused before any byte, is a normal end: the port is
            # released with the arm as it stands (torque on, holding its goal) under either
            # stop policy. Anything else (parked, not concluded, an error, an interrupt)
            # applies the robot's stop policy on the way out.
            close = getattr(family.adapter, "close", None)
            if close is not None:
                close(safe_stop=not normal_end)


def parse_targets(items: list[str]) -> dict[str, float]:
    targets: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise MoveRequestError(f"--joint wants NAME=RADIANS, got {item!r}")
        if name in targets:
            raise MoveRequestError(f"--joint {name}: given twice (one target per joint)")
        try:
            targets[name] = float(value)
        except ValueError:
            raise MoveRequestError(f"--joint {item!r}: {value!r} is not a number") from None
    return targets


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (an argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds")
    return value


def _lease_ms(text: str) -> int:
    """An attempt lease in ms within the catalog's bounds (an argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ms") from None
    if not 1 <= value <= MAX_LEASE_MS:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in [1, {MAX_LEASE_MS}] ms (7 days)")
    return value


def _one_line_logs() -> None:
    """The runtime's warnings as one line each on stderr (the exception, not its traceback)."""

    def one_line(record: logging.LogRecord) -> bool:
        if (
            record.levelno < logging.ERROR
            and record.name.startswith("tether.runtime")
            and "leaving it to reconcile" in str(record.msg)
            and not debug()
        ):
            return False  # a typed end of the attempt: the outcome document says what it was
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tether move: %(message)s"))
    handler.addFilter(one_line)
    root = logging.getLogger("tether")
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    root.propagate = False


def _bad_names(world: str | None, activity: str) -> str | None:
    """Why ``--world``/``--activity`` name no Activity (a world's or an activity's id rule, and
    no `/` in a world: it separates an Activity key's world from its kind), or None."""
    from tether.world import InvalidWrite
    from tether.world._types import check_name

    for flag, value in (("--world", world), ("--activity", activity)):
        if value is None:
            continue
        try:
            check_name(flag, value)
        except InvalidWrite as exc:
            return str(exc)
    if world is not None and "/" in world:
        return f"--world {world!r}: a world id holds no '/' (it separates a key's parts)"
    return None


def _remote_address(path: str) -> str | None:
    """The `[remote] address` of the host file at ``path`` (a bridge host's), or None."""
    import tomllib

    try:
        remote = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("remote")
    except (OSError, ValueError):
        return None
    address = remote.get("address") if isinstance(remote, dict) else None
    return address if isinstance(address, str) and address else None


def _say_json(doc: dict[str, Any]) -> None:
    """An outcome document on stdout (a refusal or an error is `error_line`'s)."""
    stdout_line(json.dumps(doc))


def _coded(doc: dict[str, Any]) -> str:
    """A failed outcome's `code: error`, its code said once."""
    code, error = doc.get("code"), str(doc.get("error"))
    return error if error.startswith(f"{code}: ") else f"{code}: {error}"


def _say_json_refusal(doc: dict[str, Any]) -> None:
    """A refusal recorded as the move's result, with JSON on stdout: its one line on stderr
    too, as every refusal of every command has."""
    if doc.get("status") == "failed" and doc.get("outcome") == "refused":
        print(f"tether move: {_coded(doc)}", file=sys.stderr, flush=True)


def _say_text(doc: dict[str, Any]) -> None:
    """The outcome for a person on a terminal, in radians (a refusal or an error is
    `error_line`'s)."""
    status = doc.get("status")
    key = doc.get("key", "")
    attempts = doc.get("attempts")
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    earlier = " (concluded earlier: not run again)" if doc.get("earlier") else ""
    if status == "done":
        print(f"{key}: done ({doc.get('conclusion')}) after {tries}{earlier}", flush=True)
    elif status == "awaiting_decision":
        print(
            f"{key}: parked for an operator (reason {doc.get('reason') or '-'}, evidence "
            f"revision {doc.get('revision')}); see `tether operator show {key}`",
            flush=True,
        )
    elif status == "failed":
        # A refusal recorded as the move's result is a refusal: its line goes to stderr.
        refused = doc.get("outcome") == "refused"
        print(
            f"{key}: failed ({doc.get('outcome')}): {_coded(doc)}{earlier}",
            flush=True,
            file=sys.stderr if refused else sys.stdout,
        )
    elif doc.get("reason") in ("interrupted", "daemon_lost", "daemon_failed", "unanswered"):
        print(f"{key}: not concluded: {doc.get('error')}", flush=True)
    else:
        print(f"{key}: not concluded before the deadline; run the same command again", flush=True)


class _ProgressLine:
    """A move's progress on a terminal: one line redrawn in place, positions in radians."""

    WIDTH = 20

    def __init__(self) -> None:
        self.drawn = False

    def __call__(self, content: dict[str, Any]) -> None:
        fraction = content.get("fraction")
        joints = content.get("joints") or {}
        parts = []
        if content.get("phase") == "queued":  # waiting for the robot's move before it
            parts.append(f"queued: robot {content.get('robot')} is running another move")
            fraction = None
        if isinstance(fraction, int | float):
            done = max(0, min(self.WIDTH, round(fraction * self.WIDTH)))
            parts.append(f"[{'#' * done}{'.' * (self.WIDTH - done)}] {fraction:4.0%}")
        for name, j in joints.items():
            if not isinstance(j, dict) or j.get("present_rad") is None:
                continue
            arrow = "moving" if j.get("moving") else "still"
            parts.append(
                f"{name} {j['present_rad']:+.3f} rad -> {j.get('goal_rad', 0.0):+.3f} ({arrow})"
            )
        if parts:
            sys.stdout.write("\r\x1b[K" + "  ".join(parts))
            sys.stdout.flush()
            self.drawn = True

    def end(self) -> None:
        if self.drawn:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.drawn = False


def main(argv: list[str]) -> int:
    """`tether move`; a SIGTERM interrupts it as Ctrl-C does (`sigterm_interrupts`): a move
    run here ends with its robot's stop policy applied, one followed in the daemon is only
    no longer followed."""
    with sigterm_interrupts():
        return _main(argv)


def _main(argv: list[str]) -> int:
    parser = Parser(
        prog="tether move",
        description="Run one robot move to a conclusion, as an Activity of the local Host "
        "(<state_dir>/moves).",
        epilog="exit codes: 0 done; 1 error; 2 refused (usage, configuration, a limit); 3 parked "
        "for an operator; 4 not concluded before the deadline; 5 a store that cannot be used; "
        "6 the disk refused a write; 7 the port is owned by another process (see `tether "
        "--help`).",
    )
    parser.add_argument("--config", required=True, help="host configuration (TOML)")
    parser.add_argument(
        "--store",
        help="operations journal of robot moves (default: robot_move in the Host data directory:"
        " [serve] data_dir, else <state_dir>/moves)",
    )
    parser.add_argument("--robot", required=True, help="the robot's name in host.toml")
    parser.add_argument(
        "--joint", action="append", default=[], help="NAME=RADIANS (repeatable; default: none)"
    )
    parser.add_argument("--relative", action="store_true", help="targets are deltas")
    parser.add_argument(
        "--world",
        default=None,
        help="world id (default: local; through a daemon whose world ledger is on PostgreSQL,"
        " shared by hosts, its own host's local@HOST_NAME: each daemon writes only its own"
        " host's worlds)",
    )
    parser.add_argument("--activity", required=True, help="activity id within the world")
    parser.add_argument(
        "--settle-timeout",
        type=_seconds,
        default=None,
        help="seconds (default 30; through a running daemon its [serve] settle_timeout_s)",
    )
    parser.add_argument(
        "--lease-ms",
        type=_lease_ms,
        default=None,
        help="attempt lease in ms (default 5000; through a running daemon its [serve] lease_ms)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="JSON lines on stdout: progress, then the outcome, in SI units (default: on off a "
        "TTY; on a TTY a progress line and the outcome in words)",
    )
    # Off a terminal it prints JSON: a usage error is then a document on stdout too.
    want_json("--json" in argv or not sys.stdout.isatty())
    args = parser.parse_args(argv)
    _one_line_logs()
    as_json = args.json or not sys.stdout.isatty()
    want_json(as_json)  # its refusals are JSON documents too
    say = _say_json if as_json else _say_text
    named_badly = _bad_names(args.world, args.activity)
    if named_badly is not None:
        refuse("tether move", "usage", named_badly, error="UsageError")
        return EXIT_USAGE
    config: HostConfig | None = None
    try:
        config = load_config(args.config)
        kind = KIND_RELATIVE if args.relative else KIND_ABSOLUTE
        request = MoveRequest.from_dict(
            {"kind": kind, "robot": args.robot, "targets": parse_targets(args.joint)}
        )
        check_request(config.robot(request.robot), request)
        usable_dir(config.state_dir, what="host.state_dir")  # as every command but a stop
        usable_dir(data_dir_of(config), what="the moves data dir")  # checked before use
        from tether.serve.config import catalog_url_for, load_serve, world_url_for

        named = [u for u in (catalog_url_for(config), world_url_for(config)) if u is not None]
        # The whole [serve] table is checked as `tether serve` and `tether status` check it
        # (a bad value is exit 2 here too); its lease and settle timeout are a daemon's, if one
        # runs, and bound how long this command follows the move.
        served = load_serve(config.path, state_dir=config.state_dir, robots=len(config.robots))
        served_lease_ms, served_settle_s = served.lease_ms, served.settle_timeout_s
    except (TetherError, MoveRequestError) as exc:
        if (
            getattr(exc, "code", None) == "unknown_robot"
            and config is not None
            and not config.robots
        ):
            bridge = _remote_address(args.config)
            if bridge is not None:  # a bridge host: its robots are another host's
                refuse(
                    "tether move",
                    "unknown_robot",
                    f"{args.config} names no robot: it is a bridge host whose robots are on"
                    f" [remote] {bridge}; its moves go through its tether serve"
                    " (`tether.client.Client.submit` with kind physical_ai.remote_move.absolute),"
                    " or run `tether move` with the robot host's own host.toml there",
                    error=type(exc).__name__,
                )
                return _exit.for_error(exc, EXIT_USAGE)
        error_line("tether move", exc)
        return _exit.for_error(exc, default=EXIT_USAGE)
    line = None if as_json else _ProgressLine()
    from tether.client import ClientError, daemon_record

    given = [
        flag
        for flag, value in (
            ("--lease-ms", args.lease_ms),
            ("--settle-timeout", args.settle_timeout),
        )
        if value is not None
    ]
    lease_ms = 5_000 if args.lease_ms is None else args.lease_ms
    settle_timeout_s = 30.0 if args.settle_timeout is None else args.settle_timeout
    record = daemon_record(config.state_dir)
    if record is not None:
        loaded = record.get("config_digest")
        if isinstance(loaded, str) and loaded != config_digest(config.path):
            # Its limits and speeds are the daemon's: a file edited since is not yet used.
            print(
                f"tether move: warning: {config.path} changed since tether serve (pid"
                f" {record.get('pid')}) loaded it: the move runs with the configuration the"
                " daemon loaded (its limits and speeds); restart tether serve to use the file",
                file=sys.stderr,
            )
        if given:  # said, not refused: the move itself is what was asked for
            print(
                f"tether move: {' and '.join(given)} ignored: moves run through tether serve,"
                " under its [serve] lease_ms and settle_timeout_s",
                file=sys.stderr,
            )
        if args.store:
            refuse(
                "tether move",
                "usage",
                "--store: tether serve runs, and moves run through it on its own store",
                error="UsageError",
            )
            return EXIT_USAGE
        # Followed for as long as the daemon's own lease and settle timeout allow a move.
        try:
            outcome = submit_move(
                config,
                request,
                world=args.world,
                activity=args.activity,
                timeout_s=2 * served_lease_ms / 1000 + 3 * served_settle_s + 30,
                progress=line,
            )
        except ClientError as exc:
            if line is not None:
                line.end()
            error_line("tether move", exc)
            if exc.code in ("daemon_not_running", "owner_no_answer", "owner_untrusted"):
                return _exit.UNAVAILABLE
            return _exit.for_error(exc, default=EXIT_ERROR)
        if line is not None:
            line.end()
        say(outcome)
        if say is _say_json:
            _say_json_refusal(outcome)
        return _move_exit(outcome)
    if named:
        # A standalone move runs on the data dir's own stores: one the configuration names
        # instead (a catalog shared by hosts, say) would never see it, nor would its operators.
        refuse(
            "tether move",
            "daemon_not_running",
            f"this host's stores are [serve] catalog/world ({redact(named[0])}): its moves"
            f" run through its daemon, on them; start `tether serve --config {args.config}`",
            error="ClientError",
        )
        return _exit.UNAVAILABLE
    world = args.world or "local"
    try:
        outcome = run_move(
            config,
            request,
            world=world,
            activity=args.activity,
            lease_ms=lease_ms,
            settle_timeout_s=settle_timeout_s,
            store=Path(args.store) if args.store else None,
            progress=line,
        )
    except KeyboardInterrupt:
        # The move ran in this process: it ends with it, its robot's stop policy applied on
        # the way out (`run_move`), and its Activity waits for the same command to reconcile it.
        if line is not None:
            line.end()
        say(
            {
                "key": str(ActivityKey(world, request.kind, args.activity)),
                "status": "pending",
                "reason": "interrupted",
                "error": "interrupted before the move concluded: its robot's stop policy was"
                " applied as this command ended; run the same command again to reconcile it"
                " from a read-back (it is never sent twice)",
            }
        )
        return _exit.INTERRUPTED
    except (TetherError, MoveRequestError) as exc:
        if line is not None:
            line.end()
        error_line("tether move", exc)
        return _exit.for_error(exc, default=EXIT_ERROR)
    if line is not None:
        line.end()
    say(outcome)
    if say is _say_json:
        _say_json_refusal(outcome)
    return _move_exit(outcome)


def _move_exit(outcome: dict[str, Any]) -> int:
    if outcome["status"] == "pending" and outcome.get("reason") == "interrupted":
        return _exit.INTERRUPTED
    if outcome["status"] == "failed" and outcome.get("outcome") == "refused":
        return EXIT_USAGE  # refused before any byte: a limit (e.g. of a relative move)
    return {"done": EXIT_DONE, "awaiting_decision": EXIT_PARKED, "pending": EXIT_RETRY}.get(
        outcome["status"], EXIT_ERROR
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
