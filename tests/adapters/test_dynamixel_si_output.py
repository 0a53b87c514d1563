"""Protocol units never leave the adapter: `tether move --json` output (progress, outcome), the
evidence document `tether operator show` prints, and the result document are scanned for
tick-valued fields; the read-back carries the measured velocity in rad/s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _dxl_setup import TARGETS, emulator_process, write_config
from tether.activities import ActivityKey, Catalog
from tether.adapters.dynamixel import tables
from tether.families.robot_move.request import KIND_ABSOLUTE
from tether.runtime import ArtifactStore

#: Control-table names are raw register values; an SI document names its own fields.
RAW_NAMES = {f.name for f in tables.FIELDS} - {"id", "moving"}
#: Integers that are no device quantity: counts, ids, fences, times.
COUNTS = {"attempt", "attempts", "for_attempt", "revision", "fence", "fence_floor", "owner_pid"}


def tick_fields(doc: Any, path: str = "$") -> list[str]:
    """Where `doc` holds a protocol unit: a raw register name, a name with `tick`, or an
    integer in the range of servo ticks (ids and small codes are below it) that is no time or
    count."""
    found: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            where = f"{path}.{key}"
            if key in RAW_NAMES or "tick" in str(key).lower():
                found.append(where)
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and abs(value) > 255
                and not str(key).endswith("_ms")
                and key not in COUNTS
            ):
                found.append(f"{where}={value}")
            found += tick_fields(value, where)
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            if isinstance(item, int) and not isinstance(item, bool) and abs(item) > 255:
                found.append(f"{path}[{i}]={item}")
            found += tick_fields(item, f"{path}[{i}]")
    return found


def test_the_scan_finds_ticks() -> None:
    # The scanner itself can fail: yesterday's evidence fields are caught.
    assert tick_fields({"targets": {"1": 2389}}) == ["$.targets.1=2389"]
    assert tick_fields({"device_state": {"joints": {"1": {"goal_position": 2048}}}}) == [
        "$.device_state.joints.1.goal_position",
        "$.device_state.joints.1.goal_position=2048",
    ]
    assert tick_fields({"joints": {"1": {"present": 2100, "goal": 2389}}}) == [
        "$.joints.1.present=2100",
        "$.joints.1.goal=2389",
    ]
    assert tick_fields({"read_at_ms": 1_796_000_000_000, "goal_rad": 0.5, "id": 2}) == []


MOVE = [sys.executable, "-m", "tether", "move"]
OPERATOR = [sys.executable, "-m", "tether", "operator"]


def move_cli(config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_CRASH")}
    return subprocess.run(
        [*MOVE, "--config", str(config), "--robot", "arm", "--lease-ms", "500", "--json", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def joints(targets: dict[str, float]) -> list[str]:
    return [arg for name, v in targets.items() for arg in ("--joint", f"{name}={v}")]


def test_tether_move_json_holds_no_ticks(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as emu:
        config = write_config(tmp_path, emu.path)
        done = move_cli(config, "--activity", "clean", *joints(TARGETS))
        assert done.returncode == 0, done.stdout + done.stderr
        out = lines(done)
        progress = [o["progress"] for o in out if "progress" in o]
        assert progress and set(progress[-1]["joints"]) == {"a", "b"}
        assert abs(progress[-1]["joints"]["a"]["present_rad"] - TARGETS["a"]) < 0.01
        assert out[-1]["status"] == "done"
        assert tick_fields(out) == []
        # The result document (the observation's source) is in SI units too.
        data = tmp_path / "state" / "moves"
        catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
        try:
            record = catalog.get(ActivityKey("local", KIND_ABSOLUTE, "clean"))
        finally:
            catalog.close()
        assert record is not None and record.result is not None
        result = json.loads(
            ArtifactStore(data / "artifacts").get_bytes(record.result.ref, record.result.digest)
        )
        assert result["goals"] == {"a": 0.500078, "b": -0.30066}
        assert tick_fields(result) == []
        # A relative move past a limit: refused from the read-back, exit 2, in radians.
        refused = move_cli(config, "--activity", "far", "--relative", *joints({"a": 1.2}))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        final = lines(refused)[-1]
        assert (final["status"], final["code"]) == ("failed", "limit_violation")
        assert "rad" in final["error"] and tick_fields(lines(refused)) == []
        # A refusal, recorded as the move's result: its one line on stderr as well (it said
        # nothing there, so a script reading stderr saw exit 2 and no reason).
        said = [x for x in refused.stderr.splitlines() if x.startswith("tether move: ")]
        assert said == [f"tether move: {final['error']}"] or said == [
            f"tether move: limit_violation: {final['error']}"
        ], refused.stderr


def test_parked_evidence_holds_no_ticks_and_measures_velocity(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=0.05) as emu:
        config = write_config(tmp_path, emu.path)
        parked = move_cli(config, "--activity", "slow", "--settle-timeout", "0.3", *joints(TARGETS))
        assert parked.returncode == 3, parked.stdout + parked.stderr
        final = lines(parked)[-1]
        assert (final["status"], final["reason"]) == ("awaiting_decision", "settle_timeout")
        assert tick_fields(lines(parked)) == []
        shown = subprocess.run(
            [*OPERATOR, "--config", str(config), "--json", "show", f"local/{KIND_ABSOLUTE}/slow"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stdout + shown.stderr
        doc = json.loads(shown.stdout)
        evidence = doc["evidence"]
        assert evidence["reason"] == "settle_timeout"
        assert tick_fields(doc) == []
        for joint in evidence["read_back"]["joints"].values():
            assert isinstance(joint["velocity_rad_s"], float)
            assert isinstance(joint["position_rad"], float)
        assert set(evidence["staged"]) == {"a", "b"}
        assert {s["instruction"] for s in evidence["sent"]} >= {"reg_write", "action", "stop_hold"}
