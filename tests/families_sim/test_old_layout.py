"""An older data directory (sim records in `<data_dir>/sim/ops/`, before the operations
journal) is migrated into the journal on open, or refused while its episode process may run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tether import _exit
from tether.families.sim import EpisodeRequest, ProcessIdentity, ProvenAbsent, SimProvider
from tether.families.sim.errors import InvalidEpisodeRequest
from tether.operations import JournalError
from tether.runtime import ArtifactStore

from tests.demo._support import demo_argv

REQ = EpisodeRequest.create((0.2, 0.15), seed=5, episodes=1, steps=300)
SMALL = ["--targets", "2", "--episodes", "1", "--steps", "200", "--port", "0"]


def _old_dir(data: Path, operation_id: str) -> Path:
    path = data / "sim" / "ops" / hashlib.sha256(operation_id.encode()).hexdigest()[:40]
    path.mkdir(parents=True, exist_ok=True)
    return path


def _dump(path: Path, doc: Any) -> None:
    path.write_bytes(json.dumps(doc, sort_keys=True).encode())


def _dead() -> ProcessIdentity:
    me = ProcessIdentity.of(os.getpid())
    return ProcessIdentity(me.pid, me.start_time + 1, me.boot_id, me.host)


def _old_operation(data: Path, operation_id: str, child: ProcessIdentity) -> Path:
    """What the older provider wrote for a bound operation whose attempt 1 started."""
    old = _old_dir(data, operation_id)
    _dump(old / "operation.json", {"operation_id": operation_id, "request_digest": REQ.digest()})
    marker = {"operation_id": operation_id, "attempt": 1, "request_digest": REQ.digest()}
    _dump(old / "attempt-1.start", {**marker, "child": child.to_dict(), "parent_pid": 1})
    return old


def to_old_layout(data: Path) -> int:
    """Turn a data directory's journal back into the older layout (what an older Tether left):
    `operation.json` instead of `bound.json`, guards as `guard-<n>.json`, under `sim/ops/`."""
    ops = data / "operations" / "ops"
    count = 0
    for entry in sorted(ops.iterdir()):
        bound = json.loads((entry / "bound.json").read_bytes())
        legacy = {"operation_id": bound["operation_id"], "request_digest": bound["request_digest"]}
        _dump(entry / "operation.json", legacy)
        (entry / "bound.json").unlink()
        for proof in entry.glob("proof-guard-*.json"):
            doc = json.loads(proof.read_bytes())
            doc.pop("proof")
            _dump(entry / proof.name.removeprefix("proof-"), doc)
            proof.unlink()
        (data / "sim" / "ops").mkdir(parents=True, exist_ok=True)
        entry.rename(data / "sim" / "ops" / entry.name)
        count += 1
    shutil.rmtree(data / "operations")
    return count


def test_an_older_layout_is_migrated_on_open_and_nothing_is_lost(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    with SimProvider(tmp_path / "scratch", artifacts=store) as scratch:
        done = scratch.execute("done-op", 1, REQ)
    finished = _old_operation(tmp_path, "done-op", _dead())
    pointer = {
        "ref": done.result.ref,
        "digest": done.digest,
        "media_type": done.result.media_type,
        "size": done.result.size,
    }
    _dump(finished / "result.json", pointer)
    gone = _old_operation(tmp_path, "gone-op", _dead())
    _dump(gone / "attempt-1.fenced", {"fenced_by_attempt": 2, "by": "reconcile"})
    old_guard = {"operation_id": "gone-op", "attempt": 2, "fenced_attempts": [1]}
    _dump(gone / "guard-2.json", old_guard)

    provider = SimProvider(tmp_path, artifacts=store)
    assert not (tmp_path / "sim" / "ops").exists()
    found = provider.find_result("done-op")
    assert found is not None and found.digest == done.digest  # verified on reading
    reused = provider.execute("done-op", 2, REQ)
    assert reused.reused and provider.entry("done-op").attempts() == [1]
    op = provider.operation("gone-op")
    assert op is not None and op.request_digest == REQ.digest()
    assert op.attempts() == [1] and op.fenced(1)
    assert op.proof("guard-2") is not None
    assert {k: v for k, v in op.proof("guard-2").items() if k not in ("proof", "digest")} == (
        old_guard
    )
    assert isinstance(provider.reconcile("gone-op", 2), ProvenAbsent)
    # The binding kept its digest: another request under the id is still a conflict.
    other = EpisodeRequest.create((0.2, 0.15), seed=6, episodes=1, steps=300)
    with pytest.raises(InvalidEpisodeRequest, match="different request"):
        provider.execute("gone-op", 2, other)
    rerun = provider.execute("gone-op", 2, REQ)
    assert not rerun.reused and rerun.summary["attempt"] == 2
    assert {s["operation_id"] for s in provider.journal.query()} == {"done-op", "gone-op"}
    provider.close()
    # Opening again finds nothing more to migrate.
    SimProvider(tmp_path, artifacts=store).close()


def test_an_older_layout_whose_episode_process_may_run_is_refused(tmp_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) as running:
        try:
            old = _old_operation(tmp_path, "live-op", ProcessIdentity.of(running.pid))
            with pytest.raises(JournalError) as refused:
                SimProvider(tmp_path)
            assert refused.value.code == "old_layout"
            assert "stop that Tether" in refused.value.message
            assert str(running.pid) in refused.value.message
            assert sorted(p.name for p in old.iterdir()) == ["attempt-1.start", "operation.json"]
            demo = subprocess.run(
                demo_argv(tmp_path, *SMALL), capture_output=True, text=True, timeout=120
            )
        finally:
            running.kill()
    assert demo.returncode == _exit.STORE_UNUSABLE, demo.stdout + demo.stderr
    [line] = demo.stderr.strip().splitlines()
    assert line.startswith("tether demo: old_layout: ") and "Traceback" not in demo.stderr
    # Once the process is gone, the same open migrates it.
    SimProvider(tmp_path).close()
    assert not (tmp_path / "sim" / "ops").exists()


def test_a_demo_data_dir_of_the_older_layout_resumes_after_migration(tmp_path: Path) -> None:
    first = subprocess.run(demo_argv(tmp_path, *SMALL), capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stderr
    assert to_old_layout(tmp_path) == 2
    again = subprocess.run(demo_argv(tmp_path, *SMALL), capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming (2 activities already settled)" in again.stdout
    assert not (tmp_path / "sim" / "ops").exists()
    assert len(list((tmp_path / "operations" / "ops").iterdir())) == 2
