"""Every effectful frame a move sends is in its operation's sent log, durable before it is sent.

The emulator (a real pty-backed peer) journals every frame it receives. The test's emulator
adds one observation to it: whenever bytes arrive, before they are decoded, it reads the
operations journal's sent logs from disk. For a whole move, a move whose REG_WRITE status is
lost (its own safe-stop, then a reconcile that neutralises the staged writes, then the guarded
second attempt) and a move stopped by its settle timeout, every WRITE, REG_WRITE, ACTION,
SYNC_WRITE and REBOOT the emulator received is in the sent log, in the order received, and was
already on disk when its bytes arrived.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _dxl_setup import write_config
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.config import HostConfig, load_config
from tether.adapters.dynamixel.host import RobotHost
from tether.adapters.dynamixel.move import DynamixelMoveAdapter, MoveNotReached
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.errors import TransportError
from tether.families.robot_move.journal import MoveStore
from tether.families.robot_move.request import (
    KIND_ABSOLUTE,
    ConfirmedAbsent,
    MoveRequest,
)

#: What changes a device (reads and pings do not).
EFFECTFUL = ("write", "reg_write", "action", "sync_write", "reboot")


class WatchedEmulator(DynamixelEmulator):
    """The real emulator; each arrival of bytes first reads the sent logs under `root`."""

    def __init__(self, ids: list[int], root: Path, **kw: Any) -> None:
        super().__init__(ids, **kw)
        self.root = root
        #: journal index -> the digests durable in a sent log when its frame's bytes arrived
        self.durable_at: dict[int, set[str]] = {}

    def _durable(self) -> set[str]:
        found: set[str] = set()
        for path in self.root.rglob("sent.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    found.add(json.loads(line)["digest"])
                except (ValueError, KeyError):
                    pass  # a torn last line is not a logged command
        return found

    def handle_bytes(self, data: bytes) -> bytes:
        durable = self._durable()
        first = len(self.journal)
        out = super().handle_bytes(data)
        for index in range(first, len(self.journal)):
            self.durable_at[index] = durable
        return out


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "ops"


@pytest.fixture
def emulator(store_root: Path) -> Iterator[WatchedEmulator]:
    with WatchedEmulator([1, 2], store_root, speed_scale=20.0) as emu:
        yield emu


@pytest.fixture
def config(emulator: WatchedEmulator, tmp_path: Path) -> HostConfig:
    return load_config(write_config(tmp_path, emulator.path))


def request(targets: dict[str, float]) -> MoveRequest:
    return MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": targets})


def received_frames(emulator: WatchedEmulator) -> list[tuple[int, str, str]]:
    """(first journal index, instruction, frame digest) of every effectful frame received,
    in order; a broadcast frame is one frame however many servos journal it."""
    frames: list[tuple[int, str, str]] = []
    last_frame: str | None = None
    for index, entry in enumerate(emulator.journal):
        if entry.instruction not in EFFECTFUL:
            last_frame = None
            continue
        if entry.packet_id == 0xFE and entry.frame == last_frame:
            continue  # the same broadcast frame, journaled by the next servo
        last_frame = entry.frame
        digest = "sha256:" + hashlib.sha256(bytes.fromhex(entry.frame)).hexdigest()
        frames.append((index, entry.instruction, digest))
    return frames


def test_every_effectful_frame_is_logged_durably_before_the_emulator_receives_it(
    emulator: WatchedEmulator, config: HostConfig, store_root: Path
) -> None:
    store = MoveStore(store_root)
    ops = []
    with RobotHost(config) as host:
        host.connect("arm")
        adapter = DynamixelMoveAdapter(config, host, settle_timeout_s=10)

        # 1. A whole move.
        whole = store.bind("op-whole", request({"a": 0.5, "b": -0.3}))
        whole.start_attempt(1, {})
        adapter.execute(whole, 1, whole.request)
        ops.append(whole)

        # 2. The REG_WRITE status of joint b is lost: the attempt stops itself (its safe-stop),
        # a reconcile neutralises both staged writes and confirms absence, the guarded second
        # attempt runs the move.
        lost = store.bind("op-lost", request({"a": -0.2, "b": 0.4}))
        lost.start_attempt(1, {})
        emulator.inject(Fault("drop_status", instruction="reg_write", id=2))
        with pytest.raises(TransportError):
            adapter.execute(lost, 1, lost.request)
        conclusion = adapter.reconcile(lost, lost.request)
        assert isinstance(conclusion, ConfirmedAbsent), conclusion
        assert conclusion.guard["neutralised_ids"] == [1, 2]
        lost.record_absent(conclusion)
        lost.start_attempt(2, {})
        adapter.execute(lost, 2, lost.request)
        ops.append(lost)

        # 3. A move stopped by its settle timeout (its own safe-stop, cause settle_timeout).
        emulator.speed_scale = 0.2
        slow = DynamixelMoveAdapter(config, host, settle_timeout_s=0.1)
        stopped = store.bind("op-stopped", request({"a": 1.2, "b": -1.2}))
        stopped.start_attempt(1, {})
        with pytest.raises(MoveNotReached):
            slow.execute(stopped, 1, stopped.request)
        ops.append(stopped)
        # What the host sends on close (its own safe-stop on exit) is not a move's frame.
        frames = received_frames(emulator)

    logged = [(rec["instruction"], rec["digest"]) for op in ops for rec in op.sent()]
    kinds = {what for _, what, _ in frames}
    assert {"write", "reg_write", "action"} <= kinds
    names = {what for what, _ in logged}
    assert {
        "profile_velocity",
        "torque_enable",
        "reg_write",
        "action",
        "neutralise_reg_write",
        "neutralise_action",
        "stop_hold",
    } <= names
    # In order: the received frames are the logged commands, one for one, in the same order
    # (nothing here was logged and then not sent).
    assert [digest for _, _, digest in frames] == [digest for _, digest in logged]
    # Durable before received: each digest was on disk when the frame's bytes arrived.
    for index, what, digest in frames:
        assert digest in emulator.durable_at[index], (index, what)
    # The writes at the start of each attempt carry the speed limit the host decided.
    first = [r for r in whole.sent() if r["instruction"] == "profile_velocity"]
    assert [r["joint"] for r in first] == ["a", "b"] and all(r["first_motion"] for r in first)
    assert first[0]["speed_rad_s"] == config.spec("arm").first_motion_speed
    assert emulator.snapshot(1)["profile_velocity"] == tables.profile_velocity_for(
        config.spec("arm").speed
    )  # the later moves ran at the configured speed
