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


def test_a_large_result_is_named_not_read(tmp_path: Path) -> None:
    """A sim reach's result is a zip of its trajectories (hundreds of MB): every `get` and
    `watch` of it read the whole file into the daemon, found it was no JSON, and answered
    `result: {}` with no way to find it. The view reads only a small JSON result, and names
    any result by its reference."""
    from tether.activities import ResultRef

    class Counted(ArtifactStore):
        reads = 0

        def get_bytes(self, ref: str, digest: str) -> bytes:
            Counted.reads += 1
            return super().get_bytes(ref, digest)

    store = Counted(tmp_path / "artifacts")
    big = store.put_bytes(b"PK\x03\x04" + bytes(2 << 20), "application/zip")
    catalog = Catalog.open(f"sqlite://{tmp_path}/catalog.db")
    k = key("zipped")
    claim = bound_claim(catalog, k)
    catalog.record_result(k, claim.fence, big)
    record = catalog.get(k)
    catalog.close()
    assert record is not None and isinstance(record.result, ResultRef)
    Counted.reads = 0
    shown = view(k, record, store, None)
    assert Counted.reads == 0
    assert shown["result"] == {} and shown["result_ref"] == {
        "ref": big.ref,
        "digest": big.digest,
        "media_type": "application/zip",
        "size": big.size,
        "failed": False,
    }
