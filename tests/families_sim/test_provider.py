"""Start markers, fences and reconciliation facts of the simulation provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether.families.sim import (
    RESULT_MEDIA_TYPE,
    EpisodeRequest,
    ProcessIdentity,
    ProvenAbsent,
    ResultFound,
    SimProvider,
    StillUnknown,
    decode_result,
)
from tether.families.sim.errors import (
    AttemptAlreadyStarted,
    EpisodeFailed,
    InvalidEpisodeRequest,
    ResultCorrupt,
    StaleAttemptAlive,
)
from tether.families.sim.provider import (
    CRASH_ENV,
    EXIT_FENCED,
    EXIT_PARENT_GONE,
    read_marker,
)
from tether.operations import Operation
from tether.runtime import ArtifactStore

REQ = EpisodeRequest.create((0.2, 0.15), seed=5, episodes=1, steps=400)


def _fake_marker(op: Operation, attempt: int, child: ProcessIdentity) -> None:
    op.start(attempt, {"operation_id": "x", "child": child.to_dict()})


def _dead_identity() -> ProcessIdentity:
    me = ProcessIdentity.of(os.getpid())
    # Same live pid, different start time: pid reuse must not pass for the recorded child.
    return ProcessIdentity(me.pid, me.start_time + 1, me.boot_id, me.host)


def test_execute_publishes_once_and_later_calls_reuse_it(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    first = provider.execute("op", 1, REQ.to_dict())
    assert not first.reused and first.summary["attempt"] == 1
    assert first.summary["operation_id"] == "op"
    op = provider.entry("op")
    assert op.attempts() == [1]
    marker = read_marker(op, 1)
    assert marker["child"]["pid"] != os.getpid()
    again = provider.execute("op", 2, REQ)
    assert again.reused and again.digest == first.digest
    # Reuse never started a child: no marker for attempt 2.
    assert op.attempts() == [1]
    fact = provider.reconcile("op", 3)
    assert isinstance(fact, ResultFound) and fact.outcome.digest == first.digest


def test_progress_reports_steps_and_error(tmp_path: Path) -> None:
    seen: list[tuple[int, int, float]] = []
    SimProvider(tmp_path).execute("op", 1, REQ, progress=lambda d, t, e: seen.append((d, t, e)))
    assert seen[-1][0] == seen[-1][1] == 400
    assert all(e >= 0 for _, _, e in seen)


def test_an_operation_id_cannot_be_rebound_to_another_request(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    provider.execute("op", 1, REQ)
    other = EpisodeRequest.create((0.2, 0.15), seed=6, episodes=1, steps=400)
    with pytest.raises(InvalidEpisodeRequest, match="different request"):
        provider.execute("op", 2, other)


def test_marker_whose_child_is_alive_is_unknown(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    _fake_marker(op, 1, ProcessIdentity.of(os.getpid()))
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, StillUnknown)
    assert "still running" in fact.reason
    assert fact.evidence["children"][0]["alive"] is True
    assert fact.evidence["reason"] == "episode_process_may_run"
    with pytest.raises(StaleAttemptAlive):
        provider.execute("op", 2, REQ)
    assert op.attempts() == [1]


def test_marker_whose_child_is_provably_gone_is_confirmed_absent(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    _fake_marker(op, 1, _dead_identity())
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ProvenAbsent)
    proof = json.loads(fact.data)
    assert proof == fact.proof
    assert op.proof("guard-2") == {**fact.proof, "digest": fact.guard_digest}
    assert proof["fenced_attempts"] == [1]
    assert "now belongs to" in proof["children_gone"][0]["observed"]
    assert op.fenced(1)
    # Reconciling again gives the same guard (same bytes, same digest).
    again = provider.reconcile("op", 2)
    assert isinstance(again, ProvenAbsent) and again.guard_digest == fact.guard_digest
    # Exactly one fresh attempt may then run.
    outcome = provider.execute("op", 2, REQ)
    assert not outcome.reused and outcome.summary["attempt"] == 2


def test_a_gone_child_of_another_boot_or_a_vanished_pid_is_also_absent(tmp_path: Path) -> None:
    me = ProcessIdentity.of(os.getpid())
    assert ProcessIdentity(me.pid, me.start_time, "other-boot", me.host).observe()[0] is False
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone = ProcessIdentity(int(done.stdout), 1, me.boot_id, me.host)
    assert gone.observe()[0] is False
    assert ProcessIdentity(me.pid, me.start_time, me.boot_id, "elsewhere").observe()[0] is None


def test_no_marker_at_all_is_absent_and_fences_the_earlier_attempt(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    fact = provider.reconcile("op", 3)
    assert isinstance(fact, ProvenAbsent)
    op = provider.entry("op")
    assert op.fenced(1) and op.fenced(2)


def test_the_same_attempt_cannot_start_twice(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    _fake_marker(op, 1, _dead_identity())
    with pytest.raises(AttemptAlreadyStarted):
        provider.execute("op", 1, REQ)
    assert op.result() is None


def _run_child(op: Operation, attempt: int, parent: int) -> int:
    job = json.dumps({"operation_id": "op", "request": REQ.to_dict()}).encode()
    argv = [
        sys.executable,
        "-m",
        "tether.families.sim._child",
        str(op.path),
        str(attempt),
        str(parent),
    ]
    return subprocess.run(argv, input=job, capture_output=True, check=False).returncode


def test_a_fenced_attempt_child_never_runs(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    assert isinstance(provider.reconcile("op", 2), ProvenAbsent)
    op = provider.entry("op")
    # A stale attempt-1 child arriving late is refused its marker by the fence and stops.
    assert _run_child(op, 1, os.getpid()) == EXIT_FENCED
    assert op.attempts() == [] and op.result() is None and op.pending() == {}


def test_a_child_whose_parent_is_not_the_expected_one_exits_before_any_marker(
    tmp_path: Path,
) -> None:
    op = SimProvider(tmp_path).entry("op")
    assert _run_child(op, 1, 1) == EXIT_PARENT_GONE
    assert op.attempts() == []


def test_partial_files_are_never_published(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    (op.path / ".result.json.tmp-123-abcd").write_bytes(b'{"ref": "artif')
    assert provider.find_result("op") is None
    assert isinstance(provider.reconcile("op", 2), ProvenAbsent)


def test_a_damaged_published_result_is_a_typed_error_not_a_reuse(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    outcome = provider.execute("op", 1, REQ)
    hexdigest = outcome.digest.removeprefix("sha256:")
    payload = tmp_path / "artifacts" / "sha256" / hexdigest[:2] / hexdigest
    data = payload.read_bytes()
    payload.write_bytes(data[:1000])  # the file in the artifact store is damaged
    with pytest.raises(ResultCorrupt):
        provider.reconcile("op", 2)
    payload.unlink()  # or lost: still never mistaken for an absent result
    with pytest.raises(ResultCorrupt):
        provider.reconcile("op", 2)
    payload.write_bytes(data)
    outcome.path.write_bytes(b"{")  # a damaged pointer too
    with pytest.raises(ResultCorrupt):
        provider.reconcile("op", 2)
    assert provider.entry("op").attempts() == [1]


def test_the_result_file_is_written_once_into_the_given_artifact_store(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "host-artifacts")
    provider = SimProvider(tmp_path / "sim")
    outcome = provider.execute("op", 1, REQ, artifacts=store)
    assert store.is_durable(outcome.result) and outcome.result.media_type == RESULT_MEDIA_TYPE
    assert store.get(outcome.result) == outcome.data
    assert decode_result(outcome.data).summary == outcome.summary
    # The provider's directory holds only the small pointer, never a second copy of the file.
    sizes = [p.stat().st_size for p in (tmp_path / "sim").rglob("*") if p.is_file()]
    assert max(sizes) < 4096 < outcome.result.size
    fact = provider.reconcile("op", 2, artifacts=store)
    assert isinstance(fact, ResultFound) and fact.outcome.result == outcome.result
    # Looked up in a store that lacks the file, the published result is not "absent".
    with pytest.raises(ResultCorrupt):
        provider.reconcile("op", 2)


def test_bad_attempt_and_operation_ids_are_typed_errors(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    with pytest.raises(InvalidEpisodeRequest):
        provider.reconcile("op", 0)
    with pytest.raises(InvalidEpisodeRequest):
        provider.reconcile("", 1)
    with pytest.raises(InvalidEpisodeRequest):
        provider.execute("op", 1, {"seed": 1})


def test_a_dead_episode_host_is_replaced_and_close_stops_it(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path)
    provider.execute("op-a", 1, REQ)
    host = provider._host
    assert host is not None and host._proc is not None
    first = host._proc
    first.kill()
    first.wait()
    outcome = provider.execute("op-b", 1, REQ)
    assert not outcome.reused
    assert host._proc is not None and host._proc.pid != first.pid
    second = host._proc
    provider.close()
    assert second.poll() is not None


def test_warming_starts_one_ready_host_that_later_attempts_reuse(tmp_path: Path) -> None:
    with SimProvider(tmp_path) as provider:
        provider.warm()
        host = provider._host
        assert host is not None and host._proc is not None and host._proc.poll() is None
        pid = host._proc.pid
        provider.execute("op", 1, REQ)
        assert host._proc.pid == pid


def test_a_file_made_durable_but_never_published_is_no_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CRASH_ENV, "sim.artifact_durable")  # the child dies in attempt 1 only
    with SimProvider(tmp_path) as provider:
        with pytest.raises(EpisodeFailed):
            provider.execute("op", 1, REQ)
        assert len(list((tmp_path / "artifacts" / "sha256").rglob("*"))) == 2  # dir + file
        assert provider.find_result("op") is None
        assert isinstance(provider.reconcile("op", 2), ProvenAbsent)
        outcome = provider.execute("op", 2, REQ)
        assert not outcome.reused and outcome.summary["attempt"] == 2
        found = provider.find_result("op")
        assert found is not None and found.result == outcome.result


def test_the_same_intent_gives_the_same_trajectory_in_two_episode_processes(
    tmp_path: Path,
) -> None:
    outcomes = []
    for name in ("a", "b"):
        with SimProvider(tmp_path / name) as provider:
            outcomes.append(provider.execute("op", 1, REQ))
    a, b = (o.summary for o in outcomes)
    assert a["trajectory_digest"] == b["trajectory_digest"]
    assert a["trajectory_digest"] == decode_result(outcomes[0].data).summary["trajectory_digest"]
    assert a == b and "wall_time_s" not in a  # nothing clock-dependent is in the summary
    # So the result file is byte for byte the same, and its digest with it.
    assert outcomes[0].data == outcomes[1].data
    assert outcomes[0].result.digest == outcomes[1].result.digest
