"""REBOOT: the emulator does what a servo does, and `tether operator reboot` (through
`tether serve`, which verifies the credential) needs the operator's word that the arm is
supported, reads the device fresh and gives every parked move on that robot a new evidence
revision through the core (`refresh_evidence`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _dxl_setup import CREDENTIAL, TARGETS
from tether.activities import ActivityKey, Catalog
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig
from tether.adapters.dynamixel.driver import DxlBus
from tether.adapters.dynamixel.worker import run_move
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest
from tether.operator.decisions import evidence_document
from tether.runtime import ArtifactStore

from tests._serve import add_serve, daemon

KEY = ActivityKey("local", KIND_ABSOLUTE, "m1")


def test_the_emulator_reboots_as_a_servo_does(emulator: DynamixelEmulator) -> None:
    emu = emulator
    with DxlBus.open(emu.path, timeout_ms=400, lock_dir=None) as bus:
        bus.write_field(1, tables.GOAL_POSITION, 2100)
        bus.write_field(1, tables.TORQUE_ENABLE, 1)
        bus.reg_write(1, tables.GOAL_POSITION.address, tables.encode(tables.GOAL_POSITION, 2500))
        emu.inject(Fault("alert", id=1, value=0x20))
        before = emu.snapshot(1)
        assert before["hardware_error_status"] == 0x20 and before["torque_enable"] == 0
        bus.reboot(1, operator="alice")
        after = emu.snapshot(1)
    assert after["torque_enable"] == 0  # torque drops
    assert after["hardware_error_status"] == 0  # the hardware error clears
    assert after["registered_instruction"] == 0  # the staged write is gone
    assert after["present_position"] == before["present_position"]  # the shaft stays
    assert after["goal_position"] == after["present_position"]
    assert [e.instruction for e in emu.journal][-1] == "reboot"


def operator(config: Path, *argv: str, secret: str = CREDENTIAL) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "tether", "operator", "--config", str(config), *argv],
        input=f"{secret}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_operator_reboot_clears_the_error_and_refreshes_the_parked_move(
    emulator: DynamixelEmulator, config: HostConfig, tmp_path: Path
) -> None:
    # An overload on joint b once the move's ACTION ran.
    emulator.inject(Fault("alert", id=2, value=0x20, instruction="action"))
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    parked = run_move(
        config, request, world="local", activity="m1", lease_ms=300, settle_timeout_s=5,
        timeout_s=30, progress=lambda content: None,
    )  # fmt: skip
    assert parked["status"] == "awaiting_decision" and parked["revision"] == 1
    present = emulator.snapshot(2)["present_position"]
    path = tmp_path / "host.toml"

    with daemon(add_serve(path)):  # only `tether serve` verifies the credential
        unconfirmed = operator(path, "reboot", "arm", "--joint", "b", "--credential-stdin")
        assert unconfirmed.returncode == 1
        assert json.loads(unconfirmed.stdout)["code"] == "reboot_unconfirmed"
        assert not [e for e in emulator.journal if e.instruction == "reboot"]  # nothing sent
        wrong = operator(path, "reboot", "arm", "--arm-supported", "--credential-stdin", secret="x")
        assert json.loads(wrong.stdout)["code"] == "credential_refused"
        assert not [e for e in emulator.journal if e.instruction == "reboot"]

        argv = ("reboot", "arm", "--joint", "b", "--arm-supported", "--credential-stdin")
        done = operator(path, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        out = json.loads(done.stdout)
        assert out["operator"] == "alice" and out["rebooted_ids"] == [2]
        b = out["read_back"]["joints"]["b"]
        assert b["hardware_errors"] == [] and b["torque_on"] is False  # SI read-back, by name
        assert CREDENTIAL not in done.stdout + done.stderr
        assert [e.id for e in emulator.journal if e.instruction == "reboot"] == [2]
        snap = emulator.snapshot(2)
        assert (snap["hardware_error_status"], snap["torque_enable"]) == (0, 0)
        assert snap["present_position"] == present

    assert [(r["key"], r["revision"]) for r in out["refreshed"]] == [
        ("local/physical_ai.robot_move.absolute/m1", 2)
    ]
    data = config.state_dir / "moves"
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    try:
        record = catalog.get(KEY)
        assert record is not None and record.awaiting_decision and record.evidence_revision == 2
        evidence = evidence_document(ArtifactStore(data / "artifacts"), record)
    finally:
        catalog.close()
    assert evidence is not None and evidence["changes"][0].startswith("rebooted by alice")
    assert evidence["read_back"]["joints"]["b"]["hardware_errors"] == []
