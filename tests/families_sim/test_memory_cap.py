"""A request too large to run (episodes x steps preallocated past the memory cap) is refused at
admission with its reason: the family's pure admission check refuses it in the required
projector, it is admitted already failed, never claimed and never bound, and the world observes
it as a failed reach. The provider's own check stays as the second line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tether.activities import ActivityKey
from tether.errors import NotClaimable
from tether.families.sim import EpisodeRequest, SimProvider
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.families.sim.errors import InvalidEpisodeRequest, RequestTooLarge
from tether.families.sim.family import (
    KIND,
    MISSION,
    MISSION_ENTITY,
    OBSERVATION,
    Mission,
    admission_check,
    refusal_for,
)
from tether.families.sim.provider import (
    BYTES_PER_REQUEST,
    BYTES_PER_STEP,
    DEFAULT_MEMORY_CAP_BYTES,
    estimated_memory_bytes,
)
from tether.operations import Journal
from tether.runtime import (
    DEFAULT_INLINE_BOUND,
    REFUSAL_MEDIA_TYPE,
    ActivityRequest,
    Host,
    Refusal,
)
from tether.world import ComponentWrite

from tests.demo._support import demo_argv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from hosttools import make_host

#: Room for 1000 steps over all episodes.
CAP = BYTES_PER_REQUEST + 1000 * BYTES_PER_STEP
KEY = ActivityKey("w", KIND, "reach-0000")
HERE = Path(__file__).resolve().parent


def _request(episodes: int, steps: int) -> dict[str, object]:
    return EpisodeRequest.create((0.2, 0.15), seed=1, episodes=episodes, steps=steps).to_dict()


def test_the_estimate_grows_with_episodes_times_steps_and_the_default_is_safe() -> None:
    small = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=500)
    assert estimated_memory_bytes(small) == CAP
    big = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=1000, steps=10_000_000)
    assert estimated_memory_bytes(big) > 100 * DEFAULT_MEMORY_CAP_BYTES
    # The demo's defaults and the README's long run fit under the default cap.
    for episodes, steps in ((2, 3000), (2, 100_000)):
        req = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=episodes, steps=steps)
        assert estimated_memory_bytes(req) < DEFAULT_MEMORY_CAP_BYTES


def test_the_admission_check_refuses_past_the_cap_with_the_numbers_and_is_pure() -> None:
    assert refusal_for(_request(2, 500), CAP) is None  # exactly at the cap runs
    refusal = refusal_for(_request(2, 501), CAP)
    assert refusal is not None and refusal.code == "request_too_large"
    assert refusal.details == {
        "episodes": 2,
        "steps": 501,
        "bytes_per_step": BYTES_PER_STEP,
        "estimated_bytes": CAP + 2 * BYTES_PER_STEP,
        "cap_bytes": CAP,
    }
    # Amounts too close to tell apart in MiB are given in bytes; just past a whole-MiB cap
    # never reads as equal to it.
    assert f"{CAP + 2 * BYTES_PER_STEP} bytes of memory, over the cap of {CAP} bytes" in (
        refusal.reason
    )
    at_64 = refusal_for(_request(2, 100), 64 << 20)
    assert at_64 is not None and "64.1 MiB of memory, over the cap of 64 MiB" in at_64.reason
    check = admission_check(CAP)
    assert check(ActivityRequest(KIND, "reach-0000", _request(2, 501))) == refusal
    assert check(ActivityRequest(KIND, "reach-0000", _request(1, 1000))) is None
    # It closes over the cap alone: the Family accepts it as pure.
    assert [c.cell_contents for c in check.__closure__ or ()] == [CAP]
    invalid = refusal_for({"episodes": 2}, CAP)
    assert invalid is not None and invalid.code == "invalid_episode_request"
    with pytest.raises(InvalidEpisodeRequest, match="memory_cap_bytes"):
        admission_check(1 << 20)


def test_the_provider_still_refuses_before_binding_anything(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path, memory_cap_bytes=CAP)
    too_big = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=501)
    with pytest.raises(RequestTooLarge) as refused:
        provider.execute("op", 1, too_big)
    assert refused.value.code == "request_too_large"
    assert refused.value.details["cap_bytes"] == CAP
    assert "episodes x 501 steps" in refused.value.message
    assert provider.operation("op") is None  # nothing bound, nothing started
    fits = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=500)
    assert provider.execute("op", 1, fits).summary["steps"] == 1000
    provider.close()


@pytest.mark.parametrize("cap", [0, 1 << 20, True, "1GiB"])
def test_a_cap_below_the_fixed_cost_or_not_a_number_is_refused(tmp_path: Path, cap: object) -> None:
    with pytest.raises(InvalidEpisodeRequest, match="memory_cap_bytes"):
        SimProvider(tmp_path, memory_cap_bytes=cap)  # type: ignore[arg-type]
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    with pytest.raises(InvalidEpisodeRequest, match="memory_cap_bytes"):
        sim_family(adapter, memory_cap_bytes=cap)  # type: ignore[arg-type]
    adapter.close()


def _commit_mission(host: Host, steps: int = 600) -> None:
    mission = Mission(targets=1, episodes=2, steps=steps)
    host.create_world("w")
    host.commit_tick("w", [ComponentWrite(MISSION_ENTITY, MISSION, mission.to_component())])
    kick_planner(host, "w")  # the tick that commits reach 0's intent, projected after it


def test_an_oversized_reach_is_admitted_refused_never_claimed_and_observed(
    tmp_path: Path,
) -> None:
    # The adapter would run it (its cap is the default): only the family's check refuses it.
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    with make_host(tmp_path, sim_family(adapter, memory_cap_bytes=CAP)) as host:
        _commit_mission(host)
        rec = host.get(KEY)
        assert rec is not None and rec.refused_at_admission
        assert rec.result is not None and rec.result.failed
        assert rec.result.media_type == REFUSAL_MEDIA_TYPE
        assert rec.recorded_result is not None and rec.recorded_result.attempt == 0
        assert (rec.attempt_count, rec.fence, rec.attempt, rec.operation_id) == (0, 0, None, None)
        assert rec.claimable_from_ms is None and rec.pending_observation
        refusal = Refusal.from_document(host.artifacts.get(rec.result))
        assert refusal.code == "request_too_large"
        assert refusal.details["steps"] == 600 and refusal.details["cap_bytes"] == CAP
        assert "2 episodes x 600 steps" in refusal.reason
        # No worker ever claims it, by scan or by key.
        worker = host.new_worker()
        assert not worker.run_once()
        worker.close()
        with pytest.raises(NotClaimable):
            host.catalog.claim_key(KEY, "someone", 1000)
        # Projecting the same committed tick again is a no-op (the same record, same version).
        host.projector.project(host.snapshot("w"))
        assert host.get(KEY) == rec
        # A later tick observes and settles it like any other failed result.
        host.observe_once()
        settled = host.get(KEY)
        assert settled is not None and settled.settlement is not None
        assert settled.result == rec.result and settled.attempt_count == 0
        summary = host.snapshot("w").get("reach-0000", OBSERVATION)["summary"]
        assert summary == {
            "failed": True,
            "success": False,
            "reason": refusal.reason,
            "code": "request_too_large",
        }
        assert host.snapshot("w").get(MISSION_ENTITY, "physical_ai.mission.done") == {
            "targets": 1,
            "succeeded": 0,
        }
    assert adapter.provider.journal.query() == []  # no provider operation was ever bound
    assert not [p for p in (tmp_path / "operations").rglob("*") if p.is_file()]
    adapter.close()


def test_a_reach_within_the_cap_is_admitted_to_run(tmp_path: Path) -> None:
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    with make_host(tmp_path, sim_family(adapter, memory_cap_bytes=CAP)) as host:
        _commit_mission(host, steps=500)
        rec = host.get(KEY)
        assert rec is not None and not rec.refused_at_admission
        assert rec.result is None and rec.claimable_from_ms is not None
    adapter.close()


def test_the_adapter_second_line_refuses_a_reach_admitted_under_a_larger_cap(
    tmp_path: Path,
) -> None:
    """A reach admitted under a larger cap (the family's check passed) is refused by the
    adapter at its first attempt, before anything is bound, with the same refusal document."""
    adapter = SimEpisodeAdapter(tmp_path, warm=False, memory_cap_bytes=CAP)
    with Host(
        tmp_path,
        [sim_family(adapter, memory_cap_bytes=DEFAULT_MEMORY_CAP_BYTES)],
        workers=0,
        observe=False,
    ) as host:
        _commit_mission(host)
        assert not host.get(KEY).refused_at_admission  # type: ignore[union-attr]
        worker = host.new_worker()
        assert worker.run_once()
        assert not worker.run_once()  # nothing left to claim: it is not retried
        worker.close()
        rec = host.get(KEY)
        assert rec is not None and rec.result is not None and rec.result.failed
        assert rec.result.media_type == REFUSAL_MEDIA_TYPE and rec.attempt_count == 1
        assert not rec.refused_at_admission
        host.observe_once()
        summary = host.snapshot("w").get("reach-0000", OBSERVATION)["summary"]
        assert summary["code"] == "request_too_large" and "over the cap" in summary["reason"]
    assert adapter.provider.journal.query() == []
    adapter.close()


CHILD = """
import sys
from pathlib import Path
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.families.sim.family import MISSION, MISSION_ENTITY, Mission
from tether.runtime import Host
from tether.world import ComponentWrite

data = Path(sys.argv[1])
adapter = SimEpisodeAdapter(data, warm=False)
host = Host(data, [sim_family(adapter, memory_cap_bytes=int(sys.argv[2]))], workers=0,
            observe=False)
if "w" not in host.ledger.worlds():
    host.create_world("w")
    mission = Mission(targets=1, episodes=2, steps=600)
    host.commit_tick("w", [ComponentWrite(MISSION_ENTITY, MISSION, mission.to_component())])
host.recover()
kick_planner(host, "w")
host.close()
adapter.close()
"""


def _reach_request(data_dir: Path) -> object:
    """Reach 0's committed request, read from the world ledger."""
    adapter = SimEpisodeAdapter(data_dir, warm=False)
    with Host(data_dir, [sim_family(adapter)], workers=0) as host:
        intent = host.snapshot("w").get("reach-0000", "physical_ai.sim_episode.intent")
    adapter.close()
    return intent["request"]


@pytest.mark.parametrize("point", ["after_refusal_document", "after_admission"])
def test_a_crash_between_the_refusal_document_and_the_admission_loses_nothing(
    tmp_path: Path, point: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}

    def child(crash: str | None) -> int:
        extra = {} if crash is None else {"TETHER_CRASH_AT": crash}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path), str(CAP)],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, -signal.SIGKILL), done.stderr
        return done.returncode

    assert child(point) == -signal.SIGKILL
    refusal = refusal_for(_reach_request(tmp_path), CAP)
    assert refusal is not None
    data = refusal.document()
    hexdigest = hashlib.sha256(data).hexdigest()
    assert len(data) > DEFAULT_INLINE_BOUND  # a file of the artifact store, not inline
    assert (tmp_path / "artifacts" / "sha256" / hexdigest[:2] / hexdigest).read_bytes() == data
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    with Host(tmp_path, [sim_family(adapter, memory_cap_bytes=CAP)], workers=0) as host:
        killed = host.get(KEY)
        if point == "after_refusal_document":
            assert killed is None  # the document is durable, the admission is not
        else:
            assert killed is not None and killed.refused_at_admission
            assert killed.result is not None and killed.result.ref == f"artifact:sha256/{hexdigest}"
    # The restart finishes the pending projection: admitted refused, with that very document.
    assert child(None) == 0
    with Host(tmp_path, [sim_family(adapter, memory_cap_bytes=CAP)], workers=0) as host:
        rec = host.get(KEY)
        assert rec is not None and rec.refused_at_admission and rec.attempt_count == 0
        assert rec.result is not None and rec.result.ref == f"artifact:sha256/{hexdigest}"
        assert rec.result.digest == f"sha256:{hexdigest}"
        host.observe_once()
        assert host.get(KEY).settlement is not None  # type: ignore[union-attr]
    assert adapter.provider.journal.query() == []
    adapter.close()


def test_the_demo_shows_an_oversized_mission_refused_at_admission(tmp_path: Path) -> None:
    argv = demo_argv(tmp_path, "--episodes", "1000", "--steps", "10000000", "--port", "0")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("tether demo: request_too_large: 1000 episodes x 10000000 steps")
    assert line.endswith("refused at admission, never run: reach-0000, reach-0001, reach-0002")
    # The mission ran to its end: each reach shows refused in the summary, never attempted.
    rows = [r.split() for r in done.stdout.splitlines() if r.startswith("reach-") and "  0  " in r]
    assert [r[0] for r in rows if r[-1] == "request_too_large"] == [
        "reach-0000",
        "reach-0001",
        "reach-0002",
    ]
    assert "mission: 0/3 reaches within tolerance" in done.stdout
    assert Journal(tmp_path / "operations").query() == []  # nothing was bound or started
    # Not parked, so `tether operator list` lists nothing; `show` names the refusal.
    operator = [sys.executable, "-m", "tether", "operator", "--data-dir", str(tmp_path)]
    listed = subprocess.run([*operator, "list"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    shown = subprocess.run(
        [*operator, "show", "demo/physical_ai.sim_episode/reach-0001"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["reason"].startswith("refused at admission: request_too_large: 1000 episodes")
    assert doc["refusal"]["details"]["cap_bytes"] == DEFAULT_MEMORY_CAP_BYTES
    assert doc["operation_id"] is None and doc["awaiting_decision"] is False
    capped = demo_argv(
        tmp_path / "b", "--steps", "10000", "--memory-cap-mb", "65", "--port", "0", "--json"
    )
    done = subprocess.run(capped, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "request_too_large" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "refused" and doc["exit_code"] == 2
    assert [r["code"] for r in doc["refused"]] == ["request_too_large"] * 3
    assert all(a["attempts"] == 0 for a in doc["activities"])
