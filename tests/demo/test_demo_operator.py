"""`tether operator` on the demo's parked sim reaches: list, show, and resolve them done (on a
verified durable result), reissue (on the provider's proof) or abandon; the demo then resumes.

Decisions go through a `tether serve` on the demo's data dir (`tests._serve.decider`: no worker,
so it claims nothing), which verifies the credential against its own host.toml; the demo runs
again once it is gone (one daemon per data dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tether import _exit
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.devices.credentials import hash_secret
from tether.families.sim import ProcessIdentity, SimProvider
from tether.families.sim.adapter import MAX_FAILED_STARTS
from tether.families.sim.family import KIND, OBSERVATION
from tether.families.sim.provider import CRASH_ENV
from tether.runtime import ArtifactStore
from tether.world import SqliteLedger

from tests._serve import decider
from tests.demo._support import demo_argv

SMALL = ["--targets", "2", "--episodes", "1", "--steps", "200", "--port", "0", "--lease-ms", "500"]
SECRET = "correct horse"
KEY = ActivityKey("demo", KIND, "reach-0000")


def _demo(data: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.run(
        demo_argv(data, *SMALL),
        capture_output=True,
        text=True,
        timeout=240,
        env={**clean, **env},
    )


def _config(tmp: Path) -> Path:
    path = tmp / "host.toml"
    credential = hash_secret(SECRET)
    text = (
        f'[host]\nstate_dir = "{tmp / "state"}"\n'
        f'[operators.ada]\ncredential = "{credential}"\nrole = "operator"\n'
    )
    path.write_text(text)
    return path


def _operator(
    data: Path, *args: str, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tether", "operator", "--data-dir", str(data), "--json"]
    if config is not None:
        argv += ["--config", str(config)]
        if args and args[0] == "resolve":
            args = (*args, "--credential-stdin")  # the secret on stdin, never argv or env
    return subprocess.run([*argv, *args], input=SECRET, capture_output=True, text=True, timeout=120)


def _listed(data: Path) -> list[dict[str, Any]]:
    done = _operator(data, "list")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def _resolve(
    data: Path, config: Path, decision: str, revision: int
) -> subprocess.CompletedProcess[str]:
    key = f"demo/{KIND}/reach-0000"
    return _operator(
        data,
        "resolve",
        key,
        "--decision",
        decision,
        "--revision",
        str(revision),
        "--operator",
        "ada",
        config=config,
    )


def _park_dying(data: Path) -> dict[str, Any]:
    """Park reach-0000 for real: its episode process dies at every attempt."""
    parked = _demo(data, **{CRASH_ENV: "sim.child_started@*"})
    assert parked.returncode == _exit.PARKED, parked.stdout + parked.stderr
    # In the summary too (its table was empty: "mission: 0/0 reaches").
    rows = [line for line in parked.stdout.splitlines() if line.startswith("reach-0000 ")]
    assert rows and rows[-1].rstrip().endswith("parked for an operator"), parked.stdout
    assert "mission: 0/2 reaches" in parked.stdout, parked.stdout
    [item] = _listed(data)
    assert item["key"] == f"demo/{KIND}/reach-0000" and item["awaiting_decision"]
    assert item["reason"] == "episode_process_keeps_dying"
    return item


def _worker_daemon(config: Path, data: Path) -> Any:
    """`tether serve` on `data` with one worker for the sim reaches (its reconciles run)."""
    from tests._serve import add_serve, daemon

    add_serve(
        config,
        f'\n[serve]\ndata_dir = "{data}"\nworkers = 1\nlease_ms = 500\nsse = "off"\n'
        'families = ["tether.serve.families:sim_families"]\n',
    )
    return daemon(config)


def _record(data: Path) -> Any:
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    try:
        return catalog.get(KEY)
    finally:
        catalog.close()


def _observed(data: Path) -> dict[str, Any]:
    ledger = SqliteLedger.open(data / "world.db")
    try:
        return dict(ledger.read_at(ledger.head("demo")).get("reach-0000", OBSERVATION))
    finally:
        ledger.close()


def test_a_parked_sim_reach_is_shown_and_reissued_on_the_providers_proof(tmp_path: Path) -> None:
    data, config = tmp_path / "data", _config(tmp_path)
    item = _park_dying(data)
    shown = _operator(data, "show", item["key"])
    assert shown.returncode == 0, shown.stderr
    evidence = json.loads(shown.stdout)["evidence"]
    assert len(evidence["provider_state"]["attempts"]) == MAX_FAILED_STARTS
    # `done` needs a verified durable result, and there is none: refused, nothing recorded.
    with decider(config, data):
        refused = _resolve(data, config, "done", item["revision"])
        reissued = _resolve(data, config, "reissue", item["revision"])
    assert refused.returncode == 1 and json.loads(refused.stdout)["code"] == "not_supported"
    assert reissued.returncode == 0, reissued.stdout + reissued.stderr
    assert json.loads(reissued.stdout)["status"] == "resolved"
    record = _record(data)
    assert record.retry_guard is not None and not record.awaiting_decision
    # The guard is the provider's proof in the journal: every handed-out attempt fenced, every
    # process gone.
    next_attempt = record.attempt_count + 1
    op = SimProvider(data).operation(operation_id_for(KEY))
    assert op is not None
    proof = op.proof(f"reissue-{next_attempt}")
    assert proof is not None and all(c["alive"] is False for c in proof["children_gone"])
    assert all(op.fenced(k) for k in range(1, next_attempt))
    stored = ArtifactStore(data / "artifacts").get_bytes(
        record.retry_guard.guard.ref, record.retry_guard.guard.digest
    )
    assert json.loads(stored)["digest"] == proof["digest"]
    # The decision authorised exactly one fresh attempt: the demo finishes the mission.
    resumed = _demo(data)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "rerun after a reissue by operator ada" in resumed.stdout  # not "proof of absence"
    assert _observed(data)["summary"]["attempt"] == next_attempt
    # The dead episode processes, then the one the decision authorised.
    assert len(op.attempts()) == MAX_FAILED_STARTS + 1 and op.attempts()[-1] == next_attempt
    assert _listed(data) == []


def test_a_parked_sim_reach_is_abandoned_and_the_mission_moves_on(tmp_path: Path) -> None:
    data, config = tmp_path / "data", _config(tmp_path)
    item = _park_dying(data)
    with decider(config, data):
        abandoned = _resolve(data, config, "abandon", item["revision"])
    assert abandoned.returncode == 0, abandoned.stdout + abandoned.stderr
    resumed = _demo(data)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "abandoned by operator ada" in resumed.stdout
    assert _observed(data)["summary"]["failed"] is True


def test_a_parked_sim_reach_is_marked_done_on_a_verified_durable_result(tmp_path: Path) -> None:
    data, config = tmp_path / "data", _config(tmp_path)
    died = _demo(data, TETHER_CRASH_AT="after_bind")
    assert died.returncode < 0
    # Attempt 1's episode process (elsewhere) still runs: the reach parks Unknown.
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) as stale:
        try:
            provider = SimProvider(data)
            marker = {"child": ProcessIdentity.of(stale.pid).to_dict()}
            provider.entry(operation_id_for(KEY)).start(1, marker)
            parked = _demo(data)
        finally:
            stale.kill()
    assert parked.returncode == _exit.PARKED, parked.stdout + parked.stderr
    [item] = _listed(data)
    assert item["reason"] == "episode_process_may_run"
    # Now the process is gone and the operation's episodes have run to a durable result.
    record = _record(data)
    request = json.loads(
        ArtifactStore(data / "artifacts").get_bytes(record.input_ref, record.input_digest)
    )
    with SimProvider(data, artifacts=ArtifactStore(data / "artifacts")) as provider:
        result = provider.execute(operation_id_for(KEY), record.attempt_count, request)
    # The provider state changed since the evidence: a new revision, the decision refused.
    with decider(config, data):
        stale_decision = _resolve(data, config, "done", item["revision"])
        assert stale_decision.returncode == 1
        assert json.loads(stale_decision.stdout)["code"] == "state_changed"
        [item] = _listed(data)
        done = _resolve(data, config, "done", item["revision"])
    assert done.returncode == 0, done.stdout + done.stderr
    resumed = _demo(data)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "done by operator ada" in resumed.stdout
    observed = _observed(data)
    assert observed["summary"]["trajectory_digest"] == result.summary["trajectory_digest"]
    assert observed["summary"]["success"] in (True, False) and "failed" not in observed["summary"]


def test_a_reach_its_adapter_refused_is_not_said_abandoned_by_an_operator(
    tmp_path: Path,
) -> None:
    """A reach admitted under the default memory cap and run under a smaller one is a failure
    its adapter recorded (`request_too_large`); the summary said "abandoned by an operator",
    though no operator decided anything."""
    data = tmp_path / "data"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    bigger = [*SMALL, "--steps", "20000"]  # about 68 MiB a reach: past a 65 MiB cap

    def demo(*extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            demo_argv(data, *bigger, *extra),
            capture_output=True,
            text=True,
            timeout=240,
            env={**clean, **env},
        )

    died = demo(TETHER_CRASH_AT="after_admission")  # admitted under the default cap
    assert died.returncode < 0, died.stdout + died.stderr
    resumed = demo("--memory-cap-mb", "65")
    rows = [line for line in resumed.stdout.splitlines() if line.startswith("reach-0000 ")]
    assert rows, resumed.stdout + resumed.stderr
    row = rows[-1]
    assert "abandoned" not in resumed.stdout, resumed.stdout
    assert row.rstrip().endswith("failed: request_too_large"), row
    assert _record(data).decision is None


def test_a_reach_parked_for_dying_stays_still_under_a_running_worker(tmp_path: Path) -> None:
    """A reach parked because its episode process kept dying was reconciled again each second
    by a running worker, and each time with a new evidence revision (the fresh proof of each
    attempt in it): an operator who read its evidence was refused `stale_revision` seconds
    later, for ever. It is asked about again only each minute, with the same evidence."""
    data, config = tmp_path / "data", _config(tmp_path)
    _park_dying(data)
    before = _record(data)
    with _worker_daemon(config, data):
        time.sleep(6.0)  # six reconciles, at a second each
    after = _record(data)
    assert after.awaiting_decision
    assert after.evidence_revision == before.evidence_revision, (before, after)
    assert after.attempt_count == before.attempt_count


def test_a_reach_whose_process_may_run_keeps_its_evidence_revision(tmp_path: Path) -> None:
    """A reach whose earlier episode process may still run is reconciled each second (it runs
    again once that process is gone); each reconcile's evidence named its own attempt, so
    each was a new evidence revision and an operator could never decide on the one read."""
    data, config = tmp_path / "data", _config(tmp_path)
    died = _demo(data, TETHER_CRASH_AT="after_bind")
    assert died.returncode < 0
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) as stale:
        try:
            marker = {"child": ProcessIdentity.of(stale.pid).to_dict()}
            SimProvider(data).entry(operation_id_for(KEY)).start(1, marker)
            parked = _demo(data)
            assert parked.returncode == _exit.PARKED, parked.stdout + parked.stderr
            before = _record(data)
            with _worker_daemon(config, data):
                time.sleep(5.0)  # reconciled each second: the process still runs
            after = _record(data)
        finally:
            stale.kill()
    assert after.awaiting_decision and after.attempt_count > before.attempt_count
    assert after.evidence_revision == before.evidence_revision, (before, after)
