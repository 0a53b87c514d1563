"""Crash tests: the episode child dies with its worker, and a restart reconciles correctly."""

from __future__ import annotations

import signal
from pathlib import Path

from tether.families.sim import ProcessIdentity, ProvenAbsent, ResultFound, SimProvider
from tether.families.sim.provider import CRASH_ENV

from tests.families_sim.support import events_until, start_worker, wait_gone


def test_killing_the_worker_mid_episode_kills_its_child_and_allows_one_retry(
    tmp_path: Path,
) -> None:
    with start_worker(tmp_path, 1, 200_000) as worker:
        child = ProcessIdentity.from_dict(
            {k: v for k, v in events_until(worker, "child").items() if k != "event"}
        )
        events_until(worker, "progress")
        assert child.observe()[0] is True
        worker.send_signal(signal.SIGKILL)
    wait_gone(child)

    provider = SimProvider(tmp_path)
    assert provider.find_result("op") is None
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ProvenAbsent)
    assert fact.proof["children_gone"][0]["child"]["pid"] == child.pid

    with start_worker(tmp_path, 2, 200_000) as retry:
        done = events_until(retry, "done")
    assert retry.returncode == 0 and done["reused"] is False
    found = provider.find_result("op")
    assert found is not None and found.summary["attempt"] == 2


def test_worker_killed_after_the_result_is_durable_is_recovered_not_rerun(
    tmp_path: Path,
) -> None:
    with start_worker(tmp_path, 1, 300, **{CRASH_ENV: "sim.result_durable"}) as worker:
        assert worker.stdout is not None
        worker.stdout.read()
    assert worker.returncode == -signal.SIGKILL
    provider = SimProvider(tmp_path)
    fact = provider.reconcile("op", 2)
    assert isinstance(fact, ResultFound) and fact.outcome.summary["attempt"] == 1
    with start_worker(tmp_path, 2, 300) as again:
        assert events_until(again, "done")["reused"] is True
    assert again.returncode == 0
    assert provider.entry("op").attempts() == [1]
