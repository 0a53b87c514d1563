"""The episode child: `python -m tether.physical._child <op-dir> <attempt> <parent-pid>`.

Protocol: the job (operation id + request JSON) arrives on stdin; JSON lines go to stdout
(`started`, `progress`, `done`); the exit code says what happened (see `provider.EXIT_*`).
Order matters: die-with-parent is armed first and the parent is checked after arming it (the
parent may have died in between), then the start marker is created if absent, then the fence
tombstone is checked, and only then does any episode run. The result is published by rename
after fsync, so a kill at any moment leaves either no result or the complete one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tether.physical._durable import create_exclusive, write_durable
from tether.physical._episode import EpisodeRequest, encode_result, run_episodes
from tether.physical._proc import ProcessIdentity, set_parent_death_signal
from tether.physical.errors import InvalidEpisodeRequest
from tether.physical.provider import (
    EXIT_ALREADY_STARTED,
    EXIT_BAD_REQUEST,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_PARENT_GONE,
    OperationDir,
    crash_point,
)


def _emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Run one attempt's episodes and publish the result; returns the exit code."""
    op_path, attempt, parent_pid = Path(argv[0]), int(argv[1]), int(argv[2])
    set_parent_death_signal()
    if os.getppid() != parent_pid:
        return EXIT_PARENT_GONE
    job = json.loads(sys.stdin.buffer.read())
    try:
        request = EpisodeRequest.from_dict(job["request"])
    except InvalidEpisodeRequest as exc:
        print(f"invalid request: {exc}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    op = OperationDir(op_path)
    me = ProcessIdentity.of(os.getpid())
    marker = {
        "operation_id": job["operation_id"],
        "attempt": attempt,
        "request_digest": request.digest(),
        "child": me.to_dict(),
        "parent_pid": parent_pid,
    }
    if not create_exclusive(op.marker(attempt), json.dumps(marker, sort_keys=True).encode()):
        print(f"attempt {attempt} already has a start marker", file=sys.stderr)
        return EXIT_ALREADY_STARTED
    if op.tombstone(attempt).exists():
        print(f"attempt {attempt} was fenced off by a later attempt", file=sys.stderr)
        return EXIT_FENCED
    _emit({"event": "started", "child": me.to_dict()})
    if op.result.exists():
        _emit({"event": "done", "reused": True})
        return EXIT_OK
    crash_point("sim.child_started")

    def progress(done: int, total: int, error: float) -> None:
        _emit({"event": "progress", "done": done, "total": total, "error": error})

    every = max(200, request.steps // 50)
    run = run_episodes(request, progress, progress_every=every)
    run.summary["operation_id"] = job["operation_id"]
    run.summary["attempt"] = attempt
    write_durable(op.result, encode_result(run))
    _emit({"event": "done", "reused": False})
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
