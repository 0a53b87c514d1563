"""How Execute and WatchOperation use the catalog, in a `Daemon` in this process (its gRPC server
on loopback, a real grpcio client, the emulated arm on a real pty, no worker: nothing is
claimed unless the test claims it).

- A new operation's Execute is answered with the record its tick admitted: the catalog is read
  once per Execute (the committer's check that no other kind holds the id), not again after
  the commit.
- A watch is woken for its own operation only: by the watch poller when its record's version
  moves without any doorbell ring or progress (a claim), by its result, by its progress.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from _grpc_setup import bearer, in_process, move, stub
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.activities import ActivityKey
from tether.serve.daemon import Daemon
from tether.serve.grpc_server import WATCH_BACKSTOP_S, WATCH_POLL_S, _Watches, world_for

SERVE = '\n[serve]\nworkers = 0\nlease_ms = 60000\nsse = "off"\ngrpc = "127.0.0.1:0"\n'
KIND = "physical_ai.robot_move.absolute"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    with in_process(tmp_path, SERVE) as running:
        yield running


def test_a_new_operation_is_answered_from_its_admission_with_one_catalog_read(
    served: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = served.host().catalog
    real = catalog.get
    reads: list[ActivityKey] = []

    def counted(key: ActivityKey) -> Any:
        reads.append(key)
        return real(key)

    monkeypatch.setattr(catalog, "get", counted)
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        request = move("job-1")
        op = control.Execute(request, metadata=bearer(), timeout=30)
        key = ActivityKey(world_for("ci"), KIND, "job-1")
        # The one read: the other joint-move kind under the id, by the committing thread.
        assert reads == [ActivityKey(key.world_id, "physical_ai.robot_move.relative", "job-1")]
        record = real(key)
        assert record is not None
        assert op.state == pb.PENDING and op.revision == record.version
        assert op.created_ms == record.admitted_at_ms and op.attempt == 0
        # The identical request again is an existing operation: read as it stands now.
        reads.clear()
        again = control.Execute(request, metadata=bearer(), timeout=30)
        assert again.revision == op.revision and key in reads
    finally:
        channel.close()


def test_a_watch_sees_a_claim_no_doorbell_names_through_the_poller(served: Daemon) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        control.Execute(move("job-2"), metadata=bearer(), timeout=30)
        key = ActivityKey(world_for("ci"), KIND, "job-2")
        # The whole stream must end before the watch's own backstop would have re-read.
        views = control.WatchOperation(
            pb.WatchOperationRequest(operation_id="job-2"),
            metadata=bearer(),
            timeout=WATCH_BACKSTOP_S - 1,
        )
        first = next(views)
        assert first.state == pb.PENDING
        time.sleep(2 * WATCH_POLL_S)  # the poller has seen the pending record
        # A claim rings nothing a watch listens to (no result, no progress).
        record = served.host().get(key)
        assert record is not None
        claim = served.host().catalog.claim_key(
            key, "test-claimer", lease_ms=60_000, host=record.bound_host or None
        )
        assert getattr(claim, "attempt", None) is not None
        second = next(views)
        # Claimed, and not started (its journal holds no start marker): still pending.
        assert second.revision > first.revision and second.attempt == 1
        assert second.state == pb.PENDING
        views.cancel()
    finally:
        channel.close()


def test_a_watch_opened_before_the_admission_sends_no_view_without_a_revision(
    served: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch that found the operation's intent committed and its catalog record not yet
    admitted sent a view of revision 0 with times of 0, while Execute answered revision 1.
    It now waits for the admission: its first view is the admitted record's."""
    catalog = served.host().catalog
    real = catalog.admit_many
    committed = threading.Event()

    def slow(admissions: Any) -> Any:
        committed.set()  # the intent is committed; its admission is late
        time.sleep(0.5)
        return real(admissions)

    monkeypatch.setattr(catalog, "admit_many", slow)
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        executed: list[pb.Operation] = []
        runner = threading.Thread(
            target=lambda: executed.append(
                control.Execute(move("job-early"), metadata=bearer(), timeout=30)
            )
        )
        runner.start()
        assert committed.wait(10)
        views = control.WatchOperation(
            pb.WatchOperationRequest(operation_id="job-early"), metadata=bearer(), timeout=30
        )
        first = next(views)
        views.cancel()
        runner.join(30)
        assert executed and executed[0].revision >= 1
        assert first.revision >= executed[0].revision and first.created_ms > 0, first
    finally:
        channel.close()


def test_watches_are_woken_for_their_own_key_only() -> None:
    watches = _Watches()
    a, b = ActivityKey("w", "k", "a"), ActivityKey("w", "k", "b")
    on_a, also_a, on_b = threading.Event(), threading.Event(), threading.Event()
    watches.add(a, on_a)
    watches.add(a, also_a)
    watches.add(b, on_b)
    watches.wake(a)
    assert on_a.is_set() and also_a.is_set() and not on_b.is_set()
    watches.wake(ActivityKey("w", "k", "nobody"))  # nobody watches it: nothing happens
    assert not on_b.is_set()
    watches.remove(a, on_a)
    watches.remove(a, also_a)
    assert sorted(k.activity_id for k in watches.keys()) == ["b"] and a not in watches
    on_a.clear()
    watches.wake_all()
    assert on_b.is_set() and not on_a.is_set()


def test_a_cancelled_watch_leaves_the_registry(served: Daemon) -> None:
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        control.Execute(move("job-3"), metadata=bearer(), timeout=30)
        views = control.WatchOperation(
            pb.WatchOperationRequest(operation_id="job-3"), metadata=bearer(), timeout=30
        )
        assert next(views).state == pb.PENDING
        key = ActivityKey(world_for("ci"), KIND, "job-3")
        watches = served.grpc.servicer.watches
        assert key in watches
        views.cancel()
        deadline = time.monotonic() + 10
        while key in watches:  # the call's end wakes it: it leaves at once, not at a poll
            assert time.monotonic() < deadline, "the cancelled watch never left"
            time.sleep(0.01)
        with pytest.raises(grpc.RpcError):
            next(views)
    finally:
        channel.close()


def test_the_dispatcher_every_call_passes_through_runs_raised(served: Daemon) -> None:
    """grpcio's dispatcher thread hands every call, a Stop's too, to the pool: it runs at
    `DISPATCH_NICE` (where this process may raise priorities), and so do the pool threads
    that serve the calls (a Stop's raises itself further)."""
    from tether._priority import DISPATCH_NICE

    me = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, me)
    try:
        os.setpriority(os.PRIO_PROCESS, me, before - 1)
    except OSError:
        pytest.skip("raising a priority needs CAP_SYS_NICE (root in CI)")
    os.setpriority(os.PRIO_PROCESS, me, before)
    dispatchers = [t for t in threading.enumerate() if t.name.endswith("(_serve)")]
    assert dispatchers, [t.name for t in threading.enumerate()]
    for t in dispatchers:
        assert t.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, t.native_id) <= DISPATCH_NICE
    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    try:
        control.Execute(move("job-nice"), metadata=bearer(), timeout=30)  # a pool thread
    finally:
        channel.close()
    pool = [t for t in threading.enumerate() if t.name.startswith("grpc_")]
    assert pool
    for t in pool:
        assert t.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, t.native_id) == DISPATCH_NICE


def test_updated_ms_is_when_the_record_last_changed_and_never_goes_back(served: Daemon) -> None:
    """`updated_ms` is the latest time the catalog record holds (`grpc_server.updated_ms`), not
    the time of the read: two reads of an unchanged operation agree, and each change (the
    first claim binding it, its result, its settlement) moves it forward only."""
    from tether.serve.grpc_server import updated_ms

    assert served.grpc_url is not None
    channel, control = stub(served.grpc_url)
    catalog = served.host().catalog
    key = ActivityKey(world_for("ci"), KIND, "job-4")
    seen: list[pb.Operation] = []

    def twice() -> pb.Operation:
        """Two reads 30 ms apart: the same time while the record did not change, and the
        time the record holds (read at the same version)."""
        read = pb.GetOperationRequest(operation_id="job-4")
        first = control.GetOperation(read, metadata=bearer(), timeout=10)
        time.sleep(0.03)
        second = control.GetOperation(read, metadata=bearer(), timeout=10)
        record = catalog.get(key)
        assert record is not None
        if first.revision == second.revision:
            assert first.updated_ms == second.updated_ms, (first, second)
        if second.revision == record.version:
            assert second.updated_ms == updated_ms(record, second.evidence.read_at_ms)
        seen.extend((first, second))
        return second

    try:
        created = control.Execute(move("job-4"), metadata=bearer(), timeout=30)
        record = catalog.get(key)
        assert record is not None
        assert created.updated_ms == created.created_ms == record.admitted_at_ms
        pending = twice()
        assert pending.state == pb.PENDING and pending.updated_ms == created.updated_ms
        time.sleep(0.02)  # the claim's time is a later millisecond than the admission's
        (claim,) = catalog.claim_and_bind_many(
            "test-claimer", 60_000, 1, world_id=key.world_id, host=record.bound_host or None
        )
        assert claim.key == key and claim.record.operation_bound_at_ms is not None
        claimed = twice()  # bound, not started (no start marker in its journal): pending
        assert claimed.state == pb.PENDING and claimed.revision > pending.revision
        assert claimed.updated_ms == claim.record.operation_bound_at_ms > pending.updated_ms
        # A renewed lease is a new revision that stamps no time: the time stays, never less.
        catalog.renew(key, claim.fence, 60_000)
        renewed = twice()
        assert renewed.revision > claimed.revision and renewed.updated_ms == claimed.updated_ms
        time.sleep(0.02)
        result = served.host().artifacts.put_bytes(b'{"outcome":"completed"}', "application/json")
        recorded = catalog.record_result(key, claim.fence, result)
        assert recorded.recorded_result is not None
        done = twice()
        assert done.state == pb.SUCCEEDED
        assert done.updated_ms >= recorded.recorded_result.recorded_at_ms > claimed.updated_ms
        # The observer settles it (a later revision, a later time); read until it has.
        deadline = time.monotonic() + 10
        while (settled := catalog.get(key)) is None or settled.settlement is None:
            assert time.monotonic() < deadline, "never settled"
            time.sleep(0.05)
        final = twice()
        assert final.updated_ms == settled.settlement.settled_at_ms
        by_revision = sorted(seen, key=lambda o: o.revision)
        times = [o.updated_ms for o in by_revision]
        assert times == sorted(times), [(o.revision, o.updated_ms) for o in by_revision]
    finally:
        channel.close()
