"""Crash tests on `tether serve`: the daemon is SIGKILLed at every crash point of a move (the
runtime's points a move passes, the DYNAMIXEL adapter's, the daemon's own), each listed by name,
then restarted. After the restart the same submit returns the same Activity, the move reaches
its conclusion, and the emulator's journal (an independent process on a real pty) shows exactly
one ACTION applying each joint's target. The default run samples three points; TETHER_SLOW=1
runs them all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.move import CRASH_POINTS as MOVE_POINTS
from tether.adapters.dynamixel.move import PROOF_CRASH_POINTS
from tether.adapters.grpc.remote import CRASH_POINTS as BRIDGE_POINTS
from tether.client import AdmissionConflict, Client, ClientError
from tether.families.robot_move.family import CRASH_POINTS as FAMILY_POINTS
from tether.families.sim.provider import CRASH_POINTS as SIM_POINTS
from tether.operator.decisions import RESOLVE_CRASH_POINTS
from tether.runtime import CRASH_POINTS as RUNTIME_POINTS
from tether.serve.daemon import CRASH_POINTS as SERVE_POINTS
from tether.serve.grpc_server import CRASH_POINTS as GRPC_POINTS

from tests._serve import daemon, final, killed, serve_config
from tests.adapters._dxl_setup import GOALS, TARGETS, emulator_process, target_actions

KIND = "physical_ai.robot_move.absolute"
REQUEST = {"robot": "arm", "targets": TARGETS}
#: The runtime's points a robot move never reaches, and why.
NOT_ON_A_MOVE = {
    "after_refusal_document": "a move is never refused at admission (its limits are checked "
    "from a fresh read-back and end as a recorded failed result)",
    "during_effect": "the sim adapter's point",
}
#: Every crash point of a move through `tether serve`, in the order a move reaches them. A
#: kill before the reply to the submit loses the reply (`lost_reply`).
MOVE_SWEEP = (
    "after_intent_tick",
    "serve.after_submit",
    "after_admission",
    "after_claim",
    "after_bind",
    "robot_move.after_journal_bind",
    "after_preimage",
    "after_reg_write",
    "after_action",
    "after_readback",
    "artifact_temp_written",
    "after_effect",
    "after_result",
    "after_staging",
    "after_observation_tick",
    "after_settlement",
)
LOST_REPLY = ("after_intent_tick", "serve.after_submit")
#: The daemon's points a lone move's sweep does not take, and where they are swept.
SWEPT_ELSEWHERE = {
    "serve.before_submit_tick": "inside a group commit, before its tick: nothing of the batch "
    "was committed or answered (tests/serve/test_submit_group_commit.py, under concurrent "
    "submits)",
}
SAMPLED = ("serve.after_submit", "after_bind", "after_reg_write", "after_action")
ROOT = Path(__file__).resolve().parents[2] / "python" / "tether"


def test_the_sweep_lists_every_crash_point_of_a_move() -> None:
    defined = (
        set(RUNTIME_POINTS) - set(NOT_ON_A_MOVE)
        | set(MOVE_POINTS)
        | set(FAMILY_POINTS)
        | set(SERVE_POINTS) - set(SWEPT_ELSEWHERE)
    )
    assert set(MOVE_SWEEP) == defined and len(MOVE_SWEEP) == len(defined)
    assert set(SWEPT_ELSEWHERE) <= set(SERVE_POINTS)
    assert set(NOT_ON_A_MOVE) <= set(RUNTIME_POINTS)


def test_every_crash_point_in_the_code_is_registered() -> None:
    """A `crash_point("name")` anywhere in the package is in one of the registered lists, so a
    new point cannot be left out of the sweeps that check them."""
    named = set()
    for path in ROOT.rglob("*.py"):
        named |= set(re.findall(r"crash_point\(\s*\"([^\"]+)\"", path.read_text()))
    registered = (
        set(RUNTIME_POINTS)
        | set(MOVE_POINTS)
        | set(PROOF_CRASH_POINTS)
        | set(RESOLVE_CRASH_POINTS)
        | set(SERVE_POINTS)
        | set(SIM_POINTS)
        | set(FAMILY_POINTS)
        | set(GRPC_POINTS)  # swept by tests/grpc (a SIGKILL of tether serve at each)
        | set(BRIDGE_POINTS)  # tests/grpc/test_bridge_crash.py (a SIGKILL of the bridge)
    )
    assert named and named <= registered, named - registered


def _cases() -> list[object]:
    return [
        pytest.param(p, id=p, marks=() if p in SAMPLED else pytest.mark.slow) for p in MOVE_SWEEP
    ]


@pytest.mark.parametrize("crash_at", _cases())
def test_serve_killed_at_each_point_of_a_move(tmp_path: Path, crash_at: str) -> None:
    with emulator_process(tmp_path) as emu:
        config = serve_config(tmp_path, emu.path)
        client = Client(config=config)
        before = {i: emu.request(op="snapshot", id=i)["goal_position"] for i in GOALS}
        with daemon(config, crash_at=crash_at) as (proc, _):
            try:
                first = client.submit("local", "move-1", KIND, REQUEST)
            except ClientError as exc:  # the reply was lost with the daemon (a kill in another
                # thread may win the race with the answer too)
                assert exc.code == "owner_no_answer", exc
                first = None
            else:
                assert crash_at not in LOST_REPLY and first["created"] is True
            killed(proc)
        assert client.running() is None
        with daemon(config):
            # The identical submit is the same Activity (its intent tick was committed).
            view = client.submit("local", "move-1", KIND, REQUEST)
            assert view["created"] is False
            assert view["key"] == "local/physical_ai.robot_move.absolute/move-1"
            if crash_at in LOST_REPLY:  # another request under the id is still a conflict
                other = {"robot": "arm", "targets": {"a": 0.2, "b": -0.3}}
                with pytest.raises(AdmissionConflict):
                    client.submit("local", "move-1", KIND, other)
            if first is not None:
                assert view["key"] == first["key"]
            done = final(client, view["key"])
            assert (done["state"], done["settled"]) == ("done", True), (
                done.get("reason"),
                done.get("result"),
                done.get("attempts"),
            )
            assert done["result"]["outcome"] in ("completed", "recovered")
            journal = emu.journal()
    assert target_actions(journal, GOALS) == {1: 1, 2: 1}
    # Any other ACTION commits a neutralised stage (the goal each servo held before the move,
    # re-staged over a staged target): it moves nothing.
    for entry in journal:
        if entry["instruction"] == "action" and entry["executed"]:
            goal = tables.decode(tables.GOAL_POSITION, bytes.fromhex(entry["data"]))
            assert goal in (GOALS[entry["id"]], before[entry["id"]]), entry
