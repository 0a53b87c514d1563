"""The daemon's view of an Activity in words (`tether.serve.views`), on a real catalog."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tether.activities import Catalog
from tether.runtime import ArtifactStore
from tether.serve.views import state_of, view

from tests.activities.support import bound_claim, evidence_for, key, receipt, result


@pytest.mark.parametrize("failed", [False, True], ids=["done", "failed"])
def test_a_compacted_record_keeps_its_outcome_never_pending(tmp_path: Path, failed: bool) -> None:
    """Retention (`tether db prune`) drops a settled record's result: its view still says how
    it ended (`tether move` of it again exits as that end, never "pending: run it again")."""
    catalog = Catalog.open(f"sqlite://{tmp_path}/catalog.db")
    k = key("ended")
    claim = bound_claim(catalog, k)
    res = replace(result("ended"), failed=failed)
    catalog.record_result(k, claim.fence, res)
    catalog.settle(k, receipt(9), evidence_for(k, res))
    before = catalog.get(k)
    assert before is not None and state_of(before) == ("failed" if failed else "done")
    assert catalog.compact_settled(0) == 1
    record = catalog.get(k)
    catalog.close()
    assert record is not None and record.compacted and record.result is None
    shown = view(k, record, ArtifactStore(tmp_path / "artifacts"), None)
    assert shown["state"] == ("failed" if failed else "done"), shown
    assert (shown["settled"], shown["final"], shown["compacted"]) == (True, True, True), shown
