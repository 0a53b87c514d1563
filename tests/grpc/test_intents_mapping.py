"""gRPC's table of intent components (one operation id names one of them) is the families'."""

from __future__ import annotations

from tether.families.robot_move import family as robot_move
from tether.families.robot_move.request import KIND_ABSOLUTE, KIND_RELATIVE
from tether.families.sim import family as sim
from tether.serve import grpc_server


def test_each_grpc_kind_names_its_familys_intent_component() -> None:
    assert grpc_server.INTENTS == {
        KIND_ABSOLUTE: robot_move.INTENT,
        KIND_RELATIVE: robot_move.INTENT,
        sim.KIND: sim.INTENT,
    }
    assert set(grpc_server.KINDS.values()) | {grpc_server.SIM_KIND} == set(grpc_server.INTENTS)
