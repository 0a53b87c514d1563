"""The DYNAMIXEL Protocol 2.0 codec through its Python bindings: golden vectors, differential
checks against dynamixel-sdk, and the decoder's any-bytes invariant."""

from __future__ import annotations

import pytest
from dynamixel_sdk import protocol2_packet_handler as sdk
from hypothesis import given
from hypothesis import strategies as st
from tether import _core
from tether.errors import DxlError, DxlFrameError, DxlUsageError, TetherError


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# Example packets published in the ROBOTIS e-manual, "DYNAMIXEL Protocol 2.0" (XM430-W210).
GOLDEN_INSTRUCTIONS = [
    (lambda: _core.dxl_ping(1), "FF FF FD 00 01 03 00 01 19 4E"),
    (lambda: _core.dxl_ping(254), "FF FF FD 00 FE 03 00 01 31 42"),
    (lambda: _core.dxl_read(1, 132, 4), "FF FF FD 00 01 07 00 02 84 00 04 00 1D 15"),
    (
        lambda: _core.dxl_write(1, 116, h("00 02 00 00")),
        "FF FF FD 00 01 09 00 03 74 00 00 02 00 00 CA 89",
    ),
    (
        lambda: _core.dxl_reg_write(1, 104, h("C8 00 00 00")),
        "FF FF FD 00 01 09 00 04 68 00 C8 00 00 00 AE 8E",
    ),
    (lambda: _core.dxl_action(1), "FF FF FD 00 01 03 00 05 02 CE"),
    (lambda: _core.dxl_reboot(1), "FF FF FD 00 01 03 00 08 2F 4E"),
    (
        lambda: _core.dxl_sync_read(132, 4, [1, 2]),
        "FF FF FD 00 FE 09 00 82 84 00 04 00 01 02 CE FA",
    ),
    (
        lambda: _core.dxl_sync_write(116, 4, [(1, h("96 00 00 00")), (2, h("AA 00 00 00"))]),
        "FF FF FD 00 FE 11 00 83 74 00 04 00 01 96 00 00 00 02 AA 00 00 00 82 87",
    ),
]


@pytest.mark.parametrize(("encode", "published"), GOLDEN_INSTRUCTIONS)
def test_encoder_matches_the_emanual_examples(encode: object, published: str) -> None:
    assert callable(encode)
    assert encode() == h(published)


def test_published_status_packets_decode_to_their_fields() -> None:
    ping = _core.dxl_decode_frame(h("FF FF FD 00 01 07 00 55 00 06 04 26 65 5D"))
    assert (ping.id, ping.is_status, ping.error, ping.error_code, ping.alert) == (
        1,
        True,
        0,
        "none",
        False,
    )
    assert int.from_bytes(ping.data[:2], "little") == 1030 and ping.data[2] == 38
    read = _core.dxl_decode_frame(h("FF FF FD 00 02 08 00 55 00 1F 08 00 00 BA BE"))
    assert int.from_bytes(read.data, "little") == 2079


def test_published_instruction_packets_parse_to_commands() -> None:
    sync = _core.dxl_decode_frame(h(GOLDEN_INSTRUCTIONS[-1][1])).command()
    assert (sync.name, sync.address, sync.length, sync.ids) == ("sync_write", 116, 4, [1, 2])
    assert sync.entries == [(1, h("96 00 00 00")), (2, h("AA 00 00 00"))]
    read = _core.dxl_decode_frame(h(GOLDEN_INSTRUCTIONS[2][1])).command()
    assert (read.name, read.address, read.length) == ("read", 132, 4)


def test_status_error_byte_decodes_alert_and_number() -> None:
    codes = _core.dxl_status_error_codes()
    assert codes == [
        "none",
        "result_fail",
        "instruction",
        "crc",
        "data_range",
        "data_length",
        "data_limit",
        "access",
    ]
    for number, code in enumerate(codes):
        for alert in (0, 0x80):
            packet = _core.dxl_decode_frame(_core.dxl_encode_status(3, number | alert))
            assert packet.error_code == code
            assert packet.alert is bool(alert)
            assert packet.error == number | alert


def test_exceptions_split_usage_from_frame_errors() -> None:
    assert issubclass(DxlUsageError, DxlError) and issubclass(DxlFrameError, DxlError)
    assert issubclass(DxlError, TetherError)
    with pytest.raises(DxlUsageError) as usage:
        _core.dxl_ping(253)
    assert getattr(usage.value, "code", None) == "bad_id"
    with pytest.raises(DxlUsageError):
        _core.dxl_sync_write(116, 4, [(1, b"\x00")])
    with pytest.raises(DxlUsageError):
        _core.dxl_read(1, 70000, 4)
    bad = bytearray(_core.dxl_ping(1))
    bad[-1] ^= 0xFF
    with pytest.raises(DxlFrameError) as frame:
        _core.dxl_decode_frame(bytes(bad))
    assert getattr(frame.value, "code", None) == "crc_mismatch"
    assert set(_core.dxl_error_codes()) >= {"crc_mismatch", "bad_stuffing", "bad_id"}


# --- differential: dynamixel-sdk's own packet functions (an independent implementation) ---

_handler = sdk.Protocol2PacketHandler()


def sdk_frame(dxl_id: int, instruction: int, params: bytes) -> bytes:
    """Build a frame the way dynamixel-sdk's txPacket does, without a port."""
    packet = [0xFF, 0xFF, 0xFD, 0x00, dxl_id, 0, 0, instruction, *params, 0, 0]
    length = len(params) + 3
    packet[5], packet[6] = length & 0xFF, length >> 8
    packet = _handler.addStuffing(packet)
    total = packet[5] + (packet[6] << 8) + 7
    crc = _handler.updateCRC(0, packet, total - 2)
    packet[total - 2], packet[total - 1] = crc & 0xFF, crc >> 8
    return bytes(packet[:total])


@given(
    dxl_id=st.integers(0, 252),
    instruction=st.sampled_from([0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x82, 0x83]),
    params=st.binary(max_size=60) | st.lists(st.sampled_from([0xFF, 0xFD, 0x00])).map(bytes),
)
def test_frames_equal_dynamixel_sdk_frames(dxl_id: int, instruction: int, params: bytes) -> None:
    ours = _core.dxl_encode(dxl_id, instruction, params)
    assert ours == sdk_frame(dxl_id, instruction, params)
    packet = _core.dxl_decode_frame(ours)
    assert (packet.id, packet.instruction, packet.params) == (dxl_id, instruction, params)


@given(data=st.binary(max_size=200))
def test_crc_equals_dynamixel_sdk_crc(data: bytes) -> None:
    assert _core.dxl_crc16(data) == _handler.updateCRC(0, list(data), len(data))


# --- the decoder invariant: value, need-more-data, or the typed error ---


def drain(decoder: _core.DxlDecoder) -> tuple[list[_core.DxlPacket], list[str]]:
    packets: list[_core.DxlPacket] = []
    errors: list[str] = []
    for _ in range(10_000):
        try:
            packet = decoder.next_packet()
        except DxlFrameError as exc:
            errors.append(str(getattr(exc, "code", "")))
            continue
        if packet is None:
            return packets, errors
        packets.append(packet)
    raise AssertionError("decoder did not reach need-more-data")


@given(chunks=st.lists(st.binary(max_size=80), max_size=10))
def test_any_bytes_give_packets_need_more_data_or_frame_errors(chunks: list[bytes]) -> None:
    decoder = _core.DxlDecoder(max_length=512)
    total = 0
    for chunk in chunks:
        total += len(chunk)
        decoder.feed(chunk)
        drain(decoder)
        assert decoder.buffered <= total


@given(
    garbage=st.binary(max_size=30).filter(lambda b: 0xFD not in b),
    split=st.integers(0, 80),
)
def test_resyncs_after_garbage_and_split_reads(garbage: bytes, split: int) -> None:
    frames = [_core.dxl_encode_status(1, 0, h("A6 00 00 00")), _core.dxl_encode_status(2, 0x80)]
    stream = garbage + frames[0] + garbage + frames[1]
    decoder = _core.DxlDecoder()
    decoder.feed(stream[:split])
    first, _ = drain(decoder)
    decoder.feed(stream[split:])
    rest, errors = drain(decoder)
    assert [p.id for p in first + rest] == [1, 2]
    assert errors == []
    assert decoder.discarded == 2 * len(garbage)


def test_codec_errors_are_born_in_python_with_fields() -> None:
    from tether._codec_errors import DxlError as PythonDxlError
    from tether.errors import CodedError

    assert DxlError is PythonDxlError and issubclass(DxlError, CodedError)
    assert not hasattr(_core, "DxlFrameError") and not hasattr(_core, "DxlUsageError")
    with pytest.raises(DxlUsageError) as usage:
        _core.dxl_ping(253)
    err = usage.value
    assert (err.code, err.details) == ("bad_id", {"kind": "usage"})
    assert str(err) == f"bad_id: {err.message}" and "253" in err.message
    decoder = _core.DxlDecoder()
    bad = bytearray(_core.dxl_ping(1))
    bad[-1] ^= 0xFF
    decoder.feed(bytes(bad))
    with pytest.raises(DxlFrameError) as frame:
        decoder.next_packet()
    assert frame.value.as_dict()["code"] == "crc_mismatch"
    decoder.feed(_core.dxl_ping(1))
    packet = decoder.next_packet()
    assert packet is not None and packet.id == 1  # the decoder stays usable
