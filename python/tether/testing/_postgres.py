"""A real PostgreSQL for tests: the server at 127.0.0.1:5432 when it answers, else a throwaway
cluster started from the Debian packages, each test in a schema of its own.

`find_server()` is what the test suite calls once per session:
1. ``TETHER_PG_URL`` if set, else ``postgresql://127.0.0.1:5432/test`` (trust auth), when it
   answers;
2. otherwise a `ThrowawayCluster`: `initdb` and `pg_ctl` from ``/usr/lib/postgresql/*/bin``
   (``apt-get install -y postgresql`` first when they are missing and this process is root),
   in a temp dir, listening on 127.0.0.1 at a free port. `initdb` refuses root, so as root the
   cluster runs as ``nobody`` (`runuser`), which owns only the temp dir;
3. if neither works, the reason, for the caller to skip with (a failure under ``CI=true``).

`schema_url(base, schema)` names one schema through libpq's ``options=-csearch_path=...``, so
a catalog and a ledger opened from that URL (in this process or a child) see only it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from tether.testing._ports import free_port

DEFAULT_URL = "postgresql://127.0.0.1:5432/test"
URL_ENV = "TETHER_PG_URL"
UNPRIVILEGED = "nobody"


def answers(url: str, timeout_s: float = 3.0) -> str | None:
    """None if a session opens at ``url``, else the one-line reason."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout_s)), autocommit=True) as c:
            c.execute("SELECT 1")
    except psycopg.Error as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def schema_url(base: str, schema: str) -> str:
    """``base`` restricted to ``schema`` (its search path), for every process that opens it."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}', safe='')}"


def pg_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` with initdb in it."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


class ClusterError(RuntimeError):
    """The throwaway cluster could not be installed, created or started."""


class ThrowawayCluster:
    """A PostgreSQL cluster in a temp dir, for one test session (or one test).

    Args:
        port: the TCP port on 127.0.0.1 (default: a free one).
        password: with a password, the cluster uses scram-sha-256 for user ``postgres``;
            without, trust auth.
        install: ``apt-get install -y postgresql`` when the binaries are missing (root only).
    """

    def __init__(
        self, *, port: int | None = None, password: str | None = None, install: bool = True
    ) -> None:
        self.port = port or free_port()
        self.password = password
        self.install = install
        self.dir: Path | None = None
        self._bin: Path | None = None
        self._as: list[str] = []

    @property
    def url(self) -> str:
        """The URL of its `test` database (no password: give it by PGPASSWORD or a file)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ClusterError(f"{Path(args[0]).name} failed: {' | '.join(tail)}")

    def _binaries(self) -> Path:
        bin_dir = pg_bin_dir()
        if bin_dir is None and self.install and os.geteuid() == 0:
            for cmd in (
                ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "postgresql"],
            ):
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
                if r.returncode != 0:
                    raise ClusterError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-300:]}")
            bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise ClusterError(
                "no PostgreSQL binaries in /usr/lib/postgresql/*/bin"
                " (install the Debian package postgresql)"
            )
        return bin_dir

    def start(self) -> ThrowawayCluster:
        self._bin = self._binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to an unprivileged user
            shutil.chown(self.dir, user=UNPRIVILEGED)
            self._as = ["runuser", "-u", UNPRIVILEGED, "--"]
        os.chmod(self.dir, 0o700)
        data = self.dir / "data"
        init = [str(self._bin / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8"]
        if self.password is not None:
            pwfile = self.dir / "pw"
            pwfile.write_text(self.password + "\n")
            if self._as:
                shutil.chown(pwfile, user=UNPRIVILEGED)
            init += ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
        else:
            init += ["--auth=trust"]
        try:
            self._run(*init, "--no-sync")
            self._run(
                str(self._bin / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(self.dir / "log"),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {self.port} -c listen_addresses=127.0.0.1"
                f" -c unix_socket_directories={self.dir}",
                "start",
            )
            self._create_test_db()
        except BaseException:
            self.stop()
            raise
        return self

    def _pg_ctl(self, *args: str) -> None:
        assert self._bin is not None and self.dir is not None, "not started"
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.dir / "data"), "-w", *args)

    def pause(self) -> None:
        """Stop the server (fast shutdown), keeping its data: clients are refused until
        `resume`."""
        self._pg_ctl("-m", "fast", "stop")

    def resume(self) -> None:
        """Start the server `pause` stopped, on the same port and data."""
        assert self.dir is not None
        self._pg_ctl(
            "-l",
            str(self.dir / "log"),
            "-t",
            "60",
            "-o",
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}",
            "start",
        )

    def _create_test_db(self) -> None:
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(admin, password=self.password, autocommit=True) as c:
                    c.execute("CREATE DATABASE test")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (immediate) and remove its directory. Idempotent."""
        if self.dir is None:
            return
        if self._bin is not None and (self.dir / "data" / "postmaster.pid").exists():
            subprocess.run(
                [
                    *self._as,
                    str(self._bin / "pg_ctl"),
                    "-D",
                    str(self.dir / "data"),
                    "-w",
                    "-m",
                    "immediate",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> ThrowawayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_server() -> tuple[str | None, ThrowawayCluster | None, str]:
    """(url, cluster we started or None, reason): the URL is None only with a reason."""
    url = os.environ.get(URL_ENV) or DEFAULT_URL
    reason = answers(url)
    if reason is None:
        return url, None, ""
    try:
        cluster = ThrowawayCluster().start()
    except (ClusterError, OSError, subprocess.SubprocessError) as e:
        return None, None, f"no PostgreSQL at {url} ({reason}) and no throwaway cluster ({e})"
    return cluster.url, cluster, ""
