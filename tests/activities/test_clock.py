"""Leases survive clock steps: leases and backoff run on CLOCK_BOOTTIME with the boot id (a
SQLite catalog: this host's; a PostgreSQL one: the server's, never a host's).

The wall clock is stepped by replacing `time.time_ns` in this process (what NTP, an operator
or a VM resume does to it); the other catalog user is a separate OS process with the true
wall clock, or a second `Catalog` on the same store. Every test that opens a catalog runs on
both backends; the two that only read this host's clock files have no store.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tether.activities import (
    BOOT_ID_PATH,
    Catalog,
    FixedBootClock,
    Now,
    SystemClock,
    read_boot_id,
)
from tether.errors import CatalogConfigError, LeaseExpired, NotClaimable, StaleFence

from tests.activities.support import admission, key
from tests.backends import SLOW_ON_POSTGRES

REPO = Path(__file__).resolve().parents[2]

# A worker in its own process: claims one activity under the default clock and exits.
_CHILD = """
import sys
from tether.activities import Catalog
with Catalog.open(sys.argv[1]) as cat:
    claim = cat.claim(sys.argv[2], int(sys.argv[3]))
    assert claim is not None
    print(claim.fence)
"""


def claim_in_another_process(url: str, owner: str, lease_ms: int) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, url, owner, str(lease_ms)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(out.stdout)


class WallClock:
    """Steps this process's wall clock (`time.time_ns` and `time.time`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset_ns = 0
        real_ns = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real_ns() + self.offset_ns)
        monkeypatch.setattr(time, "time", lambda: (real_ns() + self.offset_ns) / 1e9)

    def step(self, ms: int) -> None:
        self.offset_ns += ms * 1_000_000


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Iterator[WallClock]:
    yield WallClock(monkeypatch)


def test_a_wall_step_ahead_never_takes_over_another_process_s_live_lease(
    db_url: str, backend: str, wall: WallClock
) -> None:
    k = key()
    with Catalog.open(db_url) as cat:
        cat.admit(admission(k))
    assert claim_in_another_process(db_url, "worker-a", 30_000) == 1
    wall.step(31_000)  # this process's wall clock jumps past the 30 s lease
    with Catalog.open(db_url) as cat:
        assert cat.claim("worker-b", 30_000) is None, "took over a live attempt"
        with pytest.raises(NotClaimable):
            cat.claim_key(k, "worker-b", 30_000)
        rec = cat.get(k)
        assert rec is not None and rec.attempt is not None and rec.attempt.owner == "worker-a"
        # Record times are wall-clock; they decide nothing. On SQLite they are this host's
        # and show the step; on PostgreSQL they are the server's, which no host's step moves.
        cat.admit(admission(key("a2")))
        later = cat.get(key("a2"))
        assert later is not None
        stepped = later.admitted_at_ms >= rec.admitted_at_ms + 31_000
        assert stepped == (backend == "sqlite")


@SLOW_ON_POSTGRES  # a child process and a real lease on the server: the step ahead is sampled
def test_a_wall_step_back_never_blocks_reclaiming_a_dead_worker_s_lease(
    db_url: str, wall: WallClock
) -> None:
    with Catalog.open(db_url) as cat:
        cat.admit(admission(key()))
    assert claim_in_another_process(db_url, "worker-a", 300) == 1  # then the worker is gone
    wall.step(-3_600_000)  # this process's wall clock jumps an hour back
    time.sleep(0.4)  # the 300 ms lease runs out in real time
    with Catalog.open(db_url) as cat:
        claim = cat.claim("worker-b", 30_000)
        assert claim is not None and claim.fence == 2, "the dead worker's lease blocked reclaim"


def test_two_catalogs_on_one_store_with_stepped_wall_clocks_agree_on_leases(
    db_url: str,
) -> None:
    """Hosts whose wall clocks disagree, each on its own `SystemClock` (on PostgreSQL too: an
    explicit host clock is used as given, and the leases still agree)."""
    url = db_url
    real = SystemClock()
    ahead = SystemClock(wall_ms=lambda: real.now().wall_ms + 31_000)
    behind = SystemClock(wall_ms=lambda: real.now().wall_ms - 3_600_000)
    with Catalog.open(url, clock=real) as a, Catalog.open(url, clock=ahead) as b:
        a.admit(admission(key("live")))
        a.admit(admission(key("dying")))
        live = a.claim_key(key("live"), "a", 30_000)
        a.claim_key(key("dying"), "a", 200)  # its worker stops here
        with Catalog.open(url, clock=behind) as c:
            assert b.claim("b", 30_000) is None  # +31 s: no takeover of either
            time.sleep(0.3)
            reclaimed = c.claim("c", 30_000)  # -1 h: the dead lease is reclaimed on time
            assert reclaimed is not None and reclaimed.key == key("dying")
            assert c.claim("c", 30_000) is None
        assert a.renew(live.key, live.fence, 30_000).attempt is not None


def test_a_lease_from_another_boot_has_expired(db_url: str) -> None:
    url = db_url
    before = SystemClock(boot_id="boot-before")
    after = SystemClock(boot_id="boot-after")
    with Catalog.open(url, clock=before) as old:
        for name in ("a1", "a2"):
            old.admit(admission(key(name)))
        held = [old.claim("old", 3_600_000) for _ in range(2)]
        assert all(c is not None for c in held)
    with Catalog.open(url, clock=after) as new:
        first = new.claim("new", 30_000)
        # Claiming rebased the other record too: its lease ended with the old boot.
        other = new.get(key("a2") if first and first.key == key("a1") else key("a1"))
        assert other is not None and other.lease_boot_id == "boot-after"
        assert other.claimable(new.now())
        second = new.claim("new", 30_000)
        assert first is not None and second is not None
        assert {first.fence, second.fence} == {2} and first.record.lease_boot_id == "boot-after"
    with Catalog.open(url, clock=before) as old:
        c = held[0]
        assert c is not None
        with pytest.raises(StaleFence):
            old.renew(c.key, c.fence, 1_000)


def test_a_record_of_another_boot_is_expired_even_before_the_catalog_rebases(
    db_url: str,
) -> None:
    """The rule is the core's, per record: a renewal under a new boot's clock finds the lease
    expired, without any claim having rebased the store first."""
    url = db_url
    ms = [10_000]
    with Catalog.open(url, clock=FixedBootClock(lambda: ms[0], boot_id="one")) as cat:
        cat.admit(admission(key()))
        c = cat.claim("w", 3_600_000)
        assert c is not None
    with Catalog.open(url, clock=FixedBootClock(lambda: ms[0], boot_id="two")) as cat:
        with pytest.raises(LeaseExpired, match="boot"):
            cat.renew(c.key, c.fence, 1_000)


def test_the_system_clock_reads_boottime_and_the_boot_id() -> None:
    clock = SystemClock()
    with open(BOOT_ID_PATH) as f:
        assert clock.boot_id == f.read().strip() == read_boot_id()
    first = clock.now()
    boottime_ms = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1_000_000
    assert isinstance(first, Now) and abs(first.boot_ms - boottime_ms) < 1_000
    assert abs(first.wall_ms - time.time_ns() // 1_000_000) < 1_000
    assert clock.now().boot_ms >= first.boot_ms


def test_a_host_without_a_boot_id_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogConfigError, match="boot id"):
        read_boot_id(str(tmp_path / "no-such-file"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(CatalogConfigError):
        read_boot_id(str(tmp_path / "empty"))


def test_a_millisecond_callable_is_a_fixed_boot_clock(db_url: str) -> None:
    source: Callable[[], int] = lambda: 5_000  # noqa: E731
    with Catalog.open(db_url, clock=source) as cat:
        assert cat.now() == Now("fixed", 5_000, 5_000)  # on PostgreSQL too: a given clock
    with pytest.raises(TypeError):
        Catalog.open(db_url, clock=42)  # type: ignore[arg-type]
