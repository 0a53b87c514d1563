"""Hosts that share a PostgreSQL catalog share its payloads: the artifact store writes what is
above the inline bound to the catalog's `artifacts` table (`tether.storage._pg_artifacts`),
so a worker on one host reads the input another admitted, and the host that settles a world
reads the result another recorded. Real Hosts with separate data dirs, one PostgreSQL schema."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tether.activities import ActivityKey, Catalog
from tether.runtime import (
    ArtifactCorrupt,
    ArtifactError,
    ArtifactMissing,
    ArtifactStore,
    AttemptContext,
    Family,
    Host,
)
from tether.runtime._artifacts import shared_for
from tether.runtime.worker_main import run_workers
from tether.world import ComponentWrite, canonical_json

from tests._hosts import ECHO_KIND, echo_project, echo_stage

KIND = ECHO_KIND
_project, _stage = echo_project, echo_stage


class Echo:
    """Records its input as its result, naming the host that ran it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        doc = {**request, "ran_on": self.name}
        return ctx.artifacts.put_bytes(canonical_json(doc), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        raise AssertionError("no lease runs out in this test")


def _stores(pg_url: str, tmp_path: Path) -> tuple[ArtifactStore, ArtifactStore]:
    Catalog.open(pg_url).close()  # the catalog's schema, with its artifacts table
    one = ArtifactStore(tmp_path / "one", shared=shared_for(pg_url))
    two = ArtifactStore(tmp_path / "two", shared=shared_for(pg_url))
    return one, two


def test_a_payload_one_host_stores_is_read_by_another(pg_url: str, tmp_path: Path) -> None:
    one, two = _stores(pg_url, tmp_path)
    try:
        big = b"x" * 5000
        ref = one.put_bytes(big, "application/octet-stream")
        assert ref.ref.startswith("artifact:sha256/") and ref.size == 5000
        assert two.get(ref) == big
        assert one.put_bytes(big, "application/octet-stream") == ref  # write-once: a no-op
        assert not list((tmp_path / "one" / "sha256").rglob("*")), "written to the data dir"
        small = one.put_bytes(b"tiny", "text/plain")  # inline, as ever: no row
        assert small.ref.startswith("inline:") and two.get(small) == b"tiny"
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT count(*) FROM artifacts").fetchone()
        assert row is not None and row[0] == 1
    finally:
        one.close()
        two.close()


def test_a_shared_payload_is_checked_against_its_digest(pg_url: str, tmp_path: Path) -> None:
    one, two = _stores(pg_url, tmp_path)
    try:
        ref = one.put_bytes(b"y" * 1000, "application/octet-stream")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE artifacts SET data = %s", (b"z" * 1000,))
        with pytest.raises(ArtifactCorrupt):
            two.get(ref)
        with pytest.raises(ArtifactMissing):
            two.get_bytes("artifact:sha256/" + "0" * 64, "sha256:" + "0" * 64)
    finally:
        one.close()
        two.close()


def test_a_store_whose_connection_broke_stores_on_a_new_one(
    pg_url: str, pg_base: str, tmp_path: Path
) -> None:
    one, two = _stores(pg_url, tmp_path)
    try:
        first = one.put_bytes(b"a" * 600, "application/octet-stream")
        with psycopg.connect(pg_base, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'tether-artifacts' AND pid <> pg_backend_pid()"
            )
        second = one.put_bytes(b"b" * 600, "application/octet-stream")
        assert two.get(first) == b"a" * 600 and two.get(second) == b"b" * 600
    finally:
        one.close()
        two.close()


def test_sqlite_catalogs_keep_payloads_in_the_data_dir(tmp_path: Path) -> None:
    assert shared_for("sqlite:///" + str(tmp_path / "catalog.db")) is None
    assert shared_for(None) is None


def test_hosts_sharing_a_catalog_run_and_settle_each_others_large_payloads(
    pg_url: str, tmp_path: Path
) -> None:
    """The world's Host (no workers) admits an Activity whose input is above the inline
    bound; another host's workers (`tether worker`'s `run_workers`, a data dir of their own)
    run it and record a result above it; the Host stages and settles it. With payloads in
    each host's data dir, neither could read the other's (the input, then the result:
    ArtifactMissing), and the Activity never settled."""
    owner = Host(
        tmp_path / "owner",
        [Family("demo", (KIND,), _project, Echo("owner"), _stage)],
        workers=0,
        catalog_url=pg_url,
        world_url=pg_url,
    )
    stop = threading.Event()
    other = threading.Thread(
        target=run_workers,
        args=(tmp_path / "other", [Family("demo", (KIND,), _project, Echo("other"), _stage)]),
        kwargs={"stop": stop, "catalog_url": pg_url, "host": "other"},
    )
    try:
        owner.create_world("w")
        owner.start()
        other.start()
        request = {"pad": "p" * 2000, "seed": 7}
        owner.commit_tick("w", [ComponentWrite("big", "echo.intent", request)])
        assert owner.wait_settled("w", 60)
        record = owner.get(ActivityKey("w", KIND, "big"))
        assert record is not None and record.result is not None and not record.result.failed
        assert record.result.size > owner.artifacts.inline_bound
        assert json.loads(owner.artifacts.get(record.result)) == {**request, "ran_on": "other"}
        for side in ("owner", "other"):
            assert not list((tmp_path / side / "artifacts" / "sha256").rglob("*"))
    finally:
        stop.set()
        other.join(30)
        owner.close()


def test_a_simulation_child_writes_its_result_to_the_shared_store(
    pg_url: str, tmp_path: Path
) -> None:
    """The sim provider's child process (its own interpreter) writes the episode file into the
    store it was handed: with a shared one, the catalog's table, so another host reads it."""
    from tether.families.sim import EpisodeRequest, SimProvider

    one, two = _stores(pg_url, tmp_path)
    provider = SimProvider(tmp_path / "sim")
    try:
        request = EpisodeRequest.create((0.2, 0.15), seed=5, episodes=1, steps=400)
        outcome = provider.execute("op", 1, request, artifacts=one)
        assert outcome.result.size > one.inline_bound
        assert two.get(outcome.result) == outcome.data  # read from the table by another store
        assert not list((tmp_path / "one" / "sha256").rglob("*"))
    finally:
        provider.close()
        one.close()
        two.close()


def test_a_postgresql_url_is_shared_whatever_the_case_of_its_scheme(
    pg_url: str, tmp_path: Path
) -> None:
    from tether.storage._host_claim import is_shared
    from tether.storage._urls import postgres_url

    upper = "PostgreSQL://" + pg_url.partition("://")[2]
    assert is_shared(upper) and is_shared("POSTGRES://h/d") and not is_shared("sqlite:///x.db")
    assert postgres_url("Postgres://h/d") == "postgresql://h/d" and postgres_url(None) is None
    Catalog.open(upper).close()  # the stores take it, and so do the payloads
    store = ArtifactStore(tmp_path / "a", shared=shared_for(upper))
    try:
        ref = store.put_bytes(b"u" * 700, "application/octet-stream")
        assert not list((tmp_path / "a" / "sha256").rglob("*"))
        assert store.get(ref) == b"u" * 700
    finally:
        store.close()
    with pytest.raises(ArtifactError, match="closed"):  # closed: never a new connection
        store.get(ref)


def test_the_operator_review_of_a_sim_reach_reads_the_shared_store(
    pg_url: str, tmp_path: Path
) -> None:
    """A daemon's review (`review_for` with the Host's store) finds a sim result the table
    holds; a review of the data dir alone would call it lost (ResultCorrupt)."""
    from types import SimpleNamespace

    from tether.families.sim import EpisodeRequest, SimProvider
    from tether.families.sim.family import KIND as SIM_KIND
    from tether.operator.cli import review_for

    one, _ = _stores(pg_url, tmp_path)
    provider = SimProvider(tmp_path / "data")
    try:
        request = EpisodeRequest.create((0.2, 0.15), seed=5, episodes=1, steps=400)
        outcome = provider.execute("reach-0000", 1, request, artifacts=one)
        record = SimpleNamespace(key=SimpleNamespace(kind=SIM_KIND))
        review = review_for(None, tmp_path / "data", one)(record)
        assert review is not None and review.artifacts is one
        found = review.provider.find_result("reach-0000")
        assert found is not None and found.result == outcome.result
    finally:
        provider.close()
        one.close()
