"""Hosts in network namespaces, and a PostgreSQL cluster listening on their network.

`Network` makes, for one test module, a bridge in the root namespace (``10.200.R.1/24``, R
picked free at random so concurrent runs on one machine do not collide) and one namespace per
host joined to it by a veth pair (host i is ``10.200.R.(10+i)``). Nothing is routed beyond the
bridge. `cut`/`mend` take a host's link down/up inside its namespace. `spawn` runs a command in
a host's namespace; `kill_host` SIGKILLs every process in it, `pause_host`/`resume_host`
SIGSTOP/SIGCONT them.

`BridgeCluster` is a throwaway PostgreSQL (initdb/pg_ctl from the Debian packages, as the
unprivileged user ``nobody`` since initdb refuses root) listening on the bridge address with
trust auth for the bridge's subnet, because the system server listens on loopback only.

`unavailable()` says why namespaces cannot be made here (not root, no `ip`, a kernel or
container that refuses them), for the tests to skip with.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any

from tether.testing._postgres import UNPRIVILEGED, pg_bin_dir


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def unavailable() -> str | None:
    """None if this process may create network namespaces, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"tmprobe{uuid.uuid4().hex[:6]}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` is not permitted here: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    if pg_bin_dir() is None:
        return "no PostgreSQL binaries in /usr/lib/postgresql/*/bin"
    return None


def _used_subnets() -> set[int]:
    out = _ip("-4", "-o", "addr", "show").stdout
    used = set()
    for word in out.split():
        if word.startswith("10.200."):
            used.add(int(word.split(".")[2]))
    return used


class Network:
    """A bridge and ``hosts`` namespaces on it (see the module docstring)."""

    def __init__(self, hosts: int) -> None:
        used = _used_subnets()
        free = [r for r in range(1, 255) if r not in used]
        self.r = random.choice(free)
        self.bridge = f"tmb{self.r}"
        self.server_ip = f"10.200.{self.r}.1"
        self.subnet = f"10.200.{self.r}.0/24"
        self.names = [f"h{i}" for i in range(1, hosts + 1)]
        self._ns = {h: f"tmh{self.r}{h}" for h in self.names}
        self._peer = {h: f"tmp{self.r}{h}" for h in self.names}
        self._made: list[str] = []
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append("bridge")
            _ip("addr", "add", f"{self.server_ip}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, h in enumerate(self.names, start=1):
                ns, peer, root_end = self._ns[h], self._peer[h], f"tmv{self.r}{h}"
                _ip("netns", "add", ns)
                self._made.append(ns)
                _ip("link", "add", root_end, "type", "veth", "peer", "name", peer)
                _ip("link", "set", root_end, "master", self.bridge, "up")
                _ip("link", "set", peer, "netns", ns)
                _ip("-n", ns, "addr", "add", f"10.200.{self.r}.{10 + i}/24", "dev", peer)
                _ip("-n", ns, "link", "set", peer, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def address(self, host: str) -> str:
        return f"10.200.{self.r}.{10 + self.names.index(host) + 1}"

    def spawn(
        self, host: str, argv: list[str], *, env: dict[str, str], stderr: IO[Any]
    ) -> subprocess.Popen[bytes]:
        """Run ``argv`` in ``host``'s namespace (`ip netns exec` execs it: same pid)."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self._ns[host], *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )

    def pids(self, host: str) -> list[int]:
        out = _ip("netns", "pids", self._ns[host], check=False).stdout
        return [int(p) for p in out.split()]

    def _signal(self, host: str, sig: signal.Signals) -> int:
        n = 0
        for pid in self.pids(host):
            try:
                os.kill(pid, sig)
                n += 1
            except ProcessLookupError:
                pass
        return n

    def kill_host(self, host: str) -> int:
        """SIGKILL every process of the host (stopped ones included); returns how many were
        signalled. Their parent reaps them (`Popen.wait`)."""
        n = self._signal(host, signal.SIGKILL)
        self._signal(host, signal.SIGCONT)
        return n

    def pause_host(self, host: str) -> int:
        return self._signal(host, signal.SIGSTOP)

    def resume_host(self, host: str) -> int:
        return self._signal(host, signal.SIGCONT)

    def cut(self, host: str) -> None:
        """Take the host's only link down, inside its namespace."""
        _ip("-n", self._ns[host], "link", "set", self._peer[host], "down")

    def mend(self, host: str) -> None:
        _ip("-n", self._ns[host], "link", "set", self._peer[host], "up")

    def close(self) -> None:
        for h in self.names:
            if self._ns[h] in self._made:
                self.kill_host(h)
                _ip("netns", "del", self._ns[h], check=False)  # deletes its veth pair too
        if "bridge" in self._made:
            _ip("link", "del", self.bridge, check=False)
        self._made.clear()


class BridgeCluster:
    """A throwaway PostgreSQL listening on ``net.server_ip`` (see the module docstring)."""

    def __init__(self, net: Network) -> None:
        self.net = net
        with socket.socket() as s:
            s.bind((net.server_ip, 0))
            self.port = port = int(s.getsockname()[1])
        bin_dir = pg_bin_dir()
        assert bin_dir is not None
        self._bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="tether-mh-pg-"))
        shutil.chown(self.dir, user=UNPRIVILEGED)
        os.chmod(self.dir, 0o700)
        self._as = ["runuser", "-u", UNPRIVILEGED, "--"]
        data = self.dir / "data"
        try:
            self._run(
                str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                "--auth=trust", "--no-sync",
            )  # fmt: skip
            hba = data / "pg_hba.conf"
            with hba.open("a") as f:
                f.write(f"host all all {net.subnet} trust\n")
            self._run(
                str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(self.dir / "log"), "-w",
                "-t", "60", "-o",
                f"-p {port} -c listen_addresses={net.server_ip}"
                f" -c unix_socket_directories={self.dir} -c max_connections=200",
                "start",
            )  # fmt: skip
            self._create_db()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.net.server_ip}:{self.port}/test"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name}: {(done.stderr or done.stdout).strip()}")

    def _create_db(self) -> None:
        import psycopg

        admin = f"postgresql://postgres@{self.net.server_ip}:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as c:
            c.execute("CREATE DATABASE test")

    def stop(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            subprocess.run(
                [*self._as, str(self._bin / "pg_ctl"), "-D", str(self.dir / "data"), "-w",
                 "-m", "immediate", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)
