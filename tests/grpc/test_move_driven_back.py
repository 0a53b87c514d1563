"""A move whose ACTION was sent, and whose arm a later move drove back to where the first one
started before its reconcile ran, is never run a second time (`tether serve` over the
DYNAMIXEL emulator, its own process on a real pty, real grpcio clients). The emulator's
journal counts the ACTIONs."""

from __future__ import annotations

import time
from pathlib import Path

from _dxl_setup import emulator_process, target_actions
from _grpc_setup import bearer, daemon, execute_killed, grpc_config, move, stub, wait_for
from tether._gen.tether.robot.v1 import robot_control_pb2 as pb
from tether.adapters.dynamixel import tables

#: A lease long enough for the later move to run before the first one is reconciled.
SERVE = '\n[serve]\nlease_ms = 8000\nsettle_timeout_s = 20\nsse = "off"\ngrpc = "127.0.0.1:0"\n'
FAR = {"a": -1.0, "b": 0.0}
BACK = {"a": 0.0, "b": 0.0}  # where the emulator's shafts start: the first move's pre-image


def test_a_move_driven_back_by_a_later_one_before_its_reconcile_is_not_run_again(
    tmp_path: Path,
) -> None:
    with emulator_process(tmp_path) as emu:
        config = grpc_config(tmp_path, emu.path, serve=SERVE)
        # The daemon is killed right after "far"'s ACTION: its lease outlives the restart.
        execute_killed(config, "after_action", move("far", FAR))
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            # "back" drives the arm to exactly where "far" started, before "far"'s lease runs
            # out: "far"'s goals then read as its pre-image saw them.
            control.Execute(move("back", BACK), metadata=bearer(), timeout=30)
            back = wait_for(control, "back", lambda o: o.state == pb.SUCCEEDED, timeout=60)
            assert back.state == pb.SUCCEEDED
            far = wait_for(
                control,
                "far",
                lambda o: o.state in (pb.UNKNOWN_AWAITING_OPERATOR, pb.SUCCEEDED, pb.FAILED),
                timeout=60,
            )
            time.sleep(3.0)  # a re-issue would have sent its ACTION by now
            far = control.GetOperation(
                pb.GetOperationRequest(operation_id="far"), metadata=bearer(), timeout=10
            )
            channel.close()
        # Its ACTION ran once: it awaits an operator, who knows the arm was moved since.
        assert far.state == pb.UNKNOWN_AWAITING_OPERATOR, far
        assert far.evidence.reason == "device_state_lost_or_moved", far.evidence
        assert target_actions(emu.journal(), {1: tables.radians_to_ticks(-1.0)}) == {1: 1}
