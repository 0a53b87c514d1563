"""A result made durable but not published (the worker killed between the two) is reused after
its digest is verified, or removed once its attempt was fenced out: never left behind."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tether.families.sim import ProcessIdentity, ProvenAbsent, ResultFound, SimProvider
from tether.families.sim.provider import CRASH_ENV, CRASH_POINTS, StillUnknown

from tests.families_sim.support import events_until, start_worker, wait_gone

STAGED = {CRASH_ENV: "sim.result_staged"}


def _killed_in_the_window(root: Path, steps: int = 300) -> None:
    with start_worker(root, 1, steps, **STAGED) as worker:
        child = _identity(events_until(worker, "child"))
        assert worker.stdout is not None
        worker.stdout.read()
    assert worker.returncode == -signal.SIGKILL
    wait_gone(child)


def _identity(event: dict[str, Any]) -> ProcessIdentity:
    return ProcessIdentity.from_dict({k: v for k, v in event.items() if k != "event"})


def test_the_window_is_a_named_crash_point() -> None:
    assert CRASH_POINTS.index("sim.artifact_durable") < CRASH_POINTS.index("sim.result_staged")
    assert CRASH_POINTS.index("sim.result_staged") < CRASH_POINTS.index("sim.result_durable")


def test_a_staged_result_is_verified_and_reused_by_the_next_attempt(tmp_path: Path) -> None:
    _killed_in_the_window(tmp_path)
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    assert list(op.pending()) == [1] and op.result() is None  # durable, not published
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ResultFound) and fact.outcome.summary["attempt"] == 1
    assert op.pending() == {} and op.result() is not None  # published, the pending gone
    # Reused, never recomputed: the next attempt runs no episode process.
    again = provider.execute("op", 2, _request(provider))
    assert again.reused and again.digest == fact.outcome.digest
    assert op.attempts() == [1]
    assert sorted(p.name for p in op.path.glob("result*")) == ["result.json"]


def test_a_staged_result_that_does_not_verify_is_removed_not_published(tmp_path: Path) -> None:
    _killed_in_the_window(tmp_path)
    provider = SimProvider(tmp_path)
    op = provider.entry("op")
    [pointer] = op.pending().values()
    hexdigest = pointer["digest"].removeprefix("sha256:")
    payload = tmp_path / "artifacts" / "sha256" / hexdigest[:2] / hexdigest
    payload.write_bytes(payload.read_bytes()[:500])  # the disk lost the end of the file
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ProvenAbsent)
    assert fact.proof["discarded_pending"] == [{"attempt": 1, "digest": pointer["digest"]}]
    assert op.pending() == {} and op.result() is None and op.fenced(1)
    fresh = provider.execute("op", 2, _request(provider))
    assert not fresh.reused and fresh.summary["attempt"] == 2
    assert sorted(p.name for p in op.path.glob("result*")) == ["result.json"]


def test_a_staged_result_of_a_fenced_out_attempt_is_removed_and_one_attempt_reruns(
    tmp_path: Path,
) -> None:
    # Attempt 1 runs long; a reconciler fences it while its process lives (Unknown). The process
    # still finishes and stages its result, and its worker is killed before publishing.
    with start_worker(tmp_path, 1, 200_000, **STAGED) as worker:
        child = _identity(events_until(worker, "child"))
        events_until(worker, "progress")
        provider = SimProvider(tmp_path)
        unknown = provider.reconcile("op", 2)
        assert isinstance(unknown, StillUnknown) and unknown.evidence["children"][0]["alive"]
        assert worker.stdout is not None
        worker.stdout.read()
    assert worker.returncode == -signal.SIGKILL
    wait_gone(child)
    op = provider.entry("op")
    assert op.fenced(1) and list(op.pending()) == [1] and op.result() is None
    # The fenced-out attempt's result is never published: it is removed, and absence holds.
    fact = provider.reconcile("op", 3)
    assert isinstance(fact, ProvenAbsent)
    assert [d["attempt"] for d in fact.proof["discarded_pending"]] == [1]
    assert op.pending() == {} and op.result() is None
    outcome = provider.execute("op", 3, _request(provider))
    assert not outcome.reused and outcome.summary["attempt"] == 3
    assert op.attempts() == [1, 3]
    assert sorted(p.name for p in op.path.glob("result*")) == ["result.json"]


def _request(provider: SimProvider) -> dict[str, Any]:
    op = provider.operation("op")
    assert op is not None
    return dict(op.request)
