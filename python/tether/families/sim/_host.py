"""The worker's episode host: a pre-imported process that forks one process per attempt.

`python -m tether.families.sim._host <worker-pid> <control-fd>`. Started once per provider, it
imports numpy, MuJoCo and the runner up front (the costly part of a fresh interpreter), arms
die-with-parent and checks the worker is still its parent. Then, for each job received on the
SOCK_SEQPACKET control socket (JSON plus the write end of a fresh event pipe, passed with
SCM_RIGHTS), it forks an attempt process. That process arms die-with-parent towards the host
and checks it, writes `forked`, runs `run_attempt` and finishes with an `exit` event. The chain
worker -> host -> attempt means killing the worker kills the attempt.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from tether.families.sim._child import arm_parent_death, run_attempt
from tether.families.sim.provider import EXIT_PARENT_GONE, stderr_path
from tether.operations import Operation

_MAX_JOB = 1 << 20


def _attempt(job: dict[str, Any], out_fd: int, host_pid: int) -> int:
    out = os.fdopen(out_fd, "w", buffering=1)

    def emit(event: dict[str, Any]) -> None:
        out.write(json.dumps(event) + "\n")
        out.flush()

    emit({"event": "forked", "pid": os.getpid()})
    if not arm_parent_death(host_pid):
        emit({"event": "exit", "code": EXIT_PARENT_GONE})
        return EXIT_PARENT_GONE
    op = Operation(Path(job["op_dir"]))
    attempt = int(job["attempt"])
    err = os.open(stderr_path(op, attempt), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(err, 2)
    os.close(err)
    code = run_attempt(op, attempt, job, emit)
    emit({"event": "exit", "code": code})
    return code


def main(argv: list[str]) -> int:
    """Serve attempt jobs until the control socket closes."""
    worker_pid, control_fd = int(argv[0]), int(argv[1])
    if not arm_parent_death(worker_pid):
        return EXIT_PARENT_GONE
    # Attempt processes are reaped by the kernel; their outcome travels on their event pipe.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    control = socket.socket(fileno=control_fd)
    control.send(b"ready")  # imports are done: attempts now start with a fork, not a Python
    host_pid = os.getpid()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, _MAX_JOB, 1)
        except OSError:
            return 0
        if not msg:
            return 0
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = _attempt(json.loads(msg), fds[0], host_pid)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(fds[0])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
