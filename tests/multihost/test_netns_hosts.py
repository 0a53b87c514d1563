"""Many robot hosts: `tether worker` processes in separate network namespaces share a catalog
and a world ledger on a PostgreSQL cluster reached over veth (issue 14, point 4).

The test process is the world's Host (projector, observer, settlement: the only writer of the
world ledger); each namespace host runs `tether worker --catalog URL --world URL --host hN`.
The provider journal (`mh_provider`) records every start marker (execute and reconcile calls,
with host and fence) and applies each effect once per provider operation id; "no duplicate
effect" is read off its effect log, "no lost result" off every Activity settling.

Workers never settle: settlement is the Host's, bound to the later receipt. So "cannot bind,
record or settle" for a paused worker is shown on what a worker does (bind, record) and on the
settled record, whose result is the live attempt's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from tether.activities import ActivityKey, operation_id_for
from tether.runtime import Host
from tether.testing._postgres import schema_url

from tests.multihost import netns
from tests.multihost.mh_provider import HOST_ENV, KIND, Journal, intent, make_family

HERE = Path(__file__).resolve().parent
LEASE_MS = 1500
WORLD = "w"

_WHY = netns.unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"multi-host tests: {_WHY}")


@pytest.fixture(scope="module")
def net() -> Iterator[netns.Network]:
    network = netns.Network(3)
    try:
        yield network
    finally:
        network.close()


@pytest.fixture(scope="module")
def cluster(net: netns.Network) -> Iterator[netns.BridgeCluster]:
    c = netns.BridgeCluster(net)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def url(cluster: netns.BridgeCluster) -> Iterator[str]:
    schema = "mh_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster.url, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    yield schema_url(cluster.url, schema)
    with psycopg.connect(cluster.url, autocommit=True) as c:
        c.execute("SET lock_timeout = '30s'")
        c.execute(f"DROP SCHEMA {schema} CASCADE")


class Hosts:
    """The namespace hosts' worker processes of one test, and the Host in this process."""

    def __init__(self, net: netns.Network, url: str, data: Path) -> None:
        self.net, self.url, self.data = net, url, data
        self.logs: dict[str, list[Path]] = {}
        self._files: list[IO[Any]] = []
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.host = Host(data, [make_family(data)], workers=0, catalog_url=url, world_url=url)
        self.host.create_world(WORLD)
        self.journal = Journal(data / "provider.db")

    def start(self, name: str, *, workers: int = 1, pause_at: str | None = None) -> None:
        """Start `tether worker` on namespace host ``name``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env[HOST_ENV] = name
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
        if pause_at:
            env["TETHER_PAUSE_AT"] = pause_at
        log = self.data / f"{name}-{len(self.logs.get(name, []))}.log"
        self.logs.setdefault(name, []).append(log)
        f = log.open("wb")
        self._files.append(f)
        argv = [sys.executable, "-m", "tether", "worker", str(self.data)]
        argv += ["--families", "mh_provider:families", "--workers", str(workers)]
        argv += ["--catalog", self.url, "--world", self.url, "--host", name]
        argv += ["--lease-ms", str(LEASE_MS)]
        self.procs.setdefault(name, []).append(self.net.spawn(name, argv, env=env, stderr=f))

    def kill(self, name: str) -> int:
        """SIGKILL every process of host ``name`` and reap them: a host crash."""
        n = self.net.kill_host(name)
        for p in self.procs.pop(name, []):
            p.wait(timeout=30)
        return n

    def log(self, name: str) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs.get(name, []))

    def commit(self, *writes: Any) -> None:
        self.host.commit_tick(WORLD, list(writes))

    def settled(self, *names: str) -> bool:
        return all((r := self.host.get(key(n))) is not None and r.settlement for n in names)

    def close(self) -> None:
        for name in self.net.names:
            self.kill(name)
        self.host.close()
        for f in self._files:
            f.close()


@pytest.fixture
def hosts(net: netns.Network, url: str, tmp_path: Path) -> Iterator[Hosts]:
    h = Hosts(net, url, tmp_path)
    h.host.start()  # the observer: staging, observation ticks and settlement here
    try:
        yield h
    finally:
        h.close()


def key(name: str) -> ActivityKey:
    return ActivityKey(WORLD, KIND, name)


def op(name: str) -> str:
    return operation_id_for(key(name))


def wait_for(what: str, cond: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def markers(h: Hosts, name: str) -> list[tuple[str, int, str]]:
    """(method, fence, host) start markers of one Activity's operation, in order."""
    return [(m, f, who) for _, m, f, who in h.journal.calls(op(name))]


def check_no_duplicate_effect(h: Hosts, names: list[str]) -> None:
    """One effect per operation, and a second execute only after a reconcile proved it absent."""
    effects = h.journal.effects()
    assert {n: effects.get(op(n), 0) for n in names} == {n: 1 for n in names}
    for n in names:
        seen_reconcile = False
        executes = 0
        for method, _fence, _who in markers(h, n):
            if method == "reconcile":
                seen_reconcile = True
            else:
                executes += 1
                assert executes == 1 or seen_reconcile, markers(h, n)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


def test_a_namespace_host_reaches_the_cluster_and_not_the_loopback_server(
    net: netns.Network, cluster: netns.BridgeCluster
) -> None:
    """Each host has its own address and its own loopback: it reaches the cluster over the
    bridge, never the system server on the root namespace's 127.0.0.1:5432."""
    probe = (
        "import socket,sys\n"
        "def ok(a):\n"
        "    try: socket.create_connection(a, timeout=3).close(); return 1\n"
        "    except OSError: return 0\n"
        f"print(ok(({net.server_ip!r}, {cluster.port})), ok(('127.0.0.1', 5432)))"
    )
    out = subprocess.run(
        ["ip", "netns", "exec", f"tmh{net.r}h1", sys.executable, "-c", probe],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    assert out == ["1", "0"]
    addrs = subprocess.run(
        ["ip", "netns", "exec", f"tmh{net.r}h1", "ip", "-4", "-o", "addr"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    assert f"{net.address('h1')}/24" in addrs


def test_a_host_crash_mid_attempt_loses_nothing_and_duplicates_nothing(hosts: Hosts) -> None:
    """h1 runs a simulation attempt and a device attempt bound to h1, both held mid-attempt
    (start marker written, effect not yet), plus quick work; every process of h1 is SIGKILLed.
    h2 reconciles the simulation work (absent, then one fresh execution) but never touches
    the device work, which waits for its host; h1 restarted reconciles it. Every Activity
    settles with exactly one effect."""
    quick = [f"quick-{i}" for i in range(4)]
    hosts.start("h1", workers=2)
    hosts.commit(
        intent("sim", 1, hold_s=30),
        intent("dev", 2, host="h1", hold_s=30),
    )
    wait_for(
        "h1 mid-attempt on both",
        lambda: (
            {m[2] for n in ("sim", "dev") for m in markers(hosts, n)} == {"h1"}
            and all(markers(hosts, n) for n in ("sim", "dev"))
        ),
    )
    assert hosts.kill("h1") >= 1
    hosts.commit(*(intent(n, 10 + i) for i, n in enumerate(quick)))
    hosts.start("h2")
    wait_for("h2 to recover the simulation work", lambda: hosts.settled("sim", *quick))
    assert markers(hosts, "sim") == [
        ("execute", 1, "h1"),
        ("reconcile", 2, "h2"),
        ("execute", 3, "h2"),
    ]
    assert hosts.journal.effect_host(op("sim")) == "h2"
    # The device work is h1's alone: h2 had leases' worth of time and never claimed it.
    time.sleep(2 * LEASE_MS / 1000)
    assert markers(hosts, "dev") == [("execute", 1, "h1")]
    rec = hosts.host.get(key("dev"))
    assert rec is not None and rec.bound_host == "h1" and rec.fence == 1 and rec.result is None
    hosts.start("h1")
    wait_for("h1 to reconcile its device work", lambda: hosts.settled("dev"))
    assert markers(hosts, "dev") == [
        ("execute", 1, "h1"),
        ("reconcile", 2, "h1"),
        ("execute", 3, "h1"),
    ]
    check_no_duplicate_effect(hosts, ["sim", "dev", *quick])


def test_a_network_cut_mid_attempt_loses_nothing_and_duplicates_nothing(hosts: Hosts) -> None:
    """h1's link goes down while it holds an attempt; its lease runs out on the server's
    clock, h2 reconciles (absent) and executes once. h1, cut from the catalog but not from the
    provider, finishes its hold and tries its effect: the provider's create-if-absent returns
    the one effect (the retry guard), and once the link is back h1's result is refused."""
    hosts.start("h1")
    hosts.commit(intent("cut", 7, hold_s=10))
    wait_for("h1 mid-attempt", lambda: bool(markers(hosts, "cut")))
    hosts.net.cut("h1")
    hosts.start("h2")
    wait_for("h2 to take over", lambda: hosts.settled("cut"))
    hosts.net.mend("h1")
    wait_for(
        "h1 to find its attempt lost",
        lambda: "lost" in hosts.log("h1") and "(fence 1)" in hosts.log("h1"),
        timeout_s=90,
    )
    rec = hosts.host.get(key("cut"))
    assert rec is not None and rec.recorded_result is not None
    assert rec.recorded_result.fence == 3  # h2's execution after its reconcile (fence 2)
    assert markers(hosts, "cut")[:3] == [
        ("execute", 1, "h1"),
        ("reconcile", 2, "h2"),
        ("execute", 3, "h2"),
    ]
    assert hosts.journal.effect_host(op("cut")) == "h2"
    check_no_duplicate_effect(hosts, ["cut"])


@pytest.mark.parametrize("window", ["after_claim", "after_effect"])
def test_a_worker_paused_past_its_lease_cannot_bind_or_record(hosts: Hosts, window: str) -> None:
    """h1 stops itself (SIGSTOP) at the window; past its lease h2 claims: at `after_claim` the
    activity is still unbound, so h2 executes it; at `after_effect` h1's effect exists, so h2
    reconciles and records it. SIGCONT: h1's bind or result is refused under its stale fence,
    and the settled result is h2's attempt's."""
    hosts.start("h1", pause_at=window)
    hosts.commit(intent("paused", 5))
    wait_for("h1 to stop itself", lambda: any(stopped(p) for p in hosts.net.pids("h1")))
    hosts.start("h2")
    wait_for("h2 to finish the work", lambda: hosts.settled("paused"))
    hosts.net.resume_host("h1")
    wait_for(
        "h1 to be refused",
        lambda: "lost" in hosts.log("h1") and "(fence 1)" in hosts.log("h1"),
    )
    log = hosts.log("h1")
    assert "stale_fence" in log or "lease_expired" in log, log
    rec = hosts.host.get(key("paused"))
    assert rec is not None and rec.recorded_result is not None
    if window == "after_claim":
        # h1 never bound, so it never started: no start marker from it at all.
        assert markers(hosts, "paused") == [("execute", 2, "h2")]
        assert rec.recorded_result.fence == 2 and rec.operation_id == op("paused")
    else:
        assert markers(hosts, "paused") == [("execute", 1, "h1"), ("reconcile", 2, "h2")]
        assert rec.recorded_result.fence == 2
    check_no_duplicate_effect(hosts, ["paused"])
