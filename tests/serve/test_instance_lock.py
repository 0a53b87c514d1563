"""Single-instance locks: a client testing whether a daemon runs (`running`, `is_locked`: a
shared lock taken for a moment) is never taken for the daemon by a start meanwhile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tether.devices.ports import IdentityLock, is_locked, lock_path
from tether.serve.locks import DaemonRunning, InstanceLock, running

#: A client asking, as fast as it can, whether a daemon holds the lock (`tether status` in a
#: loop, a supervisor's readiness probe).
PROBE = """
import sys, time
from pathlib import Path
from tether.devices.ports import is_locked
path, until = Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])
print("probing", flush=True)
while time.monotonic() < until:
    is_locked(path)
"""


def _probing(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "probing\n"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_a_start_beside_a_client_probing_the_lock_is_never_refused(tmp_path: Path) -> None:
    lock = InstanceLock(tmp_path / "serve.lock", "state dir")
    lock.acquire({"socket": "s"})
    lock.release()
    prober = _probing(lock.path, 60)
    try:
        for _ in range(300):  # starts and stops, each while the lock is probed
            lock.acquire({"socket": "s"})  # DaemonRunning here: the probe taken for an owner
            assert running(lock.path) is not None  # held: a client sees the daemon
            lock.release()
    finally:
        _end(prober)
    assert running(lock.path) is None


def test_a_port_owner_beside_a_client_probing_its_lock_is_never_refused(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "path:/dev/ttyUSB0")
    first = IdentityLock(tmp_path, "path:/dev/ttyUSB0")
    first.acquire()
    first.release()
    prober = _probing(path, 60)
    try:
        for _ in range(300):
            first.acquire()  # PortBusy here: the probe taken for an owner
            assert is_locked(path)
            first.release()
    finally:
        _end(prober)


def test_a_real_owner_is_still_refused(tmp_path: Path) -> None:
    held = InstanceLock(tmp_path / "serve.lock", "state dir")
    held.acquire({"socket": "s"})
    try:
        other = InstanceLock(tmp_path / "serve.lock", "state dir")
        try:
            other.acquire({"socket": "t"})
        except DaemonRunning as exc:
            assert exc.code == "daemon_running"
        else:
            raise AssertionError("a second owner took a held lock")
    finally:
        held.release()


def test_a_start_the_disk_refuses_is_one_line_naming_the_file_not_a_fatal_traceback(
    tmp_path: Path,
) -> None:
    """A full or read-only disk at start (here a file-size limit of 0, a real refused write)
    logged "fatal error: safe-stopping every device" with a traceback, and its line named no
    file (the lock's record is written on a descriptor)."""
    import signal
    import subprocess
    import sys

    config = tmp_path / "host.toml"
    config.write_text(
        '[host]\nstate_dir = "state"\n[serve]\nfamilies = ["tether.serve.families:sim_families"]\n'
    )

    def no_file_growth() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run(
        [sys.executable, "-m", "tether", "serve", "--config", str(config), "--log-format", "text"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=no_file_growth,
    )
    assert done.returncode == 6, done.stderr
    assert "Traceback" not in done.stderr and "fatal error" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("tether serve: file_too_large:") and "serve.lock" in line, line
