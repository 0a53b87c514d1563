"""Drift checks: the Rust codec's lists agree with the Python side and with dynamixel-sdk."""

from __future__ import annotations

from dynamixel_sdk import protocol2_packet_handler as sdk_proto
from dynamixel_sdk import robotis_def
from tether import _core
from tether.emulators import dynamixel as emulator


def test_instruction_bytes_match_dynamixel_sdk() -> None:
    ours = dict(_core.dxl_instructions())
    for name, value in ours.items():
        assert getattr(robotis_def, f"INST_{name.upper()}") == value, name


def test_status_error_numbers_match_the_sdk_and_the_emulator() -> None:
    codes = _core.dxl_status_error_codes()
    for number, sdk_name in enumerate(
        ["RESULT_FAIL", "INSTRUCTION", "CRC", "DATA_RANGE", "DATA_LENGTH", "DATA_LIMIT", "ACCESS"],
        start=1,
    ):
        assert getattr(sdk_proto, f"ERRNUM_{sdk_name}") == number
        assert codes[number] == sdk_name.lower()
    assert emulator.ERR_INSTRUCTION == codes.index("instruction")
    assert emulator.ERR_DATA_RANGE == codes.index("data_range")
    assert emulator.ERR_DATA_LENGTH == codes.index("data_length")
    assert emulator.ERR_DATA_LIMIT == codes.index("data_limit")
    assert emulator.ERR_ACCESS == codes.index("access")


def test_codec_error_codes_are_unique_snake_case() -> None:
    codes = _core.dxl_error_codes()
    assert len(set(codes)) == len(codes)
    assert all(c.replace("_", "").isalpha() and c == c.lower() for c in codes)
