"""SIGKILL inside a catalog write: a fresh process finds the transaction all-or-nothing, the
write lock free, and an expired bound attempt reclaimable only to reconcile."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tether.activities import Catalog, FixedBootClock, operation_id_for

from tests.activities.support import admission, key

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("point", "committed"),
    [("in_transaction", False), ("before_commit", False), ("after_commit", True)],
)
def test_a_killed_writer_leaves_all_or_nothing(db_url: str, point: str, committed: bool) -> None:
    """On both backends (a killed PostgreSQL session's transaction is rolled back by the
    server, its row lock released)."""
    k = key()
    lease_ms = 2_000
    with Catalog.open(db_url) as cat:
        cat.admit(admission(k))
        claim = cat.claim("victim", lease_ms)
        assert claim is not None
        before = cat.bind_provider_operation(k, claim.fence, operation_id_for(k))
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.activities.crash_child",
            db_url,
            k.world_id,
            k.kind,
            k.activity_id,
            str(claim.fence),
            point,
        ],
        cwd=REPO,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL
    clock_ms = before.attempt.lease_expires_ms if before.attempt else 0
    # The lease clock of the same boot, at the lease's expiry.
    at_expiry = FixedBootClock(lambda: clock_ms, boot_id=before.lease_boot_id)
    with Catalog.open(db_url, clock=at_expiry) as cat:
        after = cat.get(k)
        assert after is not None
        if committed:
            assert after.result is not None and after.result.ref == "artifact://crash"
            assert after.version == before.version + 1
            assert cat.claim("next", 1_000) is None
        else:
            assert after == before, "a killed transaction left a trace"
            # The lock died with the process; the expired bound attempt is reconcile-only.
            again = cat.claim("next", 1_000)
            assert again is not None and not again.attempt.may_execute
