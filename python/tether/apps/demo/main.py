"""`tether demo`: the main job — a planner drives seeded MuJoCo reaches through durable activities.

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
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether import _exit
from tether._args import Parser, error_line
from tether._dirs import DataDirError, usable_dir
from tether._sqlite_files import StoreFileError, describe, storage_failure
from tether.activities import ActivityKey, ActivityRecord
from tether.agui import LiveActivities, RunStream, StoreState, StreamServer
from tether.agui import message_id as message_id  # re-exported: callers name it here
from tether.apps.demo.console import ProgressBoard, SummaryRow, summary_table
from tether.errors import TetherError
from tether.families.sim._memory import DEFAULT_MEMORY_CAP_BYTES
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
from tether.world import ComponentWrite, WorldSnapshot

WORLD = "demo"
DEBUG_ENV = "TETHER_DEBUG"
EXIT_OK, EXIT_USAGE, EXIT_PARKED = _exit.OK, _exit.USAGE, _exit.PARKED
EXIT_STORE, EXIT_DISK = _exit.STORE_UNUSABLE, _exit.STORAGE_IO
#: The codes `tether demo` documents (a test checks them against `tether._exit`).
EXIT_CODES = (EXIT_OK, EXIT_USAGE, EXIT_PARKED, EXIT_STORE, EXIT_DISK)
_EPILOG = (
    "exit codes: 0 done; 2 usage (also reaches refused at admission, `request_too_large`, a "
    "data dir that is a file, another mission in the data dir); 3 Activities parked for an "
    "operator (`tether operator`); "
    "5 a store that cannot be used (`store_truncated`, `not_a_database`, `old_layout`); 6 the "
    "disk refused a write (nothing lost; run it again). See `tether --help`."
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


def _storage_line(kind: str, detail: str, data_dir: object) -> str:
    return (
        f"tether demo: {kind}: {describe(kind)} under {data_dir} ({detail}); nothing was lost: "
        "free space (or raise the limit), then run the same command again"
    )


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="tether demo", description=__doc__.splitlines()[0], epilog=_EPILOG)
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


@dataclass
class _Run:
    host: Host
    out: TextIO
    board: ProgressBoard
    settled_before: set[str]
    started: float
    live: LiveActivities
    adapter: SimEpisodeAdapter
    #: Attempt numbers held by a previous (killed) run when this one opened: shown as
    #: interrupted until their lease runs out and a new attempt reconciles them.
    interrupted: dict[str, int]
    log: _LogLines


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
    if key.activity_id in before:
        return "settled before restart"
    if rec.result is not None and rec.result.failed:
        return "abandoned by an operator"
    observation = snap.get(key.activity_id, OBSERVATION)
    produced = observation["summary"].get("attempt") if observation else None
    recorded = rec.recorded_result.attempt if rec.recorded_result else None
    if produced is not None and recorded is not None and produced != recorded:
        return f"result of attempt {produced} reused"
    if rec.retry_guard is not None:
        return "rerun after proof of absence"
    return "-"


def _open(
    args: argparse.Namespace, out: TextIO, live: LiveActivities, log: _LogLines
) -> tuple[_Run, Mission] | int:
    mission = Mission(
        targets=args.targets, episodes=args.episodes, steps=args.steps, seed=args.seed
    )
    cap = args.memory_cap_mb << 20
    try:
        component = mission.to_component()
    except InvalidEpisodeRequest as exc:
        error_line("tether demo", exc)
        return EXIT_USAGE
    try:
        data_dir = usable_dir(Path(args.data_dir).resolve(), what="--data-dir")
    except DataDirError as exc:
        error_line("tether demo", exc)
        return EXIT_USAGE
    board = ProgressBoard(out)

    def on_progress(event: ProgressEvent) -> None:
        c = event.content
        board.update(
            event.key.activity_id,
            attempt=event.attempt,
            done=int(c.get("steps", 0)),
            total=int(c.get("total", 0)),
            error=c.get("error"),
            state="running",
        )
        live.update(event.key, **c)

    try:
        adapter = SimEpisodeAdapter(data_dir, memory_cap_bytes=cap)
    except JournalError as exc:  # an older layout that cannot be migrated now, or damage
        error_line("tether demo", exc)
        return EXIT_STORE
    try:
        host = Host(
            data_dir,
            # The family refuses a reach past the cap at admission; the adapter's own cap is
            # the same (its second line, for a reach admitted under a larger one).
            [sim_family(adapter, memory_cap_bytes=cap)],
            workers=args.workers,
            lease_ms=args.lease_ms,
            progress_listener=on_progress,
        )
    except StoreFileError as exc:  # a store cut short: refused before anything was written
        adapter.close()
        if exc.code in ("disk_full", "file_too_large"):
            print(_storage_line(exc.code, exc.message, data_dir), file=sys.stderr)
            return EXIT_DISK
        error_line("tether demo", exc)
        return EXIT_STORE
    except BaseException:
        adapter.close()
        raise
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
            host.close()
            adapter.close()
            print(
                f"tether demo: {data_dir} holds a different mission; use another --data-dir",
                file=sys.stderr,
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
    run = _Run(host, out, board, settled, time.monotonic(), live, adapter, interrupted, log)
    return run, mission


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
            print(_storage_line(kind, detail, run.host.data_dir), file=sys.stderr)
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
        parked = [k for k, rec in records.items() if _parked(rec)]
        if parked:
            run.board.message("parked activities (reconciliation is Unknown; an operator decides):")
            for key in parked:
                rec = records[key]
                assert rec is not None and rec.evidence is not None
                run.board.message(f"  {key.activity_id}  evidence {rec.evidence.evidence.ref}")
            return EXIT_PARKED
        if mission_done(snap) and all(r is not None and r.settlement for r in records.values()):
            return EXIT_OK
        time.sleep(0.05)


def _summary(run: _Run) -> str:
    rows, tail = _summary_rows(run)
    return summary_table(rows) + "\n" + tail


def _summary_rows(run: _Run) -> tuple[list[SummaryRow], str]:
    snap = run.host.snapshot(WORLD)
    rows = []
    for key in _keys(snap):
        rec = run.host.get(key)
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
    before = sum(1 for r in rows if r.recovered == "settled before restart")
    reused = sum(1 for r in rows if r.recovered.endswith("reused"))
    rerun = sum(1 for r in rows if r.recovered.startswith("rerun"))
    tail = (
        f"mission: {done.get('succeeded', 0)}/{done.get('targets', len(rows))} reaches within "
        f"tolerance; recovered: {before} settled before this run (not rerun), {reused} durable "
        f"results reused, {rerun} rerun after proof that the earlier attempt was gone"
    )
    return rows, tail


def _summary_json(run: _Run, code: int) -> str:
    """`tether demo --json`: one object on stdout at the end (the progress went to stderr)."""
    import dataclasses
    import json

    rows, tail = _summary_rows(run)
    snap = run.host.snapshot(WORLD)
    parked = [k.activity_id for k in _keys(snap) if _parked(run.host.get(k))]
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
        }
    )


def main(argv: list[str]) -> int:
    """Run the demo; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.workers < 1 or args.lease_ms < 100 or not 0 <= args.port <= 65535:
        parser.error("--workers must be >= 1, --lease-ms >= 100 and --port in [0, 65535]")
    if args.linger < 0 or args.wait_subscribers < 0:
        parser.error("--linger and --wait-subscribers must not be negative")
    if not 64 <= args.memory_cap_mb <= 1 << 30:
        parser.error("--memory-cap-mb must be at least 64")
    out = sys.stderr if args.json else sys.stdout
    stream = RunStream("tether-demo", f"run-{uuid.uuid4().hex[:12]}", StoreState())
    try:
        server = StreamServer(stream, args.host, args.port)
    except OSError as exc:
        print(f"tether demo: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    log = _LogLines()
    tether_log = logging.getLogger("tether")
    tether_log.addHandler(log)
    data_dir = Path(args.data_dir).resolve()
    try:
        stream.start()
        return _run(args, out, stream, server, log)
    except (TetherError, OSError) as exc:  # a write the disk refused, anywhere in the run
        kind = storage_failure(exc)
        if kind is None:
            raise
        stream.finish(error=describe(kind))
        print(_storage_line(kind, _one_line(exc), data_dir), file=sys.stderr)
        return EXIT_DISK
    finally:
        tether_log.removeHandler(log)
        stream.finish(error="the demo stopped")
        server.close()


def _run(
    args: argparse.Namespace, out: TextIO, stream: RunStream, server: StreamServer, log: _LogLines
) -> int:
    opened = _open(args, out, LiveActivities(stream), log)
    if isinstance(opened, int):
        stream.finish(error="the demo could not start")
        return opened
    run, _ = opened
    print(f"AG-UI stream (SSE): {server.url}", file=out, flush=True)
    if args.wait_subscribers > 0:
        server.wait_for_subscribers(args.wait_subscribers, timeout=60)
    try:
        run.host.start()
        kick_planner(run.host, WORLD)
        code = _watch(run)
        refused = _refusals(run) if code == EXIT_OK else []
        if refused:  # the mission ran to its end, but these reaches could never run
            code = EXIT_USAGE
        if args.json:
            print(_summary_json(run, code), flush=True)
        if code in (EXIT_OK, EXIT_USAGE):
            print(_summary(run), file=out)
            for line in _refusal_lines(refused):
                print(f"tether demo: {line}", file=sys.stderr)
            stream.finish()
        elif code == EXIT_PARKED:
            stream.finish(error="activities are parked: reconciliation is Unknown")
        else:
            stream.finish(error="the data directory's disk refused a write")
        return code
    finally:
        _close_quietly(run, log)
        if args.linger > 0:
            time.sleep(args.linger)


def _close_quietly(run: _Run, log: _LogLines) -> None:
    """Close the Host and the adapter; on a failed disk, a close that cannot checkpoint is no
    second error (what is committed stays in the write-ahead log)."""
    for close in (run.host.close, run.adapter.close):
        try:
            close()
        except (TetherError, OSError) as exc:
            if storage_failure(exc) is None:
                raise


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
