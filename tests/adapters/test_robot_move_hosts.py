"""Device-bound moves keep the host that owns their robot, whichever host projects them: a
host recovering a shared world admits another host's move bound to that host, never to itself,
so its workers never claim (and never drive) it. Through the runtime on the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest
from _dxl_setup import TARGETS
from tether.activities import ActivityKey
from tether.adapters.dynamixel.config import HostConfig
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.family import (
    intent,
    robot_move_family,
    serve_families,
    submit_intent,
)
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest, MoveRequestError
from tether.runtime import Host
from tether.serve.families import ServeContext

from tests._hosts import HandClock as Clock
from tests._hosts import drain


def request(**extra: object) -> MoveRequest:
    return MoveRequest.from_dict(
        {"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS, **extra}
    )


def test_a_move_another_host_committed_is_admitted_bound_to_that_host(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    family = robot_move_family(config, tmp_path / "moves", host_name="host-a")
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=Clock(), host_name="host-a"
    ) as host:
        host.create_world("w")
        # host-b's submit named itself; host-a is the one that projects the tick.
        host.commit_tick("w", [intent("theirs", request(host="host-b")), intent("mine", request())])
        theirs = host.get(ActivityKey("w", KIND_ABSOLUTE, "theirs"))
        mine = host.get(ActivityKey("w", KIND_ABSOLUTE, "mine"))
        assert theirs is not None and theirs.bound_host == "host-b"
        assert mine is not None and mine.bound_host == "host-a"
        assert drain(host) == 1  # host-a's own move only
        theirs = host.get(ActivityKey("w", KIND_ABSOLUTE, "theirs"))
        assert theirs is not None and theirs.attempt_count == 0


def test_the_daemons_submit_names_its_host_and_refuses_a_client_that_does(
    config: HostConfig,
) -> None:
    build = submit_intent(config, "host-a")
    write = build("m-1", KIND_ABSOLUTE, {"robot": "arm", "targets": TARGETS})
    assert write.value["host"] == "host-a"
    with pytest.raises(MoveRequestError):
        build("m-2", KIND_ABSOLUTE, {"robot": "arm", "targets": TARGETS, "host": "host-b"})
    assert (
        "host"
        not in submit_intent(config)(
            "m-3", KIND_ABSOLUTE, {"robot": "arm", "targets": TARGETS}
        ).value
    )


@pytest.mark.parametrize(("shared", "named"), [(True, "host-a"), (False, None)])
def test_tether_serve_names_its_host_in_a_move_on_a_shared_world_only(
    config: HostConfig, tmp_path: Path, shared: bool, named: str | None
) -> None:
    ctx = ServeContext(
        config, None, tmp_path / "data", 30.0, host_name="host-a", shared_world=shared
    )
    ((family, build),) = serve_families(ctx)
    try:
        value = build("m-1", KIND_ABSOLUTE, {"robot": "arm", "targets": TARGETS}).value
        assert value.get("host") == named
    finally:
        family.adapter.close()  # type: ignore[attr-defined]
