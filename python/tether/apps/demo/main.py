"""`tether demo`: the main job — seeded MuJoCo reaches and an emulated DYNAMIXEL arm, run by the
robot-host daemon's machinery, with one power loss that walks the operator path.

One command creates (or reopens) a data directory with the SQLite world and Activity catalog,
commits a reaching mission and its first target, and runs the runtime's projector, observer
and workers until the planner declares the mission done. The terminal shows one progress bar
per activity and ends with a summary table; a localhost HTTP server streams the run as AG-UI
events over SSE. Killed at any moment (even `kill -9`), the same command resumes: settled
activities are not run again, durable results are recovered rather than recomputed, and the
summary says what was recovered. An activity that reconciles to Unknown is parked: the demo
lists the parked activities and exits 3 (`tether._exit.PARKED`) instead of waiting forever.
A reach too large to run (episodes x steps past `--memory-cap-mb`) is refused at admission by
the family: it is never run, the world observes it as a failed reach with its reason, the
mission runs to its end, and the demo prints the summary and one line naming the refusal and
exits 2 (`tether._exit.USAGE`, `request_too_large`).

The arm (`--moves`, default 3): the demo starts an emulated arm (`DynamixelEmulator`, two
servos on a real pty, served by a thread of the demo), writes `<data_dir>/host.toml` (the arm,
the demo's operator with an argon2id hash of its credential, `[serve]` on the data dir) and
runs a `tether.serve.Daemon` in this process on it: its device host owns the port, its runtime
runs both families (sim reaches and robot moves), its control socket serves the demo's arm
planner (`tether.client`: `submit`, `watch`, `operator_show`, `operator_resolve`) and any other
`tether` command on that host.toml while the demo runs (`tether status --config
<data_dir>/host.toml`). Right after the ACTION of move `--power-loss` the arm loses power; the
move reconciles to Unknown and parks with its evidence. The operator decides:

- on a terminal (`--operator ask`, the default there) the demo asks you to choose the demo
  operator's passphrase at start (hashed into host.toml, never printed or logged), shows the
  evidence and asks for the decision and the passphrase; the daemon verifies it;
- `--operator auto-reissue|auto-abandon` decides unattended with a credential generated in
  memory. It is refused (exit 2) unless every port is an emulator: the demo's own ports are,
  because the demo created them; a port of a `--config` host.toml always counts as real;
- without a terminal and without `--operator`, the demo refuses to start (exit 2) and says
  which flag to pass.

A re-issue runs on the adapter's proof (taken by the daemon, which owns the port). A move left
parked (`wait`, or no valid credential) ends the run with exit 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import logging
import os
import secrets
import select
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tether import _exit
from tether._args import STOP_SIGNALS, Parser, Terminated, error_line, refuse
from tether._coded import CodedError
from tether._dirs import DataDirError, usable_dir
from tether._listen import ListenerError
from tether._sqlite_files import StoreFileError, describe, storage_failure
from tether.activities import DECISION_WORDS, MAX_LEASE_MS, ActivityKey, ActivityRecord
from tether.agui import LiveActivities, RunStream, StoreState, StreamServer
from tether.agui import message_id as message_id  # re-exported: callers name it here
from tether.apps.demo import arm as arm_mod
from tether.apps.demo.console import ProgressBoard, SummaryRow, summary_table
from tether.apps.demo.planner import (
    ELSEWHERE,
    ArmPlanner,
    Auto,
    MoveOutcome,
    Operator,
    Prompt,
    wait_done,
)
from tether.client import Client
from tether.devices.credentials import hash_secret, read_secret
from tether.devices.latch import StopLatch
from tether.errors import TetherError
from tether.families.sim._memory import BYTES_PER_REQUEST, DEFAULT_MEMORY_CAP_BYTES
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.families.sim.errors import InvalidEpisodeRequest
from tether.families.sim.family import (
    INTENT,
    KIND,
    MISSION,
    MISSION_ENTITY,
    OBSERVATION,
    Mission,
    mission_done,
)
from tether.operations import JournalError
from tether.runtime import Host, ProgressEvent
from tether.serve.config import ROBOT_MOVE, SIM, ServeConfig, load_serve
from tether.serve.daemon import Daemon
from tether.serve.families import ServeContext
from tether.serve.locks import InstanceLock
from tether.world import ComponentWrite, WorldSnapshot

WORLD = "demo"
#: The demo's lock of its data dir (`_hold_data_dir`), beside the daemon's `serve.lock`.
DEMO_LOCK = "demo.lock"
DEBUG_ENV = "TETHER_DEBUG"
EXIT_OK, EXIT_USAGE, EXIT_PARKED = _exit.OK, _exit.USAGE, _exit.PARKED
EXIT_STORE, EXIT_DISK = _exit.STORE_UNUSABLE, _exit.STORAGE_IO
EXIT_UNAVAILABLE = _exit.UNAVAILABLE
#: The codes `tether demo` documents (a test checks them against `tether._exit`).
EXIT_CODES = (EXIT_OK, EXIT_USAGE, EXIT_PARKED, EXIT_STORE, EXIT_DISK, EXIT_UNAVAILABLE)
OPERATOR_MODES = ("ask", "auto-reissue", "auto-abandon")
_EPILOG = (
    "exit codes: 0 done; 2 usage (also reaches refused at admission, `request_too_large`, a "
    "data dir that is a file, another mission in the data dir, --operator auto-* with a port "
    "that is not the demo's emulator, no terminal and no --operator); 3 Activities parked for "
    "an operator (`tether operator`); "
    "5 a store that cannot be used (`store_truncated`, `not_a_database`, `old_layout`); 6 the "
    "disk refused a write (nothing lost; run it again); 7 another demo or daemon runs on the "
    "data dir or state dir, or --port is taken (`sse_unavailable`). See `tether --help`."
)


class _LogLines(logging.Handler):
    """The runtime threads' log while the demo runs: a failed write of the disk (full, over a
    file-size limit, an I/O error) is kept for the main loop, which ends the run with one line;
    anything else is one line (deduplicated; the traceback with TETHER_DEBUG=1)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.storage: tuple[str, str] | None = None
        self._said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        kind = storage_failure(exc)
        if kind is not None:
            if self.storage is None:
                self.storage = (kind, _one_line(exc))
            return
        if record.name.startswith("tether.runtime") and "leaving it to reconcile" in str(
            record.msg
        ):
            return  # the runtime reconciles it; the board and the summary show the outcome
        if os.environ.get(DEBUG_ENV) == "1":
            sys.stderr.write(logging.Formatter().format(record) + "\n")
            return
        line = record.getMessage() + (f": {_one_line(exc)}" if exc is not None else "")
        if line not in self._said:
            self._said.add(line)
            print(f"tether demo: {line}", file=sys.stderr)


def _one_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _storage_refusal(kind: str, detail: str, data_dir: object) -> None:
    refuse(
        "tether demo",
        kind,
        f"{describe(kind)} under {data_dir} ({detail}); nothing was lost: "
        + (
            "make it writable (or give another --data-dir)"
            if kind == "read_only_storage"
            else "free space (or raise the limit)"
        )
        + ", then run the same command again",
        error="StorageError",
        details={"data_dir": str(data_dir)},
    )


def _parser() -> argparse.ArgumentParser:
    # The docstring's first paragraph (its first line alone stops mid-sentence).
    summary = " ".join((__doc__ or "").split("\n\n", 1)[0].split())
    p = Parser(prog="tether demo", description=summary, epilog=_EPILOG)
    p.add_argument(
        "--data-dir", default="tether-data", help="data directory (default: %(default)s)"
    )
    p.add_argument("--targets", type=int, default=3, help="reach targets in the mission")
    p.add_argument("--episodes", type=int, default=2, help="episodes per activity")
    p.add_argument("--steps", type=int, default=3000, help="simulation steps per episode")
    p.add_argument("--seed", type=int, default=0, help="mission seed (reach N uses seed+N)")
    p.add_argument(
        "--memory-cap-mb",
        type=int,
        default=DEFAULT_MEMORY_CAP_BYTES >> 20,
        help="memory one reach may preallocate (episodes x steps), in MiB; a larger reach is "
        "refused at admission and never run (default: %(default)s)",
    )
    p.add_argument("--workers", type=int, default=1, help="worker threads")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address of the SSE stream")
    p.add_argument("--port", type=int, default=8765, help="HTTP port for the SSE stream; 0 = any")
    p.add_argument("--lease-ms", type=int, default=3000, help="attempt lease (ms)")
    p.add_argument(
        "--linger", type=float, default=0.0, help="keep serving the stream N s after the run"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout at the end; progress goes to stderr",
    )
    p.add_argument(
        "--moves",
        type=int,
        default=3,
        help="arm moves the demo submits to the daemon; 0 runs the reaches only "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--power-loss",
        type=int,
        default=None,
        metavar="N",
        help="the emulated arm loses power right after the ACTION of move N (counted from 0; "
        "negative: never) (default: 1, when there is a move 1)",
    )
    p.add_argument(
        "--operator",
        choices=OPERATOR_MODES,
        default=None,
        help="who decides a parked move: ask on a terminal, or decide unattended as the "
        "choice names (refused unless every port is the demo's emulator) (default: ask on "
        "a terminal; required without one)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="a host.toml whose first robot runs the moves instead of the emulated arm; its "
        "ports count as real hardware (default: the demo's emulated arm)",
    )
    p.add_argument(
        "--wait-subscribers",
        type=int,
        default=0,
        help="hold the mission until N stream clients are connected (at most 60 s)",
    )
    return p


def final_content(key: ActivityKey, rec: ActivityRecord, snap: WorldSnapshot) -> dict[str, Any]:
    """An activity's final AG-UI content, derived only from world state and its catalog record.

    A record compacted by `tether db prune` kept its settlement but not its result reference:
    its ``result_digest`` is None."""
    observation = snap.get(key.activity_id, OBSERVATION)
    if observation is None or (rec.result is None and not rec.compacted) or rec.settlement is None:
        raise ValueError(f"{key.activity_id} is not settled with an observation")
    s = observation["summary"]  # an abandoned reach's summary has no episode facts
    intent = snap.get(key.activity_id, INTENT) or {}
    return {
        "activity": key.activity_id,
        "world": key.world_id,
        "state": "failed" if s.get("failed") else "settled",
        "attempts": rec.attempt_count,
        "steps": s.get("steps", 0),
        "total": s.get("steps", 0),
        "error": s.get("final_error"),
        "success": s["success"],
        "target": s.get("target", intent.get("request", {}).get("target")),
        "final_tip": s.get("final_tip"),
        "result_digest": rec.result.digest if rec.result else None,
        "result_attempt": s.get("attempt"),
        "source_tick": rec.source.tick,
        "settle_tick": rec.settlement.receipt.tick,
    }


def _keys(snapshot: WorldSnapshot) -> list[ActivityKey]:
    return [ActivityKey(WORLD, KIND, entity) for entity, _ in snapshot.with_component(INTENT)]


def _state(rec: ActivityRecord | None) -> str:
    if rec is None:
        return "intent"
    if rec.settlement is not None:
        return "settled"
    if rec.refused_at_admission:  # never run: observed as a failed reach next
        return "refused"
    if rec.result is not None:
        return "observing"
    if rec.awaiting_decision:  # Unknown, until a decision (its evidence stays on the record)
        return "unknown"
    if rec.attempt is not None:
        return "running" if rec.attempt.may_execute else "reconciling"
    return "admitted"


def _parked(rec: ActivityRecord | None) -> bool:
    return rec is not None and rec.result is None and _state(rec) == "unknown"


def _recovered(key: ActivityKey, rec: ActivityRecord, snap: WorldSnapshot, before: set[str]) -> str:
    if rec.refused_at_admission:
        observation = snap.get(key.activity_id, OBSERVATION) or {}
        return f"refused: {observation.get('summary', {}).get('code', 'at admission')}"
    decision = rec.decision  # as the catalog holds it, whichever run or command made it
    if rec.result is not None and rec.result.failed:
        if decision is not None and decision.outcome == "abandon":
            said = f"abandoned by operator {decision.operator}"
        else:  # a recorded failure: the adapter's (a reach past the cap it was admitted under)
            observation = snap.get(key.activity_id, OBSERVATION) or {}
            code = (observation.get("summary") or {}).get("code")
            said = f"failed: {code}" if code else "failed (a recorded failure)"
        return f"{said}, settled before restart" if key.activity_id in before else said
    if decision is not None and decision.outcome == "recovered":
        said = f"done by operator {decision.operator}"
        return f"{said}, settled before restart" if key.activity_id in before else said
    if key.activity_id in before:
        return "settled before restart"
    observation = snap.get(key.activity_id, OBSERVATION)
    produced = observation["summary"].get("attempt") if observation else None
    recorded = rec.recorded_result.attempt if rec.recorded_result else None
    if produced is not None and recorded is not None and produced != recorded:
        return f"result of attempt {produced} reused"
    if rec.retry_guard is not None:
        if decision is not None and decision.outcome == "absent":
            return f"rerun after a reissue by operator {decision.operator}"
        return "rerun after proof of absence"
    return "-"


@dataclass
class _Arm:
    """The arm side of a run: the daemon's host configuration, the moves, who decides."""

    config: Any
    serve: ServeConfig
    robot: str | None
    moves: list[MoveOutcome]
    operator: Operator | None
    #: The demo's emulated arm (None with --config or --moves 0).
    emulator: arm_mod.DemoArm | None
    #: The power loss's move (None: none injected).
    power_loss: str | None
    config_path: Path


@dataclass
class _Run:
    host: Host
    out: TextIO
    board: ProgressBoard
    settled_before: set[str]
    started: float
    live: LiveActivities
    daemon: Daemon
    #: Attempt numbers held by a previous (killed) run when this one opened: shown as
    #: interrupted until their lease runs out and a new attempt reconciles them.
    interrupted: dict[str, int]
    log: _LogLines
    arm: _Arm
    planner: ArmPlanner | None = None
    resumed_moves: set[str] = field(default_factory=set)


def _sim_factory(cap: int) -> Any:
    """The sim reaches served by the daemon, refused at admission past `cap` bytes."""

    def factory(ctx: ServeContext) -> list[Any]:
        adapter = SimEpisodeAdapter(ctx.data_dir, memory_cap_bytes=cap)
        ctx.on_close(adapter.close)
        # The family refuses a reach past the cap at admission; the adapter's own cap is the
        # same (its second line, for a reach admitted under a larger one).
        return [sim_family(adapter, memory_cap_bytes=cap)]

    return factory


def _radians_to_go(progress: dict[str, Any]) -> float | None:
    """The largest joint's distance to its goal in a move's progress (None: not reported)."""
    joints = progress.get("joints")
    if not isinstance(joints, dict):
        return None
    left = [
        abs(float(j["goal_rad"]) - float(j["present_rad"]))
        for j in joints.values()
        if isinstance(j, dict)
        and isinstance(j.get("goal_rad"), int | float)
        and isinstance(j.get("present_rad"), int | float)
    ]
    return max(left) if left else None


def _usage(message: str) -> int:
    code, sep, rest = message.partition(": ")
    if not sep or " " in code:
        code, rest = "usage", message
    refuse("tether demo", code, rest, error="UsageError", line=message)
    return EXIT_USAGE


def _operator_name() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        name = ""
    name = "".join(c for c in name if c.isascii() and (c.isalnum() or c in "_-"))
    return name or "operator"


#: Set once the demo closes (a Ctrl-C, a SIGTERM): a prompt waiting on the terminal answers
#: "wait" (decides nothing) at once, so the close does not wait out the planner for 15 s.
_CLOSING = threading.Event()


def _read_line(out: TextIO) -> Any:
    def read(prompt: str, elsewhere: Any = None) -> str:
        """One line from the terminal; `ELSEWHERE` as soon as `elsewhere()` says the move was
        decided another way (the operator console's page, `tether operator`); "wait" (nothing
        decided) once the demo closes (`_CLOSING`)."""
        out.write(prompt)
        out.flush()
        while True:
            if _CLOSING.is_set():
                return "wait"
            ready, _, _ = select.select([sys.stdin], [], [], 0.2)
            if ready:
                break
            if elsewhere is not None and elsewhere():
                return ELSEWHERE
        line = sys.stdin.readline()
        return line if line else "wait"  # end of input: decide nothing

    return read


def _choose_passphrase(name: str, out: TextIO) -> str | None:
    """The demo operator's passphrase, chosen on the terminal (asked twice, never echoed)."""
    for _ in range(3):
        first = read_secret(prompt=f"choose a passphrase for demo operator {name} (8+ chars): ")
        if len(first) < 8:
            print("  at least 8 characters, please", file=out, flush=True)
            continue
        if read_secret(prompt="the same passphrase again: ") == first:
            return first
        print("  the two did not match", file=out, flush=True)
    return None


def _config_targets(robot: Any, count: int) -> list[dict[str, float]]:
    """Moves for a configured robot: each joint a distinct fraction of its range from its
    middle (inside the limits by construction)."""
    fractions = (0.2, -0.2, 0.1, -0.1, 0.15, 0.0)
    return [
        {
            j.name: round((j.min_rad + j.max_rad) / 2 + f * (j.max_rad - j.min_rad), 4)
            for j in robot.joints
        }
        for f in fractions[:count]
    ]


def _moves(targets: list[dict[str, float]], world: str, kind: str) -> list[MoveOutcome]:
    return [
        MoveOutcome(arm_mod.move_id(i), f"{world}/{kind}/{arm_mod.move_id(i)}", t)
        for i, t in enumerate(targets)
    ]


def _no_operator(args: argparse.Namespace) -> str | None:
    """Why the demo's generated arm cannot run with no terminal to ask an operator on (its
    refusal's line), or None. Decided from the flags alone, so `main` refuses it before it
    serves or writes anything. (With `--config` the file is read first: its own errors, and
    an unattended operator on real hardware, are refused before this.)"""
    if args.config is not None or args.moves <= 0 or sys.stdin.isatty():
        return None
    if args.operator is None:
        return (
            "operator_required: no terminal to ask the operator on; pass --operator "
            "auto-reissue or --operator auto-abandon (the demo's arm is emulated), or "
            "--moves 0 for the reaches only"
        )
    if args.operator == "ask":
        return "operator_required: --operator ask needs a terminal"
    return None


def _config_refusal(args: argparse.Namespace, config: Any) -> str | None:
    """Why the demo cannot run the arm of `--config`'s file (``config``, loaded): an
    unattended operator on its ports (real hardware, as far as anything proves), no robot to
    move, or no terminal to ask the operator on; None when it can."""
    mode = args.operator
    if mode is not None and mode != "ask":
        ports = arm_mod.config_ports(config)
        return (
            f"operator_refused: --operator {mode} decides unattended and is refused unless "
            f"every port is the demo's emulator; port(s) {', '.join(ports) or '-'} of "
            f"{args.config} count as real hardware (decide on a terminal)"
        )
    if args.moves > 0 and not config.robots:
        return f"no_robot: {args.config} configures no robot (or pass --moves 0)"
    if args.moves > 0 and not sys.stdin.isatty():
        return (
            "operator_required: no terminal to ask the operator on, and --operator "
            "auto-* is refused for real hardware; run it on a terminal or pass --moves 0"
        )
    return None


def _early_refusal(args: argparse.Namespace) -> str | None:
    """A refusal of the flags (and `--config`'s file, when it reads) that `main` makes before
    it serves or writes anything; None otherwise (a file that does not read is refused, as
    it says, where it is used)."""
    if args.config is None:
        return _no_operator(args)
    from tether.devices.config import load_config

    try:
        config: Any = load_config(args.config)
    except (TetherError, OSError):
        return None
    return _config_refusal(args, config)


def _prepare_arm(args: argparse.Namespace, data_dir: Path, out: TextIO) -> _Arm | int:
    """The daemon's configuration (generated, or `--config`), the moves and the operator."""
    from tether.devices.config import load_config

    wants_arm = args.moves > 0
    mode = args.operator
    workers = max(2, args.workers) if wants_arm else args.workers
    config: Any
    if args.config is not None:
        try:
            config = load_config(args.config)
        except (TetherError, OSError) as exc:
            error_line("tether demo", exc)
            return _exit.for_error(exc, EXIT_USAGE)
        if (refused := _config_refusal(args, config)) is not None:
            return _usage(refused)
        from tether.serve.config import stores_named

        named = stores_named(config)
        if named:  # said, not refused: the demo is a run of its own, in its own data dir
            print(
                f"tether demo: [serve] {' and '.join(named)} of {args.config} not used: the"
                f" demo keeps its stores in {data_dir} (SQLite)",
                file=sys.stderr,
            )
        robots = sorted(config.robots)
        robot = robots[0] if wants_arm else None
        targets = _config_targets(config.robot(robot), args.moves) if robot else []
        serve = ServeConfig(
            data_dir, workers, None, (ROBOT_MOVE,) if robot else (), args.lease_ms, 20.0
        )
        operator: Operator | None = None
        if robot:
            operator = Prompt(
                "(the credential's)",
                out,
                _read_line(out),
                _secret_reader(),
                who=f"an operator of {args.config}",
            )
        moves = _moves(targets, arm_mod.ARM_WORLD, arm_mod.MOVE_KIND)
        return _Arm(config, serve, robot, moves, operator, None, None, Path(args.config))
    if (refused := _no_operator(args)) is not None:
        return _usage(refused)
    if wants_arm and mode is None:
        mode = "ask"  # on a terminal (`_no_operator` refused it otherwise)
    targets = list(arm_mod.TARGETS[: args.moves])
    operator = None
    credential_hash = None
    name = _operator_name() if mode == "ask" else f"demo-{mode}"
    if wants_arm:
        if mode == "ask":
            secret = _choose_passphrase(name, out)
            if secret is None:
                return _usage("no passphrase chosen; nothing was started")
            operator = Prompt(name, out, _read_line(out), _secret_reader())
        else:
            secret = secrets.token_urlsafe(24)  # in memory only; never shown
            operator = Auto(name, str(mode), secret)
        credential_hash = hash_secret(secret)
        del secret
    asked = 1 if args.power_loss is None else args.power_loss
    loss = asked if wants_arm and 0 <= asked < len(targets) else None
    emulator = None
    if wants_arm:
        goals = arm_mod.goals_ticks(targets[loss]) if loss is not None else None
        emulator = arm_mod.DemoArm(data_dir / "arm-journal.jsonl", goals)
        emulator.start()
    try:
        generated = arm_mod.write_host_toml(
            data_dir,
            pty=emulator.path if emulator is not None else None,
            operator=name if credential_hash else None,
            credential_hash=credential_hash,
            workers=workers,
            lease_ms=args.lease_ms,
        )
        config = load_config(generated.path)
        serve = load_serve(generated.path, state_dir=config.state_dir, robots=len(config.robots))
    except BaseException:
        if emulator is not None:
            emulator.stop()
        raise
    # The reaches come from the demo's own factory (its --memory-cap-mb).
    serve = dataclasses.replace(serve, families=tuple(f for f in serve.families if f != SIM))
    moves = _moves(targets, arm_mod.ARM_WORLD, arm_mod.MOVE_KIND)
    return _Arm(
        config,
        serve,
        arm_mod.ROBOT if wants_arm else None,
        moves,
        operator,
        emulator,
        arm_mod.move_id(loss) if loss is not None else None,
        generated.path,
    )


def _secret_reader() -> Any:
    return lambda prompt: read_secret(prompt=prompt)


def _mission(args: argparse.Namespace) -> tuple[Mission, Any, Path] | int:
    """The mission, its world component and the usable data dir; or the exit code of their
    refusal (said): checked before the stream's URL is shown, so no refused run advertises a
    stream that is about to go."""
    mission = Mission(
        targets=args.targets, episodes=args.episodes, steps=args.steps, seed=args.seed
    )
    try:
        component = mission.to_component()
    except InvalidEpisodeRequest as exc:
        error_line("tether demo", exc)
        return EXIT_USAGE
    try:
        data_dir = usable_dir(Path(args.data_dir).resolve(), what="--data-dir")
    except DataDirError as exc:
        error_line("tether demo", exc)
        return _exit.for_error(exc, EXIT_USAGE)  # a read-only mount is storage's (6)
    if (taken := _running_on(data_dir)) is not None:
        # Another demo (or `tether serve`) runs on this data dir: refused before its host.toml
        # is rewritten (the running one's `tether stop` reads it to find the arm) or an arm
        # started. The daemon's own lock still decides a start that races this check.
        error_line("tether demo", taken)
        return _exit.for_error(taken, EXIT_UNAVAILABLE)
    return mission, component, data_dir


def _running_on(data_dir: Path) -> CodedError | None:
    """`daemon_running` when a daemon holds the data dir's lock (or the state dir's of the
    host.toml the demo generates there), naming its pid; None when none does."""
    from tether.serve.locks import running

    for lock in (data_dir / DEMO_LOCK, data_dir / "serve.lock", data_dir / "state" / "serve.lock"):
        owner = running(lock)
        if owner is not None:
            return _taken(data_dir, lock, owner)
    return None


def _taken(data_dir: Path, lock: Path, owner: dict[str, Any]) -> CodedError:
    from tether.serve.locks import DaemonRunning

    return DaemonRunning(
        "daemon_running",
        f"a tether demo or tether serve already runs on {data_dir} (pid"
        f" {owner.get('pid') or '?'}): nothing was started or written; stop it, or"
        " pass another --data-dir",
        details={"lock": str(lock), "owner": owner},
    )


def _hold_data_dir(data_dir: Path) -> InstanceLock | int:
    """The demo's own lock of ``data_dir`` (`DEMO_LOCK`), held from before its host.toml is
    written to the end of the run: of two demos started on one data dir at the same instant,
    the one that does not get it writes nothing (`daemon_running`, said), where both passed
    `_running_on` and the loser rewrote the winner's host.toml before its daemon's lock
    refused it. The exit code of that refusal when taken."""
    from tether.serve.locks import DaemonRunning

    lock = InstanceLock(data_dir / DEMO_LOCK, "data dir")
    try:
        lock.acquire({"data_dir": str(data_dir), "program": "tether demo"})
    except DaemonRunning as exc:
        owner = dict(exc.details.get("owner") or {}) if exc.details else {}
        taken = _taken(data_dir, lock.path, owner)
        error_line("tether demo", taken)
        return _exit.for_error(taken, EXIT_UNAVAILABLE)
    return lock


def _open(
    args: argparse.Namespace,
    out: TextIO,
    live: LiveActivities,
    log: _LogLines,
    checked: tuple[Mission, Any, Path],
    sse_url: str,
) -> tuple[_Run, Mission] | int:
    mission, component, data_dir = checked
    cap = args.memory_cap_mb << 20
    board = ProgressBoard(out)

    def on_progress(event: ProgressEvent) -> None:
        c = event.content
        if event.key.kind != KIND:  # an arm move: its fraction of the way, radians to go
            board.update(
                event.key.activity_id,
                attempt=event.attempt,
                done=round(100 * float(c.get("fraction", 0.0))),
                total=100,
                error=_radians_to_go(c),
                unit="rad",
                state="moving",
            )
            live.update(event.key, **{**c, "state": "moving", "attempt": event.attempt})
            return
        board.update(
            event.key.activity_id,
            attempt=event.attempt,
            done=int(c.get("steps", 0)),
            total=int(c.get("total", 0)),
            error=c.get("error"),
            state="running",
        )
        live.update(event.key, **c)

    prepared = _prepare_arm(args, data_dir, out)
    if isinstance(prepared, int):
        return prepared
    arm = prepared
    daemon = Daemon(
        arm.config,
        arm.serve,
        robots=[arm.robot] if arm.robot else [],
        factories=[_sim_factory(cap)],
        progress_listener=on_progress,
        stream_url=sse_url,
    )
    try:
        daemon.start()
    except StoreFileError as exc:  # a store cut short: refused before anything was written
        _stop_all(daemon, arm)
        if exc.code in ("disk_full", "file_too_large"):
            _storage_refusal(exc.code, exc.message, data_dir)
            return EXIT_DISK
        error_line("tether demo", exc)
        return EXIT_STORE
    except JournalError as exc:  # an older layout that cannot be migrated now, or damage
        _stop_all(daemon, arm)
        error_line("tether demo", exc)
        return EXIT_STORE
    except CodedError as exc:  # another daemon or demo on the data dir or state dir
        _stop_all(daemon, arm)
        if storage_failure(exc) is not None:
            raise
        error_line("tether demo", exc)
        return _exit.for_error(exc, EXIT_UNAVAILABLE)
    except BaseException:
        _stop_all(daemon, arm)
        raise
    assert daemon.runtime is not None
    if daemon.console is not None:
        print(f"operator console: {daemon.console.url}", file=out)
    host = daemon.runtime
    settled: set[str] = set()
    interrupted: dict[str, int] = {}
    if WORLD not in host.ledger.worlds():
        host.create_world(WORLD)
        # Only the mission: the planner processor commits every reach intent, the first too.
        host.commit_tick(WORLD, [ComponentWrite(MISSION_ENTITY, MISSION, component)])
        print(f"data directory {data_dir}: new mission of {mission.targets} reaches", file=out)
    else:
        snap = host.snapshot(WORLD)
        if snap.get(MISSION_ENTITY, MISSION) != component:
            _stop_all(daemon, arm)
            refuse(
                "tether demo",
                "other_mission",
                f"{data_dir} holds a different mission; use another --data-dir",
                error="UsageError",
            )
            return EXIT_USAGE
        records = {k.activity_id: host.get(k) for k in _keys(snap)}
        settled = {a for a, rec in records.items() if rec is not None and rec.settlement}
        interrupted = {
            a: rec.attempt.number
            for a, rec in records.items()
            if rec is not None and rec.settlement is None and rec.attempt is not None
        }
        print(
            f"data directory {data_dir}: resuming ({len(settled)} "
            f"{'activity' if len(settled) == 1 else 'activities'} already settled)",
            file=out,
        )
    if arm.robot is not None:
        where = "emulated DYNAMIXEL arm on " + arm.emulator.path if arm.emulator else arm.robot
        print(
            f"arm: {where}; daemon control socket {daemon.socket_path} "
            f"(`tether status --config {arm.config_path}`)",
            file=out,
        )
    run = _Run(host, out, board, settled, time.monotonic(), live, daemon, interrupted, log, arm)
    return run, mission


def _stop_all(daemon: Daemon, arm: _Arm) -> None:
    """Close the daemon (safe-stop, stores, locks), then the emulated arm; on a failed disk a
    close that cannot checkpoint is no second error."""
    try:
        daemon.close()
    except (TetherError, OSError) as exc:
        if storage_failure(exc) is None:
            raise
    finally:
        if arm.emulator is not None:
            arm.emulator.stop()


def _refusals(run: _Run) -> list[tuple[str, str, str]]:
    """(activity, code, reason) of every reach refused at admission, from the observed facts."""
    snap = run.host.snapshot(WORLD)
    out = []
    for key in _keys(snap):
        rec = run.host.get(key)
        if rec is None or not rec.refused_at_admission:
            continue
        summary = (snap.get(key.activity_id, OBSERVATION) or {}).get("summary", {})
        out.append((key.activity_id, str(summary.get("code")), str(summary.get("reason"))))
    return out


def _refusal_lines(refusals: list[tuple[str, str, str]]) -> list[str]:
    """One line per distinct refusal: its code, reason and the reaches it refused."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for activity, code, reason in refusals:
        by_reason.setdefault((code, reason), []).append(activity)
    return [
        f"{code}: {reason} (--memory-cap-mb); refused at admission, never run: "
        f"{', '.join(activities)}"
        for (code, reason), activities in by_reason.items()
    ]


def _request_of(snap: WorldSnapshot, key: ActivityKey) -> dict[str, Any]:
    intent = snap.get(key.activity_id, INTENT)
    return dict(intent["request"]) if intent else {}


def _watch(run: _Run) -> int:
    """Follow the catalog until the mission ends (EXIT_OK) or an activity is parked
    (EXIT_PARKED)."""
    shown: dict[str, str] = {}
    done: dict[ActivityKey, ActivityRecord] = {}  # settled records never change: read once
    while True:
        if run.log.storage is not None:  # a runtime thread could not write: stop, say it once
            kind, detail = run.log.storage
            _storage_refusal(kind, detail, run.host.data_dir)
            return EXIT_DISK
        snap = run.host.snapshot(WORLD)
        records = {k: done.get(k) or run.host.get(k) for k in _keys(snap)}
        done |= {k: r for k, r in records.items() if r is not None and r.settlement is not None}
        for key, rec in records.items():
            if rec is None:  # not admitted yet: no durable Activity to show
                continue
            state = _state(rec)
            if rec.attempt and run.interrupted.get(key.activity_id) == rec.attempt.number:
                state = "interrupted" if state in ("running", "reconciling") else state
            if shown.get(key.activity_id) != state:
                shown[key.activity_id] = state
                attempt = rec.attempt.number if rec.attempt else None
                # A refused reach stays "refused" on the board once observed: it never ran.
                changes: dict[str, Any] = {
                    "state": "refused" if rec.refused_at_admission else state
                }
                if attempt is not None:
                    changes["attempt"] = attempt
                if state == "settled":
                    final = final_content(key, rec, snap)
                    changes |= {"done": final["steps"], "total": final["total"]}
                    changes |= {"error": final["error"], "attempt": rec.attempt_count}
                    run.live.settle(key, final)
                else:
                    request = _request_of(snap, key)
                    run.live.update(
                        key,
                        state=state,
                        target=request.get("target"),
                        **({"attempt": attempt} if attempt is not None else {}),
                    )
                run.board.update(key.activity_id, **changes)
        for move in run.arm.moves:
            if move.state != "not submitted" and shown.get(move.activity) != move.state:
                shown[move.activity] = move.state
                run.board.update(move.activity, state=move.state, attempt=move.attempts, unit="rad")
                # On the run's AG-UI stream as the reaches are: the arm's power loss, its
                # parked move and the operator's decision show there too.
                key = ActivityKey(arm_mod.ARM_WORLD, arm_mod.MOVE_KIND, move.activity)
                changes = {"state": move.state, "attempt": move.attempts}
                if move.state == "awaiting_decision":
                    changes["reason"] = move.reason
                run.live.update(key, **changes)
        parked = [k for k, rec in records.items() if _parked(rec)]
        if parked:
            run.board.message("parked activities (reconciliation is Unknown; an operator decides):")
            for key in parked:
                rec = records[key]
                assert rec is not None and rec.evidence is not None
                run.board.message(f"  {key.activity_id}  evidence {rec.evidence.evidence.ref}")
            return EXIT_PARKED
        arm_done = run.planner is None or run.planner.done.is_set()
        if (
            arm_done
            and mission_done(snap)
            and all(r is not None and r.settlement for r in records.values())
        ):
            return _arm_code(run)
        time.sleep(0.05)


def _arm_code(run: _Run) -> int:
    """EXIT_OK, or EXIT_PARKED when a move is left awaiting a decision (its lines said)."""
    if run.planner is not None and run.planner.error is not None:
        run.board.message(f"tether demo: the arm planner stopped: {run.planner.error}")
    left = [m for m in run.arm.moves if m.state == "awaiting_decision"]
    if left:
        # Its daemon (and the emulated arm) stopped with the demo: the same command serves
        # them again, resumes and asks for each decision again.
        run.board.message("parked moves (an operator decides; the daemon stopped with the demo):")
        for move in left:
            run.board.message(
                f"  {move.key}  {move.reason}; to decide it, run the same demo command again"
            )
        robot = run.arm.robot
        if robot is not None and StopLatch(run.arm.config.state_dir).latched(robot):
            if isinstance(run.arm.operator, Auto):
                # Its credential lived in this run's memory only: no one can give it to
                # `resume`, and the next unattended run makes another. A run that asks (on a
                # terminal) has a passphrase its operator chose.
                run.board.message(
                    "  the arm is stopped (latched), and this unattended run's credential was"
                    " never shown: run the demo with --operator ask on a terminal (choose a"
                    " passphrase), and while it runs resume the arm from another terminal:"
                    f" tether operator --config {run.arm.config_path} resume {robot}"
                    " --credential-stdin"
                )
            else:
                run.board.message(
                    f"  the arm is stopped (latched): while that demo runs, resume it from"
                    f" another terminal: tether operator --config {run.arm.config_path} resume"
                    f" {robot} --credential-stdin"
                )
        return EXIT_PARKED
    return EXIT_OK


def _summary(run: _Run) -> str:
    rows, tail = _summary_rows(run)
    text = summary_table(rows) + "\n" + tail
    if run.arm.moves:
        _decisions(run)
        text += "\n\n" + _moves_table(run)
    return text


#: A catalog decision's outcome, as the operator named it.
_DECIDED = DECISION_WORDS


def _decisions(run: _Run) -> None:
    """Each move's decision from the catalog (the one control record: also a decision made
    by an earlier, killed run or by `tether operator`); `wait` records nothing there, so the
    planner's word is kept for it."""
    for move in run.arm.moves:
        key = ActivityKey(arm_mod.ARM_WORLD, arm_mod.MOVE_KIND, move.activity)
        rec = run.host.get(key)
        made = rec.decision if rec is not None else None
        if made is None:
            continue
        here = move.decision or {}
        move.decision = {
            "decision": _DECIDED.get(made.outcome, made.outcome),
            "operator": made.operator,
            "revision": made.evidence_revision,
            "decided_at_ms": made.decided_at_ms,
            "mode": here.get("mode") if here.get("decided_at_ms") == made.decided_at_ms else None,
        }


def _decision_text(decision: dict[str, Any] | None) -> str:
    if not decision:
        return "-"
    if decision.get("decision") is None:
        return f"refused: {decision.get('refused')}"
    if decision["decision"] == "wait":
        return f"wait ({decision.get('operator')}): left parked"
    return f"{decision['decision']} by {decision['operator']} on revision {decision['revision']}"


def _moves_table(run: _Run) -> str:
    """The arm's moves: target, final state and outcome, attempts, the ACTIONs the arm
    applied, what the operator decided; then the power loss."""
    head = ("arm move", "target rad", "state", "outcome", "attempts", "ACTIONs", "operator")
    body = [
        (
            m.activity,
            " ".join(f"{n} {v:+.2f}" for n, v in sorted(m.target.items())),
            m.state,
            m.outcome or (m.reason or "-"),
            str(m.attempts),
            str(m.actions) if run.arm.emulator is not None else "-",
            _decision_text(m.decision),
        )
        for m in run.arm.moves
    ]
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(_power_loss_line(run))
    return "\n".join(line.rstrip() for line in lines)


def _power_loss(run: _Run) -> dict[str, Any]:
    emulator = run.arm.emulator
    return {
        "move": run.arm.power_loss,
        "injected": bool(emulator is not None and emulator.power_loss.fired.is_set()),
    }


def _power_loss_line(run: _Run) -> str:
    loss = _power_loss(run)
    if run.arm.emulator is None:
        return "power loss: none (a configured robot is never power-cycled by the demo)"
    if loss["move"] is None:
        return "power loss: none (--power-loss is negative or past the last move)"
    if loss["injected"]:
        said = f"power loss: the arm lost power right after the ACTION of {loss['move']}"
        move = next((m for m in run.arm.moves if m.activity == loss["move"]), None)
        decided = ((move.decision if move is not None else None) or {}).get("decision")
        if decided not in (None, "wait"):  # as the catalog holds it (`_decisions`)
            return f"{said}; the operator decided: {decided}"
        if move is not None and move.state == "awaiting_decision":
            return f"{said}; it awaits the operator's decision"
        return f"{said}; no operator decision is recorded for it"
    return f"power loss: not injected this run ({loss['move']} had run before)"


def _summary_rows(run: _Run) -> tuple[list[SummaryRow], str]:
    snap = run.host.snapshot(WORLD)
    rows = []
    for key in _keys(snap):
        rec = run.host.get(key)
        if rec is not None and _parked(rec):  # in the table too: its row says it waits
            rows.append(
                SummaryRow(
                    activity=key.activity_id,
                    attempts=rec.attempt_count,
                    result_digest="(none)",
                    source_tick=rec.source.tick,
                    settle_tick=None,
                    seconds=0.0,
                    recovered="parked for an operator",
                )
            )
            continue
        if rec is None or (rec.result is None and not rec.compacted):
            continue
        settled = rec.settlement
        seconds = (
            (settled.settled_at_ms if settled else rec.admitted_at_ms) - rec.admitted_at_ms
        ) / 1000
        rows.append(
            SummaryRow(
                activity=key.activity_id,
                attempts=rec.attempt_count,
                result_digest=rec.result.digest if rec.result else "(pruned)",
                source_tick=rec.source.tick,
                settle_tick=settled.receipt.tick if settled else None,
                seconds=seconds,
                recovered=_recovered(key, rec, snap, run.settled_before),
            )
        )
    done = snap.get(MISSION_ENTITY, "physical_ai.mission.done") or {}
    # Its size from the mission itself while it is not done (a parked reach holds it open).
    planned = (snap.get(MISSION_ENTITY, MISSION) or {}).get("targets", len(rows))
    before = sum(1 for r in rows if r.recovered.endswith("settled before restart"))
    reused = sum(1 for r in rows if r.recovered.endswith("reused"))
    rerun = sum(1 for r in rows if r.recovered.startswith("rerun"))
    tail = (
        f"mission: {done.get('succeeded', 0)}/{done.get('targets', planned)} reaches within "
        f"tolerance; recovered: {before} settled before this run (not rerun), {reused} durable "
        f"results reused, {rerun} rerun after proof that the earlier attempt was gone"
    )
    return rows, tail


def _summary_json(run: _Run, code: int) -> str:
    """`tether demo --json`: one object on stdout at the end (the progress went to stderr)."""
    import json

    rows, tail = _summary_rows(run)
    snap = run.host.snapshot(WORLD)
    parked = [k.activity_id for k in _keys(snap) if _parked(run.host.get(k))]
    parked += [m.key for m in run.arm.moves if m.state == "awaiting_decision"]
    operator = run.arm.operator
    _decisions(run)
    refused = [{"activity": a, "code": c, "reason": r} for a, c, r in _refusals(run)]
    status = {EXIT_OK: "done", EXIT_PARKED: "parked", EXIT_USAGE: "refused"}.get(
        code, "storage_failed"
    )
    return json.dumps(
        {
            "status": status,
            "exit_code": code,
            "data_dir": str(run.host.data_dir),
            "activities": [dataclasses.asdict(r) for r in rows],
            "parked": parked,
            "refused": refused,
            "mission": tail,
            "moves": [m.as_dict() for m in run.arm.moves],
            "operator": None
            if operator is None
            else {"mode": operator.mode, "name": operator.name},
            "arm": None
            if run.arm.robot is None
            else {
                "robot": run.arm.robot,
                "emulated": run.arm.emulator is not None,
                "config": str(run.arm.config_path),
                "journal": str(run.host.data_dir / "arm-journal.jsonl")
                if run.arm.emulator is not None
                else None,
                "power_loss": _power_loss(run),
            },
        }
    )


class _LingerEnded(Exception):
    """A SIGTERM ended `--linger`: the demo exits with its run's code."""


class _Sigterm:
    """SIGTERM as the demo's phase takes it:
    - `run` (the mission runs, or the demo prepares it before anything is served): as
      Ctrl-C, said and exit 130; the close that follows safe-stops the arm;
    - `starting` (the daemon starts and the mission is opened) and `closing` (the mission
      concluded: its summary, then the close): held, then acted on: a held one interrupts
      the run as it begins, and none lingers after the close (the close is bounded, and one
      interrupted half-done could leave the process hanging);
    - `linger`: its end (exit: the run's code).
    Once one is taken, the demo is closing: a second is held too."""

    def __init__(self) -> None:
        self.phase = "run"
        #: A SIGTERM came: the run is interrupted as it begins, and no linger follows.
        self.pending = False
        self.name = "SIGTERM"  # the signal that came (SIGHUP is taken alike)

    def __call__(self, signum: int, frame: object) -> None:
        self.pending = True
        self.name = signal.Signals(signum).name
        if self.phase == "run":
            self.phase = "closing"
            raise Terminated(self.name)
        if self.phase == "linger":
            self.phase = "closing"
            raise _LingerEnded

    def running(self) -> None:
        """The mission begins to run: a SIGTERM held while it started interrupts it now."""
        self.phase = "run"
        if self.pending:
            self.phase = "closing"
            raise Terminated(self.name)


def main(argv: list[str]) -> int:
    """Run the demo; returns the process exit code."""
    sigterm = _Sigterm()
    if threading.current_thread() is not threading.main_thread():
        return _main(argv, sigterm)  # no signal handler off the main thread (in process)
    before = {sig: signal.signal(sig, sigterm) for sig in STOP_SIGNALS}  # SIGHUP as SIGTERM
    try:
        return _main(argv, sigterm)
    finally:
        sigterm.phase = "closing"
        for sig, old in before.items():
            if old is not None:  # None: a handler not installed from Python, left as it is
                signal.signal(sig, old)


#: The longest `--linger` (a week): a run that serves its stream longer is a service.
MAX_LINGER_S = 7 * 24 * 3600.0


def _main(argv: list[str], sigterm: _Sigterm) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for wrong, why in (
        (args.workers < 1, f"--workers must be >= 1, got {args.workers}"),
        (
            not 100 <= args.lease_ms <= MAX_LEASE_MS,  # before anything serves or is written
            f"--lease-ms must be 100..{MAX_LEASE_MS}, got {args.lease_ms}",
        ),
        (not 0 <= args.port <= 65535, f"--port must be in [0, 65535], got {args.port}"),
        (
            not 0 <= args.linger <= MAX_LINGER_S,  # NaN too
            f"--linger must be in [0, {MAX_LINGER_S:g}] seconds, got {args.linger:g}",
        ),
        (
            args.wait_subscribers < 0,
            f"--wait-subscribers must not be negative, got {args.wait_subscribers:g}",
        ),
    ):
        if wrong:
            parser.error(why)
    lowest = (BYTES_PER_REQUEST >> 20) + 1  # at a reach's fixed cost itself none could run
    if not lowest <= args.memory_cap_mb <= 1 << 30:
        parser.error(f"--memory-cap-mb must be {lowest}..{1 << 30}, got {args.memory_cap_mb}")
    if not args.data_dir.strip():  # an unset shell variable: never the current directory
        parser.error("--data-dir is empty: give a directory, or leave the flag out")
    from tether.families.sim._episode import MAX_EPISODES, MAX_STEPS  # the episode's bounds
    from tether.families.sim.family import MAX_SEED, MAX_TARGETS

    for flag, value, high in (
        ("--targets", args.targets, MAX_TARGETS),
        ("--episodes", args.episodes, MAX_EPISODES),
        ("--steps", args.steps, MAX_STEPS),
    ):
        if not 1 <= value <= high:  # a reach of none of them runs nothing it could report
            parser.error(f"{flag} must be in [1, {high}], got {value}")
    if not 0 <= args.seed <= MAX_SEED - (args.targets - 1):  # reach N uses seed + N
        parser.error(
            f"--seed must be in [0, {MAX_SEED - (args.targets - 1)}] with --targets"
            f" {args.targets} (reach N uses seed+N, at most {MAX_SEED}), got {args.seed}"
        )
    if args.power_loss is not None and args.power_loss >= 0 and args.moves == 0:
        parser.error(  # asked for a power loss of a run with no move: said, not ignored
            f"--power-loss names a move, and --moves 0 runs none (got --power-loss"
            f" {args.power_loss}; drop it, or pass --moves)"
        )
    if args.power_loss is not None and args.power_loss >= 0 and args.config is not None:
        parser.error(  # the demo power-cycles only the emulated arm it started itself
            f"--power-loss cuts the power of the demo's own emulated arm, and --config"
            f" {args.config} runs the moves on its robot, which is never power-cycled (got"
            f" --power-loss {args.power_loss}; drop it)"
        )
    if args.power_loss is not None and args.moves > 0 and args.power_loss >= args.moves:
        parser.error(  # asked for a power loss no move of the run could have
            f"--power-loss must name one of the {args.moves} moves (0 to {args.moves - 1};"
            f" negative: never), got {args.power_loss}"
        )
    if not 0 <= args.moves <= len(arm_mod.TARGETS):
        parser.error(
            f"--moves must be in [0, {len(arm_mod.TARGETS)}] (each move has its own target)"
        )
    if (refused := _early_refusal(args)) is not None:  # before anything is served or written
        try:  # a data dir that could never be used is named first, as it is on a terminal
            usable_dir(Path(args.data_dir).resolve(), what="--data-dir", create=False)
        except DataDirError as exc:
            if exc.code != "no_such_directory":
                error_line("tether demo", exc)
                return EXIT_USAGE
        return _usage(refused)
    out = sys.stderr if args.json else sys.stdout
    stream = RunStream("tether-demo", f"run-{uuid.uuid4().hex[:12]}", StoreState())
    try:
        server = StreamServer(stream, args.host, args.port)
    except ListenerError as exc:  # the address itself is refused (off loopback, no TLS)
        error_line("tether demo", exc)
        return EXIT_USAGE
    except OSError as exc:  # a port another process holds, say: not this command's fault
        from tether.serve.daemon import unavailable

        where = f"{args.host}:{args.port}"
        error_line(
            "tether demo",
            unavailable("sse_unavailable", "the AG-UI stream", where, exc.strerror or exc),
        )
        return _exit.UNAVAILABLE
    log = _LogLines()
    tether_log = logging.getLogger("tether")
    tether_log.addHandler(log)
    data_dir = Path(args.data_dir).resolve()
    try:
        stream.start()
        return _run(args, out, stream, server, log, sigterm)
    except (TetherError, OSError) as exc:  # a write the disk refused, anywhere in the run
        kind = storage_failure(exc)
        if kind is None:
            raise
        stream.finish(error=describe(kind))
        _storage_refusal(kind, _one_line(exc), data_dir)
        return EXIT_DISK
    finally:
        sigterm.phase = "closing"
        tether_log.removeHandler(log)
        stream.finish(error="the demo stopped")
        server.close()


def _run(
    args: argparse.Namespace,
    out: TextIO,
    stream: RunStream,
    server: StreamServer,
    log: _LogLines,
    sigterm: _Sigterm,
) -> int:
    checked = _mission(args)
    if isinstance(checked, int):
        stream.finish(error="the demo could not start")
        return checked
    held = _hold_data_dir(checked[2])
    if isinstance(held, int):
        stream.finish(error="the demo could not start")
        return held
    try:
        return _run_held(args, out, stream, server, log, sigterm, checked)
    finally:
        held.release()


def _run_held(
    args: argparse.Namespace,
    out: TextIO,
    stream: RunStream,
    server: StreamServer,
    log: _LogLines,
    sigterm: _Sigterm,
    checked: tuple[Mission, Any, Path],
) -> int:
    print(f"AG-UI stream (SSE): {server.url}", file=out, flush=True)
    if args.wait_subscribers > 0:
        server.wait_for_subscribers(args.wait_subscribers, timeout=60)
    sigterm.phase = "starting"  # held from the daemon's start until the run's close is sure
    opened = _open(args, out, LiveActivities(stream), log, checked, server.url)
    if isinstance(opened, int):
        stream.finish(error="the demo could not start")
        return opened
    run, _ = opened
    try:
        sigterm.running()
        kick_planner(run.host, WORLD)
        if run.arm.robot is not None and run.arm.operator is not None:
            run.planner = _planner(run).start()
        code = _watch(run)
        sigterm.phase = "closing"  # concluded: a SIGTERM now keeps its code, and no linger
        refused = _refusals(run) if code == EXIT_OK else []
        if refused:  # the mission ran to its end, but these reaches could never run
            code = EXIT_USAGE
        if args.json:
            print(_summary_json(run, code), flush=True)
        if code in (EXIT_OK, EXIT_USAGE, EXIT_PARKED):
            print(_summary(run), file=out)
            for line in _refusal_lines(refused):
                print(f"tether demo: {line}", file=sys.stderr)
        if code == EXIT_PARKED:
            stream.finish(error="activities are parked: reconciliation is Unknown")
        elif code in (EXIT_OK, EXIT_USAGE):
            stream.finish()
        else:
            stream.finish(error="the data directory's disk refused a write")
        return code
    finally:
        sigterm.phase = "closing"
        _close_quietly(run, log)
        if args.linger > 0:
            try:  # the handler's _LingerEnded can come only from inside this try
                sigterm.phase = "linger"
                if not sigterm.pending:  # one that came before ends it now
                    time.sleep(args.linger)
                sigterm.phase = "closing"
            except _LingerEnded:
                pass


def _planner(run: _Run) -> ArmPlanner:
    assert run.arm.robot is not None and run.arm.operator is not None
    emulator = run.arm.emulator

    def on_existing(activity: str) -> None:
        run.resumed_moves.add(activity)
        if emulator is not None and activity == run.arm.power_loss:
            emulator.power_loss.disarm()  # one power loss per move, not one per run

    @contextmanager
    def pause() -> Iterator[None]:
        with run.board.paused():
            yield

    return ArmPlanner(
        Client(state_dir=run.daemon.state_dir),
        run.arm.moves,
        run.arm.operator,
        world=arm_mod.ARM_WORLD,
        kind=arm_mod.MOVE_KIND,
        robot=run.arm.robot,
        actions=emulator.actions if emulator is not None else (lambda target: 0),
        on_existing=on_existing,
        pause=pause,
        say=run.board.message,
    )


def _close_quietly(run: _Run, log: _LogLines) -> None:
    """Stop the arm planner, then close the daemon (safe-stop, workers, stores, locks) and the
    emulated arm; on a failed disk, a close that cannot checkpoint is no second error (what is
    committed stays in the write-ahead log)."""
    _CLOSING.set()  # a prompt waiting on the terminal decides nothing and lets go
    if run.planner is not None:
        run.planner.stop.set()
        wait_done(run.planner, 15.0)
    _stop_all(run.daemon, run.arm)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
