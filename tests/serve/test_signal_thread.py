"""`tether serve` stops on a SIGTERM whichever of its threads the kernel hands it to: Python
runs the handler in the main thread, which must wake for it (a wait without a timeout there
slept on while the daemon served, deaf to the signal)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._serve import serve_config

SYS_TGKILL = 234  # x86-64 and aarch64 number it differently: checked below


def _tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="tgkill's syscall number is x86-64's")
def test_a_sigterm_given_to_another_thread_stops_the_daemon(tmp_path: Path) -> None:
    config = serve_config(tmp_path, "/dev/null-unused", extra='\n[serve]\nsse = "off"\n')
    with subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and '"ready": true' in proc.stdout.readline()
            tasks = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
            others = [t for t in tasks if t != proc.pid]
            assert others, "the daemon runs threads besides its main one"
            _tgkill(proc.pid, others[-1], signal.SIGTERM)
            deadline = time.monotonic() + 10
            while proc.poll() is None:
                assert time.monotonic() < deadline, "the daemon served on after its SIGTERM"
                time.sleep(0.05)
            assert proc.returncode == 0
        finally:
            if proc.poll() is None:
                proc.kill()
