"""One episode attempt, run in its own process: marker, fence check, episodes, durable result.

`run_attempt` is the body; it runs in a process forked by the worker's episode host (see
`_host.py`) or, stand-alone, as `python -m tether.families.sim._child <op-dir> <attempt>
<parent-pid>` with the job on stdin and JSON lines on stdout. Either way the order is fixed:
die-with-parent is armed first and the parent is checked after arming it (it may have died in
between), then the request's `not_after_ms` is checked against the clock (past it: exit, no marker),
then the journal's start marker is created (create-if-absent, refused once the
attempt is fenced out, checked again after the marker exists), and only then does any episode
run. The result file is made durable in the artifact store, and only then is its reference
staged in the journal (`result-<n>.pending`); the worker verifies its digest and publishes it.
A kill at any moment leaves no result, a durable file no record names, or a staged result the
next reconciliation publishes or removes: never a partial result.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether._proc import ProcessIdentity, set_parent_death_signal
from tether._sqlite_files import storage_failure
from tether.families.sim._episode import (
    RESULT_MEDIA_TYPE,
    EpisodeRequest,
    encode_result,
    run_episodes,
)
from tether.families.sim.errors import InvalidEpisodeRequest
from tether.families.sim.provider import (
    EXIT_ALREADY_STARTED,
    EXIT_BAD_REQUEST,
    EXIT_EXPIRED,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_PARENT_GONE,
    EXIT_STORAGE,
    crash_point,
    result_pointer,
)
from tether.operations import JournalError, Operation
from tether.runtime import DEFAULT_INLINE_BOUND, ArtifactError, ArtifactStore
from tether.runtime._artifacts import shared_for

Emit = Callable[[dict[str, Any]], None]


def arm_parent_death(parent_pid: int) -> bool:
    """Die with the parent; False if the parent is already gone (checked after arming)."""
    set_parent_death_signal()
    return os.getppid() == parent_pid


def run_attempt(op: Operation, attempt: int, job: dict[str, Any], emit: Emit) -> int:
    """Run one attempt's episodes and stage the result; returns the exit code."""
    try:
        request = EpisodeRequest.from_dict(job["request"])
    except (InvalidEpisodeRequest, KeyError, TypeError) as exc:
        print(f"invalid request: {exc}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    me = ProcessIdentity.of(os.getpid())
    marker = {
        "operation_id": job["operation_id"],
        "request_digest": request.digest(),
        "child": me.to_dict(),
        "parent_pid": os.getppid(),
    }
    if request.expired(int(time.time() * 1000)):  # checked last before the marker
        print(f"attempt {attempt} does not start: not_after_ms passed", file=sys.stderr)
        return EXIT_EXPIRED
    try:
        op.start(attempt, marker)
    except JournalError as exc:
        print(f"attempt {attempt} does not start: {exc}", file=sys.stderr)
        return EXIT_ALREADY_STARTED if exc.code == "attempt_already_started" else EXIT_FENCED
    emit({"event": "started", "child": me.to_dict()})
    if op.result() is not None:
        return EXIT_OK
    crash_point("sim.child_started", attempt)

    def progress(done: int, total: int, error: float) -> None:
        emit({"event": "progress", "done": done, "total": total, "error": error})

    every = max(200, request.steps // 50)
    run = run_episodes(request, progress, progress_every=every)
    # The wall time goes to the attempt's log only: the result file (and so its digest) holds
    # nothing that depends on the clock.
    print(f"episodes ran in {run.wall_time_s:.3f} s", file=sys.stderr)
    run.summary["operation_id"] = job["operation_id"]
    run.summary["attempt"] = attempt
    # The provider names its store in the job; without one, its default (<root>/artifacts).
    default = op.path.parent.parent.parent / "artifacts"
    # On a shared (PostgreSQL) catalog the provider names its table too: every host reads it.
    shared = shared_for(job.get("artifacts_url"))
    store = ArtifactStore(job.get("artifacts", default), inline_bound=_bound(job), shared=shared)
    try:
        ref = store.put_bytes(encode_result(run), RESULT_MEDIA_TYPE)  # durable before staged
        crash_point("sim.artifact_durable", attempt)
        # Staged, not published: the worker verifies the digest first, and a fenced-out
        # attempt's staged result is removed, never published.
        op.stage_result(attempt, result_pointer(ref))
    except (OSError, ArtifactError) as exc:
        code = EXIT_STORAGE.get(storage_failure(exc) or "")
        if code is None:
            raise
        try:  # the log is on the same disk: it may not take this line either
            print(f"the result could not be made durable: {exc}", file=sys.stderr)
        except OSError:
            pass
        return code
    return EXIT_OK


def _bound(job: dict[str, Any]) -> int:
    return int(job["inline_bound"]) if "inline_bound" in job else DEFAULT_INLINE_BOUND


def main(argv: list[str]) -> int:
    """Stand-alone entry: job on stdin, events on stdout; returns the exit code."""
    op_path, attempt, parent_pid = Path(argv[0]), int(argv[1]), int(argv[2])
    if not arm_parent_death(parent_pid):
        return EXIT_PARENT_GONE
    job = json.loads(sys.stdin.buffer.read())

    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    return run_attempt(Operation(op_path), attempt, job, emit)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
