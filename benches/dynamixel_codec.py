"""DYNAMIXEL codec benchmark: Tether's Rust codec vs dynamixel-sdk's packet functions, one run.

Part 1 (target >= 10x): packets encoded and decoded per second. The baseline builds each frame
the way `Protocol2PacketHandler.txPacket` does (addStuffing + updateCRC) and parses it the way
`rxPacket` does (header scan, CRC check, removeStuffing), on the same realistic message mix: a
READ of Present Position, its 4-byte status reply, and a 2-servo SYNC_WRITE of Goal Position.

Part 2 (reported): READ round-trip latency over the pty emulator, Tether's transport next to
dynamixel-sdk's `read4ByteTxRx`.

Run: `.venv/bin/python benches/dynamixel_codec.py`
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from dynamixel_sdk import PacketHandler, PortHandler
from dynamixel_sdk import protocol2_packet_handler as sdk_proto
from tether import _core
from tether.adapters.dynamixel import tables
from tether.adapters.dynamixel.driver import DxlBus
from tether.emulators.dynamixel import DynamixelEmulator

HANDLER = sdk_proto.Protocol2PacketHandler()


def sdk_encode(dxl_id: int, instruction: int, params: bytes) -> bytes:
    packet = [0xFF, 0xFF, 0xFD, 0x00, dxl_id, 0, 0, instruction, *params, 0, 0]
    length = len(params) + 3
    packet[5], packet[6] = length & 0xFF, length >> 8
    packet = HANDLER.addStuffing(packet)
    total = packet[5] + (packet[6] << 8) + 7
    crc = HANDLER.updateCRC(0, packet, total - 2)
    packet[total - 2], packet[total - 1] = crc & 0xFF, crc >> 8
    return bytes(packet[:total])


def sdk_decode(frame: bytes) -> tuple[int, int, list[int]]:
    """rxPacket's parsing steps on a buffer: header scan, length, CRC, removeStuffing."""
    rx = list(frame)
    idx = 0
    for idx in range(len(rx) - 3):
        if rx[idx] == 0xFF and rx[idx + 1] == 0xFF and rx[idx + 2] == 0xFD and rx[idx + 3] != 0xFD:
            break
    del rx[:idx]
    wait = rx[5] + (rx[6] << 8) + 7
    crc = rx[wait - 2] + (rx[wait - 1] << 8)
    if HANDLER.updateCRC(0, rx, wait - 2) != crc:
        raise ValueError("crc")
    rx = HANDLER.removeStuffing(rx)
    return rx[4], rx[7], rx[8 : rx[5] + (rx[6] << 8) + 5]


def tether_encode(dxl_id: int, instruction: int, params: bytes) -> bytes:
    return _core.dxl_encode(dxl_id, instruction, params)


DECODER = _core.DxlDecoder()


def tether_decode(frame: bytes) -> tuple[int, int, bytes]:
    DECODER.feed(frame)
    packet = DECODER.next_packet()
    assert packet is not None
    return packet.id, packet.instruction, packet.params


MESSAGES: list[tuple[int, int, bytes]] = [
    (1, 0x02, bytes([132, 0, 4, 0])),
    (1, 0x55, bytes([0x00, 0xA6, 0x00, 0x00, 0x00])),
    (0xFE, 0x83, bytes([116, 0, 4, 0, 1, 0x96, 0, 0, 0, 2, 0xAA, 0, 0, 0])),
]


def packets_per_second(
    encode: Callable[[int, int, bytes], bytes],
    decode: Callable[[bytes], object],
    seconds: float,
) -> float:
    count = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(50):
            for dxl_id, instruction, params in MESSAGES:
                decode(encode(dxl_id, instruction, params))
                count += 1
    return count / (time.perf_counter() - start)


def codec_throughput(seconds: float) -> tuple[float, float]:
    # Both codecs must agree before they are timed.
    for dxl_id, instruction, params in MESSAGES:
        frame = tether_encode(dxl_id, instruction, params)
        assert frame == sdk_encode(dxl_id, instruction, params)
        assert tether_decode(frame)[2] == bytes(sdk_decode(frame)[2])
    # Alternate short rounds and keep each side's best: on a shared machine a neighbour's burst
    # then slows one round, not one side.
    rounds = 5
    ours = theirs = 0.0
    for _ in range(rounds):
        ours = max(ours, packets_per_second(tether_encode, tether_decode, seconds / rounds))
        theirs = max(theirs, packets_per_second(sdk_encode, sdk_decode, seconds / rounds))
    return ours, theirs


def read_latency_samples(samples: int) -> tuple[list[float], list[float]]:
    """READ round trips (seconds) through Tether's transport and through dynamixel-sdk, each
    against its own emulator (a thread in this process, the same for both)."""
    ours: list[float] = []
    with DynamixelEmulator([1]) as emu:
        bus = DxlBus.open(emu.path, baudrate=1_000_000, timeout_ms=200, lock_dir=None)
        try:
            for _ in range(samples):
                t = time.perf_counter()
                bus.read(1, tables.PRESENT_POSITION.address, 4)
                ours.append(time.perf_counter() - t)
        finally:
            bus.close()
    theirs: list[float] = []
    with DynamixelEmulator([1]) as emu:
        port = PortHandler(emu.path)
        port.openPort()
        handler = PacketHandler(2.0)
        try:
            for _ in range(samples):
                t = time.perf_counter()
                _, result, _ = handler.read4ByteTxRx(port, 1, tables.PRESENT_POSITION.address)
                theirs.append(time.perf_counter() - t)
                if result != 0:
                    raise RuntimeError(handler.getTxRxResult(result))
        finally:
            port.closePort()
    return ours, theirs


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    ours, theirs = codec_throughput(seconds)
    print("codec: packets encoded+decoded per second (READ, status, SYNC_WRITE mix)")
    print(f"  tether (Rust core)        {ours:12,.0f} /s")
    print(f"  dynamixel-sdk (Python)    {theirs:12,.0f} /s")
    print(f"  ratio                     {ours / theirs:12.1f}x  (target >= 10x)")
    tether_s, sdk_s = read_latency_samples(200)
    print("READ round trip over the pty emulator (Present Position, 4 bytes), median / p95")
    for name, values in (("tether transport", tether_s), ("dynamixel-sdk", sdk_s)):
        ordered = sorted(values)
        p95 = ordered[int(len(ordered) * 0.95) - 1]
        med = statistics.median(ordered)
        print(f"  {name:<24}  {med * 1e3:8.3f} ms / {p95 * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
