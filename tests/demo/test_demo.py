"""`tether demo` end to end: a small mission, kill -9 and resume, crash points, parked Unknown."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tether import _exit
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.families.sim import ProcessIdentity, SimProvider
from tether.families.sim.adapter import MAX_FAILED_STARTS
from tether.families.sim.family import KIND, OBSERVATION
from tether.families.sim.provider import CRASH_ENV
from tether.runtime import CRASH_POINTS
from tether.world import SqliteLedger

from tests.demo._support import demo_argv
from tests.sampling import sampled

SMALL = ["--targets", "2", "--episodes", "1", "--steps", "200", "--port", "0"]


def _cmd(data: Path, *extra: str) -> list[str]:
    return demo_argv(data, "--lease-ms", "500", *extra)


def _signalled(
    data: Path,
    args: list[str],
    sig: signal.Signals,
    seen: Callable[[str], bool],
    awaited: str,
    *,
    on_stderr: bool = False,
    timeout: float = 120,
) -> tuple[int, str, str]:
    """Run the demo and send it `sig` once a line of its stdout (stderr with `on_stderr`)
    is `seen` (`awaited` says what, when it ends first); (exit code, stdout, stderr: what was
    left of each)."""
    with subprocess.Popen(
        _cmd(data, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as demo:
        lines = demo.stderr if on_stderr else demo.stdout
        assert lines is not None
        for line in lines:
            if seen(line):
                break
        else:
            pytest.fail(f"the demo ended before {awaited}")
        demo.send_signal(sig)
        out, err = demo.communicate(timeout=timeout)
    return demo.returncode, out, err


def _run(data: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cmd(data, *extra),
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        env={**os.environ, **env},
    )


def _journal(data: Path) -> dict[str, dict[str, object]]:
    """Per activity: attempts, settled?, recorded result digest, and provider result files."""
    ledger = SqliteLedger.open(data / "world.db")
    snap = ledger.read_at(ledger.head("demo"))
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    provider = SimProvider(data)
    out: dict[str, dict[str, object]] = {}
    for entity, _ in snap.with_component("physical_ai.sim_episode.intent"):
        key = ActivityKey("demo", KIND, entity)
        rec = catalog.get(key)
        assert rec is not None
        op = provider.entry(operation_id_for(key))
        out[entity] = {
            "attempts": rec.attempt_count,
            "settled": rec.settlement is not None,
            "result": rec.result.digest if rec.result else None,
            "results_on_disk": sorted(p.name for p in op.path.glob("result*")),
            "markers": op.attempts(),
            "observed_attempt": (snap.get(entity, OBSERVATION) or {})
            .get("summary", {})
            .get("attempt"),
        }
    catalog.close()
    ledger.close()
    return out


def _one_completed_episode_per_operation(journal: dict[str, dict[str, object]]) -> None:
    for entry in journal.values():
        assert entry["settled"] is True
        assert entry["results_on_disk"] == ["result.json"]
        assert entry["observed_attempt"] in entry["markers"]  # type: ignore[operator]


def test_a_small_mission_exits_0_and_a_rerun_runs_nothing_again(tmp_path: Path) -> None:
    first = _run(tmp_path, *SMALL)
    assert first.returncode == 0, first.stderr
    assert "reach-0000" in first.stdout and "reach-0001" in first.stdout
    assert "/2 reaches within tolerance" in first.stdout
    journal = _journal(tmp_path)
    assert set(journal) == {"reach-0000", "reach-0001"}
    _one_completed_episode_per_operation(journal)
    again = _run(tmp_path, *SMALL)
    assert again.returncode == 0, again.stderr
    assert "resuming (2 activities already settled)" in again.stdout
    assert again.stdout.count("settled before restart") == 2
    assert _journal(tmp_path) == journal


def test_a_pruned_data_dir_resumes_without_running_anything_again(tmp_path: Path) -> None:
    """`tether db prune` compacts the settled reaches; the same demo command then resumes,
    shows them as settled before restart (their result references pruned) and runs nothing."""
    first = _run(tmp_path, *SMALL)
    assert first.returncode == 0, first.stderr
    before = _journal(tmp_path)
    argv = ["db", "prune", "--data-dir", str(tmp_path), "--older-than", "0s", "--json"]
    prune = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert prune.returncode == 0, prune.stderr
    assert json.loads(prune.stdout)["compacted"] == 2
    again = _run(tmp_path, *SMALL)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert "resuming (2 activities already settled)" in again.stdout
    assert again.stdout.count("(pruned)") == 2
    assert again.stdout.count("settled before restart") == 2
    after = _journal(tmp_path)
    for entity, entry in after.items():
        assert entry["result"] is None  # the reference went with the compaction
        assert {**entry, "result": before[entity]["result"]} == before[entity]


def _table_digests(stdout: str) -> dict[str, str]:
    """The summary table's `result digest` column, by activity."""
    rows = re.findall(r"^(reach-\d+)\s+\d+\s+([0-9a-f]{16})\s", stdout, re.MULTILINE)
    return dict(rows)


def test_one_seed_prints_the_same_digests_in_two_runs(tmp_path: Path) -> None:
    # The digested result holds no wall time: two fresh runs of one seed agree digest for digest.
    runs = [_run(tmp_path / name, *SMALL, "--seed", "7") for name in ("a", "b")]
    for done in runs:
        assert done.returncode == 0, done.stderr
    first, second = (_table_digests(done.stdout) for done in runs)
    assert set(first) == {"reach-0000", "reach-0001"}
    assert first == second
    # The digests do depend on what was run: another seed gives other results.
    other = _run(tmp_path / "c", *SMALL, "--seed", "8")
    assert other.returncode == 0, other.stderr
    assert _table_digests(other.stdout)["reach-0000"] != first["reach-0000"]


def test_a_different_mission_in_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    assert _run(tmp_path, *SMALL).returncode == 0
    other = _run(tmp_path, "--targets", "3", "--episodes", "1", "--steps", "200", "--port", "0")
    assert other.returncode == 2 and "different mission" in other.stderr
    assert "tether demo: other_mission: " in other.stderr  # its stable code, on a terminal too
    # A seed whose last reach (seed + N) passes the largest one is refused at start: its
    # reach could never be committed, and the run would wait for it for ever.
    top = _run(tmp_path / "z", "--targets", "2", "--seed", str(2**63 - 1), "--port", "0")
    assert top.returncode == 2 and "tether demo: usage: --seed must be in [0, " in top.stderr
    assert not (tmp_path / "z").exists()
    # A data dir that is a file: refused before the stream's URL is shown (no dead URL).
    (tmp_path / "afile").write_text("")
    afile = _run(tmp_path / "afile", "--moves", "0", "--port", "0")
    assert afile.returncode == 2 and "not_a_directory" in afile.stderr, afile.stderr
    assert "AG-UI stream" not in afile.stdout + afile.stderr
    for flag, value in (
        ("--workers", "0"),
        ("--lease-ms", "1"),
        ("--port", "70000"),
        ("--linger", "inf"),  # once slept: an overflow after the run (exit 70)
        ("--linger", "nan"),  # once no linger at all, said nowhere
    ):
        wrong = _run(tmp_path / "w", flag, value)
        assert wrong.returncode == 2 and f"usage: {flag} must" in wrong.stderr, wrong.stderr
    # A power loss asked for after the last move would never happen: said, not ignored.
    never = _run(tmp_path / "v", "--moves", "2", "--power-loss", "7", "--port", "0")
    assert never.returncode == 2, (never.stdout, never.stderr)
    assert "usage: --power-loss must name one of the 2 moves (0 to 1" in never.stderr
    assert not (tmp_path / "v").exists()
    # A power loss of a run with no move, or of a configured robot (never power-cycled), was
    # ignored until the summary (`power loss: none`): refused before anything runs.
    host = tmp_path / "host.toml"
    host.write_text("")
    for extra in (("--moves", "0"), ("--config", str(host))):
        none = _run(tmp_path / "n", *extra, "--power-loss", "0", "--port", "0")
        assert none.returncode == 2, (none.stdout, none.stderr)
        assert "usage: --power-loss " in none.stderr and "drop it" in none.stderr, none.stderr
        assert not (tmp_path / "n").exists()
    bad = _run(tmp_path / "x", "--targets", "1", "--episodes", "0", "--port", "0")
    assert bad.returncode == 2 and "episodes" in bad.stderr
    # A mission of no targets or no steps runs nothing it could report: a usage error before
    # anything is served or written, never a run that "succeeds" at nothing.
    for flag in ("--steps", "--targets"):
        empty = _run(tmp_path / "y", flag, "0", "--port", "0")
        assert empty.returncode == 2, (flag, empty.stdout, empty.stderr)
        assert f"tether demo: usage: {flag} must be in [1, " in empty.stderr, empty.stderr
        assert not (tmp_path / "y").exists()


def test_ctrl_c_with_json_ends_with_one_document(tmp_path: Path) -> None:
    """`--json` asked for one document on stdout: Ctrl-C mid-run still prints one, saying it
    was interrupted (exit 130), never nothing."""
    args = ["--targets", "2", "--episodes", "1", "--steps", "400000", "--port", "0", "--json"]
    code, out, err = _signalled(
        tmp_path,
        args,
        signal.SIGINT,
        lambda line: "reach-0000" in line and "running" in line,
        "reach-0000 ran",
        on_stderr=True,  # progress goes to stderr with --json
    )
    assert code == 130, (out, err)
    doc = json.loads(out)
    assert (doc["status"], doc["code"]) == ("interrupted", "interrupted"), doc


def test_sigterm_ends_the_demo_as_ctrl_c_does(tmp_path: Path) -> None:
    """A service manager's SIGTERM mid-run is an interruption: said, exit 130 (never a bare
    143 with nothing closed), and no `--linger` after it."""
    args = ["--targets", "2", "--episodes", "1", "--steps", "400000", "--port", "0"]
    args += ["--linger", "600"]
    code, out, err = _signalled(
        tmp_path,
        args,
        signal.SIGTERM,
        lambda line: line.startswith("reach-0000") and "running" in line,
        "reach-0000 ran",
    )
    assert code == 130, (out, err)
    assert "tether demo: interrupted (SIGTERM)" in err, err  # named as the signal it was


def test_sigterm_during_linger_ends_it_with_the_runs_code(tmp_path: Path) -> None:
    """After the run, `--linger` keeps serving the stream; a SIGTERM then ends the linger and
    the demo exits with its run's code (the close already ran: nothing is interrupted)."""
    args = ["--targets", "1", "--episodes", "1", "--steps", "200", "--port", "0", "--moves", "0"]
    code, out, err = _signalled(
        tmp_path,
        [*args, "--linger", "600"],
        signal.SIGTERM,
        lambda line: line.startswith("mission: "),
        "it finished its mission",
        timeout=60,
    )
    assert code == 0, (out, err)
    assert "interrupted" not in err, err


def test_kill_9_mid_episode_then_the_same_command_resumes(tmp_path: Path) -> None:
    args = ["--targets", "2", "--episodes", "1", "--steps", "400000", "--port", "0"]
    with subprocess.Popen(_cmd(tmp_path, *args), stdout=subprocess.PIPE, text=True) as demo:
        assert demo.stdout is not None
        for line in demo.stdout:
            if line.startswith("reach-0000") and "running" in line and " 0/" not in line:
                break
        else:
            pytest.fail("the demo ended before reach-0000 made progress")
        demo.send_signal(signal.SIGKILL)
        demo.stdout.read()
    killed = _journal(tmp_path)
    assert killed["reach-0000"]["results_on_disk"] == []
    resumed = _run(tmp_path, *args)
    assert resumed.returncode == 0, resumed.stderr
    journal = _journal(tmp_path)
    _one_completed_episode_per_operation(journal)
    assert journal["reach-0000"]["attempts"] >= 2  # type: ignore[operator]
    assert journal["reach-0000"]["observed_attempt"] != 1
    assert "rerun after proof" in resumed.stdout


@pytest.mark.parametrize(
    "crash",
    [
        {"TETHER_CRASH_AT": "after_effect"},
        {CRASH_ENV: "sim.result_durable"},
        {CRASH_ENV: "sim.result_staged"},
    ],
    ids=["runtime-after-effect", "provider-result-durable", "provider-result-staged"],
)
def test_a_result_written_but_not_recorded_is_recovered_not_rerun(
    tmp_path: Path, crash: dict[str, str]
) -> None:
    died = _run(tmp_path, *SMALL, **crash)
    assert died.returncode == -signal.SIGKILL
    # Published, or (killed between making it durable and publishing it) staged.
    staged = crash.get(CRASH_ENV) == "sim.result_staged"
    on_disk = ["result-1.pending"] if staged else ["result.json"]
    assert _journal(tmp_path)["reach-0000"]["results_on_disk"] == on_disk
    resumed = _run(tmp_path, *SMALL)
    assert resumed.returncode == 0, resumed.stderr
    journal = _journal(tmp_path)
    _one_completed_episode_per_operation(journal)
    assert journal["reach-0000"]["markers"] == [1]  # never executed again
    assert journal["reach-0000"]["observed_attempt"] == 1
    assert "result of attempt 1 reused" in resumed.stdout


def test_an_unknown_activity_is_parked_and_the_demo_exits_1(tmp_path: Path) -> None:
    died = _run(tmp_path, *SMALL, TETHER_CRASH_AT="after_bind")
    assert died.returncode == -signal.SIGKILL
    # A stale episode process of attempt 1, started elsewhere, is still alive.
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) as stale:
        try:
            key = ActivityKey("demo", KIND, "reach-0000")
            op = SimProvider(tmp_path).entry(operation_id_for(key))
            marker = {
                "operation_id": operation_id_for(key),
                "attempt": 1,
                "child": ProcessIdentity.of(stale.pid).to_dict(),
            }
            op.start(1, marker)
            parked = _run(tmp_path, *SMALL)
        finally:
            stale.kill()
    assert parked.returncode == _exit.PARKED, parked.stdout + parked.stderr
    assert "parked activities" in parked.stdout
    assert "reach-0000" in parked.stdout.split("parked activities")[1]


ALL_POINTS = [
    *(("TETHER_CRASH_AT", p) for p in CRASH_POINTS),
    (CRASH_ENV, "sim.child_started"),
    (CRASH_ENV, "sim.artifact_durable"),
    (CRASH_ENV, "sim.result_staged"),
    (CRASH_ENV, "sim.result_durable"),
]
#: The default run crashes the demo at one of `ALL_POINTS` (a different one each run,
#: `tests/sampling.py`); TETHER_SLOW=1 at every point.
SAMPLED = list(sampled("demo crash", ALL_POINTS, 1))


def test_an_episode_process_that_always_dies_is_parked_not_retried_forever(
    tmp_path: Path,
) -> None:
    parked = _run(tmp_path, *SMALL, **{CRASH_ENV: "sim.child_started@*"})
    assert parked.returncode == _exit.PARKED, parked.stdout + parked.stderr
    assert "reach-0000" in parked.stdout.split("parked activities")[1]
    journal = _journal(tmp_path)
    assert journal["reach-0000"]["results_on_disk"] == []
    assert len(journal["reach-0000"]["markers"]) == MAX_FAILED_STARTS  # type: ignore[arg-type]


def _crash_then_resume(data: Path, var: str, point: str) -> None:
    first = _run(data, *SMALL, **{var: point})
    assert first.returncode in (0, -signal.SIGKILL), first.stderr
    resumed = _run(data, *SMALL)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    journal = _journal(data)
    assert set(journal) == {"reach-0000", "reach-0001"}
    _one_completed_episode_per_operation(journal)


@pytest.mark.parametrize(("var", "point"), SAMPLED, ids=[p for _, p in SAMPLED])
def test_sampled_crash_points_resume_to_one_result_per_operation(
    tmp_path: Path, var: str, point: str
) -> None:
    _crash_then_resume(tmp_path, var, point)


@pytest.mark.slow
@pytest.mark.parametrize(("var", "point"), ALL_POINTS, ids=[p for _, p in ALL_POINTS])
def test_every_crash_point_resumes_to_one_result_per_operation(
    tmp_path: Path, var: str, point: str
) -> None:
    _crash_then_resume(tmp_path, var, point)
