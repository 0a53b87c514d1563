"""`tether db prune --catalog URL` on both backends: the catalog by URL (a PostgreSQL catalog
shared by hosts has no data directory), the same compaction the core decides."""

from __future__ import annotations

import json

import pytest
from tether.activities import Catalog
from tether.cli import main as tether

from tests.activities.support import (
    ManualClock,
    admission,
    bound_claim,
    evidence_for,
    key,
    receipt,
    result,
)


def test_prune_by_url_compacts_only_settled_records(
    db_url: str, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    settled, pending, admitted = key("settled"), key("pending"), key("admitted")
    with Catalog.open(db_url, clock=clock) as cat:  # times of 1970: older than any cutoff
        for k in (settled, pending):
            c = bound_claim(cat, k)
            cat.record_result(k, c.fence, result(k.activity_id))
        cat.settle(settled, receipt(9), evidence_for(settled, result("settled")))
        cat.admit(admission(admitted))
    assert tether(["db", "prune", "--catalog", db_url, "--older-than", "1d", "--dry-run"]) == 0
    assert "1 settled Activities" in capsys.readouterr().out
    assert tether(["db", "prune", "--catalog", db_url, "--older-than", "1d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compacted"] == 1 and report["artifacts"] == "kept"
    with Catalog.open(db_url, clock=clock) as cat:
        assert cat.get(settled).compacted  # type: ignore[union-attr]
        assert not cat.get(pending).compacted  # type: ignore[union-attr]
        assert not cat.get(admitted).compacted  # type: ignore[union-attr]
    # Exactly one of --data-dir and --catalog; --vacuum is a data directory's.
    assert tether(["db", "prune", "--older-than", "1d"]) == 2
    assert tether(["db", "prune", "--catalog", db_url, "--older-than", "1d", "--vacuum"]) == 2
    assert tether(["db", "prune", "--catalog", "ftp://x/y", "--older-than", "1d"]) == 2
    err = capsys.readouterr().err
    assert "exactly one" in err and "unsupported URL" in err
