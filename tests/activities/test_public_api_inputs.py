"""What a library user hands the public API and gets a clear, typed error for (a review of the
Python API as a library user found each of these accepted, or failing later and elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.activities import REJECTION_CODES, ActivityKey, Admission, Catalog, Receipt
from tether.client import Client
from tether.errors import CatalogRejection
from tether.runtime import ActivityRuntimeError, ArtifactError, ArtifactStore, Host
from tether.runtime._artifacts import MAX_INLINE_BOUND
from tether.world import InvalidWrite, SqliteLedger

from tests.backends import BACKENDS, catalog_url_for


def test_a_world_id_or_kind_with_a_slash_or_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    """An Activity's key joins world, kind and id with '/': a world "lab/1" was created, and
    its key then named another Activity (`lab` / `1` / ...). A name's `$` matched before a
    final newline, so "w\\n" was a world, printed over two lines."""
    ledger = SqliteLedger.open(tmp_path / "world.db")
    try:
        for bad in ("lab/1", "w\n", "w\nx"):
            with pytest.raises(InvalidWrite):
                ledger.create_world(bad)
        assert ledger.create_world("lab-1").world_id == "lab-1"
    finally:
        ledger.close()


@pytest.mark.parametrize("lease_ms", [0, -5, 7 * 24 * 3600 * 1000 + 1, True, 1.5])
def test_a_host_lease_outside_its_bounds_is_refused_before_anything_runs(
    tmp_path: Path, lease_ms: object
) -> None:
    """Accepted, every claim was refused and the workers did nothing, said only in logs."""
    with pytest.raises(ActivityRuntimeError, match="lease_ms must be"):
        Host(tmp_path / "d", [], lease_ms=lease_ms)  # type: ignore[arg-type]
    assert not (tmp_path / "d").exists()  # refused before anything was made


@pytest.mark.parametrize("bound", [MAX_INLINE_BOUND + 1, -1, True, 1.5])
def test_an_inline_bound_whose_references_the_catalog_refuses_is_refused(
    tmp_path: Path, bound: object
) -> None:
    """A bound over ~3,000 bytes made references past the catalog's 4096-byte bound: the
    admission failed after its tick was committed, and the world stayed blocked."""
    with pytest.raises(ArtifactError, match="inline_bound must be"):
        ArtifactStore(tmp_path / "a", inline_bound=bound)  # type: ignore[arg-type]
    store = ArtifactStore(tmp_path / "b", inline_bound=MAX_INLINE_BOUND)
    assert len(store.put_bytes(b"x" * MAX_INLINE_BOUND, "text/plain").ref) <= 4096


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_take_that_raises_is_its_error_not_nothing_claimed(store_url: str) -> None:
    """`claim_many(take=...)`: a bug in `take` was swallowed as a row not taken, so every
    claim silently returned nothing."""
    with Catalog.open(catalog_url_for(store_url)) as cat:
        key = ActivityKey("w", "k", "a")
        cat.admit(Admission(key, Receipt("w", "r", 1, "v"), "in", "sha256:in"))

        def take(record: object) -> bool:
            return record.key.activty_id.startswith("a")  # type: ignore[attr-defined]

        with pytest.raises(AttributeError, match="activty_id"):
            cat.claim_many("worker", 30_000, 10, take=take)
        assert [r.key for r in cat.claim_many("worker", 30_000, 10, take=lambda r: False)] == []
        assert [c.record.key for c in cat.claim_many("worker", 30_000, 10)] == [key]


def test_every_rejection_code_is_listed_and_said_first(tmp_path: Path) -> None:
    """`UnknownActivity` is a `CatalogRejection` whose code was not in REJECTION_CODES, and
    its message alone had no `code:` first."""
    assert "unknown_activity" in REJECTION_CODES
    with Catalog.open(f"sqlite://{tmp_path / 'c.db'}") as cat:
        with pytest.raises(CatalogRejection) as info:
            cat.renew(ActivityKey("w", "k", "zz"), 1, 1000)
    assert info.value.code in REJECTION_CODES
    assert str(info.value).startswith("unknown_activity: no activity w/k/zz")


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True])
def test_a_client_timeout_that_is_no_wait_is_refused(tmp_path: Path, timeout: object) -> None:
    """0 was taken for the default (and a daemon was then said to close without answering);
    a negative one failed inside the socket module."""
    with pytest.raises(ValueError, match="timeout must be"):
        Client(tmp_path, timeout=timeout)  # type: ignore[arg-type]
